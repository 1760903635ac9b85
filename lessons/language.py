"""The language of a lesson or a task, for the full-text configuration (``Lesson.lang``).

A small heuristic, enough for the two languages the product has users in: count English and
Portuguese function words and Portuguese-only letters (ã, õ, ç, ê…). Anything without a clear
winner is ``""`` and gets PostgreSQL's ``simple`` configuration (no stemming, no stop words), which
is also what any other language code gets. See docs/lessons.md#language.
"""

from __future__ import annotations

import re

LANGUAGES = ("en", "pt")
# PostgreSQL text-search configuration per language; every other value (including "") is "simple".
TS_CONFIGS = {"en": "english", "pt": "portuguese"}
MAX_CODE = 8
CODE = re.compile(r"^[a-z]{2,3}(?:-[a-z0-9]{2,4})?$")

_WORD = re.compile(r"[^\W\d_]+")
_EN = frozenset(
    "the a an and or of to in on at for with from by is are was were be been it this that these those "
    "when after before into not no do does did has have had will would should can could file files "
    "using use run running add adding write writing while which what how why".split()
)
_PT = frozenset(
    "o a os as um uma uns umas e ou de do da dos das no na nos nas em para pelo pela por com sem que "
    "não nao é foi ser são está estava quando depois antes como mais muito seu sua ao aos às se "
    "arquivo arquivos usar usou fazer criar num numa meu minha seus suas dois duas nosso nossa".split()
)
_SHARED = _EN & _PT  # "a", "do", "no"… say nothing
_PT_LETTERS = re.compile(r"[ãõçâêôáéíóúà]")


def ts_config(lang: str) -> str:
    return TS_CONFIGS.get(lang, "simple")


def detect(text: str) -> str:
    """``"en"``, ``"pt"`` or ``""`` (no clear evidence)."""
    words = _WORD.findall(text.lower())
    if not words:
        return ""
    en = sum(1 for w in words if w in _EN and w not in _SHARED)
    pt = sum(1 for w in words if w in _PT and w not in _SHARED) + len(_PT_LETTERS.findall(text.lower()))
    if pt > en:
        return "pt"
    if en > pt:
        return "en"
    # No function words either way (a terse line of identifiers): English is the default of the
    # tooling these lessons are about, but only when the text is plain ASCII.
    return "en" if text.isascii() and len(words) >= 2 else ""


def clean_code(value: str) -> str:
    """A language code as given (``"pt"``, ``"pt-br"`` → ``"pt"``), lower-cased; ``ValueError`` if not one."""
    code = value.strip().lower()
    if not code:
        return ""
    if not CODE.match(code):
        raise ValueError("a language code such as 'en' or 'pt' (ISO 639-1)")
    base = code.split("-")[0]
    return base if base in LANGUAGES else code[:MAX_CODE]
