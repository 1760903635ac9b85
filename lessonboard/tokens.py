"""Agent API tokens: ``lb_<prefix>_<secret>``; the database keeps the prefix and a SHA-256, never the token.

A plain SHA-256 is enough (no slow password hash): the secret is 32 random bytes, so there is nothing
to brute-force, and the lookup stays one indexed query per request.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.cache import cache

from lessonboard.models import AgentToken, TokenScope

TOKEN_PREFIX = "lb"


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedToken:
    token: AgentToken
    plaintext: str  # shown once, never stored


def issue_token(name: str, scopes: Iterable[str], *, created_by: Any = None) -> IssuedToken:
    scopes = sorted(set(scopes)) or [TokenScope.INGEST.value]
    unknown = set(scopes) - set(TokenScope.values)
    if unknown:
        raise ValueError(f"unknown scope(s): {', '.join(sorted(unknown))}; known: {', '.join(TokenScope.values)}")
    if not name.strip():
        raise ValueError("a token needs a name")
    prefix = secrets.token_hex(4)
    plaintext = f"{TOKEN_PREFIX}_{prefix}_{secrets.token_urlsafe(32)}"
    token = AgentToken.objects.create(
        name=name.strip(), prefix=prefix, token_hash=hash_token(plaintext), scopes=scopes, created_by=created_by
    )
    return IssuedToken(token=token, plaintext=plaintext)


def authenticate(plaintext: str) -> AgentToken | None:
    """The token row for ``plaintext`` (revoked ones included: the caller decides), or ``None``.

    Raises ``DatabaseError`` when the database cannot be asked; see ``authenticate_offline``.
    """
    parts = plaintext.split("_")
    if len(parts) < 3 or parts[0] != TOKEN_PREFIX:
        return None
    token = AgentToken.objects.filter(prefix=parts[1]).first()
    if token is None or not hmac.compare_digest(token.token_hash, hash_token(plaintext)):
        return None
    if not token.is_revoked:
        remember(token)
    return token


# --- surviving a database outage -------------------------------------------------------------------------
# Ingest must answer 202 while the database is down (the WAL makes the trigger durable). Authentication is
# the one thing that needs the database first, so every successful check leaves the token's identity in
# the cache (the file cache on the node by default) for TOKEN_CACHE_SECONDS; only when the database
# cannot be reached is that copy used. Revoking deletes it, so a revoked token never outlives its row.
def _cache_key(token_hash: str) -> str:
    return f"lessonboard:agent-token:{token_hash}"


def remember(token: AgentToken) -> None:
    """Keep the token's identity for offline checks; a fresh entry is not rewritten (one write per TTL)."""
    cache.add(
        _cache_key(token.token_hash),
        {"pk": token.pk, "name": token.name, "prefix": token.prefix, "scopes": list(token.scopes)},
        timeout=settings.API_TOKEN_CACHE_SECONDS,
    )


def forget(token: AgentToken) -> None:
    cache.delete(_cache_key(token.token_hash))


def authenticate_offline(plaintext: str) -> AgentToken | None:
    """The token as last verified against the database, or ``None``; the result is an unsaved copy."""
    token_hash = hash_token(plaintext)
    data = cache.get(_cache_key(token_hash))
    if not data:
        return None
    return AgentToken(
        pk=data["pk"], name=data["name"], prefix=data["prefix"], scopes=data["scopes"], token_hash=token_hash
    )
