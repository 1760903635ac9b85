"""The console's pages, included at the root by lessonboard/urls.py (the URL names stay unnamespaced)."""

from django.urls import include, path

from console import views
from console.mcp import views as mcp_views

urlpatterns = [
    path("", views.overview_page, name="overview"),
    path("workers/ping", views.ping_workers, name="ping-workers"),
    path("overview/charts", views.overview_charts, name="overview-charts"),
    path("inbox/", views.inbox_page, name="inbox"),
    path("inbox/act", views.inbox_act, name="inbox-act"),
    path("settings/quality", views.quality_settings, name="quality-settings"),
    path("mcp", mcp_views.mcp_endpoint, name="mcp"),
    path("", include("console.audit.urls")),
]
