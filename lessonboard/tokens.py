"""Agent API tokens: ``lb_<prefix>_<secret>``; the database keeps the prefix and a SHA-256, never the token.

A plain SHA-256 is enough (no slow password hash): the secret is 32 random bytes, so there is nothing
to brute-force, and the lookup stays one indexed query per request.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import InterfaceError, OperationalError, connection
from django.db.models import Field

from lessonboard.models import SLUG_RE, AgentToken, TokenScope, offline_cache_key

TOKEN_PREFIX = "lb"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    token: AgentToken
    plaintext: str  # shown once, never stored


def issue_token(
    name: str,
    scopes: Iterable[str],
    *,
    created_by: Any = None,
    workspaces: Iterable[str] = (),
    may_create_workspaces: bool = False,
) -> IssuedToken:
    scopes = sorted(set(scopes)) or [TokenScope.INGEST.value]
    unknown = set(scopes) - set(TokenScope.values)
    if unknown:
        raise ValueError(f"unknown scope(s): {', '.join(sorted(unknown))}; known: {', '.join(TokenScope.values)}")
    if not name.strip():
        raise ValueError("a token needs a name")
    if len(name.strip()) > AgentToken._meta.get_field("name").max_length:  # type: ignore[operator]
        raise ValueError(f"a token's name has at most {AgentToken._meta.get_field('name').max_length} characters")
    bound = sorted(set(workspaces))
    bad = [slug for slug in bound if not re.match(SLUG_RE, slug)]
    if bad:
        raise ValueError(f"not a workspace slug: {', '.join(bad)}")
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    token = AgentToken.objects.create(
        name=name.strip(),
        prefix=prefix,
        token_hash=hash_token(plaintext),
        scopes=scopes,
        created_by=created_by,
        workspaces=bound,
        may_create_workspaces=may_create_workspaces,
    )
    return IssuedToken(token=token, plaintext=plaintext)


def authenticate(plaintext: str) -> AgentToken | None:
    """The token row for ``plaintext`` (revoked ones included: the caller decides), or ``None``.

    Raises ``DatabaseError`` when the database cannot be asked; see ``authenticate_offline``.
    """
    parts = plaintext.split("_")
    if len(parts) < 3 or parts[0] != TOKEN_PREFIX:
        return None
    token = _token_by_prefix(parts[1])
    if token is None or not hmac.compare_digest(token.token_hash, hash_token(plaintext)):
        # Deleted (or never issued): drop any offline copy this node still holds, so a token deleted
        # through another node stops here at the first check the database answers.
        cache.delete(_cache_key(hash_token(plaintext)))
        return None
    if token.is_revoked:
        forget(token)
    else:
        remember(token)
    return token


@functools.cache
def _select_by_prefix() -> tuple[str, list[Field[Any, Any]]]:
    """The token lookup's SQL, built once from the model (every field, so nothing is deferred)."""
    fields = list(AgentToken._meta.concrete_fields)
    columns = ", ".join(connection.ops.quote_name(str(f.column)) for f in fields)
    table = connection.ops.quote_name(AgentToken._meta.db_table)
    return f"SELECT {columns} FROM {table} WHERE prefix = %s", fields  # noqa: S608 - names from the model


def _token_by_prefix(prefix: str) -> AgentToken | None:
    """``AgentToken.objects.filter(prefix=prefix).first()`` without the ORM's query compilation, which
    cost more than the rest of an ingest's database work together (every API request authenticates).
    One indexed read of the row as it is now: a revoke, an edit or a delete shows at the next request."""
    sql, fields = _select_by_prefix()
    row = _first_query(sql, [prefix])
    if row is None:
        return None
    values = [
        f.from_db_value(v, None, connection) if hasattr(f, "from_db_value") else v
        for f, v in zip(fields, row, strict=True)
    ]
    return AgentToken.from_db(connection.alias, [f.attname for f in fields], values)


def _first_query(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    """The first row of ``sql``, run as the request's first query, which is also the check that its
    kept connection still works: with ``CONN_HEALTH_CHECKS`` Django would first spend a round trip on
    ``SELECT 1`` for that (every API request authenticates first). A kept connection that fails (the
    database restarted since the last request) is closed and the query runs once more on a new one;
    an error on a connection that still works is the query's own and propagates."""
    unchecked = (
        connection.connection is not None
        and connection.health_check_enabled  # type: ignore[attr-defined]
        and not connection.health_check_done  # type: ignore[attr-defined]
    )
    if unchecked:
        connection.health_check_done = True  # type: ignore[attr-defined]  # this query is the check
    try:
        return _fetch_one(sql, params)
    except (InterfaceError, OperationalError):
        if not unchecked or connection.in_atomic_block or connection.is_usable():
            raise
    connection.close()
    return _fetch_one(sql, params)


def _fetch_one(sql: str, params: list[Any]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        row: tuple[Any, ...] | None = cursor.fetchone()
    return row


# --- surviving a database outage -------------------------------------------------------------------------
# Ingest must answer 202 while the database is down (the WAL makes the trigger durable). Authentication is
# the one thing that needs the database first, so every successful check leaves the token's identity in
# the cache (the file cache on the node by default) for TOKEN_CACHE_SECONDS; only when the database
# cannot be reached is that copy used. Saving (revoking, editing) or deleting the row deletes it
# (``forget_changed``, connected in apps.py), so no old copy outlives a change to its row on this node.
def _cache_key(token_hash: str) -> str:
    return offline_cache_key(token_hash)  # on the model, whose revoke() deletes the copy


def remember(token: AgentToken) -> None:
    """Keep the token's identity for offline checks; a fresh entry is not rewritten (one write per TTL)."""
    cache.add(
        _cache_key(token.token_hash),
        {
            "pk": token.pk,
            "name": token.name,
            "prefix": token.prefix,
            "scopes": list(token.scopes),
            "workspaces": list(token.workspaces),
        },
        timeout=settings.API_TOKEN_CACHE_SECONDS,
    )


def forget(token: AgentToken) -> None:
    cache.delete(_cache_key(token.token_hash))


def forget_changed(sender: Any, *, instance: AgentToken, **kwargs: Any) -> None:
    """Signal receiver: a token edited (scopes, workspaces) or deleted loses its offline copy at once."""
    forget(instance)


def authenticate_offline(plaintext: str) -> AgentToken | None:
    """The token as last verified against the database, or ``None``; the result is an unsaved copy."""
    token_hash = hash_token(plaintext)
    data = cache.get(_cache_key(token_hash))
    if not data:
        return None
    return AgentToken(
        pk=data["pk"],
        name=data["name"],
        prefix=data["prefix"],
        scopes=data["scopes"],
        token_hash=token_hash,
        # An entry cached before tokens could be bound has no list; bound tokens always have one.
        workspaces=data.get("workspaces", []),
    )
