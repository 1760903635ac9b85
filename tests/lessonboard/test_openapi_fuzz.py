"""Schemathesis against a real gunicorn: every operation of /api/v1/openapi.json, fuzzed from the document
itself, answers no 5xx and nothing the document does not describe (docs/api.md#openapi).

The run is bounded (``MAX_EXAMPLES`` per operation, a fixed seed, one worker) so it fits a small CI
machine; ``LESSONBOARD_OPENAPI_FUZZ_EXAMPLES`` raises it for a longer hunt.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

import pytest

from lessonboard.models import TokenScope, Workspace
from lessonboard.tokens import issue_token
from tests.fakes.openai_server import Reply
from tests.support.processes import Gunicorn, subprocess_env

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.worker]


MAX_EXAMPLES = int(os.environ.get("LESSONBOARD_OPENAPI_FUZZ_EXAMPLES", "25"))
SEED = int(os.environ.get("LESSONBOARD_OPENAPI_FUZZ_SEED", "20261201"))
CHECKS = os.environ.get(
    "LESSONBOARD_OPENAPI_FUZZ_CHECKS",
    "not_a_server_error,response_schema_conformance,status_code_conformance,content_type_conformance",
)


@pytest.fixture
def web(queue_dir: Path, settings: Any, fake_openai: Any, start_gunicorn: Any) -> Gunicorn:
    # The review pass's model answers as it should, with a proposal the gate rejects (nothing is written):
    # a 502 would be the fake model's fault, not the API's.
    proposal = {"target": "memory", "op": "add", "content": "fuzz", "rationale": "r", "score": 0.1}
    fake_openai.default = Reply(text=json.dumps({"proposals": [proposal]}))
    env = subprocess_env(
        LESSONQ_BASE_DIR=str(queue_dir),
        LESSONBOARD_NODE=settings.NODE,
        # A refine answers 202 at once: the fuzz run never waits for a model.
        LESSONBOARD_REFINE_API_WAIT="0",
        LESSONBOARD_LLM_BASE_URL=fake_openai.url,
        LESSONBOARD_LLM_MODEL=fake_openai.model,
    )
    return start_gunicorn(env=env, workers=2)


def run_schemathesis(web: Gunicorn, token: str, report: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(Path(sys.executable).parent / "st"),
        "run",
        f"{web.url}/api/v1/openapi.json",
        "--header",
        f"Authorization: Bearer {token}",
        "--checks",
        CHECKS,
        "--max-examples",
        str(MAX_EXAMPLES),
        "--seed",
        str(SEED),
        # One worker: schemathesis' generators on two threads at once trip CPython 3.11's AST recursion
        # check now and then (a tool error, not a finding); one is still well within the time budget.
        "--workers",
        "1",
        "--phases",
        "examples,coverage,fuzzing,stateful",
        "--request-timeout",
        "30",
        "--no-shrink",
        "--report",
        "junit",
        "--report-junit-path",
        str(report),
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "", "NO_COLOR": "1", "COLUMNS": "200"}
    # Run in the report's folder: schemathesis keeps a .schemathesis/ cache in its working directory.
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=report.parent)


def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_document(web: Gunicorn, tmp_path: Path) -> None:
    token = issue_token("schemathesis", [TokenScope.FULL, TokenScope.INGEST, TokenScope.METRICS]).plaintext
    Workspace.objects.create(slug="ws", name="ws")  # a known workspace: some requests get past the lookup
    report = tmp_path / "junit.xml"
    result = run_schemathesis(web, token, report)
    # Long generated values are cut, so the message stays readable.
    output = "\n".join(line[:400] for line in (result.stdout + result.stderr).splitlines())
    assert result.returncode == 0, output[-8000:]
    suites = ElementTree.parse(report).getroot()
    cases = suites.findall(".//testcase")
    failed = [c.get("name") for c in cases if c.find("failure") is not None or c.find("error") is not None]
    assert failed == [], output[-8000:]
    # Every operation of the document was exercised (a schema that fails to load runs nothing); the
    # document's own operation is the one schemathesis leaves out (tests/lessonboard/test_openapi.py has it).
    document = json.loads(subprocess_get(web, "/api/v1/openapi.json", token))
    operations = {f"{method.upper()} {path}" for path, methods in document["paths"].items() for method in methods}
    assert operations - {c.get("name") for c in cases} == {"GET /api/v1/openapi.json"}, output[-4000:]
    print(output[-3000:])


def subprocess_get(web: Gunicorn, path: str, token: str) -> bytes:
    import urllib.request

    request = urllib.request.Request(web.url + path, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return bytes(response.read())
