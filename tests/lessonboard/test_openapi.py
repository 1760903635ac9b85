"""The OpenAPI document at /api/v1/openapi.json (docs/api.md#openapi): valid OpenAPI 3.1, complete (every
``/api/v1/`` URL of the URL configuration is in it), and true (what its schemas refuse, the views refuse,
naming the field). The fuzz run against gunicorn is tests/lessonboard/test_openapi_fuzz.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import jsonschema
import pytest
import schemathesis
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from lessonboard.models import Workspace
from lessonboard.openapi import document

pytestmark = pytest.mark.django_db

OPENAPI_URL = "/api/v1/openapi.json"
# A value of the wrong JSON type for each schema type.
WRONG = {"string": 5, "integer": "1", "number": "0.5", "boolean": "yes", "object": 5, "array": "x"}
# A value each required field takes, so that one wrong field is the only thing wrong.
GOOD = {
    "workspace": "ws",
    "Trigger": "error",
    "retrieval_id": 1,
    "success": True,
    "mode": "on",
    "scope": "shared",
}


def urlconf_api_paths() -> set[str]:
    def walk(patterns: list[Any], prefix: str) -> Iterator[str]:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                yield from walk(pattern.url_patterns, prefix + str(pattern.pattern))
            elif isinstance(pattern, URLPattern):
                yield prefix + str(pattern.pattern)

    routes = walk(get_resolver().url_patterns, "")
    return {"/" + re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", r) for r in routes if r.startswith("api/")}


def fetch(client: Client, token: str) -> dict[str, Any]:
    response = client.get(OPENAPI_URL, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200, response.content
    return dict(response.json())


def test_the_document_is_served_to_any_agent_token_and_refused_without_one(agent_token: Any) -> None:
    assert Client().get(OPENAPI_URL).status_code == 401
    served = fetch(Client(), agent_token("reader", "ingest"))
    assert served == document()
    assert served["openapi"] == "3.1.0"


def test_every_api_url_of_the_urlconf_is_in_the_document() -> None:
    paths = urlconf_api_paths()
    assert len(paths) > 10
    assert paths == set(document()["paths"])


def resolve(doc: dict[str, Any], ref: str) -> Any:
    node: Any = doc
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        if "$ref" in node:
            yield node["$ref"]
        for value in node.values():
            yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def test_the_document_is_valid_openapi_3_1() -> None:
    doc = document()
    assert doc["openapi"] == "3.1.0" and doc["info"]["title"] and doc["info"]["version"]
    assert doc["components"]["securitySchemes"]["bearer"] == {
        "type": "http",
        "scheme": "bearer",
        "description": doc["components"]["securitySchemes"]["bearer"]["description"],
    }
    for name, schema in doc["components"]["schemas"].items():
        jsonschema.Draft202012Validator.check_schema(schema)  # OpenAPI 3.1 schemas are JSON Schema 2020-12
        assert re.fullmatch(r"[A-Za-z0-9._-]+", name)
    for ref in refs(doc):
        assert resolve(doc, ref) is not None, ref
    operation_ids = []
    for path, methods in doc["paths"].items():
        declared = set(re.findall(r"{(\w+)}", path))
        for method, operation in methods.items():
            assert method in ("get", "post")
            operation_ids.append(operation["operationId"])
            assert operation["security"] == [{"bearer": []}] and operation["x-scope"] in ("ingest", "full", "operator")
            params = {p["name"] for p in operation.get("parameters", ()) if p["in"] == "path"}
            assert params == declared, (path, method)
            assert {"400", "401", "403", "503"} <= set(operation["responses"]), (path, method)
            if "requestBody" in operation:
                assert "413" in operation["responses"]
            for status, answer in operation["responses"].items():
                assert re.fullmatch(r"[1-5]\d\d", status) and answer["description"]
                # JSON, except gunicorn's own 414 for a request line past its limit (it never reaches Django)
                kind = "text/html" if status == "414" else "application/json"
                assert "schema" in answer["content"][kind], (path, method, status)
    assert len(operation_ids) == len(set(operation_ids))
    # Schemathesis (the fuzzer) reads it as a valid 3.1 document with every operation.
    schema = schemathesis.openapi.from_dict(doc)
    loaded = [result.ok() for result in schema.get_all_operations()]
    assert len(loaded) == len(operation_ids)


def body_schema(doc: dict[str, Any], operation: dict[str, Any]) -> list[dict[str, Any]]:
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    return [resolve(doc, s["$ref"]) for s in schema.get("anyOf", [schema])]


def scalar_type(prop: dict[str, Any]) -> str | None:
    """The JSON type of a property that has exactly one besides null."""
    types = [p.get("type") for p in prop.get("anyOf", [prop]) if p.get("type") != "null"]
    return types[0] if len(types) == 1 and isinstance(types[0], str) else None


def good_value(name: str, prop: dict[str, Any]) -> Any:
    if name in GOOD:
        return GOOD[name]
    return {"string": "x", "integer": 1, "number": 0.5, "boolean": True, "object": {}, "array": []}[
        scalar_type(prop) or "string"
    ]


def wrong_bodies() -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """``(path, shape, body, field)``: a body whose only fault, by the document, is ``field``'s type."""
    doc = document()
    for path, methods in doc["paths"].items():
        operation = methods.get("post")
        if operation is None or "requestBody" not in operation:
            continue
        for shape in body_schema(doc, operation):
            required = shape.get("required", [])
            base = {name: good_value(name, shape["properties"][name]) for name in required}
            for name, prop in shape["properties"].items():
                kind = scalar_type(prop)
                if kind is None:
                    continue
                yield path, shape["title"], {**base, name: WRONG[kind]}, name


