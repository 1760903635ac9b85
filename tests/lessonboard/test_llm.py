"""The gateway, through the real ``openai`` client, against the fake server over HTTP."""

import json
from typing import Any

import pytest

from lessonboard import llm
from tests.fakes.openai_server import Reply


def _ask() -> llm.ChatResult:
    return llm.chat([{"role": "user", "content": "hello"}])


def _answer_with_content(content: Any) -> Reply:
    """A chat answer whose message ``content`` is ``content`` as it is (the fake only sends strings)."""
    body = {
        "id": "chatcmpl-content",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    }
    return Reply(body=json.dumps(body))


def test_it_returns_the_reply_and_token_counts(fake_openai):
    fake_openai.script(Reply(text="hi there", prompt_tokens=3, completion_tokens=2))
    result = _ask()
    assert result.text == "hi there"
    assert (result.prompt_tokens, result.completion_tokens, result.model) == (3, 2, "fake-model")
    sent = fake_openai.chat_requests()[-1]
    assert sent.json["messages"] == [{"role": "user", "content": "hello"}]
    assert sent.headers["authorization"] == "Bearer sk-test"


@pytest.mark.parametrize("status", [429, 500, 502, 503])
def test_it_maps_rate_limits_and_server_errors_to_transient(fake_openai, status):
    fake_openai.script(Reply(status=status, error_message="slow down"))
    with pytest.raises(llm.TransientLLMError) as info:
        _ask()
    assert info.value.status == status
    assert "slow down" in info.value.message
    assert len(fake_openai.chat_requests()) == 1  # the gateway never retries by itself


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_it_maps_other_client_errors_to_permanent(fake_openai, status):
    fake_openai.script(Reply(status=status, error_message="bad model"))
    with pytest.raises(llm.PermanentLLMError) as info:
        _ask()
    assert info.value.status == status and "bad model" in info.value.message


def test_it_maps_a_timeout_to_transient(fake_openai, settings):
    settings.LLM_TIMEOUT = 0.3
    fake_openai.script(Reply(text="too late", delay=3))
    with pytest.raises(llm.TransientLLMError, match="timed out"):
        _ask()


def test_it_maps_a_malformed_body_to_transient(fake_openai):
    fake_openai.script(Reply(body="{not json"))
    with pytest.raises(llm.TransientLLMError):
        _ask()


def test_content_sent_as_parts_is_the_text_of_its_text_parts(fake_openai):
    fake_openai.script(
        _answer_with_content(
            [
                {"type": "text", "text": "LESSON: a"},
                {"type": "image_url", "image_url": {"url": "https://example.invalid/x.png"}},
                {"type": "text", "text": "\nMISTAKE: b"},
            ]
        )
    )
    result = _ask()
    assert result.text == "LESSON: a\nMISTAKE: b"
    assert (result.prompt_tokens, result.completion_tokens) == (3, 2)


@pytest.mark.parametrize(
    "content",
    [{"type": "text", "text": "hi"}, 42, ["hi"], [{"type": "text", "text": 7}], [{"type": "text"}]],
    ids=["object", "number", "list-of-strings", "text-not-a-string", "text-missing"],
)
def test_other_content_that_is_not_text_is_a_malformed_answer(fake_openai, content):
    fake_openai.script(_answer_with_content(content))
    with pytest.raises(llm.TransientLLMError, match="malformed chat response from provider") as info:
        _ask()
    assert type(info.value) is llm.TransientLLMError and not info.value.outage  # as a garbled body is
    assert len(fake_openai.chat_requests()) == 1


def test_it_maps_an_unreachable_endpoint_to_transient(settings):
    settings.LLM_BASE_URL = "http://127.0.0.1:1/v1"
    settings.LLM_MODEL = "m"
    with pytest.raises(llm.TransientLLMError, match="cannot reach"):
        _ask()


def test_unconfigured_is_a_visible_state_not_a_crash(settings):
    settings.LLM_BASE_URL = ""
    settings.LLM_MODEL = ""
    assert llm.is_configured() is False
    assert "no LLM configured" in llm.status_text()
    with pytest.raises(llm.PermanentLLMError):
        _ask()


def test_it_embeds_through_the_same_client(fake_openai):
    vectors = llm.embed(["a b", "c"], model="fake-embed")
    assert len(vectors) == 2 and len(vectors[0]) == 64
    assert fake_openai.requests[-1].json["input"] == ["a b", "c"]
