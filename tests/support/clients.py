"""What test modules of every folder import: the personas' password and an API client with a bearer token
(the ``api`` fixture in tests/conftest.py makes one)."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

PASSWORD = "pw-not-secret-123"


class ApiClient:
    """Django's test client with a bearer token and JSON bodies."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.client = Client()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def post(self, path: str, data: Any = None, *, raw: bytes | str | None = None) -> Any:
        body = raw if raw is not None else json.dumps(data if data is not None else {})
        return self.client.post(path, data=body, content_type="application/json", headers=self._headers())

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self.client.get(path, params or {}, headers=self._headers())
