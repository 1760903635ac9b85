from django.urls import URLPattern, URLResolver, path

from refine import api_views, views

app_name = "refine"

urlpatterns: list[URLPattern | URLResolver] = [
    path("refine/", views.runs_list, name="runs"),
    path("refine/modes/", views.modes, name="modes"),
    path("refine/<int:run_id>/", views.run_detail, name="run"),
    path("refine/<int:run_id>/use/<int:number>", views.use_pass, name="use-pass"),
    path("refine/<int:run_id>/passes/<int:number>/lesson", views.propose_lesson, name="propose-lesson"),
    path("api/v1/refine", api_views.refine, name="api-refine"),
    path("api/v1/refine/mode", api_views.refine_mode, name="api-mode"),
    path("api/v1/refine/<int:run_id>", api_views.refine_run, name="api-run"),
]
