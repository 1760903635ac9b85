"""The anchor of ``bench_queue_ingest_http.py``: a bare Django view doing only the durable append of
the same trigger (parse the JSON, build the chatcli record, WAL append with its fsyncs, answer 202),
served next to lessonboard's own URLs by the same gunicorn. It is the ``ROOT_URLCONF`` of
``bench_ingest_settings`` (bench/ on ``PYTHONPATH``); never part of the app."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.urls import path
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from lessonboard.urls import urlpatterns as app_urlpatterns
from lessonq import gojson
from lessonq.jobid import job_id
from lessonq.paths import wal
from lessonq.wal import WalJob

BARE_PATH = "/api/bench/bare-append"


@csrf_exempt
def bare_append(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body)
    task, output, error = data["task"], data.get("output", ""), data.get("error", "")
    outcome = f"ERROR: {error}"
    now = gojson.local(timezone.now())
    jid = job_id(task=task, attempt=output, outcome=outcome, trigger="error")
    record = WalJob(
        id=jid, task=task, attempt=output, outcome=outcome, trigger="error", enqueued_at=now, next_attempt_at=now
    )
    accepted = wal().append(record)
    return JsonResponse({"job_id": jid, "status": "accepted" if accepted else "deduped"}, status=202)


urlpatterns = [path(BARE_PATH.lstrip("/"), bare_append), *app_urlpatterns]
