"""The fake OpenAI server's real-model behaviours, seen through the real ``openai`` client over HTTP."""

import threading

import openai
import pytest

from tests.fakes.openai_server import FakeOpenAIServer, Reply, Style
from tests.support.wait import wait_for


@pytest.fixture
def server():
    fake = FakeOpenAIServer().start()
    yield fake
    fake.stop()


def _client(server: FakeOpenAIServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="sk-test", max_retries=0, timeout=10)


def _ask(server: FakeOpenAIServer):
    return _client(server).chat.completions.create(model="fake-model", messages=[{"role": "user", "content": "hi"}])


def test_defaults_answer_as_before(server):
    response = _ask(server)
    assert response.choices[0].message.content == "ok"
    assert response.choices[0].finish_reason == "stop"
    assert response.usage is not None and response.usage.prompt_tokens == 11


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("retry-after", ("Retry-After", "2")),
        ("retry-after-ms", ("retry-after-ms", "2000")),
        ("x-ratelimit-reset-requests", ("x-ratelimit-reset-requests", "2s")),
    ],
)
def test_a_storm_of_n_calls_names_the_wait_in_the_chosen_header(server, header, expected):
    server.script(Reply(text="after the storm"))
    server.rate_limit(retry_after=2, calls=2, header=header)
    for _ in range(2):
        with pytest.raises(openai.RateLimitError) as info:
            _ask(server)
        assert info.value.response.headers[expected[0]] == expected[1]
    assert server.storm_hits == 2
    assert _ask(server).choices[0].message.content == "after the storm"  # the script waited behind it


def test_a_storm_of_503_without_header_and_a_storm_that_ends(server):
    server.rate_limit(seconds=3600, status=503, header=None)
    with pytest.raises(openai.InternalServerError) as info:
        _ask(server)
    assert "retry-after" not in info.value.response.headers
    server.end_storm()
    assert _ask(server).choices[0].message.content == "ok"


def test_replies_dressed_as_chatty_models_write_them(server):
    server.script(Reply(text='{"a": 1}', think="let me see", fence="json", preamble="Here:", postscript="Bye."))
    text = _ask(server).choices[0].message.content
    assert text == '<think>\nlet me see\n</think>\n\nHere:\n\n```json\n{"a": 1}\n```\n\nBye.'
    server.style = Style(preamble="Sure!")
    assert _ask(server).choices[0].message.content == "Sure!\n\nok"


def test_missing_usage_and_truncation(server):
    server.script(Reply(text="abcdefghij", usage=False, truncate_at=4))
    response = _ask(server)
    assert response.usage is None
    assert response.choices[0].message.content == "abcd"
    assert response.choices[0].finish_reason == "length"
    server.send_usage = False
    assert _ask(server).usage is None


def test_latency_holds_calls_in_flight_and_is_counted(server):
    server.latency = 30.0  # released by the test, never waited out
    results: list[str] = []
    threads = [
        threading.Thread(target=lambda: results.append(_ask(server).choices[0].message.content)) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    wait_for(lambda: server.in_flight == 3, timeout=10, what="three calls in flight")
    server.release()
    for thread in threads:
        thread.join(10)
    assert results == ["ok"] * 3 and server.max_in_flight == 3
    # The server thread counts the call out just after the client has read its answer.
    wait_for(lambda: server.in_flight == 0, timeout=10, what="the three calls counted out")
