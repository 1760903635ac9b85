from django.urls import URLPattern, path

from lessons.usage import views

# Included into the ``lessons`` namespace by lessons/urls.py.
urlpatterns: list[URLPattern] = [
    path("lessons/gaps/", views.gaps_page, name="gaps"),
    path("lessons/gaps/dismiss", views.dismiss_gap, name="gap-dismiss"),
    path("lessons/impact/<int:pk>", views.proposal_impact, name="impact"),
]
