"""The pass loop, regression guard and refiner protocol (docs/compat/chatcli.md#refine, vectors docs/compat/chatcli.md#test-vectors). The LLM reply is a
fake handed to the real ``Refiner``; directive, parsing, fallback and the cascade run for real."""

import pytest

from lessonboard.llm import ChatResult, TransientLLMError
from refine.convergence import Cascade, Check
from refine.passes import Decision, RefineConfig, char_heuristic, run_passes, skip_reason
from refine.refiner import DEFAULT_TASK, Refiner, directive, parse_directive, parse_reply
from refine.scorers import Score


def reply(revised, critique="- fine"):
    return f"<critique>\n{critique}\n</critique>\n<revised>\n{revised}\n</revised>"


class ScriptedLLM:
    """Stands in for the LLM endpoint: answers each chat with the next scripted text (or raises)."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.messages = []

    def __call__(self, messages):
        self.messages.append(messages)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return ChatResult(text=answer, model="fake", prompt_tokens=10, completion_tokens=5)


class StubChecker:
    """A ``refine.convergence.Checker`` in place of the cascade: answers scripted (similarity, converged) pairs
    in order."""

    def __init__(self, *answers):
        self.answers = list(answers)
        self.calls = []

    def check(self, a, b):
        self.calls.append((a, b))
        similarity, converged = self.answers.pop(0)
        return Check(converged, Score(similarity, 0.9), "stub", "scripted")


def config(**kwargs):
    return RefineConfig(**{"max_passes": 1, "min_bytes": 0, "epsilon": 50, **kwargs})


# --- refiner protocol --------------------------------------------------------------------------------
def test_it_builds_and_parses_the_refine_directive():
    text = directive("Explain WAL", "A WAL is a log.")
    assert text == "[REFINE_DRAFT]\nTask:\nExplain WAL\n\nDraft:\nA WAL is a log."
    assert parse_directive(text) == ("Explain WAL", "A WAL is a log.")
    assert parse_directive("[REFINE_DRAFT] just a body") == (DEFAULT_TASK, "just a body")
    assert parse_directive("[REFINE_DRAFT]\nDraft:\nbody only") == (DEFAULT_TASK, "body only")
    assert parse_directive("[REFINE_DRAFT]\nDRAFT: x\nTASK: y") == (DEFAULT_TASK, "x\nTASK: y")


def test_it_parses_critique_bullets_and_revised_text():
    parsed = parse_reply("<critique>\n- vague claim\n- missing edge case\n</critique>\n<revised>\n better \n</revised>")
    assert parsed.output == "better" and parsed.protocol_ok
    assert parsed.bullets == ["vague claim", "missing edge case"] and parsed.reports_issues
    unclosed = parse_reply("<critique>- no material issues</critique><revised>kept as is")
    assert unclosed.output == "kept as is" and not unclosed.reports_issues


def test_it_falls_back_to_the_raw_reply_when_revised_is_missing_or_empty():
    raw = "Sure! Here is a better version: the WAL is fsynced."
    parsed = parse_reply(raw)
    assert parsed.output == raw and not parsed.protocol_ok
    empty = parse_reply("<critique>- x</critique><revised>   </revised>")
    assert empty.output.startswith("<critique>") and not empty.protocol_ok


def test_it_sends_chatclis_messages_to_the_llm():
    llm = ScriptedLLM(reply("polished hello"))
    result = Refiner(llm)("Say hello", "hello")
    system, user = llm.messages[0]
    assert system["role"] == "system" and "<critique>" in system["content"] and "<revised>" in system["content"]
    assert user == {"role": "user", "content": "TASK:\nSay hello\n\nDRAFT:\nhello"}
    assert result.output == "polished hello" and result.prompt_tokens == 10


# --- preconditions -------------------------------------------------------------------------------------------
def test_it_skips_short_drafts_and_excluded_agents():
    cfg = RefineConfig(min_bytes=200)
    assert "below the minimum of 200" in skip_reason(agent="coder", draft="too short", config=cfg)
    assert "exclude" in skip_reason(agent=" Formatter ", draft="x" * 300, config=cfg)
    assert skip_reason(agent="coder", draft="x" * 200, config=cfg) == ""
    assert skip_reason(agent="coder", draft="é" * 100, config=cfg) == ""  # bytes, not characters


# --- the legacy char heuristic (docs/compat/chatcli.md#refine-legacy-char) ---------------------------------------------------------------------
def test_it_applies_the_legacy_char_heuristic():
    assert char_heuristic("hello world", "hello world", 5)
    assert not char_heuristic("hello", "totally different and longer", 5)
    assert char_heuristic("hello", "helloo", 2)
    assert not char_heuristic("abcdefgh", "abcdXXXX", 3)
    assert char_heuristic("a" * 10, "b" * 10, 0)  # ε ≤ 0 → 50


# --- the loop (docs/compat/chatcli.md#test-vectors) ----------------------------------------------------------------------------------------
def test_it_replaces_the_output_after_one_pass():
    llm = ScriptedLLM(reply("polished hello"))
    result = run_passes(task="t", draft="hello", refiner=Refiner(llm), checker=None, config=config())
    assert result.output == "polished hello" and len(result.passes) == 1 and len(llm.messages) == 1


def test_it_stops_at_max_passes_without_a_checker():
    llm = ScriptedLLM(reply("rewrite v1 longer text here"))
    result = run_passes(
        task="t", draft="draft v0", refiner=Refiner(llm), checker=None, config=config(max_passes=2, epsilon=5)
    )
    assert len(llm.messages) <= 2
    assert result.output == "rewrite v1 longer text here"
    assert [p.decided_by for p in result.passes] == ["char_heuristic", "char_heuristic"]
    assert result.passes[-1].converged  # the second rewrite equals the first


def test_it_keeps_the_original_when_the_refiner_fails():
    llm = ScriptedLLM(TransientLLMError("LLM endpoint answered 503"))
    result = run_passes(task="t", draft="original draft", refiner=Refiner(llm), checker=None, config=config())
    assert result.output == "original draft" and result.passes == [] and "503" in result.error


def test_it_keeps_the_previous_pass_when_a_later_pass_fails():
    llm = ScriptedLLM(reply("first rewrite, much longer than the original one was before"), TransientLLMError("boom"))
    result = run_passes(
        task="t", draft="orig", refiner=Refiner(llm), checker=None, config=config(max_passes=3, epsilon=1)
    )
    assert result.output == "first rewrite, much longer than the original one was before"
    assert "pass 2" in result.stop_reason


def test_it_stops_when_the_checker_says_converged():
    llm = ScriptedLLM(reply("v2"), reply("v3"), reply("v4"))
    checker = StubChecker((0.98, False), (0.98, True))
    result = run_passes(task="t", draft="v1", refiner=Refiner(llm), checker=checker, config=config(max_passes=5))
    assert result.output == "v2" and len(result.passes) == 1 and result.converged
    assert checker.calls == [("v1", "v2"), ("v1", "v2")]


def test_it_rolls_back_to_the_best_pass_when_quality_drops_more_than_15_percent():
    llm = ScriptedLLM(reply("v1 is good", "- vague"), reply("v2 drifted"))
    checker = StubChecker((0.95, False), (0.7, False), (0.4, False))
    result = run_passes(task="t", draft="v0", refiner=Refiner(llm), checker=checker, config=config(max_passes=5))
    assert result.output == "v1 is good"
    assert result.rolled_back and result.metadata["refine_rolled_back"] == "true"
    assert [p.decision for p in result.passes] == [Decision.CONTINUE, Decision.ROLLED_BACK]
    assert len(checker.calls) == 3  # a rolling-back pass checks only against the original
    assert result.low_quality and "rolled back" in result.metadata["refine_low_quality_reason"]


def test_it_continues_within_15_percent_of_the_best():
    llm = ScriptedLLM(reply("v1"), reply("v2"))
    # 0.81 ≥ 0.85 × 0.95 = 0.8075: no rollback
    checker = StubChecker((0.95, False), (0.5, False), (0.81, False), (0.5, False))
    result = run_passes(task="t", draft="v0", refiner=Refiner(llm), checker=checker, config=config(max_passes=2))
    assert not result.rolled_back and result.output == "v2"
    assert result.passes[1].best_similarity == 0.95


def test_it_tolerates_a_nearly_identical_rewrite():
    llm = ScriptedLLM(reply("nearly identical draft"))
    result = run_passes(task="t", draft="nearly identical draft!", refiner=Refiner(llm), checker=None, config=config())
    assert result.output == "nearly identical draft"


def test_it_uses_the_char_heuristic_when_the_cascade_refuses_in_strict_mode():
    from refine.convergence import EmbeddingScorer

    llm = ScriptedLLM(reply("Use the Edit tool for large files!"))
    cascade = Cascade(embedding=EmbeddingScorer(None), strict=True)
    result = run_passes(
        task="t", draft="Use the Edit tool for large files.", refiner=Refiner(llm), checker=cascade, config=config()
    )
    first = result.passes[0]
    assert first.similarity_to_original == 1.0  # a check error counts as 1.0 for the guard
    assert first.decided_by == "char_heuristic" and "refused" in first.reason and first.converged
    assert first.degraded_from == "embedding_unavailable"


def test_it_runs_the_real_cascade_over_passes_and_records_every_scorer():
    draft = "Deploy the service with helm and check pods"
    llm = ScriptedLLM(
        reply("Deploy the service with kubectl and check logs", "- wrong tool"),
        reply("Deploy the service with kubectl and check logs"),
    )
    result = run_passes(
        task="deploy", draft=draft, refiner=Refiner(llm), checker=Cascade(), config=config(max_passes=3)
    )
    assert [p.decision for p in result.passes] == [Decision.CONTINUE, Decision.CONVERGED]
    assert result.converged and result.passes[1].decided_by == "char"
    assert set(result.passes[0].scores["original"]) == {"char", "jaccard"}
    assert result.passes[0].scores["original"]["jaccard"]["similarity"] == pytest.approx(3 / 7)
    assert result.low_quality and "wrong tool" in result.low_quality_reason


def test_it_does_not_flag_low_quality_when_the_critique_finds_nothing():
    llm = ScriptedLLM(reply("same", "- no material issues"))
    result = run_passes(task="t", draft="same", refiner=Refiner(llm), checker=Cascade(), config=config())
    assert not result.low_quality and result.metadata == {}


class SteppingClock:
    """A clock that moves ``step`` seconds every time it is read."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def test_no_pass_starts_after_the_loops_time_budget():
    refiner = Refiner(ScriptedLLM(reply("draft one"), reply("draft two"), reply("draft three")))
    checker = StubChecker((0.9, False), (0.5, False), (0.95, False), (0.5, False), (0.96, False), (0.5, False))
    # Each read of the clock advances 6 s: pass 1 starts at 6 s, pass 2 at 18 s, pass 3 would start at 30 s.
    result = run_passes(
        task="t",
        draft="original",
        refiner=refiner,
        checker=checker,
        config=config(max_passes=5, loop_timeout=20.0),
        clock=SteppingClock(6.0),
    )
    assert len(result.passes) == 2 and result.output == "draft two"
    assert "time budget of 20 s ran out after 2 pass(es)" in result.stop_reason
    unbounded = run_passes(
        task="t",
        draft="original",
        refiner=Refiner(ScriptedLLM(reply("a"), reply("b"), reply("c"))),
        checker=StubChecker(*[(0.9 + i / 100, False) if i % 2 == 0 else (0.5, False) for i in range(6)]),
        config=config(max_passes=3, loop_timeout=0),
        clock=SteppingClock(60.0),
    )
    assert len(unbounded.passes) == 3


