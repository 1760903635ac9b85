"""Property tests (Hypothesis): the WAL decoder on random bytes and envelopes, the JobID, and the lesson and
critique parsers on random model output never fail in an undocumented way, and what they hand on can be
stored (docs/api.md#input-policy)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from lessonboard.inputs import unstorable_reason
from lessonq.generation import GeneratedLesson, LessonParseError, parse
from lessonq.jobid import GO_SPACE, is_job_id, job_id, normalize_task
from lessonq.wal import MAGIC, CorruptRecord, WalJob, decode, frame, unframe
from refine.refiner import parse_reply

FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)
any_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=200)
times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
) | st.builds(
    lambda dt, minutes: dt.replace(tzinfo=timezone(timedelta(minutes=minutes))),
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1)),
    st.integers(-23 * 60, 23 * 60),
)


# --- the WAL decoder ---------------------------------------------------------------------------------------
@FUZZ
@given(st.binary(max_size=300))
@example(MAGIC + b"\x00\x00\x00\x05\x00\x00\x00\x00hello")
def test_unframe_and_decode_of_random_bytes_only_raise_corrupt_record(data: bytes) -> None:
    try:
        decode(unframe(data))
    except CorruptRecord:
        pass


@FUZZ
@given(st.binary(min_size=1, max_size=300))
def test_decode_of_a_correctly_framed_random_payload_only_raises_corrupt_record(payload: bytes) -> None:
    try:
        record = decode(unframe(frame(payload)))
    except CorruptRecord:
        return
    assert isinstance(record, WalJob)


def envelope(job: Any) -> bytes:
    return json.dumps({"v": 1, "job": job}).encode()


@FUZZ
@given(
    st.dictionaries(
        st.sampled_from(["ID", "id", "Request", "EnqueuedAt", "NextAttemptAt", "Attempts", "LastError", "x"]),
        json_values,
    )
)
@example({"Attempts": 1.5})
@example({"Attempts": float("inf")})
@example({"Request": {"Task": "\ud800"}})
@example({"EnqueuedAt": "2026-01-01T00:00:00+99:00"})
def test_decode_of_random_envelopes_only_raises_corrupt_record(job: dict[str, Any]) -> None:
    try:
        record = decode(envelope(job))
    except CorruptRecord:
        return
    # A decoded record can always be written back, and no lone surrogate survives (Go's decoder reads one as U+FFFD).
    assert decode(unframe(frame(record.payload()))) == record
    texts = (record.id, record.task, record.attempt, record.outcome, record.trigger, record.last_error)
    assert not any("\ud800" <= ch <= "\udfff" for text in texts for ch in text)


def decided(payload: bytes) -> WalJob | str:
    try:
        return decode(payload)
    except CorruptRecord as exc:
        return f"corrupt: {exc}"


canonical_jobs = st.fixed_dictionaries(
    {
        "ID": any_text,
        "Request": st.fixed_dictionaries({k: any_text for k in ("Task", "Attempt", "Outcome", "Trigger")}),
        "EnqueuedAt": st.sampled_from(["2026-01-01T00:00:00Z", "2026-01-01T00:00:00.123456789+01:00", "", "x"]),
        "NextAttemptAt": st.sampled_from(["2026-01-01T00:00:00Z", "0001-01-01T00:00:00Z"]),
        "Attempts": st.integers() | st.floats() | st.sampled_from([2**63, -(2**63) - 1, 2**64, 10**30]),
        "LastError": any_text,
    }
)


@FUZZ
@given(canonical_jobs | st.dictionaries(st.sampled_from(["ID", "id", "Request", "Attempts", "x"]), json_values))
@example({"ID": "a", "Request": {}, "EnqueuedAt": "", "NextAttemptAt": "", "Attempts": 2**64, "LastError": ""})
def test_the_fast_json_reader_decides_every_envelope_as_json_alone_does(job: dict[str, Any]) -> None:
    """orjson reads canonical records; whatever it reads differently (big integers, lone surrogates) must
    fall through to json, so the decoder's answer never depends on which reader took it."""
    import orjson

    from lessonq import wal as wal_module

    payload = json.dumps({"v": 1, "job": job}).encode()
    with_fast_reader = decided(payload)
    real = wal_module.orjson

    class Refusing:
        JSONDecodeError = orjson.JSONDecodeError

        @staticmethod
        def loads(data: bytes) -> Any:
            raise orjson.JSONDecodeError("json only", "", 0)

    wal_module.orjson = Refusing  # type: ignore[assignment]
    try:
        json_alone = decided(payload)
    finally:
        wal_module.orjson = real
    assert with_fast_reader == json_alone


@FUZZ
@given(st.integers(min_value=1, max_value=100_000))
def test_decode_of_deeply_nested_json_is_a_corrupt_record(depth: int) -> None:
    try:
        decode(b'{"v":1,"job":' + b"[" * depth + b"]" * depth + b"}")
    except CorruptRecord:
        pass


