"""A dead job's "similar lessons" list only what retrieval would serve its task in its workspace, above the
floor (docs/triage.md#seen-this-before)."""

from __future__ import annotations

from typing import Any

import pytest

from lessonq.models import JobState
from lessons import retrieval, vectors
from lessons.store import persist_lesson
from tests.factories import WorkspaceFactory

pytestmark = pytest.mark.django_db


def lesson(workspace: Any, situation: str, mistake: str, correction: str, tags: list[str]) -> Any:
    return persist_lesson(
        situation=situation, mistake=mistake, correction=correction, tags=tags, trigger="error", workspace=workspace
    ).lesson


@pytest.fixture
def store() -> dict[str, Any]:
    shop, billing = WorkspaceFactory(slug="shop"), WorkspaceFactory(slug="billing")
    made = {
        "cache": lesson(
            shop,
            "serving personalised responses behind a caching proxy or CDN",
            "one user's page was cached and served to other users",
            "mark per-user responses Cache-Control: private and set Vary",
            ["cache", "cdn"],
        ),
        "rate": lesson(
            shop,
            "bulk calls to the payments API",
            "no backoff after HTTP 429",
            "retry 429 with exponential backoff and jitter",
            ["rate-limit"],
        ),
        "billing_cache": lesson(
            billing,
            "caching invoices behind a CDN",
            "cached invoices were served to other customers",
            "mark invoice responses Cache-Control: private",
            ["cache", "cdn"],
        ),
    }
    vectors.embed_pending()
    retrieval.query_vectors().clear()
    return {"shop": shop, "billing": billing, **made}


def test_an_on_topic_dead_job_lists_what_retrieval_serves_in_its_workspace(
    store: dict[str, Any], jobs: Any, client_as: Any, carol: Any
) -> None:
    job = jobs(state=JobState.DEAD, task="put the /me and /cart endpoints behind Cloudflare", workspace=store["shop"])
    served = retrieval.search(job.task, k=5, filters=retrieval.Filters(workspace="shop"))
    html = client_as(carol).get(f"/queue/jobs/{job.pk}/").content.decode()
    section = html[html.index("Similar lessons") :]
    assert f'href="/lessons/{store["cache"].pk}/"' in section
    assert [f"/lessons/{hit.lesson.pk}/" in section for hit in served.hits] == [True] * len(served.hits)
    assert f'href="/lessons/{store["billing_cache"].pk}/"' not in section  # another workspace's lesson
    assert "in workspace shop" in section and "0.00" not in section


def test_an_off_topic_dead_job_says_none_above_the_floor(
    store: dict[str, Any], jobs: Any, client_as: Any, carol: Any
) -> None:
    job = jobs(state=JobState.DEAD, task="What is the weather in Lisbon tomorrow?", workspace=store["shop"])
    html = client_as(carol).get(f"/queue/jobs/{job.pk}/").content.decode()
    section = html[html.index("Similar lessons") :]
    assert "None above the floor" in section
    for name in ("cache", "rate", "billing_cache"):
        assert f'href="/lessons/{store[name].pk}/"' not in section, name
