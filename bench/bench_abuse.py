"""Bounded cost per request: each costly request of the abuse probe replayed against a local stack (a real
gunicorn on the embedded PostgreSQL of ``var/test``, database ``lessonboard_bench_abuse``), each beside a
normal request of the same class (the anchor). Prints server time p50/p95 (loopback wall time of each
request) and the web workers' RSS after each class.

    .venv/bin/python bench/bench_abuse.py [--lessons 20000] [--requests 10] [--big 30] [--rounds 5]

``--lessons 200000`` is the size the probe used (seeding takes a while on a 2-core machine: the HNSW index is
built once after the rows are in: the secondary indexes are dropped for the bulk load and rebuilt). The
lessons are synthetic — seeded in SQL with random vectors under the configured model's id and texts of
Zipf-distributed made-up words plus topic words, in one workspace; fine for a cost bench, not for quality.
The same database is reused while ``--lessons`` stays the same.

Rows:
1. retrieve, task = 1,000 characters of ~150 distinct rare words, k=50 (also for a token bound to an
   almost empty workspace) — beside a 6-word task, k=5;
2. /lessons/?q= with the same text, as a viewer — beside /lessons/?q=<6 words>;
3. /queue/?tab=done&q=zz (and q=zzz, served by the excerpt index) after ``--big`` done jobs of 15 MiB —
   beside /queue/?tab=done;
4. /lessons/gaps/ and /inbox/ after 1,000 distinct gaps — beside /lessons/ (the maintained rows are
   refreshed once first, as beat would; that refresh's own time is printed);
5. retrieve with "hyde": true while the server has HyDE off — beside the same without it (the reviews half
   of that row, LLM calls in web threads, belongs to the LLM gateway's limiter and is not replayed here);
6. ``--rounds`` rounds of 10 concurrent maximum-size (15 MiB) triggers: every web worker's RSS after each
   round (bar: the last round within 1.5x of the first);
7. ``--reviews`` (40) concurrent POST /api/v1/reviews against a fake model (tests/fakes) that takes
   ``--model-latency`` (20 s) per answer: /healthz every 50 ms meanwhile, beside /healthz at rest (the
   anchor), and how the reviews were answered (bar: p95 <= 50 ms while they wait; none holds every thread).
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

parser = argparse.ArgumentParser()
parser.add_argument("--lessons", type=int, default=20_000)
parser.add_argument("--requests", type=int, default=10, help="requests per class")
parser.add_argument("--big", type=int, default=30, help="done jobs of 15 MiB for row 3")
parser.add_argument("--rounds", type=int, default=5, help="rounds of 10 concurrent 15 MiB triggers")
parser.add_argument("--gaps", type=int, default=1000)
parser.add_argument("--no-malloc-env", action="store_true", help="web without serve's allocator settings")
parser.add_argument("--only-memory", action="store_true", help="row 6 only (the RSS rounds)")
parser.add_argument("--seed-only", action="store_true", help="seed the lessons and stop")
parser.add_argument("--only", default="", help="comma-separated rows to run (1-7); default: all")
parser.add_argument("--reviews", type=int, default=40, help="concurrent reviews for row 7")
parser.add_argument("--model-latency", type=float, default=20.0, help="seconds per fake model answer (row 7)")
args = parser.parse_args()

import bench_env  # noqa: E402

bench_env.setup("abuse")

import psutil  # noqa: E402
from django.conf import settings  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.utils import timezone  # noqa: E402
from synthetic import TOPICS, seed_gaps, seed_lessons  # noqa: E402

from lessonboard.tokens import issue_token  # noqa: E402
from lessonq.models import Job, JobState  # noqa: E402
from tests.factories import UserFactory  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, Reply  # noqa: E402
from tests.support.processes import Gunicorn  # noqa: E402

BIG = 15 * 1024 * 1024
MALLOC_ENV = {"MALLOC_ARENA_MAX": "2", "MALLOC_MMAP_THRESHOLD_": str(1 << 20)}


def percentile(values: list[float], p: float) -> float:
    return bench_env.percentile(values, p)


def seed_done_jobs(n: int) -> None:
    Job.objects.all().delete()
    rnd = random.Random(7)
    vocab = [f"{w}{i}" for w in TOPICS for i in range(50)]
    now = timezone.now()
    for i in range(n):
        chunk = " ".join(rnd.choice(vocab) for _ in range(20_000))
        task = (chunk * (BIG // len(chunk) + 1))[:BIG]
        Job.objects.create(
            id=f"{i + 1:016x}",
            node="lessonq.bench",
            state=JobState.SUCCEEDED,
            task=task,
            trigger="error",
            last_error="",
            enqueued_at=now,
            next_attempt_at=now,
            finished_at=now,
        )
    with connection.cursor() as cur:
        cur.execute("ANALYZE queue_job")


class Web:
    def __init__(self, server: Gunicorn, token: str, cookie: str) -> None:
        self.server, self.token, self.cookie = server, token, cookie

    def call(self, method: str, path: str, body: Any = None, *, api: bool = False) -> tuple[int, bytes, float]:
        conn = http.client.HTTPConnection("127.0.0.1", self.server.port, timeout=120)
        headers = {"Authorization": f"Bearer {self.token}"} if api else {"Cookie": self.cookie}
        data = None
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        t0 = time.perf_counter()
        conn.request(method, path, body=data, headers=headers)
        response = conn.getresponse()
        content = response.read()
        elapsed = (time.perf_counter() - t0) * 1000
        conn.close()
        return response.status, content, elapsed

    def workers(self) -> list[psutil.Process]:
        return psutil.Process(self.server.proc.pid).children()

    def rss(self) -> list[float]:
        return [p.memory_info().rss / 2**20 for p in self.workers()]


def measure(web: Web, label: str, make: Callable[[], tuple[str, str, Any, bool]], n: int) -> dict[str, Any]:
    times: list[float] = []
    statuses: dict[int, int] = {}
    last = b""
    for _ in range(n):
        method, path, body, api = make()
        status, last, ms = web.call(method, path, body, api=api)
        times.append(ms)
        statuses[status] = statuses.get(status, 0) + 1
    rss = web.rss()
    row = {"label": label, "p50": percentile(times, 50), "p95": percentile(times, 95), "statuses": statuses}
    print(
        f"  {label:<58} p50 {row['p50']:7.1f} ms  p95 {row['p95']:7.1f} ms  statuses {statuses}  "
        f"web RSS {' / '.join(f'{r:.0f}' for r in rss)} MB",
        flush=True,
    )
    row["last"] = last
    return row


def rare_task(rnd: random.Random) -> str:
    words: list[str] = []
    while len(" ".join(words)) < 1000:
        words.append(f"w{rnd.randrange(12000, 20000)}" if rnd.random() < 0.7 else f"zq{rnd.randrange(10**6)}x")
    return " ".join(words)[:1000]


def memory_rounds(web: Web) -> None:
    print(f"6. {args.rounds} rounds of 10 concurrent 15 MiB triggers (web RSS after each round)")
    payload = json.dumps({"task": "t" * (BIG - 4096), "output": "o" * 1024, "error": "boom", "agent": "bench"}).encode()
    rounds: list[list[float]] = []
    for r in range(args.rounds):
        statuses: dict[int, int] = {}
        lock = threading.Lock()
        times: list[float] = []

        def send(statuses: dict[int, int] = statuses, lock: threading.Lock = lock, times: list[float] = times) -> None:
            status, _, ms = web.call("POST", "/api/v1/reflexion/triggers", payload, api=True)
            with lock:
                statuses[status] = statuses.get(status, 0) + 1
                times.append(ms)

        pool = [threading.Thread(target=send) for _ in range(10)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        rss = web.rss()
        rounds.append(rss)
        print(
            f"  round {r + 1}: statuses {statuses}  p50 {percentile(times, 50):.0f} ms  "
            f"web RSS {' / '.join(f'{x:.0f}' for x in rss)} MB (sum {sum(rss):.0f})",
            flush=True,
        )
    first, last = sum(rounds[0]), sum(rounds[-1])
    print(f"  RSS last/first round: {last / first:.2f}x (bar: <= 1.5x)", "met" if last <= 1.5 * first else "NOT met")
    Job.objects.all().delete()


class HealthSampler(threading.Thread):
    """GET /healthz every 50 ms until stopped; keeps the latencies (ms) and the non-200 answers."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.ms: list[float] = []
        self.failed = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
            t0 = time.perf_counter()
            try:
                conn.request("GET", "/healthz")
                response = conn.getresponse()
                response.read()
                self.failed += response.status != 200
            except OSError:
                self.failed += 1
            self.ms.append((time.perf_counter() - t0) * 1000)
            conn.close()

    def figures(self) -> str:
        return (
            f"p50 {percentile(self.ms, 50):.1f} ms  p95 {percentile(self.ms, 95):.1f} ms  "
            f"max {max(self.ms):.1f} ms over {len(self.ms)} probes ({self.failed} not 200)"
        )