@FUZZ
@given(
    id=st.text(alphabet="0123456789abcdef", min_size=16, max_size=16),
    task=any_text,
    attempt=any_text,
    outcome=any_text,
    trigger=any_text,
    enqueued_at=times,
    next_attempt_at=times,
    attempts=st.integers(0, 2**31 - 1),
    last_error=any_text,
)
def test_a_record_round_trips_through_the_wal_format(**fields: Any) -> None:
    record = WalJob(**fields)
    decoded = decode(unframe(frame(record.payload())))
    assert decoded.id == record.id and decoded.attempts == record.attempts
    for name in ("task", "attempt", "outcome", "trigger", "last_error"):
        # exact, NUL included; a lone surrogate becomes U+FFFD as Go writes it
        expected = "".join("\ufffd" if "\ud800" <= ch <= "\udfff" else ch for ch in getattr(record, name))
        assert getattr(decoded, name) == expected
    assert decoded.enqueued_at == record.enqueued_at and decoded.next_attempt_at == record.next_attempt_at


@FUZZ
@given(st.binary(min_size=1, max_size=200), st.integers(0, 220))
def test_a_torn_or_flipped_record_is_detected(payload: bytes, cut: int) -> None:
    data = frame(payload)
    torn = data[: min(cut, len(data) - 1)]
    try:
        unframe(torn)
    except CorruptRecord:
        pass
    else:  # pragma: no cover - a prefix of a record can never pass its checks
        raise AssertionError("a torn record was accepted")


# --- JobID -------------------------------------------------------------------------------------------------
@FUZZ
@given(task=any_text, attempt=any_text, outcome=any_text, trigger=any_text)
def test_a_job_id_is_16_hex_deterministic_and_blind_to_go_whitespace_and_case(
    task: str, attempt: str, outcome: str, trigger: str
) -> None:
    jid = job_id(task=task, attempt=attempt, outcome=outcome, trigger=trigger)
    assert is_job_id(jid)
    assert jid == job_id(task=task, attempt=attempt, outcome=outcome, trigger=trigger)
    padded = job_id(
        task=f"{GO_SPACE[0]} {task.upper() if task.isascii() else task}\n",
        attempt=f" {attempt}\t",
        outcome=f"\n{outcome}",
        trigger=f" {trigger} ",
    )
    assert padded == jid
    assert normalize_task(normalize_task(task)) == normalize_task(task)


@FUZZ
@given(st.text(max_size=50), st.text(min_size=1, max_size=50))
def test_a_job_id_separates_the_fields(a: str, b: str) -> None:
    """Moving text from the task into the attempt gives another id (the NUL separators at work)."""
    if not b.strip(GO_SPACE):
        return  # only whitespace moved: both requests are the same after trimming
    moved = job_id(task=a, attempt=b, outcome="", trigger="error")
    assert job_id(task=a + b, attempt="", outcome="", trigger="error") != moved


# --- the lesson and critique parsers -------------------------------------------------------------------------
tagged = st.lists(
    st.one_of(
        any_text,
        st.builds(
            lambda tag, body, close: f"<{tag}>{body}{'</' + tag + '>' if close else ''}",
            st.sampled_from(["situation", "mistake", "correction", "tags", "skip", "revised", "critique"]),
            any_text,
            st.booleans(),
        ),
    ),
    max_size=8,
).map("".join)


@FUZZ
@given(tagged)
@example("<situation>a\x00b</situation><correction>c\ud800</correction><tags>x\x00, y</tags>")
def test_the_lesson_parser_returns_a_storable_lesson_or_a_parse_error(text: str) -> None:
    try:
        lesson = parse(text, "error")
    except LessonParseError:
        return
    if lesson is None:
        return
    assert isinstance(lesson, GeneratedLesson)
    assert lesson.situation.strip() and lesson.correction.strip()
    for value in (lesson.situation, lesson.mistake, lesson.correction, *lesson.tags):
        assert unstorable_reason(value) is None
    assert all(tag == tag.strip().lower() and tag for tag in lesson.tags)


@FUZZ
@given(tagged)
@example("<revised>fine\x00</revised><critique>- a\ud800\n- b</critique>")
def test_the_critique_parser_returns_storable_text(text: str) -> None:
    reply = parse_reply(text)
    assert reply.protocol_ok == bool(reply.output.strip()) or not reply.protocol_ok
    for value in (reply.output, reply.critique, *reply.bullets):
        assert unstorable_reason(value) is None
    assert all(b.strip() for b in reply.bullets)


# --- the review proposer's reply parser ---------------------------------------------------------------------
@FUZZ
@given(json_values.map(json.dumps) | any_text | st.integers(1, 5000).map(lambda d: "[" * d + "]" * d))
@example('{"proposals": [{"content": "a\\u0000b", "target": "memory\\ud800"}]}')
def test_the_proposer_parser_returns_storable_proposals_or_a_proposer_error(text: str) -> None:
    from lessonboard.inputs import check_document
    from lessons.review.proposer import ProposerError, parse_reply

    try:
        proposals = parse_reply(text)
    except ProposerError as exc:
        assert unstorable_reason(exc.raw_output) is None
        return
    check_document(proposals)  # raises on any NUL or lone surrogate left, or on deep nesting
