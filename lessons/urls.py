from django.urls import URLPattern, URLResolver, path

from lessons import api_views, views
from lessons.usage import urls as usage_urls

app_name = "lessons"

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/lessons", api_views.create_lesson, name="api-create"),
    path("api/v1/lessons/retrieve", api_views.retrieve, name="api-retrieve"),
    path("api/v1/lessons/get", api_views.get_lesson, name="api-get"),
    path("api/v1/lessons/list", api_views.list_lessons, name="api-list"),
    path("api/v1/lessons/update", api_views.update_lesson, name="api-update"),
    path("api/v1/lessons/archive", api_views.archive_lesson, name="api-archive"),
    path("api/v1/lessons/restore", api_views.restore_lesson, name="api-restore"),
    path("api/v1/lessons/delete", api_views.delete_lesson, name="api-delete"),
    path("api/v1/lessons/scope", api_views.scope_lesson, name="api-scope"),
    path("api/v1/lessons/history", api_views.lesson_history, name="api-history"),
    path("api/v1/outcomes", api_views.outcome, name="api-outcome"),
    path("lessons/", views.search_page, name="search"),
    path("lessons/new", views.create_page, name="create"),
    *usage_urls.urlpatterns,
    path("lessons/merge", views.merge_page, name="merge"),
    path("lessons/<int:pk>/", views.detail_page, name="detail"),
    path("lessons/<int:pk>/edit", views.edit_page, name="edit"),
    path("lessons/<int:pk>/status", views.change_status, name="status"),
    path("lessons/<int:pk>/scope", views.change_scope, name="scope"),
    path("lessons/<int:pk>/restore/<int:number>", views.restore, name="restore"),
]
