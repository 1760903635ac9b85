"""The WAL (docs/compat/chatcli.md#wal-envelope, docs/compat/chatcli.md#wal, docs/compat/chatcli.md#test-vectors): framing, Go-compatible payloads, durability and quarantine."""

from __future__ import annotations

import os
import stat
import struct
import threading
import zlib
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from lessonq import gojson
from lessonq.wal import MAX_PAYLOAD, CorruptRecord, PayloadTooLarge, Wal, WalJob, decode, frame, unframe

SPEC_PAYLOAD = (
    '{"v":1,"job":{"ID":"abc123","Request":{"Task":"task A","Attempt":"a","Outcome":"ERROR: x","Trigger":"error"},'
    '"EnqueuedAt":"2026-04-22T21:00:00.123456-03:00","NextAttemptAt":"2026-04-22T21:00:00Z","Attempts":0,"LastError":""}}'
)
BRT = timezone(timedelta(hours=-3))


def spec_job() -> WalJob:
    return WalJob(
        id="abc123",
        task="task A",
        attempt="a",
        outcome="ERROR: x",
        trigger="error",
        enqueued_at=datetime(2026, 4, 22, 21, 0, 0, 123456, tzinfo=BRT),
        next_attempt_at=datetime(2026, 4, 22, 21, 0, 0, tzinfo=UTC),
    )


@pytest.fixture
def wal(tmp_path: Path) -> Wal:
    return Wal(tmp_path / "wal", quarantine_dir=tmp_path / "quarantine", tmp_grace=0)


def test_it_writes_the_spec_example_byte_for_byte() -> None:
    payload = spec_job().payload()
    assert payload == SPEC_PAYLOAD.encode()
    assert len(payload) == 225 and zlib.crc32(payload) == 0xF959D30B
    data = frame(payload)
    assert len(data) == 241
    assert data[:12] == bytes.fromhex("4c534e31000000e1f959d30b") and data[-4:] == bytes.fromhex("f959d30b")


def test_it_reads_the_spec_example_back_to_the_same_bytes() -> None:
    job = decode(unframe(frame(SPEC_PAYLOAD.encode())))
    assert job == spec_job()
    assert job.payload() == SPEC_PAYLOAD.encode()


def test_it_serialises_a_zero_job_like_go() -> None:
    assert WalJob(id="z").payload().decode() == (
        '{"v":1,"job":{"ID":"z","Request":{"Task":"","Attempt":"","Outcome":"","Trigger":""},'
        '"EnqueuedAt":"0001-01-01T00:00:00Z","NextAttemptAt":"0001-01-01T00:00:00Z","Attempts":0,"LastError":""}}'
    )


def test_a_record_names_its_sender_in_a_key_chatcli_ignores_and_reads_back_the_same() -> None:
    """lessonboard's third key (workspace, agent, token): written only when there is one, read back by the
    fast path and by the general one alike, and re-encoded to the same bytes."""
    at = datetime(2026, 1, 1, tzinfo=UTC)
    job = WalJob(id="z", task="t", enqueued_at=at, next_attempt_at=at, workspace="shop", agent="cöder", token_id=7)
    payload = job.payload()
    assert payload.decode().endswith(',"lb":{"Workspace":"shop","Agent":"cöder","Token":7}}')
    assert decode(payload) == job and decode(payload).payload() == payload
    spaced = payload.decode().replace(',"lb":', ', "lb": ').encode()  # not canonical: the general reader
    assert decode(spaced) == job
    folded = b'{"v":1,"job":{"ID":"z"},"LB":{"workspace":"shop","token":3}}'
    assert (decode(folded).workspace, decode(folded).agent, decode(folded).token_id) == ("shop", "", 3)
    assert b'"lb"' not in WalJob(id="z").payload()  # chatcli's records stay as chatcli writes them
    with pytest.raises(CorruptRecord):
        decode(b'{"v":1,"job":{"ID":"z"},"lb":{"Workspace":5}}')


def test_it_escapes_strings_like_go() -> None:
    text = 'a<b>&c\u2028d\u2029e"f\\g\nh\ri\tj\x01k\x7fl é 日本 \ud800'
    encoded = gojson.dumps({"s": text})
    assert encoded == (
        '{"s":"a\\u003cb\\u003e\\u0026c\\u2028d\\u2029e\\"f\\\\g\\nh\\ri\\tj\\u0001k\x7fl é 日本 \ufffd"}'
    )
    assert gojson.dumps({"s": "\b\f"}) == '{"s":"\\b\\f"}'


