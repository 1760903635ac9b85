"""A live lessonboard for the docs' examples: gunicorn and a lesson worker on a node of their own, the LLM
being the fake OpenAI server answering as a real model would for each prompt."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.docs import docset
from tests.fakes.openai_server import FakeOpenAIServer
from tests.fakes.tour_llm import respond
from tests.support.processes import CeleryWorker, Gunicorn, subprocess_env
from tests.support.wait import wait_for


@dataclass
class Stack:
    url: str
    node: str
    llm: FakeOpenAIServer
    queue_dir: Path
    env: dict[str, str]  # the environment of the stack's processes (for a management command on its node)

    def forget_jobs(self) -> None:
        """Empty the node's WAL and DLQ: the database is emptied between tests, so are they."""
        for sub in ("wal", "dlq"):
            for record in (self.queue_dir / sub).glob("*"):
                record.unlink(missing_ok=True)

    def run(self, example: docset.Example, token: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(tmp_path),
            "LB": self.url,
            "TOKEN": token,
            "OPENAI_BASE_URL": self.llm.url,
            "OPENAI_API_KEY": "sk-test",
            "AGENT_MODEL": self.llm.model,
        }
        if example.language == "python":
            script = tmp_path / f"{example.name}.py"
            script.write_text(example.code, encoding="utf-8")
            cmd = [sys.executable, str(script)]
        else:
            cmd = ["bash", "-euo", "pipefail", "-c", example.code]
        return subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def docs_stack(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[Stack]:
    yield from _stack(django_db_blocker, tmp_path_factory)


@pytest.fixture
def own_stack(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[Stack]:
    """A stack for one test that stops its model and counts the breaker from nothing (the module's stack
    has served the other examples by then)."""
    for stack in _stack(django_db_blocker, tmp_path_factory):
        stack.forget_jobs()
        yield stack
        settle()


def _stack(django_db_blocker: Any, tmp_path_factory: Any) -> Iterator[Stack]:
    node = "docs" + uuid.uuid4().hex[:8]
    queue_dir = tmp_path_factory.mktemp("lessonq")
    # A model of its own: the tour stops and restarts it, and the session's shared fake may still be holding
    # another test's slow answers (a test that made every answer wait) in the same process.
    fake_openai_server = FakeOpenAIServer().start()
    fake_openai_server.responder = respond
    with django_db_blocker.unblock():
        env = subprocess_env(
            LESSONBOARD_LLM_BASE_URL=fake_openai_server.url,
            LESSONBOARD_LLM_MODEL=fake_openai_server.model,
            LESSONBOARD_LLM_API_KEY="sk-test",
            LESSONBOARD_LLM_TIMEOUT="5s",
            LESSONBOARD_NODE=node,
            LESSONQ_BASE_DIR=str(queue_dir),
        )
    web = Gunicorn(env=env, workers=2).wait_ready()
    # The lesson queue and ``embed``, as ``serve`` runs them: a new lesson is found by the next retrieve
    # once it is embedded, which the tour waits for.
    worker = CeleryWorker(queues=[f"lessonq.{node}", "embed"], env=env, hostname=f"{node}@%h")
    try:
        worker.wait_ready()
        yield Stack(url=web.url, node=node, llm=fake_openai_server, queue_dir=queue_dir, env=env)
    finally:
        worker.stop()
        web.stop()
        fake_openai_server.stop()


@pytest.fixture
def stack(docs_stack: Stack) -> Iterator[Stack]:
    docs_stack.forget_jobs()
    yield docs_stack
    settle()


def settle() -> None:
    """Wait until the worker is done with what the test started (its jobs finished, its lessons
    embedded): emptying the database under a worker that is still writing to it can deadlock."""
    from lessonq.models import ACTIVE, Job
    from lessons.models import Lesson

    wait_for(
        lambda: (
            not Job.objects.filter(state__in=ACTIVE).exists()
            and not Lesson.objects.filter(embedding__isnull=True).exists()
        ),
        timeout=60,
        what="the docs worker to finish the test's jobs and embeddings",
    )
