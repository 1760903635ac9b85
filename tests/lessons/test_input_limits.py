"""Text that reaches a model is cut to a documented length (docs/api.md#input-policy)."""

from __future__ import annotations

import numpy as np

from lessonq.generation import TASK_LIMIT, user_message
from lessons.embeddings import E5_MAX_CHARS, E5Provider


def test_the_lesson_prompt_carries_the_first_task_limit_characters_of_a_task() -> None:
    task = "t" * (TASK_LIMIT + 5000)
    message = user_message(task=task, attempt="a", outcome="o", trigger="error")
    assert f"TASK:\n{'t' * TASK_LIMIT}...\n\nATTEMPT:" in message
    assert "t" * (TASK_LIMIT + 1) not in message
    short = user_message(task="Edit main.go", attempt="a", outcome="o", trigger="error")
    assert short.startswith("TASK:\nEdit main.go\n\nATTEMPT:")  # chatcli's prompt when the task is short


def test_e5_embeds_the_first_e5_max_chars_characters_of_a_long_text() -> None:
    provider = E5Provider()
    words = " ".join(f"deploy{n} the service with helm" for n in range(2000))
    assert len(words) > 10 * E5_MAX_CHARS
    np.testing.assert_array_equal(provider.embed_query(words), provider.embed_query(words[:E5_MAX_CHARS]))
    np.testing.assert_array_equal(
        provider.embed_documents([words])[0], provider.embed_documents([words[:E5_MAX_CHARS]])[0]
    )
