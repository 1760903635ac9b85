"""The embedded broker (lessonboard/broker.py) on its own: real files, a real kombu connection."""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from kombu import Connection, Queue

import lessonboard.broker  # registers atomicfs://
from tests.support.wait import wait_for


def _connection(folder: Path) -> Connection:
    # kombu keeps the bindings it declared in one state per transport class, for the whole process: a new
    # folder would otherwise look bound already (an earlier test in this process bound "default") and get no
    # binding file, so its messages would go nowhere. A deployment has one folder per process.
    lessonboard.broker.Transport.global_state.clear()
    (folder / "queue").mkdir(parents=True, exist_ok=True)
    (folder / "control").mkdir(exist_ok=True)
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
    }
    return Connection("atomicfs://", transport_options=options)


def test_it_never_shows_a_consumer_a_message_that_is_still_being_written(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("default")
        queue.put({"n": 1})
        names = sorted(os.listdir(tmp_path / "queue"))
        assert [n for n in names if n.endswith(".default.msg")] == [names[-1]]  # renamed in whole
        assert not list((tmp_path / "queue" / ".staging").iterdir())
        assert queue.get(timeout=1).payload == {"n": 1}
        queue.close()


def test_one_producers_messages_come_out_in_the_order_they_were_sent(tmp_path: Path) -> None:
    """Hundreds of messages fall within one millisecond; their order must not come from a random UUID."""
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("fifo")
        for n in range(300):
            queue.put({"n": n})
        got = []
        for _ in range(300):
            message = queue.get(timeout=1)
            got.append(message.payload["n"])
            message.ack()
        assert got == list(range(300))
        queue.close()


def test_it_sets_an_undecodable_message_aside_and_delivers_the_next_one(tmp_path: Path) -> None:
    with _connection(tmp_path) as conn:
        # (a queue name of its own: kombu keeps the bindings it declared in a process-wide state)
        queue = conn.SimpleQueue("torn")
        (tmp_path / "queue" / "0_torn.torn.msg").write_bytes(b"")  # what a host crash can leave
        queue.put({"n": 2})

        message = queue.get(timeout=1)

        assert message.payload == {"n": 2}
        assert [p.name for p in (tmp_path / "queue" / ".bad").iterdir()] == ["0_torn.torn.msg"]
        queue.close()


def test_it_consumes_messages_left_by_kombus_filesystem_transport(tmp_path: Path) -> None:
    options = {
        "data_folder_in": str(tmp_path / "queue"),
        "data_folder_out": str(tmp_path / "queue"),
        "control_folder": str(tmp_path / "control"),
    }
    with _connection(tmp_path), Connection("filesystem://", transport_options=options) as old:
        old.SimpleQueue("left").put({"n": 3})
    with _connection(tmp_path) as conn:
        queue = conn.SimpleQueue("left")
        assert queue.get(timeout=1).payload == {"n": 3}
        queue.close()


def test_an_ack_wakes_a_consumer_whose_prefetch_was_full_instead_of_it_sleeping_a_poll_interval(
    tmp_path: Path,
) -> None:
    """With its one prefetch slot taken, a consumer finds nothing it may take and waits a polling interval
    (an hour here); acking the message it holds frees the slot and must end that wait at once."""
    folder = tmp_path
    (folder / "queue").mkdir()
    (folder / "control").mkdir()
    options = {
        "data_folder_in": str(folder / "queue"),
        "data_folder_out": str(folder / "queue"),
        "control_folder": str(folder / "control"),
        "polling_interval": 3600,
    }
    received: list[Any] = []
    with Connection("atomicfs://", transport_options=options) as conn:
        queue = Queue("wake", routing_key="wake")
        with conn.Producer() as producer:
            for n in (1, 2):
                producer.publish({"n": n}, routing_key="wake", declare=[queue])
        with conn.Consumer(queue, callbacks=[lambda body, message: received.append(message)], prefetch_count=1):
            conn.drain_events(timeout=10)
            assert [m.payload for m in received] == [{"n": 1}]
            second = threading.Thread(target=conn.drain_events, daemon=True)  # waits: the slot is taken
            second.start()
            received[0].ack()
            wait_for(lambda: len(received) == 2, timeout=30, what="the second message after the ack")
            second.join(timeout=30)
            assert [m.payload for m in received] == [{"n": 1}, {"n": 2}]
            received[1].ack()


def test_a_queue_bound_after_messages_were_sent_gets_the_next_ones_and_the_bindings_are_read_once(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The producer keeps the exchange's bindings between messages; a queue bound since (here through
    another connection, as another process would) still gets the next message."""
    from kombu import Exchange
    from kombu.transport import filesystem as kombu_fs

    reads = []
    read_table = kombu_fs.Channel.get_table
    monkeypatch.setattr(
        kombu_fs.Channel, "get_table", lambda self, exchange: reads.append(exchange) or read_table(self, exchange)
    )
    exchange = Exchange("late", type="direct")
    first, second = Queue("late-1", exchange, routing_key="k"), Queue("late-2", exchange, routing_key="k")
    with _connection(tmp_path) as conn, _connection(tmp_path) as other:
        producer = conn.Producer()
        for n in range(5):
            producer.publish({"n": n}, exchange=exchange, routing_key="k", declare=[first])
        assert reads == ["late"]  # read for the first message only
        second(other.default_channel).declare()
        producer.publish({"n": 5}, exchange=exchange, routing_key="k")
        late = other.SimpleQueue(second)
        assert late.get(timeout=1).payload == {"n": 5}
        early = conn.SimpleQueue(first)
        assert [early.get(timeout=1).payload["n"] for _ in range(6)] == [0, 1, 2, 3, 4, 5]
        late.close()
        early.close()
