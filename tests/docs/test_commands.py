"""Every management command, subcommand and flag the docs mention exists: each mention is checked against
the command's own ``--help`` (its argparse parser), so renaming a flag without the docs fails here."""

from __future__ import annotations

import argparse
import re

from django.core.management import get_commands, load_command_class

from tests.docs import docset


def parser_for(command: str) -> argparse.ArgumentParser:
    app = get_commands()[command]
    return load_command_class(app, command).create_parser("manage.py", command)


def subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def help_flags(parser: argparse.ArgumentParser) -> set[str]:
    """The options ``--help`` lists."""
    text = parser.format_help()
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", text))


def problems_of(mention: docset.CommandMention) -> list[str]:
    commands = get_commands()
    if mention.command not in commands:
        return [f"{mention}: no command {mention.command!r}"]
    parser = parser_for(mention.command)
    subs = subparsers(parser)
    if subs and mention.words:
        if mention.words[0] not in subs:
            return [f"{mention}: {mention.command} has no subcommand {mention.words[0]!r} (has {sorted(subs)})"]
        parser = subs[mention.words[0]]
    known = help_flags(parser)
    return [f"{mention}: {flag} is not in its --help" for flag in mention.flags if flag not in known]


def test_it_finds_the_commands_the_docs_mention() -> None:
    mentioned = {m.command for m in docset.command_mentions()}
    assert {"reflect", "lessonq", "lessons", "reflect_docs", "create_user", "create_agent_token"} <= mentioned


def test_every_mentioned_command_subcommand_and_flag_exists() -> None:
    problems = [p for mention in docset.command_mentions() for p in problems_of(mention)]
    assert problems == []


def test_it_catches_a_renamed_flag_and_an_unknown_subcommand() -> None:
    readme = docset.ROOT / "README.md"
    renamed = docset.CommandMention(readme, 1, "lessons", ("reembed",), ("--everything",))
    assert problems_of(renamed) == [f"{renamed}: --everything is not in its --help"]
    unknown = docset.CommandMention(readme, 1, "lessonq", ("export",), ())
    assert "no subcommand 'export'" in problems_of(unknown)[0]
    assert "no command" in problems_of(docset.CommandMention(readme, 1, "nope", (), ()))[0]


def test_every_lb_py_verb_in_the_docs_exists() -> None:
    source = (docset.ROOT / "lb.py").read_text()
    verbs = set(re.findall(r'"([a-z-]+)"', re.search(r"argv\[0\] not in \{([^}]*)\}", source).group(1)))
    assert {"serve", "test"} <= verbs
    used = {
        (docset.rel(path), verb)
        for path in docset.doc_files()
        for verb in re.findall(r"python3 lb\.py ([a-z][a-z-]*)", path.read_text(encoding="utf-8"))
    }
    assert used and [u for u in used if u[1] not in verbs] == []
    # `serve`'s flags are the serve command's
    for path in docset.doc_files():
        for rest in re.findall(r"python3 lb\.py serve([^`\n]*)", path.read_text(encoding="utf-8")):
            for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest.split(" #", 1)[0]):
                assert flag in help_flags(parser_for("serve")), f"{docset.rel(path)}: serve {flag}"