def reviews_on_a_slow_model(web: Web, fake: FakeOpenAIServer) -> None:
    print(f"7. {args.reviews} concurrent reviews, the model taking {args.model_latency:.0f} s per answer")
    rest = HealthSampler(web.server.port)
    rest.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not rest.stopped.wait(0.5):
        pass
    rest.stopped.set()
    rest.join()
    print(f"  anchor: /healthz at rest         {rest.figures()}", flush=True)
    fake.latency = args.model_latency
    fake.max_in_flight = 0
    statuses: dict[int, int] = {}
    answered: list[tuple[int, float]] = []
    lock = threading.Lock()

    def review() -> None:
        body = {"summary": f"did work {time.monotonic_ns()}", "workspace": "abuse-big", "agent": "bench"}
        status, _, ms = web.call("POST", "/api/v1/reviews", body, api=True)
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
            answered.append((status, ms))

    busy = HealthSampler(web.server.port)
    busy.start()
    pool = [threading.Thread(target=review) for _ in range(args.reviews)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    busy.stopped.set()
    busy.join()
    fake.latency = 0.0
    refused = [ms for status, ms in answered if status == 503]
    waited = [ms for status, ms in answered if status != 503]
    print(f"  /healthz while the reviews wait  {busy.figures()}")
    print(
        f"  reviews: statuses {statuses}; at the model at once: {fake.max_in_flight}; "
        f"503 answered in p95 {percentile(refused, 95) if refused else 0:.0f} ms; "
        f"the others in p50 {percentile(waited, 50) if waited else 0:.0f} ms",
    )
    p95 = percentile(busy.ms, 95)
    print(
        f"  /healthz p95 busy/rest: {p95 / max(percentile(rest.ms, 95), 0.001):.2f}x; bar p95 <= 50 ms:",
        "met" if p95 <= 50 else "NOT met",
        flush=True,
    )


def want(row: int) -> bool:
    if args.only_memory:
        return row == 6
    return not args.only or str(row) in args.only.split(",")


def main() -> None:
    seed_lessons(args.lessons)
    if args.seed_only:
        return
    token = issue_token(f"bench-abuse-{time.monotonic_ns()}", ["full"]).plaintext
    bound = issue_token(f"bench-abuse-bound-{time.monotonic_ns()}", ["full"], workspaces=["abuse-tiny"]).plaintext
    viewer = UserFactory(username=f"bench-abuse-{time.monotonic_ns()}", role="viewer")
    browser = Client()
    browser.force_login(viewer)
    cookie = f"{settings.SESSION_COOKIE_NAME}={browser.cookies[settings.SESSION_COOKIE_NAME].value}"
    fake = FakeOpenAIServer().start()
    fake.default = Reply(text='{"proposals": []}')  # a review that proposes nothing: the call's wait is the cost
    env = bench_env.env(
        **({} if args.no_malloc_env else MALLOC_ENV),
        LESSONBOARD_LLM_BASE_URL=fake.url,
        LESSONBOARD_LLM_MODEL=fake.model,
        LESSONBOARD_LLM_TIMEOUT="120s",
    )
    server = Gunicorn(env=env, workers=2).wait_ready()
    web = Web(server, token, cookie)
    rnd = random.Random(28)
    n = args.requests
    print(
        f"{args.lessons:,} lessons in one workspace; gunicorn 2 workers x {settings.WEB_THREADS} threads; "
        f"statement timeouts retrieve {settings.STATEMENT_TIMEOUT_RETRIEVE}s, list {settings.STATEMENT_TIMEOUT_LIST}s, "
        f"search {settings.STATEMENT_TIMEOUT_SEARCH}s; allocator env: {'none' if args.no_malloc_env else MALLOC_ENV}",
        flush=True,
    )
    try:
        for _ in range(3):  # warm-up: each worker loads the model and imports its views
            web.call("POST", "/api/v1/lessons/retrieve", {"task": "warm up", "workspace": "abuse-big"}, api=True)
            web.call("GET", "/lessons/?q=warm")
        print(f"start: web RSS {' / '.join(f'{r:.0f}' for r in web.rss())} MB")

        if want(1):
            print("1. retrieve (class: retrieve)")
            measure(
                web,
                "normal: 6-word task, k=5",
                lambda: (
                    "POST",
                    "/api/v1/lessons/retrieve",
                    {"task": "retry with backoff on 429 " + str(rnd.random()), "k": 5, "workspace": "abuse-big"},
                    True,
                ),
                n,
            )
            row = measure(
                web,
                "abuse: 1,000 chars of ~150 rare words, k=50",
                lambda: (
                    "POST",
                    "/api/v1/lessons/retrieve",
                    {"task": rare_task(rnd), "k": 50, "workspace": "abuse-big"},
                    True,
                ),
                n,
            )
            if row["statuses"].get(503):
                print(
                    f"     503 body: {json.loads(row['last']) if row['last'].startswith(b'{') else row['last'][:200]!r}"
                )
            web_bound = Web(server, bound, cookie)
            measure(
                web_bound,
                "abuse, token bound to a 3-lesson workspace",
                lambda: (
                    "POST",
                    "/api/v1/lessons/retrieve",
                    {"task": rare_task(rnd), "k": 50, "workspace": "abuse-tiny"},
                    True,
                ),
                n,
            )

        if want(2):
            print("2. /lessons/?q= as a viewer (class: search)")
            measure(
                web,
                "normal: /lessons/?q=<6 words>",
                lambda: (
                    "GET",
                    "/lessons/?q=" + urllib.parse.quote("retry backoff rate limit 429 deploy"),
                    None,
                    False,
                ),
                n,
            )
            measure(
                web,
                "abuse: /lessons/?q=<1,000 chars of rare words>",
                lambda: ("GET", "/lessons/?q=" + urllib.parse.quote(rare_task(rnd)), None, False),
                n,
            )

        if want(3):
            print(f"3. queue search (class: search) after {args.big} done jobs of 15 MiB")
            t0 = time.perf_counter()
            seed_done_jobs(args.big)
            print(f"     ({args.big} jobs of 15 MiB written in {time.perf_counter() - t0:.0f} s)")
            measure(web, "normal: /queue/?tab=done", lambda: ("GET", "/queue/?tab=done", None, False), n)
            measure(
                web,
                "abuse: /queue/?tab=done&q=zz (refused: too short)",
                lambda: ("GET", "/queue/?tab=done&q=zz", None, False),
                n,
            )
            measure(
                web,
                "/queue/?tab=done&q=zzz (the excerpt index)",
                lambda: ("GET", "/queue/?tab=done&q=zzz", None, False),
                n,
            )
            measure(
                web,
                "/queue/?tab=done&q=deploy7 (a hit in every job)",
                lambda: ("GET", "/queue/?tab=done&q=deploy7", None, False),
                n,
            )
            Job.objects.all().delete()

        if want(4):
            print(f"4. derived views (class: list) after {args.gaps:,} distinct gaps")
            seed_gaps(args.gaps)
            from console.tasks import refresh_derived

            t0 = time.perf_counter()
            refreshed = refresh_derived()
            print(
                f"     beat's refresh_derived {refreshed}: {(time.perf_counter() - t0) * 1000:.0f} ms (in the worker, not a page)"
            )
            measure(web, "normal: /lessons/ (list page)", lambda: ("GET", "/lessons/", None, False), n)
            measure(web, "/lessons/gaps/", lambda: ("GET", "/lessons/gaps/", None, False), n)
            measure(web, "/inbox/", lambda: ("GET", "/inbox/", None, False), n)
            measure(web, "/overview/ (nav badge from the maintained row)", lambda: ("GET", "/", None, False), n)

        if want(5):
            print("5. hyde from the request while the server has it off (class: retrieve)")
            measure(
                web,
                "normal: retrieve without hyde",
                lambda: (
                    "POST",
                    "/api/v1/lessons/retrieve",
                    {"task": "deploy the helm chart " + str(rnd.random()), "workspace": "abuse-big"},
                    True,
                ),
                n,
            )
            row = measure(
                web,
                'abuse: retrieve with "hyde": true',
                lambda: (
                    "POST",
                    "/api/v1/lessons/retrieve",
                    {"task": "deploy the helm chart " + str(rnd.random()), "hyde": True, "workspace": "abuse-big"},
                    True,
                ),
                n,
            )
            print(f"     explanation.hyde: {json.loads(row['last'])['explanation'].get('hyde')}")

        if want(6):
            memory_rounds(web)
        if want(7):
            reviews_on_a_slow_model(web, fake)
        Job.objects.all().delete()
    finally:
        server.stop()
        fake.stop()


if __name__ == "__main__":
    sys.exit(main())
