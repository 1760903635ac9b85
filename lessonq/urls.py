from django.urls import URLPattern, URLResolver, path

from lessonq import api

app_name = "queue"

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/reflexion/triggers", api.triggers, name="api-triggers"),
]
