"""The embedded broker: kombu's filesystem transport, made safe for several producers and consumers.

kombu's own filesystem transport opens a message file and then writes it, so a consumer polling the folder
can claim the file while it is still empty and fail to decode it — the worker's consumer stops with
``JSONDecodeError`` (see docs/operations.md#broker). Here:

* a message is written under ``.staging/`` and renamed into the queue folder: a rename within one
  filesystem is atomic, so a consumer sees a whole message or none;
* a consumer claims a message by renaming it into ``.claimed/`` beside the queue folder (kombu moves it to
  the system temp dir, which may be another filesystem, where a move is a copy);
* a file that still cannot be decoded (torn by a host crash) is set aside in ``.bad/`` and logged, never
  raised into the worker;
* one folder listing serves many gets (kombu lists and sorts the whole folder for every message, which
  grows with the backlog);
* an exchange's bindings are read from their file again only when the file has changed (kombu reads
  and parses it for every message sent);
* a consumer whose prefetch is full does not sleep a whole polling interval after a task finishes: the
  ack (or a prefetch change) wakes its wait at once, so the next message is taken as soon as a slot
  frees. kombu sleeps ``polling_interval`` whenever a get finds nothing *or may not take anything*, which
  made every task longer than the gap between two gets wait up to one interval for its slot to refill.

The on-disk format and folders are kombu's, so messages left by kombu's transport are consumed as they are.
URL: ``atomicfs://`` (registered as a kombu transport alias when this module is imported).
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import threading
import uuid
from pathlib import Path
from queue import Empty
from time import monotonic
from typing import Any

from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.transport import filesystem as kombu_fs
from kombu.utils.json import dumps, loads

logger = logging.getLogger(__name__)

SCHEME = "atomicfs"
RELIST_INTERVAL = 0.05  # seconds
TRANSPORT_ALIASES[SCHEME] = "lessonboard.broker:Transport"
# Messages are taken in file-name order. kombu names a message by the millisecond and a random UUID, so two
# sent within the same millisecond came out in random order; a per-process sequence between the two keeps
# one producer's messages first in, first out (names stay "<ms>_<unique>.<queue>.msg", as kombu's are).
_SEQUENCE = itertools.count()


class Channel(kombu_fs.Channel):  # type: ignore[misc]
    """Atomic publish (write aside, rename in) and atomic claim (rename out) on kombu's folder layout."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # queue name → file names seen in the last listing, oldest first; entries another consumer has
        # claimed since fail their rename and are skipped.
        self._listed: dict[str, collections.deque[str]] = {}
        self._listed_at = -1e9
        self._relist_every = RELIST_INTERVAL
        self._exchange_files: dict[str, Path] = {}
        self._tables: dict[str, tuple[tuple[int, int, int], list[Any]]] = {}  # exchange → (file identity, table)

    def _side_folder(self, name: str) -> Path:
        folder = Path(self.data_folder_in) / name
        folder.mkdir(exist_ok=True)
        return folder

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:  # type: ignore[override]
        name = f"{round(monotonic() * 1000)}_{next(_SEQUENCE) % 10**10:010d}-{uuid.uuid4()}.{queue}.msg"
        out = os.fspath(self.data_folder_out)
        staged = f"{out}/.staging/{name}"
        data = dumps(message).encode()
        try:
            try:
                fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileNotFoundError:
                os.makedirs(f"{out}/.staging", exist_ok=True)
                fd = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.rename(staged, f"{out}/{name}")
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.unlink(staged)
            raise kombu_fs.ChannelError(f"Cannot add message {name!r} to {out}") from exc

    def get_table(self, exchange: str) -> list[Any]:
        """The exchange's bindings. kombu reads and parses its table file for every message sent (a
        quarter of a publish); the table only changes when a queue is bound, which writes a new file
        and renames it into place (``_queue_bind``). So the table read last is kept per exchange and
        read again only when a ``stat`` shows another file or another size or modification time."""
        file = self._exchange_files.get(exchange)
        if file is None:
            file = self._exchange_files[exchange] = self._exchange_file(exchange)  # checks the name once
        try:
            st = os.stat(file)
        except FileNotFoundError:
            self._tables.pop(exchange, None)
            return []
        except OSError as exc:
            raise kombu_fs.ChannelError(f"Cannot open {file}") from exc
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        cached = self._tables.get(exchange)
        if cached is None or cached[0] != identity:
            cached = self._tables[exchange] = (identity, super().get_table(exchange))
        return list(cached[1])

    def basic_ack(self, delivery_tag: Any, multiple: bool = False) -> None:
        super().basic_ack(delivery_tag, multiple)
        self.connection.wake()

    def basic_reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        super().basic_reject(delivery_tag, requeue)
        self.connection.wake()

    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0, apply_global: bool = False) -> None:
        super().basic_qos(prefetch_size, prefetch_count, apply_global)
        self.connection.wake()

    def _get(self, queue: str, timeout: float | None = None) -> Any:
        folder = Path(self.data_folder_in)
        pending = self._listed.get(queue)
        # An empty queue (the worker's remote-control queue, say) must not cost a listing of the whole
        # backlog each time it is polled: list again at most every RELIST_INTERVAL, and with a big backlog
        # (a slow listing) seldom enough that listing takes at most a tenth of the time.
        if not pending and monotonic() - self._listed_at >= self._relist_every:
            self._relist(folder)
            pending = self._listed.get(queue)
        claimed_dir = self._side_folder(".claimed")
        while pending:
            name = pending.popleft()
            claimed = claimed_dir / name
            try:
                os.rename(folder / name, claimed)
            except FileNotFoundError:
                continue  # another consumer claimed it since our listing
            except OSError as exc:
                raise kombu_fs.ChannelError(f"Cannot claim {name!r} in {folder}") from exc
            try:
                payload = claimed.read_bytes()
            except OSError as exc:
                raise kombu_fs.ChannelError(f"Cannot read claimed message {claimed}") from exc
            try:
                message = loads(payload.decode())
            except ValueError as exc:
                bad = self._side_folder(".bad") / name
                os.replace(claimed, bad)
                logger.error("broker: message %s cannot be decoded (%s); set aside in %s", name, exc, bad)
                continue
            if self.store_processed:
                os.replace(claimed, Path(self.processed_folder) / name)
            else:
                claimed.unlink(missing_ok=True)
            return message
        raise Empty()

    def _relist(self, folder: Path) -> None:
        started = monotonic()
        self._listed = {}
        for name in sorted(os.listdir(folder)):
            if name.startswith(".") or not name.endswith(".msg"):
                continue
            queue = name.partition(".")[2][: -len(".msg")]
            self._listed.setdefault(queue, collections.deque()).append(name)
        self._listed_at = monotonic()
        self._relist_every = max(RELIST_INTERVAL, 10 * (self._listed_at - started))

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        # kombu creates the exchange table file and then writes it; a reader can see it empty. Rewrite it
        # under an exclusive lock on a separate lock file and rename it into place.
        file = self._exchange_file(exchange)
        self.control_folder.mkdir(exist_ok=True)
        entry = kombu_fs.exchange_queue_t(routing_key or "", pattern or "", queue or "")
        with open(self.control_folder / ".bind.lock", "a") as lock_file:
            kombu_fs.lock(lock_file, kombu_fs.LOCK_EX)
            try:
                queues = self.get_table(exchange)
                if entry in queues:
                    return
                queues.insert(0, entry)
                staged = file.with_name(f".{file.name}.{uuid.uuid4().hex}")
                staged.write_text(dumps(queues))
                os.rename(staged, file)
            finally:
                kombu_fs.unlock(lock_file)