def test_a_lone_surrogate_escape_reads_as_u_fffd_as_go_reads_it_whatever_the_envelope_looks_like() -> None:
    """orjson refuses the escape, so json reads the record; the canonical shortcut then must replace it
    as the general rules (lower-case keys here) do."""
    canonical = WalJob(id="0123456789abcdef", task="a", enqueued_at=datetime(2026, 1, 1, tzinfo=UTC)).payload()
    canonical = canonical.replace(b'"Task":"a"', b'"Task":"x\\ud800y"')
    folded = canonical.replace(b'"Task"', b'"task"')
    assert decode(canonical).task == decode(folded).task == "x\ufffdy"


def test_it_formats_times_like_go() -> None:
    assert gojson.format_time(datetime(2026, 4, 22, 21, 0, 0, 120000, tzinfo=BRT)) == "2026-04-22T21:00:00.12-03:00"
    assert gojson.format_time(datetime(2026, 4, 22, 21, 0, tzinfo=timezone(timedelta(hours=5, minutes=30)))) == (
        "2026-04-22T21:00:00+05:30"
    )
    assert gojson.parse_time("2026-04-22T21:00:00.123456789-03:00") == datetime(
        2026, 4, 22, 21, 0, 0, 123456, tzinfo=BRT
    )
    assert gojson.parse_time("2026-04-22T21:00:00Z").utcoffset() == timedelta(0)


