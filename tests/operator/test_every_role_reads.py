"""Reading is not an action: every role follows every link from the Overview (demo data loaded) without a
403, a 404 or an error (the admin site aside: it is staff-only by design)."""

from __future__ import annotations

import re
from urllib.parse import urljoin, urlsplit

import pytest
from django.core.management import call_command

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

HREF = re.compile(r'href="([^"#]*)')
SKIP = ("/admin/", "/accounts/logout/", "/static/", "/metrics", "/api/")
LIMIT = 400


def crawl(client, start: str = "/") -> dict[str, int]:
    seen: dict[str, int] = {}
    todo = [start]
    while todo and len(seen) < LIMIT:
        url = todo.pop(0)
        if url in seen:
            continue
        response = client.get(url)
        seen[url] = response.status_code
        if response.status_code != 200 or "text/html" not in response.get("Content-Type", ""):
            continue
        for raw in HREF.findall(response.content.decode()):
            target = urljoin(url, raw.replace("&amp;", "&"))
            parts = urlsplit(target)
            if parts.netloc or not parts.path.startswith("/") or parts.path.startswith(SKIP):
                continue
            link = parts.path + (f"?{parts.query}" if parts.query else "")
            if link not in seen and link not in todo:
                todo.append(link)
    return seen


@pytest.mark.parametrize("role", ["viewer", "operator", "reviewer"])
def test_it_lets_every_role_read_every_linked_page(role, client_as, queue_dir):
    call_command("demo")
    seen = crawl(client_as(UserFactory(username=f"reader-{role}", role=role)))
    bad = {url: status for url, status in seen.items() if status != 200}
    assert not bad, bad
    assert len(seen) > 30  # the crawl reached the pages, not just the overview
    for page in ("/inbox/", "/reviews/", "/reviews/decisions/", "/workspaces/", "/queue/groups/", "/audit/"):
        assert page in seen, page