@pytest.mark.django_db
def test_the_refiner_can_use_a_model_of_its_own(fake_openai, settings):
    fake_openai.script(reply("better draft"))
    settings.REFINE_MODEL = "refiner-model"
    assert Refiner()("t", "draft").output == "better draft"
    assert fake_openai.chat_requests()[-1].json["model"] == "refiner-model"
    settings.REFINE_MODEL = ""
    fake_openai.script(reply("again"))
    Refiner()("t", "draft")
    assert fake_openai.chat_requests()[-1].json["model"] == settings.LLM_MODEL


# --- protocol violations and the similarity floor (not chatcli: pass 1 is checked too) -----------------
def test_a_destroyed_first_draft_is_rolled_back_to_the_original_and_flagged_low_quality():
    original = "Deploy with helm upgrade --install, wait for the readiness probes, then run the smoke tests."
    llm = ScriptedLLM(reply("lorem ipsum dolor sit amet", "- tighten the wording"))
    result = run_passes(
        task="t",
        draft=original,
        refiner=Refiner(llm),
        checker=StubChecker((0.033, False)),
        config=config(max_passes=3, similarity_floor=0.2),
    )
    assert result.output == original and result.rolled_back and len(llm.messages) == 1
    assert [p.decision for p in result.passes] == [Decision.ROLLED_BACK]
    assert result.low_quality and "below the floor 0.2" in result.metadata["refine_low_quality_reason"]


