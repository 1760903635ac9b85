from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from lessonboard import api_views, metrics, views

urlpatterns = [
    # First: the trigger API is the busiest route, and every include tried before it costs a failed
    # resolve; its paths (api/v1/reflexion/triggers, queue/…) are no other app's.
    path("", include("lessonq.urls")),
    # The console's pages (Overview, Inbox, quality settings, MCP, audit log): console/urls.py.
    path("", include("console.urls")),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("favicon.ico", views.favicon, name="favicon"),
    path("usage/", views.usage_page, name="usage"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/whoami", api_views.whoami, name="api-whoami"),
    path("api/v1/workspaces", api_views.workspaces, name="api-workspaces"),
    path("api/v1/openapi.json", api_views.openapi_json, name="api-openapi"),
    path("", include("lessons.urls")),
    path("", include("refine.urls")),
    path("", include("lessons.reflect.urls")),
    path("", include("lessons.review.urls")),
]

handler403 = "lessonboard.views.permission_denied"
handler404 = "lessonboard.views.not_found"
handler500 = "lessonboard.views.server_error"
