"""The read-only quality settings page (chatcli's /config quality)."""

from __future__ import annotations

from typing import Any

import pytest
from django.conf import settings as django_settings

from console import quality

pytestmark = pytest.mark.django_db


def test_it_shows_the_values_this_process_runs_with(client_as: Any, carol: Any, settings: Any) -> None:
    settings.LESSONQ_ON_LOW_QUALITY = True
    settings.REFINE_EXCLUDE = ["formatter", "deps"]
    html = client_as(carol).get("/settings/quality").content.decode()
    assert '<tr data-setting="LESSONQ_ON_LOW_QUALITY"><td><code>LESSONQ_ON_LOW_QUALITY</code></td><td>true</td>' in html
    assert "<td>formatter, deps</td>" in html
    assert "CHATCLI_QUALITY_REFINE_CONVERGENCE_JACCARD_HIGH" in html


def test_every_listed_setting_exists_and_its_variable_is_the_one_settings_reads() -> None:
    source = (django_settings.BASE_DIR / "lessonboard" / "settings.py").read_text()
    for _, rows in quality.GROUPS:
        for name, variable, _chatcli in rows:
            assert hasattr(django_settings, name), name
            assert f'"{variable}"' in source, (name, variable)
