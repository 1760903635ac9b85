"""Issue 27, an operator's second day: the favicon, a first run that guides, pause/resume, running now,
schedules (see docs/operations.md#operator-pages)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def test_favicon_ico_is_no_404_and_every_page_links_the_icon(client_as: Any, carol: Any) -> None:
    anonymous = Client()
    answer = anonymous.get("/favicon.ico")  # the admin's pages and browsers ask without a login
    assert answer.status_code == 301 and answer["Location"].endswith("favicon.svg")
    page = client_as(carol).get("/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg"' in page
    from django.contrib.staticfiles import finders

    assert finders.find("favicon.svg") is not None
