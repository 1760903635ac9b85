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
    """The token row for ``plaintext`` (revoked ones included: the caller decides), or ``None``."""
    parts = plaintext.split("_")
    if len(parts) < 3 or parts[0] != TOKEN_PREFIX:
        return None
    token = AgentToken.objects.filter(prefix=parts[1]).first()
    if token is None or not hmac.compare_digest(token.token_hash, hash_token(plaintext)):
        return None
    return token