def test_it_stamps_new_times_in_the_process_local_zone(monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    monkeypatch.setenv("TZ", "America/Sao_Paulo")
    time.tzset()
    try:
        stamped = gojson.format_time(gojson.local(datetime(2026, 4, 23, 0, 0, 0, 123456, tzinfo=UTC)))
        assert stamped == "2026-04-22T21:00:00.123456-03:00"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


@pytest.mark.parametrize("size", [10, 4092, 4096, 4100, 100 * 1024, MAX_PAYLOAD])
def test_it_frames_and_reads_payloads_of_any_size(size: int) -> None:
    payload = (b"0123456789abcdef" * (size // 16 + 1))[:size]
    assert unframe(frame(payload)) == payload


def sized_job(size: int, prefix: str = "é<>&\u2028") -> WalJob:
    stamp = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def make(pad: int) -> WalJob:
        return WalJob(
            id="0123456789abcdef",
            task="t",
            attempt=prefix + "x" * pad,
            trigger="error",
            enqueued_at=stamp,
            next_attempt_at=stamp,
        )

    job = make(size - len(make(0).payload()))
    assert len(job.payload()) == size
    return job


@pytest.mark.parametrize("size", [4081, 4084, 4085, 5000, 20000, 100 * 1024])
def test_it_round_trips_records_chatcli_could_not_read(wal: Wal, size: int) -> None:
    job = sized_job(size)
    assert wal.append(job)
    listing = wal.list()
    assert listing.jobs == [job] and not listing.quarantined


def test_it_round_trips_a_16_mib_record_and_refuses_more(wal: Wal) -> None:
    job = sized_job(MAX_PAYLOAD)
    assert wal.append(job)
    assert wal.read(job.id) == job
    assert wal.list().jobs == [job]  # the listing's reads follow the frame's length past the first read
    too_big = WalJob(**{**sized_job(MAX_PAYLOAD + 1).__dict__, "id": "1123456789abcdef"})
    with pytest.raises(PayloadTooLarge, match=r"payload too large \(16777217 bytes\)"):
        wal.append(too_big)
    assert not wal.exists(too_big.id)


def test_it_appends_durably_with_private_modes_and_no_leftovers(wal: Wal) -> None:
    assert wal.append(spec_job())
    path = wal.path("abc123")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(wal.dir.stat().st_mode) == 0o750
    assert sorted(os.listdir(wal.dir)) == ["abc123.wal"]
    assert path.read_bytes() == frame(SPEC_PAYLOAD.encode())


def test_it_ignores_a_second_append_and_overwrites_on_update(wal: Wal) -> None:
    job = spec_job()
    assert wal.append(job)
    assert not wal.append(job.with_retry(attempts=9, next_attempt_at=job.next_attempt_at, last_error="x"))
    wal.update(job.with_retry(attempts=3, next_attempt_at=job.next_attempt_at, last_error="transient provider timeout"))
    [read] = wal.list().jobs
    assert (read.attempts, read.last_error) == (3, "transient provider timeout")
    wal.ack(job.id)
    wal.ack(job.id)  # missing → success
    wal.ack("unknown")
    assert wal.list().jobs == [] and wal.count() == 0


def test_it_survives_reopening_and_counts(tmp_path: Path, wal: Wal) -> None:
    for i in range(5):
        wal.append(WalJob(id=f"{i:016x}", task=str(i)))
    assert wal.count() == 5
    again = Wal(tmp_path / "wal", quarantine_dir=tmp_path / "quarantine")
    assert [j.task for j in again.list().jobs] == ["0", "1", "2", "3", "4"] or len(again.list().jobs) == 5


def test_it_keeps_one_record_when_many_threads_append_the_same_job(wal: Wal) -> None:
    results: list[bool] = []
    job = spec_job()

    def go() -> None:
        results.append(wal.append(job))

    threads = [threading.Thread(target=go) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(True) == 1 and wal.count() == 1
    assert [p.name for p in wal.dir.iterdir()] == ["abc123.wal"]


def test_it_keeps_100_concurrent_distinct_appends(wal: Wal) -> None:
    threads = [threading.Thread(target=wal.append, args=(WalJob(id=f"{i:016x}"),)) for i in range(100)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wal.count() == 100 and len(wal.list().jobs) == 100


def _corrupt(wal: Wal, name: str, data: bytes) -> Path:
    path = wal.dir / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "mangle",
    [
        pytest.param(lambda d: d[:15] + bytes([d[15] ^ 0xFF]) + d[16:], id="flipped-payload-byte"),
        pytest.param(lambda d: d[:-4], id="truncated-trailer"),
        pytest.param(lambda d: d[:100], id="torn"),
        pytest.param(lambda d: b"XXXX" + d[4:], id="bad-magic"),
        pytest.param(lambda d: d[:-4] + struct.pack(">I", 1), id="bad-trailing-crc"),
        pytest.param(lambda d: b"\xaa" * 64, id="garbage"),
        pytest.param(lambda d: frame(d[12:-4].replace(b'"v":1', b'"v":2')), id="unknown-version"),
        pytest.param(lambda d: frame(b"{not json"), id="bad-json"),
        pytest.param(lambda d: b"", id="empty"),
    ],
)
def test_it_quarantines_corrupt_records_and_counts_them(wal: Wal, mangle: object) -> None:
    from prometheus_client import REGISTRY

    before = REGISTRY.get_sample_value("chatcli_lessonq_wal_corruption_total") or 0.0
    good = sized_job(300).__class__(**{**sized_job(300).__dict__, "id": "1" * 16})
    wal.append(good)
    data = frame(spec_job().payload())
    bad = _corrupt(wal, "abc123.wal", mangle(data))  # type: ignore[operator]
    listing = wal.list()
    assert listing.jobs == [good]
    assert not bad.exists()
    assert listing.quarantined == ["wal-abc123.wal"]
    assert (wal.quarantine_dir / "wal-abc123.wal").read_bytes() == mangle(data)  # type: ignore[operator]
    assert (REGISTRY.get_sample_value("chatcli_lessonq_wal_corruption_total") or 0.0) == before + 1


def test_it_reads_go_records_case_insensitively_and_zero_enqueued_becomes_epoch() -> None:
    payload = b'{"V":1,"JOB":{"id":"q","request":{"task":"T"},"Extra":1,"attempts":2}}'
    job = decode(payload)
    assert (job.id, job.task, job.attempts, job.enqueued_at) == ("q", "T", 2, datetime(1970, 1, 1, tzinfo=UTC))
    with pytest.raises(CorruptRecord, match="unsupported record version 0"):
        decode(b'{"job":{}}')


def test_it_removes_temp_files_only_after_the_grace_period(tmp_path: Path) -> None:
    wal = Wal(tmp_path / "wal", quarantine_dir=tmp_path / "q", tmp_grace=3600)
    fresh = _corrupt(wal, "job.tmp.1234.5", b"partial")
    old = _corrupt(wal, "old.tmp.1234.6", b"partial")
    os.utime(old, (0, 0))
    other = _corrupt(wal, "notes.txt", b"left alone")
    listing = wal.list()
    assert fresh.exists() and not old.exists() and other.exists()
    assert listing.tmp_removed == 1 and wal.count() == 0


def test_it_refuses_empty_and_path_like_ids(wal: Wal) -> None:
    from lessonq.wal import WalError

    with pytest.raises(WalError, match="empty JobID"):
        wal.append(WalJob(id="  "))
    with pytest.raises(WalError):
        wal.append(WalJob(id="../x"))


def test_it_quarantines_a_record_filed_under_another_name(wal: Wal) -> None:
    (wal.dir / "0000000000000001.wal").write_bytes(frame(spec_job().payload()))
    listing = wal.list()
    assert listing.jobs == [] and listing.quarantined == ["wal-0000000000000001.wal"]
