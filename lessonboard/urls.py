from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from lessonboard import api_views, metrics, operator_api, operator_views, views
from lessonboard.mcp import views as mcp_views

urlpatterns = [
    # First: the trigger API is the busiest route, and every include tried before it costs a failed
    # resolve; its paths (api/v1/reflexion/triggers, queue/…) are no other app's.
    path("", include("lessonq.urls")),
    path("", views.overview_page, name="overview"),
    path("workers/ping", views.ping_workers, name="ping-workers"),
    path("overview/charts", views.overview_charts, name="overview-charts"),
    path("queues/<str:name>/pause", operator_views.queue_pause, name="queue-pause"),
    path("queues/<str:name>/resume", operator_views.queue_resume, name="queue-resume"),
    path("running/", operator_views.running_now, name="running-now"),
    path("running/<str:job_id>/cancel", operator_views.job_cancel, name="job-cancel"),
    path("schedules/", operator_views.schedules_page, name="schedules"),
    path("inbox/", views.inbox_page, name="inbox"),
    path("inbox/act", views.inbox_act, name="inbox-act"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("settings/quality", views.quality_settings, name="quality-settings"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/whoami", api_views.whoami, name="api-whoami"),
    path("api/v1/workspaces", api_views.workspaces, name="api-workspaces"),
    path("api/v1/openapi.json", api_views.openapi_json, name="api-openapi"),
    path("api/v1/operator/dlq", operator_api.dlq_list, name="api-operator-dlq"),
    path("api/v1/operator/dlq/bulk", operator_api.dlq_bulk, name="api-operator-dlq-bulk"),
    path("api/v1/operator/dlq/<str:job_id>/retry", operator_api.dlq_retry, name="api-operator-retry"),
    path("api/v1/operator/dlq/<str:job_id>/purge", operator_api.dlq_purge, name="api-operator-purge"),
    path("api/v1/operator/queues/<str:name>/pause", operator_api.queue_pause, name="api-operator-pause"),
    path("api/v1/operator/queues/<str:name>/resume", operator_api.queue_resume, name="api-operator-resume"),
    path("mcp", mcp_views.mcp_endpoint, name="mcp"),
    path("", include("lessonboard.audit.urls")),
    path("", include("lessons.urls")),
    path("", include("refine.urls")),
    path("", include("lessons.reflect.urls")),
    path("", include("lessons.review.urls")),
]

handler403 = "lessonboard.views.permission_denied"
handler404 = "lessonboard.views.not_found"
handler500 = "lessonboard.views.server_error"
