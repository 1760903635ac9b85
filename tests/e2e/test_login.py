import pytest

from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.e2e]


def test_a_person_logs_in_sees_the_overview_and_logs_out(page, live_server, login):
    UserFactory(username="carol", role="viewer")
    page.goto(live_server.url + "/")
    assert "/accounts/login/" in page.url
    login(page, "carol")
    assert page.locator("h1").inner_text() == "Overview"
    assert page.locator("nav a", has_text="Overview").count() == 1
    assert page.locator("nav a", has_text="Admin").count() == 0  # a viewer is not staff
    assert page.locator("#counts dt", has_text="Users").count() == 1
    page.click("text=Log out")
    page.wait_for_url("**/accounts/login/")
    page.goto(live_server.url + "/")
    assert "/accounts/login/" in page.url
