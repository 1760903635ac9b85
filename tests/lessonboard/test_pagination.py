import pytest
from django.utils import timezone

from lessonboard.models import AuditEvent
from lessonboard.pagination import decode_cursor, encode_cursor, keyset_page

pytestmark = pytest.mark.django_db


def test_it_returns_every_row_exactly_once_when_timestamps_tie():
    same = timezone.now()
    AuditEvent.objects.bulk_create([AuditEvent(action=f"a{i}", created_at=same) for i in range(23)])
    AuditEvent.objects.bulk_create([AuditEvent(action="older", created_at=same - timezone.timedelta(seconds=1))])
    seen, cursor, pages = [], None, 0
    while True:
        page = keyset_page(AuditEvent.objects.all(), cursor=cursor, size=5, time_field="created_at", pk_field="id")
        seen.extend(e.pk for e in page.rows)
        pages += 1
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert sorted(seen) == sorted(AuditEvent.objects.values_list("pk", flat=True))
    assert len(seen) == len(set(seen)) == 24
    assert pages == 5
    assert AuditEvent.objects.get(pk=seen[-1]).action == "older"


def test_a_garbled_cursor_starts_from_the_top():
    AuditEvent.objects.create(action="x")
    page = keyset_page(AuditEvent.objects.all(), cursor="%%%not-base64", size=5, time_field="created_at", pk_field="id")
    assert [e.action for e in page.rows] == ["x"]
    assert decode_cursor("bm9waXBl") is None


def test_cursors_round_trip():
    now = timezone.now()
    assert decode_cursor(encode_cursor(now, 42)) == (now, 42)


def _raw(text: str) -> str:
    import base64

    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


@pytest.mark.parametrize(
    "raw",
    [
        "2024-01-01T00:00:00+00:00|abc",  # not an id
        "2024-01-01T00:00:00+00:00|-1",
        "2024-01-01T00:00:00+00:00|99999999999999999999",  # past bigint
        "2024-01-01T00:00:00|7",  # no time zone
        "not a time|7",
    ],
)
def test_a_crafted_cursor_does_not_decode_and_the_page_starts_from_the_top(raw):
    AuditEvent.objects.create(action="x")
    assert decode_cursor(_raw(raw)) is None
    page = keyset_page(AuditEvent.objects.all(), cursor=_raw(raw), size=5, time_field="created_at", pk_field="id")
    assert [e.action for e in page.rows] == ["x"]
