import pytest
from django.core.management import call_command
from django.db import connection

from lessonboard.models import AgentToken
from lessonboard.tokens import hash_token, issue_token
from tests.support.clients import ApiClient

pytestmark = pytest.mark.django_db


def test_it_accepts_a_valid_token_and_records_its_use(api):
    response = api.get("/api/v1/whoami")
    assert response.status_code == 200
    assert response.json()["scopes"] == ["full"]
    assert AgentToken.objects.get().last_used_at is not None


def test_it_answers_401_json_without_a_token(client):
    response = client.get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json() == {"error": "missing bearer token (Authorization: Bearer <token>)"}
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_it_answers_401_for_a_wrong_token(api):
    forged = api.token[:-4] + "AAAA"
    response = ApiClient(forged).get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"] == "invalid token"
    assert ApiClient("not-even-shaped").get("/api/v1/whoami").status_code == 401


def test_it_answers_401_for_a_revoked_token(api):
    AgentToken.objects.get().revoke()
    response = api.get("/api/v1/whoami")
    assert response.status_code == 401
    assert response.json()["error"] == "token revoked"


def test_it_answers_403_for_a_token_without_the_scope(agent_token):
    ingest_only = ApiClient(agent_token("harness", "ingest"))
    assert ingest_only.get("/api/v1/whoami").status_code == 200
    response = ingest_only.get("/api/v1/workspaces")
    assert response.status_code == 403
    assert response.json() == {"error": "token lacks the 'full' scope"}


def test_it_stores_no_plaintext_token():
    issued = issue_token("agent-x", ["ingest"])
    row = AgentToken.objects.get()
    assert row.token_hash == hash_token(issued.plaintext)
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM lessonboard_agenttoken")
        stored = " ".join(str(value) for value in cursor.fetchone())
    assert issued.plaintext not in stored
    secret = issued.plaintext.split("_", 2)[2]  # the secret itself may contain "_"
    assert secret not in stored


def test_it_rejects_unknown_scopes():
    with pytest.raises(ValueError, match="unknown scope"):
        issue_token("x", ["admin"])


def test_the_command_prints_the_token_once_and_it_works(capsys):
    call_command("create_agent_token", "ci-bot", "--scope", "full")
    out = capsys.readouterr()
    token = out.out.strip().splitlines()[-1]
    assert token.startswith("lb_")
    assert "not shown again" in out.err
    assert ApiClient(token).get("/api/v1/workspaces").status_code == 200
    assert AgentToken.objects.get(name="ci-bot").scopes == ["full"]


def test_a_verified_token_is_remembered_for_outages_until_revoked():
    from lessonboard.tokens import authenticate, authenticate_offline

    issued = issue_token("agent-y", ["ingest"])
    assert authenticate_offline(issued.plaintext) is None  # never verified yet
    assert authenticate(issued.plaintext).pk == issued.token.pk
    offline = authenticate_offline(issued.plaintext)
    assert (offline.pk, offline.name, offline.scopes) == (issued.token.pk, "agent-y", ["ingest"])
    assert authenticate_offline(issued.plaintext[:-1] + "x") is None
    issued.token.revoke()
    assert authenticate_offline(issued.plaintext) is None