def test_a_first_pass_that_breaks_the_protocol_is_rolled_back():
    original = "the original draft text"
    llm = ScriptedLLM("Sure! Here is a better version: totally different words")
    result = run_passes(task="t", draft=original, refiner=Refiner(llm), checker=None, config=config(max_passes=3))
    assert result.output == original and result.rolled_back and result.low_quality
    assert "broke the critique/revise protocol" in result.stop_reason
    assert not result.passes[0].reply.protocol_ok


def test_a_later_pass_below_the_floor_rolls_back_to_the_best_pass():
    llm = ScriptedLLM(reply("v1 good"), reply("v2 destroyed"))
    checker = StubChecker((0.9, False), (0.5, False), (0.1, False))
    result = run_passes(
        task="t", draft="v0", refiner=Refiner(llm), checker=checker, config=config(max_passes=3, similarity_floor=0.2)
    )
    assert result.output == "v1 good" and result.rolled_back
    assert [p.decision for p in result.passes] == [Decision.CONTINUE, Decision.ROLLED_BACK]


def test_the_floor_can_be_turned_off():
    llm = ScriptedLLM(reply("something else entirely"))
    result = run_passes(
        task="t",
        draft="v0",
        refiner=Refiner(llm),
        checker=StubChecker((0.03, False), (0.03, False)),
        config=config(similarity_floor=0.0),
    )
    assert result.output == "something else entirely" and not result.rolled_back


def test_the_refiner_reads_think_blocks_and_fences_as_models_write_them():
    raw = "<think>the <revised> block must be short</think>\n```xml\n<critique>\n- x\n</critique>\n<revised>\nbetter\n</revised>\n```"
    parsed = parse_reply(raw)
    assert parsed.protocol_ok and parsed.output == "better" and parsed.bullets == ["x"]
    draft_with_code = "<critique>\n- fine\n</critique>\n<revised>\nRun:\n```sh\nmake <target>\n```\n</revised>"
    assert parse_reply(draft_with_code).output == "Run:\n```sh\nmake <target>\n```"
    cut = parse_reply("<critique>\n- a\n</critique>\n<revised>\nhalf of the rev")
    assert cut.protocol_ok and cut.output == "half of the rev"
