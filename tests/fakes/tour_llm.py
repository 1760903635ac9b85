"""A scripted model for the README's tour, when no LLM is at hand, and for the docs' tests: the fake OpenAI
server answering each of lessonboard's prompts as a real model would. ``--prose`` makes it answer lesson
prompts with prose instead of the lesson's blocks, a reply the lesson parser refuses (a real model does it
now and then), so the tour can show a dead job on demand.

    .venv/bin/python -m tests.fakes.tour_llm            # http://127.0.0.1:11434/v1, model "tour-model"
    .venv/bin/python -m tests.fakes.tour_llm --prose
"""

from __future__ import annotations

import argparse
import json
import signal
import threading
from typing import Any

from tests.fakes.openai_server import FakeOpenAIServer, Reply

LESSON_REPLY = (
    "<situation>editing a large source file</situation><mistake>rewrote the whole file at once</mistake>"
    "<correction>make targeted edits and run the build after each</correction><tags>go, edit-file</tags>"
)
PROPOSALS_REPLY = json.dumps(
    {
        "proposals": [
            {
                "target": "memory",
                "op": "add",
                "content": "The test suite runs with make test.",
                "rationale": "a project convention",
                "score": 0.9,
            },
            {
                "target": "lesson",
                "op": "add",
                "lesson": {"situation": "editing a large Go file", "correction": "split it into targeted edits"},
                "rationale": "worth keeping as a lesson",
                "score": 0.8,
            },
        ]
    }
)


def respond(request: dict[str, Any], *, prose: bool = False) -> Reply:
    """What a model would answer to each of lessonboard's prompts (and to the example agent's own)."""
    system = next((m["content"] for m in request.get("messages", []) if m.get("role") == "system"), "")
    if "distill engineering lessons" in system:
        return Reply(text=PROSE_REPLY if prose else LESSON_REPLY)
    if "propose what is worth remembering" in system:
        return Reply(text=PROPOSALS_REPLY)
    if system.startswith("You are a careful coding agent."):
        return Reply(text="")  # the example agent's model fails, so the example reports an error
    return Reply(text="ok")


PROSE_REPLY = "Sure! The agent should have edited the file in smaller steps and run the build after each one."


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=11434)
    parser.add_argument("--prose", action="store_true", help="answer lesson prompts with prose the parser refuses")
    args = parser.parse_args(argv)
    server = FakeOpenAIServer(model="tour-model")
    server.responder = lambda request: respond(request, prose=args.prose)
    server.start(port=args.port)
    print(f"scripted model at {server.url} (model {server.model}){'; lessons answered in prose' if args.prose else ''}")
    print("Ctrl-C stops it.", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    server.stop()


if __name__ == "__main__":
    main()
