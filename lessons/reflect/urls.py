from django.urls import path

from lessons.reflect import api_views, views

app_name = "reflect"

urlpatterns = [
    path("workspaces/", views.workspace_list, name="workspaces"),
    path("workspaces/<str:slug>/", views.workspace_page, name="workspace"),
    path("workspaces/<str:slug>/repository", views.workspace_settings, name="workspace-settings"),
    path("workspaces/<str:slug>/proposals/<int:pk>/approve", views.approve_proposal, name="proposal-approve"),
    path("workspaces/<str:slug>/proposals/<int:pk>/reject", views.reject_proposal, name="proposal-reject"),
    path("api/v1/workspaces/<str:slug>/reflect/prepare", api_views.prepare, name="api-prepare"),
    path("api/v1/workspaces/<str:slug>/reflect/commit", api_views.commit, name="api-commit"),
    path("api/v1/workspaces/<str:slug>/reflect/manifest", api_views.pending_manifest, name="api-manifest"),
    path("api/v1/reflect/prompts", api_views.prompts, name="api-prompts"),
]
