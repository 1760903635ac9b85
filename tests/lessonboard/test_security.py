"""Login throttling, the protected /metrics, TLS headers and cookies, no-store pages, server-side
messages and token deletion (docs/security.md)."""

from __future__ import annotations

import http.client
import ipaddress
import re
from typing import Any

import pytest
from axes.models import AccessAttempt
from django.contrib.auth import SESSION_KEY
from django.test import Client

from lessonboard.models import AgentToken, AuditEvent
from lessonboard.tokens import authenticate, authenticate_offline, issue_token
from lessonq.triage.metrics import OPERATOR_ACTIONS
from tests.factories import UserFactory
from tests.support.clients import PASSWORD, ApiClient
from tests.support.processes import subprocess_env

pytestmark = pytest.mark.django_db


# --- login throttling ----------------------------------------------------------------------------------
def login(client: Client, username: str, password: str, address: str = "127.0.0.1") -> Any:
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@pytest.fixture
def dave(db: Any) -> Any:
    return UserFactory(username="dave", role="viewer")


def test_it_locks_a_user_out_from_one_address_after_repeated_failures(settings: Any, dave: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 5
    client = Client()
    for _ in range(4):
        assert login(client, "dave", "wrong").status_code == 200  # the form again, with its error
    locked = login(client, "dave", "wrong")
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.content.decode()

    right = login(client, "dave", PASSWORD)
    assert right.status_code == 429  # the right password does not get past a lockout
    assert SESSION_KEY not in client.session
    for _ in range(3):
        login(client, "dave", PASSWORD)

    lockouts = AuditEvent.objects.filter(action="auth.lockout")
    assert [(e.object_ids, e.result["ip_address"]) for e in lockouts] == [(["dave"], "127.0.0.1")]  # once

    other = Client()
    assert login(other, "dave", PASSWORD, address="10.0.0.9").status_code == 302  # another address
    assert SESSION_KEY in other.session


def test_a_success_before_the_limit_starts_the_count_again(settings: Any, dave: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    client = Client()
    login(client, "dave", "wrong")
    login(client, "dave", "wrong")
    assert login(client, "dave", PASSWORD).status_code == 302
    client.logout()
    login(client, "dave", "wrong")
    login(client, "dave", "wrong")
    assert login(client, "dave", PASSWORD).status_code == 302
    assert not AuditEvent.objects.filter(action="auth.lockout").exists()


def test_an_admin_unlocks_a_pair_and_the_unlock_is_audited(settings: Any, dave: Any, admin_user: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 2
    client = Client()
    login(client, "dave", "wrong")
    login(client, "dave", "wrong")
    assert login(client, "dave", PASSWORD).status_code == 429
    attempt = AccessAttempt.objects.get(username="dave")

    admin = Client()
    admin.force_login(admin_user)
    changelist = admin.get("/admin/axes/accessattempt/")
    assert changelist.status_code == 200 and "dave" in changelist.content.decode()
    response = admin.post(
        "/admin/axes/accessattempt/", {"action": "unlock_selected", "_selected_action": [str(attempt.pk)]}
    )
    assert response.status_code == 302
    assert not AccessAttempt.objects.exists()
    unlock = AuditEvent.objects.get(action="auth.unlock")
    assert (unlock.actor_user, unlock.object_ids, unlock.result) == (admin_user, ["dave"], {"ip_address": "127.0.0.1"})

    assert login(client, "dave", PASSWORD).status_code == 302
    # Locked again after the unlock: a new lockout, audited again.
    client.logout()
    login(client, "dave", "wrong")
    login(client, "dave", "wrong")
    assert AuditEvent.objects.filter(action="auth.lockout").count() == 2


def test_one_address_trying_many_user_names_is_locked_out_for_every_user(settings: Any, dave: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 5
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 8
    sprayer = Client()
    for n in range(7):  # one guess per name: no user+address pair comes near its own limit
        assert login(sprayer, f"user{n}", "wrong", address="10.0.0.66").status_code == 200
    locked = login(sprayer, "user7", "wrong", address="10.0.0.66")
    assert locked.status_code == 429
    assert "Too many failed logins" in locked.content.decode()

    # Now every user is refused from that address, even with the right password.
    assert login(sprayer, "dave", PASSWORD, address="10.0.0.66").status_code == 429
    assert SESSION_KEY not in sprayer.session
    for n in range(8, 12):
        assert login(sprayer, f"user{n}", "wrong", address="10.0.0.66").status_code == 429

    lockouts = AuditEvent.objects.filter(action="auth.lockout")
    assert [(e.object_type, e.object_ids, e.result) for e in lockouts] == [
        ("address", ["10.0.0.66"], {"ip_address": "10.0.0.66", "failures": 8})
    ]  # once, however many names it tries after

    # The same user from another address is not affected: the spraying address cannot lock dave out.
    elsewhere = Client()
    assert login(elsewhere, "dave", PASSWORD, address="10.0.0.9").status_code == 302
    assert SESSION_KEY in elsewhere.session


def test_logging_in_as_oneself_does_not_forget_failures_against_another_user(settings: Any, dave: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 3
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 20
    UserFactory(username="mallory", role="viewer")
    client = Client()
    login(client, "dave", "wrong")
    login(client, "dave", "wrong")
    assert login(client, "mallory", PASSWORD).status_code == 302  # the guesser's own account
    client.logout()
    assert login(client, "dave", "wrong").status_code == 429  # dave's count from this address was kept
    assert AccessAttempt.objects.get(username="dave").failures_since_start == 3


def test_an_admin_unlocks_an_address_by_unlocking_its_rows(settings: Any, dave: Any, admin_user: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 5
    settings.LOGIN_ADDRESS_FAILURE_LIMIT = 3
    client = Client()
    for name in ("x", "y", "z"):
        login(client, name, "wrong", address="10.0.0.66")
    assert login(client, "dave", PASSWORD, address="10.0.0.66").status_code == 429

    admin = Client()
    admin.force_login(admin_user)
    rows = [str(pk) for pk in AccessAttempt.objects.filter(ip_address="10.0.0.66").values_list("pk", flat=True)]
    response = admin.post("/admin/axes/accessattempt/", {"action": "unlock_selected", "_selected_action": rows})
    assert response.status_code == 302
    assert login(client, "dave", PASSWORD, address="10.0.0.66").status_code == 302
    assert AuditEvent.objects.filter(action="auth.unlock", result__ip_address="10.0.0.66").count() == len(rows)


def test_the_admin_login_page_is_throttled_too(settings: Any, admin_user: Any) -> None:
    settings.AXES_FAILURE_LIMIT = 2
    client = Client()
    for _ in range(2):
        client.post("/admin/login/", {"username": "root", "password": "wrong"})
    response = client.post("/admin/login/?next=/admin/", {"username": "root", "password": PASSWORD})
    assert response.status_code == 429
    assert SESSION_KEY not in client.session


# --- /metrics --------------------------------------------------------------------------------------------
@pytest.fixture
def deny_addresses(settings: Any) -> None:
    settings.METRICS_ALLOWED_ADDRESSES = []  # the default outside the test harness


def test_metrics_refuse_an_anonymous_scrape(client: Client, deny_addresses: None) -> None:
    response = client.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert b"lessonboard_" not in response.content


def test_metrics_accept_a_bearer_token_with_the_metrics_scope_only(deny_addresses: None) -> None:
    scraper = issue_token("prometheus", ["metrics"]).plaintext
    ok = ApiClient(scraper).get("/metrics")
    assert ok.status_code == 200 and b"python_info" in ok.content
    assert ApiClient(scraper).post("/api/v1/workspaces", {}).status_code == 403  # nothing else
    assert ApiClient(issue_token("agent", ["ingest"]).plaintext).get("/metrics").status_code == 401
    AgentToken.objects.get(name="prometheus").revoke()
    assert ApiClient(scraper).get("/metrics").status_code == 401


def test_metrics_accept_an_address_on_the_allow_list(settings: Any) -> None:
    settings.METRICS_ALLOWED_ADDRESSES = [ipaddress.ip_network("10.1.0.0/16")]
    assert Client().get("/metrics", REMOTE_ADDR="10.1.2.3").status_code == 200
    assert Client().get("/metrics", REMOTE_ADDR="10.2.0.1").status_code == 401
    settings.BEHIND_TLS_PROXY = True  # then the address is the one the proxy appended, not REMOTE_ADDR
    proxied = Client().get("/metrics", REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR="10.1.0.5, 192.0.2.7")
    assert proxied.status_code == 401
    assert Client().get("/metrics", HTTP_X_FORWARDED_FOR="192.0.2.7, 10.1.9.9").status_code == 200


def test_metric_labels_name_no_user(client_as: Any, alice: Any, bob: Any, carol: Any) -> None:
    assert OPERATOR_ACTIONS._labelnames == ("action",)
    text = Client().get("/metrics").content.decode()
    labels = " ".join(re.findall(r"\{[^}]*\}", text))
    for user in (alice, bob, carol):
        assert f'"{user.username}"' not in labels
    assert "operator=" not in labels


# --- headers, cookies, messages ---------------------------------------------------------------------------
def test_authenticated_pages_are_not_stored_by_caches(client_as: Any, carol: Any) -> None:
    for path in ("/", "/workspaces/", "/audit/"):
        response = client_as(carol).get(path)
        assert response.status_code == 200, path
        assert "no-store" in response["Cache-Control"], path
    assert "no-store" in ApiClient(issue_token("a", ["full"]).plaintext).get("/api/v1/whoami")["Cache-Control"]
    static = Client().get("/static/css/app.css")
    assert static.status_code == 200 and "no-store" not in static.get("Cache-Control", "")


def test_a_token_created_in_the_admin_never_travels_in_a_cookie(admin_user: Any) -> None:
    admin = Client()
    admin.force_login(admin_user)
    response = admin.post("/admin/lessonboard/agenttoken/add/", {"name": "ci-agent", "scopes": ["ingest"]})
    assert response.status_code == 302
    assert "messages" not in response.cookies
    shown = admin.get(response["Location"]).content.decode()
    plaintext = re.search(r"lb_[0-9a-f]{8}_[A-Za-z0-9_-]+", shown)
    assert plaintext is not None  # shown once, from the server-side session
    assert authenticate(plaintext.group(0)) == AgentToken.objects.get(name="ci-agent")
    assert all(plaintext.group(0) not in morsel.value for morsel in admin.cookies.values())


def _request(port: int, method: str, path: str, headers: dict[str, str], body: str = "") -> http.client.HTTPResponse:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    connection.request(method, path, body=body or None, headers=headers)
    response = connection.getresponse()
    response.read()
    connection.close()
    return response


@pytest.mark.django_db(transaction=True)
def test_behind_a_tls_proxy_http_is_redirected_and_cookies_are_secure(start_gunicorn: Any) -> None:
    UserFactory(username="erin", role="viewer")
    server = start_gunicorn(env=subprocess_env(LESSONBOARD_BEHIND_TLS_PROXY="true"), workers=1)
    plain = _request(server.port, "GET", "/accounts/login/", {})
    assert plain.status == 301
    assert plain.getheader("Location") == f"https://127.0.0.1:{server.port}/accounts/login/"
    assert _request(server.port, "GET", "/healthz", {}).status == 200  # probes talk plain HTTP

    tls = {"X-Forwarded-Proto": "https"}
    page = _request(server.port, "GET", "/accounts/login/", tls)
    assert page.status == 200
    assert page.getheader("Strict-Transport-Security", "").startswith("max-age=31536000")
    csrf_cookie = page.getheader("Set-Cookie", "")
    assert "csrftoken=" in csrf_cookie and "Secure" in csrf_cookie
    token = re.search(r"csrftoken=([^;]+)", csrf_cookie).group(1)  # type: ignore[union-attr]
    logged_in = _request(
        server.port,
        "POST",
        "/accounts/login/",
        {
            **tls,
            "Cookie": f"csrftoken={token}",
            "Content-Type": "application/x-www-form-urlencoded",
            "Referer": f"https://127.0.0.1:{server.port}/accounts/login/",
            "Host": f"127.0.0.1:{server.port}",
        },
        f"username=erin&password={PASSWORD}&csrfmiddlewaretoken={token}",
    )
    assert logged_in.status == 302
    session_cookie = [c for c in logged_in.headers.get_all("Set-Cookie") or [] if c.startswith("sessionid=")]
    assert session_cookie and "Secure" in session_cookie[0] and "HttpOnly" in session_cookie[0]


# --- tokens ------------------------------------------------------------------------------------------------
def test_a_deleted_token_stops_authenticating_at_once_offline_too() -> None:
    issued = issue_token("doomed", ["ingest"])
    assert authenticate(issued.plaintext) is not None
    assert authenticate_offline(issued.plaintext) is not None  # the outage copy exists
    issued.token.delete()
    assert authenticate_offline(issued.plaintext) is None
    assert ApiClient(issued.plaintext).get("/api/v1/whoami").status_code == 401


def test_a_token_deleted_in_the_admin_is_gone_from_the_offline_cache(admin_user: Any) -> None:
    issued = issue_token("doomed", ["ingest"])
    authenticate(issued.plaintext)
    admin = Client()
    admin.force_login(admin_user)
    response = admin.post(
        "/admin/lessonboard/agenttoken/",
        {"action": "delete_selected", "_selected_action": [str(issued.token.pk)], "post": "yes"},
    )
    assert response.status_code == 302
    assert not AgentToken.objects.exists()
    assert authenticate_offline(issued.plaintext) is None


def test_a_check_that_finds_no_row_drops_a_stale_offline_copy() -> None:
    # Another node deleted the row (its post_delete ran there): this node's copy goes at the next check.
    issued = issue_token("elsewhere", ["ingest"])
    authenticate(issued.plaintext)
    AgentToken.objects.filter(pk=issued.token.pk)._raw_delete(AgentToken.objects.db)  # no signal, as remote
    assert authenticate_offline(issued.plaintext) is not None
    assert authenticate(issued.plaintext) is None
    assert authenticate_offline(issued.plaintext) is None


def test_an_edited_token_loses_its_offline_copy_with_the_old_rights() -> None:
    issued = issue_token("narrowed", ["full"])
    authenticate(issued.plaintext)
    token = AgentToken.objects.get()
    token.scopes = ["ingest"]
    token.workspaces = ["proj-a"]
    token.save()
    assert authenticate_offline(issued.plaintext) is None
    authenticate(issued.plaintext)
    offline = authenticate_offline(issued.plaintext)
    assert offline is not None and (offline.scopes, offline.workspaces) == (["ingest"], ["proj-a"])
