import pytest
from django.contrib.auth.models import Group
from django.urls import URLPattern, URLResolver, get_resolver

from lessonboard.models import AuditEvent

pytestmark = pytest.mark.django_db

PUBLIC = {"healthz", "readyz", "metrics", "login", "mcp", "favicon"}  # mcp: bearer tokens, 401 JSON; favicon: the icon


def _page_urls(resolver=None, prefix=""):
    """Every URL without arguments that is a page (not the API, not public probes)."""
    resolver = resolver or get_resolver()
    for entry in resolver.url_patterns:
        if isinstance(entry, URLResolver):
            if str(entry.pattern).startswith("admin/"):
                continue
            yield from _page_urls(entry, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            route = prefix + str(entry.pattern)
            if "<" in route or route.startswith("api/") or entry.name in PUBLIC:
                continue
            yield "/" + route


def test_every_page_redirects_to_login_when_logged_out(client):
    urls = sorted(set(_page_urls()))
    assert "/" in urls
    for url in urls:
        response = client.get(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith("/accounts/login/?next="), url


def test_htmx_requests_get_401_with_a_redirect_header_when_logged_out(client):
    response = client.get("/", headers={"HX-Request": "true"})
    assert response.status_code == 401
    assert response["HX-Redirect"] == "/accounts/login/"


def test_the_admin_redirects_to_its_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response["Location"]


def test_it_logs_in_with_the_form_and_shows_the_overview(client, carol):
    response = client.post("/accounts/login/", {"username": "carol", "password": "pw-not-secret-123"})
    assert response.status_code == 302
    page = client.get("/")
    assert page.status_code == 200
    assert b"<h1>Overview</h1>" in page.content
    assert b"Active agent tokens" in page.content


def test_the_overview_counts_as_a_partial_for_htmx(client_as, carol):
    response = client_as(carol).get("/", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b"<html" not in response.content
    assert b'id="counts"' in response.content


def test_a_viewer_gets_403_on_an_operator_action_and_nothing_happens(client_as, carol):
    response = client_as(carol).post("/workers/ping")
    assert response.status_code == 403
    assert not AuditEvent.objects.filter(action="workers.ping").exists()


def test_an_operator_may_ping_the_workers_and_it_is_audited(client_as, alice):
    response = client_as(alice).post("/workers/ping", headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert b"Heartbeat sent" in response.content
    event = AuditEvent.objects.get(action="workers.ping")
    assert event.actor_user == alice


def test_a_user_without_a_role_cannot_see_the_overview(client_as, django_user_model):
    nobody = django_user_model.objects.create_user("nobody", password="x-pass-1234")
    assert client_as(nobody).get("/").status_code == 403


def test_pages_carry_a_strict_csp_and_no_inline_script(client_as, carol):
    response = client_as(carol).get("/")
    csp = response["Content-Security-Policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp and "unsafe-eval" not in csp
    html = response.content.decode()
    assert "<script>" not in html and "<style" not in html and " style=" not in html
    assert 'hx-headers=\'{"x-csrftoken": "' in html


def test_csrf_is_enforced_on_forms(carol):
    from django.test import Client

    strict = Client(enforce_csrf_checks=True)
    strict.force_login(carol)
    assert strict.post("/accounts/logout/").status_code == 403


def test_cross_site_posts_are_refused(client_as, alice):
    response = client_as(alice).post("/workers/ping", headers={"Sec-Fetch-Site": "cross-site"})
    assert response.status_code == 403
    assert not AuditEvent.objects.exists()


def test_roles_exist_with_their_permissions():
    perms = {g.name: {p.codename for p in g.permissions.all()} for g in Group.objects.all()}
    assert perms["viewer"] == {"view_dashboard"}
    assert perms["operator"] == {"view_dashboard", "operate_queue"}
    assert perms["reviewer"] == {"view_dashboard", "review_memory"}
    assert {"operate_queue", "review_memory", "manage_tokens"} <= perms["admin"]


def test_the_create_user_command_gives_the_role(django_user_model):
    from django.core.management import call_command

    call_command("create_user", "dave", "--role", "reviewer", "--password", "a-long-password-1")
    dave = django_user_model.objects.get(username="dave")
    assert dave.has_perm("lessonboard.review_memory")
    assert not dave.has_perm("lessonboard.operate_queue")
    assert dave.check_password("a-long-password-1")


def test_the_admin_lists_every_model(client_as, admin_user):
    client = client_as(admin_user)
    for path in ["agenttoken", "workspace", "auditevent", "workerheartbeat"]:
        assert client.get(f"/admin/lessonboard/{path}/").status_code == 200, path


def test_unknown_api_paths_answer_json_404(client):
    response = client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json() == {"error": "no API endpoint at /api/v1/nothing-here"}


def test_unknown_pages_answer_the_html_404(client_as, carol):
    response = client_as(carol).get("/no-such-page/")
    assert response.status_code == 404
    assert b"<h1>Not found</h1>" in response.content
