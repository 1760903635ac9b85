"""docs/compat/chatcli.md#test-vectors scorer vectors: upstream bounds (T) and exact values (C)."""

import pytest

from refine.scorers import char_score, jaccard_score, tokens


@pytest.mark.parametrize(
    ("a", "b", "similarity", "confidence"),
    [
        ("hello world", "hello world", 1.0, 0.8999999999999999),
        ("abcdef", "zyxwvu", 0.0, 0.8999999999999999),
        ("hello", "hello, this is a much longer text", 0.15151515151515149, 0.71818181818181825),
        ("abcd", "abce", 0.75, 0.6),
        ("", "", 1.0, 1.0),
        ("", "abc", 0.0, 0.8999999999999999),
        ("ação", "acao", 0.5, 0.3),
    ],
)
def test_it_scores_char_similarity_exactly_as_chatcli(a, b, similarity, confidence):
    score = char_score(a, b)
    assert score.similarity == similarity
    assert score.confidence == confidence


def test_it_keeps_chatclis_char_bounds():
    assert char_score("hello world", "hello world").similarity == 1.0
    assert char_score("abcdef", "zyxwvu").similarity <= 0.2
    assert char_score("hello", "hello, this is a much longer text").similarity <= 0.6


@pytest.mark.parametrize(
    ("a", "b", "similarity", "confidence"),
    [("hello", "helloo", 0.8333, 0.7), ("3x1", "3-1", 0.6667, 0.5)],
)
def test_it_scores_char_similarity_of_near_strings(a, b, similarity, confidence):
    score = char_score(a, b)
    assert score.similarity == pytest.approx(similarity, abs=1e-4)
    assert score.confidence == pytest.approx(confidence, abs=1e-9)


def test_it_tokenises_like_chatcli():
    assert tokens("v1.0") == {"v1"}
    assert tokens("você") == {"voc"}
    assert tokens("ação") == set()
    assert tokens("hello-world snake_case") == {"hello-world", "snake_case"}
    assert tokens("The cat and THE dog") == {"cat", "dog"}


@pytest.mark.parametrize(
    ("a", "b", "similarity", "confidence"),
    [
        (
            "the quick brown fox jumps over lazy dog",
            "lazy dog jumps over the quick brown fox",
            1.0,
            0.14283473824766824,
        ),
        ("the quick brown fox", "swift tawny canine", 0.0, 0.060001831082627605),
        ("the a an", "of to", 1.0, 0.5),
        ("the", "cat", 0.0, 0.7),
        ("Use Edit, not full rewrite!", "use edit not full rewrite", 1.0, 0.08004515049597044),
    ],
)
def test_it_scores_jaccard_exactly_as_chatcli(a, b, similarity, confidence):
    score = jaccard_score(a, b)
    assert score.similarity == similarity
    assert score.confidence == pytest.approx(confidence, abs=1e-15)


def test_it_keeps_chatclis_jaccard_bounds():
    assert (
        jaccard_score("the quick brown fox jumps over lazy dog", "dog lazy over jumps fox brown quick the").similarity
        >= 0.99
    )
    assert jaccard_score("the quick brown fox", "swift tawny canine").similarity <= 0.2
    assert jaccard_score("cat", "the cat").similarity == 1.0
    assert jaccard_score("Go Programming", "go programming").similarity == 1.0


@pytest.mark.parametrize(
    ("n", "confidence"),
    [
        (1, 0.02),
        (2, 0.040000001858445898),
        (3, 0.060001831082627605),
        (5, 0.10030495203889796),
        (7, 0.14283473824766824),
        (10, 0.21680869346053849),
        (20, 0.60203801762444709),
        (30, 0.95),
    ],
)
def test_it_computes_jaccard_confidence_with_four_newton_steps(n, confidence):
    a = " ".join(f"word{i}" for i in range(n))
    assert jaccard_score(a, a).confidence == confidence
