"""Refine fixtures every folder uses (a pytest plugin, registered in tests/conftest.py): drafts, a scripted
LLM, ``make_run`` and a rolled-back run."""

from __future__ import annotations

from typing import Any

import pytest

from lessonboard.llm import ChatResult
from refine import runs
from refine.models import RefineRun
from refine.refiner import Refiner

ORIGINAL = (
    "To deploy the service, build the image, push it to the registry and run helm upgrade with the new tag. "
    "Then check that every pod is ready and roll back with helm rollback if the health checks fail after five minutes."
)
PASS_1 = (
    "To deploy the service, build the image, push it to the registry and run helm upgrade --atomic with the new tag. "
    "Then check that every pod is ready and roll back with helm rollback if the readiness probes fail after five minutes."
)
PASS_2 = "Deployment is easy: just <script>alert(1)</script> kubectl apply everything and hope for the best."


def reply(revised: str, critique: str = "- fine") -> str:
    return f"<critique>\n{critique}\n</critique>\n<revised>\n{revised}\n</revised>"


class ScriptedLLM:
    """Stands in for the LLM endpoint in-process: answers each chat with the next scripted text."""

    def __init__(self, *answers: Any) -> None:
        self.answers = list(answers)
        self.messages: list[Any] = []

    def __call__(self, messages: Any) -> ChatResult:
        self.messages.append(messages)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return ChatResult(text=answer, model="fake", prompt_tokens=10, completion_tokens=5)


def make_run(*answers: str, max_passes: int = 3, agent: str = "coder", draft: str = ORIGINAL) -> RefineRun:
    run = RefineRun.objects.create(
        task="Explain how to deploy", original_draft=draft, agent=agent, max_passes=max_passes
    )
    finished = runs.execute_run(run.pk, refiner=Refiner(ScriptedLLM(*answers)))
    assert finished is not None
    return finished


@pytest.fixture
def rolled_back_run(db: Any) -> RefineRun:
    """Pass 1 tightens the draft, pass 2 drifts away (and carries markup): the guard rolls back to pass 1."""
    return make_run(
        reply(PASS_1, "- say --atomic so a failed upgrade undoes itself\n- name the probes"),
        reply(PASS_2, "- too long"),
    )
