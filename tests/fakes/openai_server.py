"""A real HTTP server, in a thread, speaking enough of the OpenAI API for the real ``openai`` client:
``POST /v1/chat/completions`` and ``POST /v1/embeddings``, with scripted replies.

    server = FakeOpenAIServer().start()
    server.script(Reply(text="hello"), Reply(status=429), Reply(delay=5))
    ... LESSONBOARD_LLM_BASE_URL = server.url ...
    server.requests[-1].json["messages"]

Scripted replies are consumed in order (one per chat request); when the script is empty, ``responder``
(a callable taking the request JSON and returning a ``Reply``) answers, else ``default``. Replies can be a
text, an HTTP error status with an OpenAI-shaped error body, a delay before answering (for timeouts), or a
raw malformed ``body``. Embeddings answer with deterministic vectors from ``embedding_fn``.

Real models' habits, switchable per test (the defaults answer as before: at once, bare text, with usage):

- ``server.latency = 1.0``: every chat answer takes that long (on top of a reply's own ``delay``);
- ``server.rate_limit(retry_after=5, seconds=60)`` / ``calls=N``: a storm of 429s (or ``status=503``) naming
  the wait in ``Retry-After``, ``retry-after-ms`` or ``x-ratelimit-reset-requests`` (``header=``), or in no
  header at all (``header=None``); ``server.storm_hits`` counts the requests it answered;
- ``Reply(text=…, think=…, fence="json", preamble=…, postscript=…)`` or server-wide ``server.style =
  Style(…)``: the answer wrapped as chatty models write it (a ``<think>`` block first, a fenced block,
  words before and after);
- ``Reply(usage=False)`` / ``server.send_usage = False``: no ``usage`` object in the body;
- ``Reply(truncate_at=N)``: the text cut after N characters, ``finish_reason`` "length" (max_tokens hit).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    text: str = "ok"
    status: int = 200
    delay: float = 0.0
    body: str | bytes | None = None  # raw body: overrides everything else (malformed replies)
    headers: dict[str, str] = field(default_factory=dict)
    error_message: str | None = None
    prompt_tokens: int = 11
    completion_tokens: int = 7
    # How real models dress their answers (see ``Style``); None/"" leave the text as it is.
    think: str | None = None
    fence: str | None = None
    preamble: str = ""
    postscript: str = ""
    usage: bool | None = None  # None: the server's ``send_usage``
    truncate_at: int | None = None
    finish_reason: str | None = None  # None: "stop", or "length" when truncated


@dataclass(frozen=True)
class Style:
    """A server-wide way of dressing every text answer (fields as on ``Reply``)."""

    think: str | None = None
    fence: str | None = None
    preamble: str = ""
    postscript: str = ""


def dress(text: str, *, think: str | None, fence: str | None, preamble: str, postscript: str) -> str:
    """``text`` as a chatty model writes it: ``<think>…</think>``, preamble, fenced block, postscript."""
    if fence is not None:
        text = f"```{fence}\n{text}\n```"
    parts = [p for p in (preamble, text, postscript) if p]
    text = "\n\n".join(parts)
    if think is not None:
        text = f"<think>\n{think}\n</think>\n\n{text}"
    return text


@dataclass
class Storm:
    """A rate limit: every chat request is refused until ``until`` (monotonic) or for ``calls`` more."""

    status: int = 429
    retry_after: float | None = 5.0
    header: str | None = "retry-after"
    until: float | None = None
    calls: int | None = None

    def active(self) -> bool:
        if self.calls is not None:
            return self.calls > 0
        return self.until is not None and time.monotonic() < self.until

    def reply(self) -> Reply:
        headers: dict[str, str] = {}
        if self.header and self.retry_after is not None:
            wait = self.retry_after
            if self.header == "retry-after":
                headers["Retry-After"] = f"{wait:g}"
            elif self.header == "retry-after-ms":
                headers["retry-after-ms"] = f"{wait * 1000:g}"
            else:  # x-ratelimit-reset-requests / -tokens: OpenAI's duration text ("1s", "6m0s", "250ms")
                headers[self.header] = f"{wait * 1000:g}ms" if wait < 1 else f"{wait:g}s"
        message = "Rate limit reached for requests" if self.status == 429 else "Service temporarily overloaded"
        return Reply(status=self.status, headers=headers, error_message=message)


@dataclass
class RecordedRequest:
    path: str
    headers: dict[str, str]
    json: Any


def hashed_embedding(text: str, dimensions: int = 64) -> list[float]:
    """A deterministic bag-of-words vector: texts sharing words have a higher cosine similarity."""
    vec = [0.0] * dimensions
    for word in text.lower().split():
        digest = hashlib.sha256(word.encode()).digest()
        vec[int.from_bytes(digest[:4], "big") % dimensions] += 1.0 if digest[4] % 2 else -1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class _Server(ThreadingHTTPServer):
    # socketserver's default listen backlog is 5; real servers take hundreds, and a worker with many slots
    # connects at once (a full backlog drops SYNs, which the client only retries after a second).
    request_queue_size = 128


class FakeOpenAIServer:
    def __init__(self, *, model: str = "fake-model") -> None:
        self.model = model
        self._script: deque[Reply] = deque()
        self._embed_script: deque[Reply] = deque()
        self._lock = threading.Lock()
        self._released = threading.Event()
        self.requests: list[RecordedRequest] = []
        self.default = Reply(text="ok")
        self.responder: Callable[[dict[str, Any]], Reply] | None = None
        self.embedding_fn: Callable[[str], list[float]] = hashed_embedding
        self.latency = 0.0
        self.style: Style | None = None
        self.send_usage = True
        self.storm: Storm | None = None
        self.storm_hits = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self._httpd: ThreadingHTTPServer | None = None

    # --- control ------------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    def start(self, port: int = 0) -> FakeOpenAIServer:
        """Listen on ``port`` (0: any free one; pass the old port to bring a stopped server back)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    payload = json.loads(raw or b"{}")
                except ValueError:
                    payload = None
                server._record(self.path, {k.lower(): v for k, v in self.headers.items()}, payload)
                if self.path.rstrip("/").endswith("/chat/completions"):
                    reply = server._next_chat(payload or {})
                    with server._flight():
                        if server.latency and reply.status < 400:
                            server._released.wait(server.latency)
                        self._answer(reply, lambda: server._chat_body(reply))
                elif self.path.rstrip("/").endswith("/embeddings"):
                    reply = server._next_embedding()
                    self._answer(reply, lambda: server._embedding_body(payload or {}))
                else:
                    self._send(404, json.dumps({"error": {"message": f"no route {self.path}"}}).encode())

            def _answer(self, reply: Reply, ok_body: Callable[[], dict[str, Any]]) -> None:
                if reply.delay:
                    server._released.wait(reply.delay)
                if reply.body is not None:
                    body = reply.body.encode() if isinstance(reply.body, str) else reply.body
                    self._send(reply.status, body, reply.headers)
                elif reply.status >= 400:
                    message = reply.error_message or f"scripted error {reply.status}"
                    error = {"error": {"message": message, "type": "fake_error", "code": str(reply.status)}}
                    self._send(reply.status, json.dumps(error).encode(), reply.headers)
                else:
                    self._send(reply.status, json.dumps(ok_body()).encode(), reply.headers)

            def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client timed out and left
                    pass

        self._released.clear()
        self._httpd = _Server(("127.0.0.1", port), Handler)
        self._httpd.daemon_threads = True
        threading.Thread(target=self._httpd.serve_forever, name="fake-openai", daemon=True).start()
        return self

    def stop(self) -> None:
        self._released.set()  # let delayed replies finish at once
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()

    def release(self) -> None:
        """Let every delayed answer (``delay``, ``latency``) go at once, now and until ``reset``."""
        self._released.set()

    def reset(self) -> None:
        self._released.clear()
        with self._lock:
            self._script.clear()
            self._embed_script.clear()
            self.requests.clear()
        self.default = Reply(text="ok")
        self.responder = None
        self.embedding_fn = hashed_embedding
        self.latency = 0.0
        self.style = None
        self.send_usage = True
        self.storm = None
        self.storm_hits = 0
        self.max_in_flight = 0

    def rate_limit(
        self,
        *,
        retry_after: float | None = 5.0,
        seconds: float | None = None,
        calls: int | None = None,
        header: str | None = "retry-after",
        status: int = 429,
    ) -> Storm:
        """Refuse every chat request with ``status`` for ``seconds`` or for the next ``calls`` requests,
        naming ``retry_after`` in ``header`` (``None``: no header). Scripted replies wait behind it."""
        assert (seconds is None) != (calls is None), "a storm lasts either seconds or calls"
        storm = Storm(
            status=status,
            retry_after=retry_after,
            header=header,
            until=time.monotonic() + seconds if seconds is not None else None,
            calls=calls,
        )
        with self._lock:
            self.storm = storm
            self.storm_hits = 0
        return storm

    def end_storm(self) -> None:
        with self._lock:
            self.storm = None

    def script(self, *replies: Reply | str) -> None:
        with self._lock:
            self._script.extend(r if isinstance(r, Reply) else Reply(text=r) for r in replies)

    def script_embeddings(self, *replies: Reply) -> None:
        with self._lock:
            self._embed_script.extend(replies)

    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.rstrip("/").endswith("/chat/completions")]

    # --- internals ------------------------------------------------------------------------------------
    def _record(self, path: str, headers: dict[str, str], payload: Any) -> None:
        with self._lock:
            self.requests.append(RecordedRequest(path=path, headers=headers, json=payload))

    @contextmanager
    def _flight(self) -> Iterator[None]:
        with self._lock:
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def _next_chat(self, payload: dict[str, Any]) -> Reply:
        with self._lock:
            storm = self.storm
            if storm is not None and storm.active():
                self.storm_hits += 1
                if storm.calls is not None:
                    storm.calls -= 1
                return storm.reply()
            if self._script:
                return self._script.popleft()
        if self.responder is not None:
            return self.responder(payload)
        return self.default

    def _next_embedding(self) -> Reply:
        with self._lock:
            if self._embed_script:
                return self._embed_script.popleft()
        return Reply()

    def _chat_body(self, reply: Reply) -> dict[str, Any]:
        style = self.style or Style()
        text = dress(
            reply.text,
            think=reply.think if reply.think is not None else style.think,
            fence=reply.fence if reply.fence is not None else style.fence,
            preamble=reply.preamble or style.preamble,
            postscript=reply.postscript or style.postscript,
        )
        finish = reply.finish_reason or "stop"
        if reply.truncate_at is not None and len(text) > reply.truncate_at:
            text, finish = text[: reply.truncate_at], reply.finish_reason or "length"
        body: dict[str, Any] = {
            "id": f"chatcmpl-fake-{int(time.time() * 1000)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        }
        if self.send_usage if reply.usage is None else reply.usage:
            body["usage"] = {
                "prompt_tokens": reply.prompt_tokens,
                "completion_tokens": reply.completion_tokens,
                "total_tokens": reply.prompt_tokens + reply.completion_tokens,
            }
        return body

    def _embedding_body(self, payload: dict[str, Any]) -> dict[str, Any]:
        inputs = payload.get("input", [])
        if isinstance(inputs, str):
            inputs = [inputs]
        data = [
            {"object": "embedding", "index": i, "embedding": self.embedding_fn(str(text))}
            for i, text in enumerate(inputs)
        ]
        return {
            "object": "list",
            "data": data,
            "model": payload.get("model", "fake-embed"),
            "usage": {"prompt_tokens": len(inputs), "total_tokens": len(inputs)},
        }
