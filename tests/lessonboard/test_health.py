import pytest

from lessonq import leader

pytestmark = pytest.mark.django_db


def test_healthz_answers_without_login(client):
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_is_green_with_every_check(client):
    leader.hold("beat:test:1")  # a scheduler runs (lessonq.leader)
    response = client.get("/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == {
        "database",
        "migrations",
        "broker",
        "data_dir",
        "processes",
        "llm",
        "nodes",
        "scheduler",
        "pauses",
    }
    assert all(check["ok"] for check in body["checks"].values())


def test_readyz_is_503_when_a_data_dir_is_not_writable(client, settings, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    settings.READINESS_DIRS = [str(blocker / "wal")]
    response = client.get("/readyz")
    assert response.status_code == 503
    check = response.json()["checks"]["data_dir"]
    assert check["ok"] is False and "not writable" in check["detail"]


def test_readyz_is_503_when_the_broker_is_unreachable(client, settings):
    settings.CELERY_BROKER_URL = "redis://127.0.0.1:1/0"
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["checks"]["broker"]["ok"] is False
