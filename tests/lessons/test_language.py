"""Lesson language: detection, the API/import/page field, and the full-text configuration it picks."""

import json

import pytest

from lessons import interchange, language, retrieval
from lessons.models import Lesson
from lessons.store import edit_lesson, persist_lesson

pytestmark = pytest.mark.django_db


def test_it_detects_portuguese_and_english_and_admits_when_it_cannot_tell():
    assert language.detect("renomeou a coluna direto e a versão antiga da aplicação quebrou") == "pt"
    assert language.detect("sincronizar 50 mil boletos com a API do banco num script noturno") == "pt"
    assert language.detect("the retry created a duplicate charge when the request timed out") == "en"
    assert language.detect("ENOSPC") == ""
    assert language.detect("") == ""
    assert language.clean_code("pt-BR") == "pt" and language.clean_code("es") == "es"
    with pytest.raises(ValueError, match="ISO 639-1"):
        language.clean_code("portuguese!")


def lesson(situation, mistake, correction, **kw):
    return persist_lesson(situation=situation, mistake=mistake, correction=correction, tags=[], trigger="error", **kw)


def test_it_stems_each_lesson_with_the_configuration_of_its_language():
    pt = lesson("migrações de banco em produção", "renomeou as colunas direto", "adicionar a coluna nova antes").lesson
    en = lesson("running migrations in production", "renamed the columns in place", "add the new column first").lesson
    other = lesson("migraciones de base de datos", "cambió el nombre", "hacerlo por etapas", lang="es").lesson
    assert (pt.lang, en.lang, other.lang) == ("pt", "en", "es")
    pt_lexemes = Lesson.objects.filter(pk=pt.pk).values_list("search_vector", flat=True).get()
    assert "'migraçõ'" in pt_lexemes and "'colun'" in pt_lexemes  # Portuguese snowball stems
    assert "'migrat'" in Lesson.objects.filter(pk=en.pk).values_list("search_vector", flat=True).get()
    assert "'migraciones'" in Lesson.objects.filter(pk=other.pk).values_list("search_vector", flat=True).get()  # simple
    # A Portuguese task's words reach the Portuguese lesson through its stems (no embedder needed).
    found = retrieval.search("renomear coluna da migração", k=3, branches=("text",))
    assert found.hits[0].lesson == pt


def test_it_takes_the_language_from_the_api_and_refuses_a_bad_one(api):
    body = {"situation": "bulk API calls", "mistake": "no backoff", "correction": "back off on 429", "lang": "pt-BR"}
    response = api.post("/api/v1/lessons", body)
    assert response.status_code == 201 and response.json()["lesson"]["lang"] == "pt"
    detected = api.post("/api/v1/lessons", {"text": "quando editar arquivos grandes use edições pontuais"})
    assert detected.json()["lesson"]["lang"] == "pt"
    bad = api.post("/api/v1/lessons", {**body, "situation": "other", "lang": "portuguese!"})
    assert bad.status_code == 400 and bad.json()["field"] == "lang"


def test_it_detects_the_language_again_when_an_edit_changes_the_words_without_naming_one():
    saved = lesson("running migrations in production", "renamed the column", "add the new column first").lesson
    edited = edit_lesson(saved, situation="migração em produção", correction="adicionar a coluna nova", actor="t")
    assert edited.lang == "pt"
    named = edit_lesson(edited, lang="en", actor="t")
    assert Lesson.objects.get(pk=named.pk).lang == "en"


def test_it_round_trips_the_language_through_jsonl_and_detects_it_when_absent(tmp_path):
    lesson("migração em produção", "renomeou a coluna", "fazer em etapas", lang="pt")
    path = tmp_path / "lessons.jsonl"
    interchange.export_jsonl(path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows[0]["lesson"]["lang"] == "pt"
    Lesson.objects.all().delete()
    interchange.import_jsonl(path)
    assert Lesson.objects.get().lang == "pt"
    Lesson.objects.all().delete()
    del rows[0]["lesson"]["lang"]
    path.write_text(json.dumps(rows[0]) + "\n")
    interchange.import_jsonl(path)
    assert Lesson.objects.get().lang == "pt"  # detected on save
    rows[0]["lesson"]["lang"] = "not a code"
    rows[0]["lesson"]["created_at"] = "2020-01-01T00:00:00Z"
    path.write_text(json.dumps(rows[0]) + "\n")
    with pytest.raises(interchange.InterchangeError, match="'lang'"):
        interchange.import_jsonl(path)


def test_it_edits_the_language_on_the_lesson_page(client_as, bob):
    client = client_as(bob)
    saved = lesson("running migrations in production", "renamed the column", "add the new column first").lesson
    page = client.get(f"/lessons/{saved.pk}/edit")
    assert page.status_code == 200 and 'name="lang"' in page.content.decode()
    form = {"situation": saved.situation, "mistake": saved.mistake, "correction": saved.correction}
    form |= {"tags": "", "trigger": "error", "confidence": "0.6", "reason": "", "lang": "pt"}
    assert client.post(f"/lessons/{saved.pk}/edit", form).status_code == 302
    assert Lesson.objects.get(pk=saved.pk).lang == "pt"
    bad = client.post(f"/lessons/{saved.pk}/edit", {**form, "lang": "??"})
    assert bad.status_code == 200 and "ISO 639-1" in bad.content.decode()
    assert "<dt>Language</dt><dd>pt</dd>" in client.get(f"/lessons/{saved.pk}/").content.decode()
