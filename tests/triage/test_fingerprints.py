"""Error fingerprints: real-looking errors that differ only in what varies per occurrence group together."""

from __future__ import annotations

from typing import Any

import pytest

from lessonq.models import Job

pytestmark = pytest.mark.django_db

# (error text, group label): errors with the same label must share a fingerprint, others must not.
ERRORS = [
    ("transient: Error code: 503 - {'error': {'message': 'upstream down', 'type': 'server_error'}}", "503"),
    ("transient: Error code: 503 - {'error': {'message': 'upstream busy', 'type': 'server_error'}}", "503"),
    ("transient: Error code: 429 - {'error': {'message': 'rate limited', 'type': 'rate_limit'}}", "429"),
    ("lessonq: job timed out after 120s (attempt 3 of 5)", "timeout"),
    ("lessonq: job timed out after 30.5s (attempt 1 of 5)", "timeout"),
    ("open /var/lib/lessonboard/wal/3f2a9c0d11e4b7a2.wal: permission denied", "perm"),
    ("open /srv/data/wal/00aa11bb22cc33dd.wal: permission denied", "perm"),
    (
        "request 6f1c2b7e-2b7d-4f0e-9a51-1c2d3e4f5a6b failed at 2026-11-30T05:12:44.123Z: connection reset by 10.0.3.7:5432",
        "reset",
    ),
    (
        "request 0a9e8d7c-6b5a-4321-8fed-cba987654321 failed at 2026-12-01 17:02:03+01:00: connection reset by 192.168.1.20:5432",
        "reset",
    ),
    ('permanent: lesson parse error: missing <correction> in "the model said <situation>x</situation>"', "parse"),
    ('permanent: lesson parse error: missing <correction> in "another reply entirely"', "parse"),
    ("LLMNotConfigured: set LESSONBOARD_LLM_BASE_URL", "config"),
    ("GET https://api.example.test/v1/models?page=2 returned 502 after 3 retries (token sk-0b12c3d4e5f6a7b8)", "502"),
    ("GET https://other.example.test/v1/chat returned 502 after 4 retries (token sk-99aa88bb77cc66dd)", "502"),
]


def test_it_groups_real_looking_errors_by_their_normalised_text(jobs: Any) -> None:
    made = [(jobs(error=text), label) for text, label in ERRORS]
    fingerprints = {j.pk: j.fingerprint for j in Job.objects.all()}
    by_label: dict[str, set[str]] = {}
    for job, label in made:
        by_label.setdefault(label, set()).add(fingerprints[job.pk])
    assert all(len(fps) == 1 for fps in by_label.values()), by_label
    assert len({fp for fps in by_label.values() for fp in fps}) == len(by_label)


def test_it_strips_numbers_ids_paths_quoted_values_and_timestamps(jobs: Any) -> None:
    job = jobs(
        error="request 6f1c2b7e-2b7d-4f0e-9a51-1c2d3e4f5a6b at 2026-11-30T05:12:44Z:\n  open /var/lib/x/y.wal "
        "(job deadbeef00112233, 'quoted value', \"double\") after 17 tries"
    )
    job.refresh_from_db()
    assert job.error_signature == ("request <uuid> at <time>: open <path> (job <hex>, '…', \"…\") after <n> tries")
    assert len(job.fingerprint) == 16 and int(job.fingerprint, 16) >= 0


def test_it_keeps_words_and_apostrophes_and_separates_triggers(jobs: Any) -> None:
    a = jobs(error="the model didn't answer: it's empty", trigger="error")
    b = jobs(error="the model didn't answer: it's empty", trigger="hallucination")
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.error_signature == "the model didn't answer: it's empty"
    assert a.fingerprint != b.fingerprint


def test_it_updates_the_fingerprint_when_the_error_changes(jobs: Any) -> None:
    job = jobs(error="first failure 1")
    before = Job.objects.get(pk=job.pk).fingerprint
    job.mark_dead("a different failure 2")
    assert Job.objects.get(pk=job.pk).fingerprint != before
