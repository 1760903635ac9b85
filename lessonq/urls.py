from django.urls import URLPattern, URLResolver

app_name = "queue"

urlpatterns: list[URLPattern | URLResolver] = []