WRONG_BODIES = list(wrong_bodies())


def test_the_wrong_bodies_cover_every_post_endpoint() -> None:
    assert {path for path, *_ in WRONG_BODIES} == {
        path for path, methods in document()["paths"].items() if "requestBody" in methods.get("post", {})
    }


@pytest.mark.parametrize(("path", "shape", "body", "field"), WRONG_BODIES, ids=lambda v: str(v)[:40])
def test_what_the_schema_refuses_the_view_refuses_naming_the_field(
    agent_token: Any, path: str, shape: str, body: dict[str, Any], field: str
) -> None:
    doc = document()
    schema = {**resolve(doc, f"#/components/schemas/{shape}"), "components": doc["components"]}
    refusal = next(jsonschema.Draft202012Validator(schema).iter_errors(body))
    assert list(refusal.absolute_path)[:1] == [field]  # the document refuses it for that field
    Workspace.objects.create(slug="ws", name="ws")
    url = path.replace("{slug}", "ws").replace("{pk}", "1")
    response = Client().post(
        url, body, content_type="application/json", headers={"Authorization": f"Bearer {agent_token('t', 'full')}"}
    )
    assert response.status_code == 400, (response.status_code, response.content)
    assert response.json()["field"] == field, response.json()


@pytest.mark.parametrize(
    ("url", "field"),
    [
        ("/api/v1/workspaces?limit=x", "limit"),
        ("/api/v1/workspaces?limit=0", "limit"),
        ("/api/v1/memory/memory?workspace=Not+A+Slug", "workspace"),
        ("/api/v1/memory/memory", "workspace"),
        ("/api/v1/refine/mode", "agent"),
    ],
)
def test_a_query_the_schema_refuses_is_refused_naming_the_parameter(agent_token: Any, url: str, field: str) -> None:
    response = Client().get(url, headers={"Authorization": f"Bearer {agent_token('t', 'full')}"})
    assert response.status_code == 400 and response.json()["field"] == field, response.content


def test_a_nested_value_is_named_by_its_dotted_path(api: Any) -> None:
    response = api.post("/api/v1/reflexion/triggers", {"task": "t", "metadata": {"force_reflexion": 5}})
    assert response.status_code == 400
    assert response.json()["field"] == "metadata.force_reflexion"
    assert "must be a string" in response.json()["error"]


def test_the_trigger_models_read_wal_text_as_gos_decoder_does() -> None:
    from lessonq.api import AgentResultBody, ChatcliLessonRequest

    body = AgentResultBody.model_validate(
        {
            "task": "bad \ud800 text é",
            "output": "nul\x00stays",
            "metadata": {"note\udc00": "v\ud800", "verifier_discrepancies": ["x\udfff", "ok"], "force_reflexion": True},
        }
    )
    assert body.task == "bad \ufffd text é" and body.output == "nul\x00stays"
    assert body.metadata == {
        "note\ufffd": "v\ufffd",
        "verifier_discrepancies": ["x\ufffd", "ok"],
        "force_reflexion": True,
    }
    raw = ChatcliLessonRequest.model_validate({"Task": "\ud800", "Trigger": "error", "agent": "a\udc00"})
    assert raw.Task == "\ufffd" and raw.agent == "a\ufffd"
