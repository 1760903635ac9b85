"""Request and response models of the JSON API (pydantic v2): the views validate with them and the OpenAPI
document at ``/api/v1/openapi.json`` is generated from them, so the two cannot drift.

Request models are strict (``"5"`` is not a number, ``true`` is not 1) and ignore unknown fields (chatcli
and other clients send more than we read). A ``ValidationError`` becomes the API's usual 400
``{"error": "'k' must be …", "field": "k"}`` naming the first offending field, dotted for nested values
(``metadata.force_reflexion``, ``tags[0]``); ``Says`` gives a field its own message.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from lessonboard.models import SLUG_RE

M = TypeVar("M", bound=BaseModel)


class Says:
    """``Annotated`` metadata: the message a 400 gives for an error in this field (of the pydantic error
    types ``on``, or of any type)."""

    def __init__(self, message: str, *, on: tuple[str, ...] = ()) -> None:
        self.message = message
        self.on = on


class RequestModel(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class ResponseModel(BaseModel):
    """Describes an answer (never used to build one): extra keys are allowed, as clients must tolerate."""

    model_config = ConfigDict(extra="allow")


class QueryModel(BaseModel):
    """Query-string parameters: strings from the URL, so not strict (the digit check is the field's own)."""

    model_config = ConfigDict(extra="ignore")


class ErrorBody(ResponseModel):
    """Every 4xx/5xx of the API: what is wrong and, for bad input, the field it is in."""

    error: str
    field: str | None = None


PATTERN = ("string_pattern_mismatch",)
SLUG_MESSAGE = "'workspace' must be a slug: lower-case letters, digits, '.', '_' or '-'"
# SLUG_RE in JSON Schema's dialect: "$" is the end of the text (pydantic checks it with Rust's regex,
# where a trailing newline does not match, as with Python's \Z).
SLUG_PATTERN = SLUG_RE.removesuffix("\\Z") + "$"
WorkspaceSlug = Annotated[str, Field(pattern=SLUG_PATTERN), Says(SLUG_MESSAGE)]
# "" names no workspace, as an absent one does.
OptionalSlug = Annotated[str, Field(pattern=f"^({SLUG_PATTERN[1:-1]})?$"), Says(SLUG_MESSAGE)]
AgentName = Annotated[str, Field(max_length=200)]
Tags = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]],
    Says("'tags' must be a list of non-empty strings (at most 200 characters each)"),
]


def _digits(value: Any) -> Any:
    """A query-string integer is plain ASCII digits (no sign, no spaces, no ``1_000``)."""
    if isinstance(value, str) and not (value.isascii() and value.isdigit()):
        raise ValueError("not a non-negative integer")
    return value


QueryInt = Annotated[int, BeforeValidator(_digits)]


def validated(model: type[M], data: dict[str, Any]) -> M:
    """``data`` as ``model``, or ``ApiError`` (400) naming the first field the model refuses."""
    from lessonboard.api import ApiError  # api imports the models of this module's users

    try:
        return model.model_validate(data)
    except ValidationError as exc:
        field, message = describe(model, exc.errors()[0], data)
        raise ApiError(message, field=field) from None


def describe(model: type[BaseModel], err: Any, data: Any) -> tuple[str, str]:
    """``(field, message)`` for one pydantic error: the field as the client spelled it, and our wording."""
    parts = _located(err["loc"], data, missing=err["type"] == "missing")
    field = _dotted(parts) or "body"
    top = parts[0] if parts and isinstance(parts[0], str) else None
    info = model.model_fields.get(top) if top else None
    says = next((m for m in _says(info) if not m.on or err["type"] in m.on), None) if info else None
    # A required field sent as null is as absent as a missing one (as the hand-written checks had it).
    if err["type"] == "missing" or (len(parts) == 1 and err.get("input", 0) is None and info and info.is_required()):
        return field, f"'{field}' is required"
    if says is not None and top is not None:
        return top, says.message  # the message is about the field as a whole
    return field, _generic(field, err)


def _says(info: Any) -> list[Says]:
    """``Says`` of a field, also inside ``X | None`` (pydantic keeps the union's own metadata apart)."""
    found = [m for m in info.metadata if isinstance(m, Says)]
    for arg in getattr(info.annotation, "__args__", ()):
        found += [m for m in getattr(arg, "__metadata__", ()) if isinstance(m, Says)]
    return found


def _generic(field: str, err: Any) -> str:
    ctx = err.get("ctx") or {}
    kind = err["type"]
    if kind == "string_type":
        return f"'{field}' must be a string"
    if kind == "string_too_long":
        return f"'{field}' is longer than {ctx.get('max_length')} characters"
    if kind == "string_too_short":
        return f"'{field}' is required"  # only ever min_length=1: "" is as good as absent
    if kind == "bool_type":
        return f"'{field}' must be true or false"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"'{field}' must be an integer"
    if kind == "value_error":  # our own validators' ValueError
        return f"'{field}' is {err['msg'].removeprefix('Value error, ')}"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"'{field}' must be an object"
    if kind == "list_type":
        return f"'{field}' must be a list"
    return f"'{field}': {err['msg']}"


def _located(loc: tuple[Any, ...], data: Any, *, missing: bool) -> list[str | int]:
    """The part of pydantic's ``loc`` that names places in the client's document (a union's member
    names are pydantic's, not the client's); a missing key is named as well."""
    parts: list[str | int] = []
    current = data
    for key in loc:
        if isinstance(current, dict) and isinstance(key, str) and key in current:
            current = current[key]
        elif isinstance(current, list) and isinstance(key, int) and 0 <= key < len(current):
            current = current[key]
        elif missing and isinstance(current, dict) and isinstance(key, str):
            parts.append(key)
            break
        else:
            break
        parts.append(key)
    return parts


_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _dotted(parts: list[str | int]) -> str:
    out = ""
    for key in parts:
        if isinstance(key, int):
            out = f"{out}[{key}]"
        elif _NAME.match(key) or not out:
            out = f"{out}.{key}" if out else key
        else:
            break  # a key that is data (a path, a sentence) names its parent, as inputs.check_document does
    return out
