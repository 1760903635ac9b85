"""The ten chatcli_lessonq_* series, aggregated across processes at /metrics (docs/compat/chatcli.md#metrics)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from lessonq import processing
from lessonq.ingest import LessonRequest, enqueue
from lessonq.models import Job
from tests.fakes.openai_server import Reply
from tests.support.queue import LESSON

pytestmark = pytest.mark.django_db


def scrape() -> dict[str, Any]:
    text = Client().get("/metrics").content.decode()
    return {f.name: f for f in text_string_to_metric_families(text)}


def sample(families: dict[str, Any], name: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return 0.0


def test_it_exposes_the_ten_series_with_chatclis_names_and_buckets(
    queue_dir: Path, fake_openai: Any, settings: Any
) -> None:
    before = scrape()
    settings.LESSONQ_MAX_ATTEMPTS = 2
    fake_openai.script(Reply(status=503), Reply(text=LESSON), Reply(text="junk"))
    a = enqueue(LessonRequest(task="a", attempt="", outcome="ERROR: x", trigger="error")).job_id
    enqueue(LessonRequest(task="a", attempt="", outcome="ERROR: x", trigger="error"))
    processing.process(a)
    Job.objects.filter(pk=a).update(next_attempt_at=Job.objects.get(pk=a).enqueued_at)
    processing.process(a)
    b = enqueue(LessonRequest(task="b", attempt="", outcome="ERROR: x", trigger="error")).job_id
    processing.process(b)
    enqueue(LessonRequest(task="c", attempt="", outcome="ERROR: x", trigger="error"))
    (queue_dir / "wal" / "ffffffffffffffff.wal").write_bytes(b"torn")
    from lessonq import reconcile

    reconcile.sweep()
    after = scrape()
    names = {
        "chatcli_lessonq_enqueue": "counter",
        "chatcli_lessonq_queue_depth": "gauge",
        "chatcli_lessonq_processing_duration_seconds": "histogram",
        "chatcli_lessonq_attempts": "counter",
        "chatcli_lessonq_retry": "counter",
        "chatcli_lessonq_dlq_size": "gauge",
        "chatcli_lessonq_wal_corruption": "counter",
        "chatcli_lessonq_wal_segments": "gauge",
        "chatcli_lessonq_stale_discarded": "counter",
        "chatcli_lessonq_persist_failures": "counter",
    }
    assert {n: after[n].type for n in names} == names

    def delta(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert delta("chatcli_lessonq_enqueue_total", outcome="accepted") == 3
    assert delta("chatcli_lessonq_enqueue_total", outcome="deduped") == 1
    assert delta("chatcli_lessonq_attempts_total", outcome="transient") == 1
    assert delta("chatcli_lessonq_attempts_total", outcome="success") == 1
    assert delta("chatcli_lessonq_attempts_total", outcome="permanent") == 1
    assert delta("chatcli_lessonq_retry_total", attempt="1") == 1
    assert delta("chatcli_lessonq_wal_corruption_total") == 1
    assert sample(after, "chatcli_lessonq_queue_depth") == 1  # job c
    assert sample(after, "chatcli_lessonq_wal_segments") == 1
    assert sample(after, "chatcli_lessonq_dlq_size") == 1  # job b
    buckets = [
        s.labels["le"]
        for s in after["chatcli_lessonq_processing_duration_seconds"].samples
        if s.name.endswith("_bucket") and s.labels.get("outcome") == "success"
    ]
    assert buckets == ["0.5", "1.0", "2.0", "5.0", "10.0", "20.0", "30.0", "60.0", "120.0", "+Inf"]
