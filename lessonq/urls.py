from django.urls import URLPattern, URLResolver, path

from lessonq import api, views

app_name = "queue"

urlpatterns: list[URLPattern | URLResolver] = [
    path("api/v1/reflexion/triggers", api.triggers, name="api-triggers"),
    # DLQ triage pages
    path("queue/", views.index, name="index"),
    path("queue/counts", views.counts, name="counts"),
    path("queue/groups/", views.groups, name="groups"),
    path("queue/propose-lesson", views.propose_lesson, name="propose-lesson"),
    path("queue/jobs/<str:job_id>/", views.job_detail, name="job"),
    path("queue/jobs/<str:job_id>/text/<str:field>", views.job_text, name="job-text"),
    path("queue/jobs/<str:job_id>/retry", views.job_retry, name="retry"),
    path("queue/jobs/<str:job_id>/purge", views.job_purge, name="purge"),
    path("queue/jobs/<str:job_id>/retry-now", views.job_retry_now, name="retry-now"),
    path("queue/bulk/preview", views.bulk_preview, name="bulk-preview"),
    path("queue/bulk/start", views.bulk_start, name="bulk-start"),
    path("queue/bulk/<int:bulk_id>/", views.bulk_detail, name="bulk"),
    path("queue/bulk/<int:bulk_id>/cancel", views.bulk_cancel, name="bulk-cancel"),
]