class Transport(kombu_fs.Transport):  # type: ignore[misc]
    Channel = Channel
    global_state = virtual.BrokerState()
    driver_type = SCHEME
    driver_name = SCHEME

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._woken = threading.Event()

    def wake(self) -> None:
        """A slot freed (a message acked or rejected, the prefetch changed): end the current wait now.
        Celery acks from another thread of the worker (the pool's result handler)."""
        self._woken.set()

    def drain_events(self, connection: Any, timeout: float | None = None, **kwargs: Any) -> None:
        """kombu's loop (get one message, else wait ``polling_interval``; ``socket.timeout`` after
        ``timeout``), waiting on the wake-up event instead of sleeping: a wake-up between a failed get and
        the wait is not lost, since the event stays set until the next get is tried."""
        started = monotonic()
        cycle = self.cycle
        assert cycle is not None  # set up with the transport's first channel
        interval = self.polling_interval
        if timeout and interval and interval > timeout:
            interval = timeout
        while True:
            self._woken.clear()
            try:
                cycle.get(self._deliver, timeout=timeout)
            except Empty:
                if timeout is not None and monotonic() - started >= timeout:
                    raise TimeoutError() from None  # socket.timeout, as kombu raises
                if interval is not None:
                    self._woken.wait(interval)
            else:
                return
