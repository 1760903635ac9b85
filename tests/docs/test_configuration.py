"""The configuration reference cannot drift from ``lessonboard/config.py`` and ``lessonboard/settings.py``:
each variable is declared once, read by the settings, named by the one rule, and the tables of
docs/configuration.md and .env.example are the generated ones."""

from __future__ import annotations

import re

import pytest

from lessonboard import config
from tests.docs import docset


def test_it_finds_the_settings_the_settings_module_reads() -> None:
    read = docset.settings_read()
    # readers of every kind are found: env.text/flag/integer/duration/path…, os.environ.get
    assert {"DATABASE_URL", "LESSONBOARD_DEBUG", "LESSONQ_CAPACITY", "LESSONQ_BLOCK_TIMEOUT"} <= read
    assert "LESSONBOARD_ENV_FILE" in read
    assert len(read) > 80


def test_it_documents_every_setting_read_in_the_configuration_reference() -> None:
    documented = docset.table_variables(docset.CONFIGURATION)
    missing = sorted(docset.settings_read() - set(documented))
    assert missing == [], f"add these to a table in docs/configuration.md: {missing}"


def test_it_documents_no_setting_that_is_not_read() -> None:
    documented = docset.table_variables(docset.CONFIGURATION)
    stale = sorted(
        f"docs/configuration.md:{line}: {name}"
        for name, line in documented.items()
        if name not in docset.settings_read()
    )
    assert stale == [], "documented but never read by lessonboard/settings.py"


def test_it_shows_every_setting_in_env_example() -> None:
    missing = sorted(docset.settings_read() - docset.env_example_names())
    assert missing == [], f"add these to .env.example (commented out is fine): {missing}"


def test_it_documents_each_variable_once() -> None:
    """One row per variable in docs/configuration.md: two rows drift apart (four once said different things)."""
    rows = [
        name
        for _, line in docset.prose_lines(docset.CONFIGURATION.read_text(encoding="utf-8"))
        if line.lstrip().startswith("|")
        for name in re.findall(r"`([A-Z][A-Z0-9_]{2,})`", line.strip().strip("|").split("|")[0])
    ]
    assert sorted({name for name in rows if rows.count(name) > 1}) == []


def test_the_generated_files_match_the_declarations() -> None:
    """.env.example and the tables of docs/configuration.md are what ``python -m lessonboard.config --write``
    makes from lessonboard/config.py; an edit by hand, or a declaration changed without regenerating, fails."""
    assert config.drift() == [], "run: python -m lessonboard.config --write"


def test_the_check_fails_on_a_table_edited_by_hand() -> None:
    text = docset.CONFIGURATION.read_text(encoding="utf-8")
    edited = text.replace("| `LESSONQ_CAPACITY` |", "| `LESSONQ_CAPACITY_TYPO` |", 1)
    assert edited != text
    assert config.render_docs(edited) == text  # regenerating puts the declared row back
    broken = re.sub(r"<!-- end generated: config queue -->\n", "", text)
    with pytest.raises(ValueError, match="config queue"):
        config.render_docs(broken)


def test_no_variable_is_declared_twice() -> None:
    assert config.duplicates() == []
    twice = (*config.VARS, config.Var("LESSONQ_CAPACITY", "integer", default=1, section="queue", help="again"))
    assert config.duplicates(twice) == ["LESSONQ_CAPACITY"]


def test_settings_read_exactly_the_declared_variables() -> None:
    declared = {var.name for var in config.VARS}
    assert sorted(docset.settings_read() - declared) == [], "declare these in lessonboard/config.py"
    assert sorted(declared - docset.settings_read()) == [], "declared but never read by lessonboard/settings.py"


def test_every_declaration_is_complete() -> None:
    anchors = {section.anchor for section in config.SECTIONS}
    for var in config.VARS:
        assert var.kind in config.KINDS, var.name
        assert var.section in anchors, var.name
        assert var.help and "\n" not in var.help, var.name
        if var.default is config.COMPUTED:
            assert var.shown, f"{var.name}: a computed default needs the words the docs show for it"
        if var.kind == "choice":
            assert var.default is config.COMPUTED or var.default in var.choices, var.name


def test_each_setting_is_named_by_the_rule() -> None:
    """``LESSONBOARD_X`` sets ``settings.X``, any other variable the setting of its own name; the exceptions
    are the closed list ``config.FOREIGN_SETTINGS`` (Django's, axes', Celery's, a container)."""
    from django.conf import settings

    for var in config.VARS:
        if var.setting:
            assert var.setting in config.FOREIGN_SETTINGS, f"{var.name}: {var.setting} is not a known exception"
        if var.setting_name != config.NO_SETTING:
            assert hasattr(settings, var.setting_name), f"{var.name} should set settings.{var.setting_name}"
