from django.urls import URLPattern, URLResolver

app_name = "refine"

urlpatterns: list[URLPattern | URLResolver] = []
