"""The configuration reference cannot drift from ``lessonboard/settings.py``: every variable read there is
in docs/configuration.md (and .env.example), and every variable documented there is really read."""

from __future__ import annotations

import re

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
