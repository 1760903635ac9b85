from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from lessonboard import api_views, metrics, views

urlpatterns = [
    path("", views.overview_page, name="overview"),
    path("workers/ping", views.ping_workers, name="ping-workers"),
    path("accounts/login/", auth_views.LoginView.as_view(redirect_authenticated_user=True), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("readyz", views.readyz, name="readyz"),
    path("metrics", metrics.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
    path("api/v1/whoami", api_views.whoami, name="api-whoami"),
    path("api/v1/workspaces", api_views.workspaces, name="api-workspaces"),
    path("", include("lessonboard.audit_urls")),
    path("", include("lessons.urls")),
    path("", include("lessonq.urls")),
    path("", include("refine.urls")),
]
