from lessons.templatetags.lessons_tags import highlight


def test_it_marks_matched_words_and_escapes_everything_else():
    assert (
        highlight("Retry <b>429</b> responses", ["429", "respons"])
        == "Retry &lt;b&gt;<mark>429</mark>&lt;/b&gt; <mark>responses</mark>"
    )


def test_it_never_breaks_an_escaped_entity():
    assert highlight("a & b", ["amp"]) == "a &amp; b"
    assert highlight("x < y", ["lt"]) == "x &lt; y"
    assert highlight("<script>", ["script"]) == "&lt;<mark>script</mark>&gt;"
    assert highlight("it's", ["x27"]) == "it&#x27;s"
