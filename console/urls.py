"""The console's pages, included at the root by lessonboard/urls.py (the URL names stay unnamespaced)."""

from django.urls import include, path

from console import api, controls, views
from console.mcp import views as mcp_views

urlpatterns = [
    path("", views.overview_page, name="overview"),
    path("workers/ping", views.ping_workers, name="ping-workers"),
    path("overview/charts", views.overview_charts, name="overview-charts"),
    path("queues/<str:name>/pause", controls.queue_pause, name="queue-pause"),
    path("queues/<str:name>/resume", controls.queue_resume, name="queue-resume"),
    path("running/", controls.running_now, name="running-now"),
    path("running/<str:job_id>/cancel", controls.job_cancel, name="job-cancel"),
    path("schedules/", controls.schedules_page, name="schedules"),
    path("inbox/", views.inbox_page, name="inbox"),
    path("inbox/act", views.inbox_act, name="inbox-act"),
    path("settings/quality", views.quality_settings, name="quality-settings"),
    path("api/v1/operator/dlq", api.dlq_list, name="api-operator-dlq"),
    path("api/v1/operator/dlq/bulk", api.dlq_bulk, name="api-operator-dlq-bulk"),
    path("api/v1/operator/dlq/<str:job_id>/retry", api.dlq_retry, name="api-operator-retry"),
    path("api/v1/operator/dlq/<str:job_id>/purge", api.dlq_purge, name="api-operator-purge"),
    path("api/v1/operator/proposals/<int:pk>/approve", api.proposal_approve, name="api-operator-proposal-approve"),
    path("api/v1/operator/proposals/<int:pk>/reject", api.proposal_reject, name="api-operator-proposal-reject"),
    path("api/v1/operator/queues/<str:name>/pause", api.queue_pause, name="api-operator-pause"),
    path("api/v1/operator/queues/<str:name>/resume", api.queue_resume, name="api-operator-resume"),
    path("mcp", mcp_views.mcp_endpoint, name="mcp"),
    path("", include("console.audit.urls")),
]
