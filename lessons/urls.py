from django.urls import URLPattern, URLResolver

app_name = "lessons"

urlpatterns: list[URLPattern | URLResolver] = []
