import pytest

from lessonboard.models import AuditEvent

pytestmark = pytest.mark.django_db


def test_it_lists_events_with_filters_in_the_url(client_as, carol, alice):
    AuditEvent.record("queue.retry", user=alice, object_type="job", object_ids=["j1"], filter={"state": "dead"})
    AuditEvent.record("token.create", object_type="agent_token", object_ids=[7])
    client = client_as(carol)
    page = client.get("/audit/")
    assert page.status_code == 200
    assert b"<h1>Audit log</h1>" in page.content
    retry, create = b"<code>queue.retry</code>", b"<code>token.create</code>"
    assert retry in page.content and create in page.content
    filtered = client.get("/audit/", {"actor": "alice"})
    assert retry in filtered.content and create not in filtered.content
    by_object = client.get("/audit/", {"object_id": "7"})
    assert create in by_object.content and retry not in by_object.content


def test_htmx_gets_only_the_results(client_as, carol):
    AuditEvent.record("workers.ping")
    response = client_as(carol).get("/audit/", {"action": "workers"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b"<html" not in response.content
    assert b'id="results"' in response.content and b"workers.ping" in response.content


def test_it_pages_with_a_cursor(client_as, carol):
    for i in range(55):
        AuditEvent.record(f"bulk.{i:02d}")
    client = client_as(carol)
    first = client.get("/audit/").content.decode()
    assert "<code>bulk.54</code>" in first and "<code>bulk.04</code>" not in first
    cursor = first.split("after=")[1].split('"')[0]
    second = client.get(f"/audit/?after={cursor}").content.decode()
    assert "<code>bulk.04</code>" in second and "<code>bulk.54</code>" not in second


def test_a_crafted_cursor_starts_from_the_top_instead_of_failing(client_as, carol):
    AuditEvent.record("bulk.only")
    crafted = "MjAyNC0wMS0wMVQwMDowMDowMCswMDowMHxhYmM"  # base64 of "<time>|abc": decodes, not an id (was a 500)
    page = client_as(carol).get(f"/audit/?after={crafted}")
    assert page.status_code == 200
    assert "<code>bulk.only</code>" in page.content.decode()


def test_event_text_is_escaped(client_as, carol):
    AuditEvent.record("x", reason="<script>alert(1)</script>")
    body = client_as(carol).get("/audit/").content.decode()
    assert "<script>alert(1)</script>" not in body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in body


def test_a_workspace_event_links_the_workspace_page_by_its_slug(client_as, carol):
    from lessonboard.models import Workspace

    workspace = Workspace.objects.create(slug="payments", name="Payments")
    AuditEvent.record("workspace.create", object_type="workspace", object_ids=[workspace.pk])
    AuditEvent.record("workspace.create", object_type="workspace", object_ids=[987654])  # deleted since
    page = client_as(carol).get("/audit/").content.decode()
    assert 'href="/workspaces/payments/"' in page
    assert f'href="/workspaces/{workspace.pk}/"' not in page and "/workspaces/987654/" not in page
