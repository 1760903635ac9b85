from django.urls import path

from lessons.review import api_views, views

app_name = "reviews"

urlpatterns = [
    path("reviews/", views.queue_page, name="queue"),
    path("reviews/bulk", views.bulk_decide, name="bulk"),
    path("reviews/decisions/", views.decisions_page, name="decisions"),
    path("reviews/gates/<str:slug>/", views.gates_page, name="gates"),
    path("reviews/gates/<str:slug>/save", views.gates_save, name="gates-save"),
    path("reviews/<int:pk>/", views.proposal_page, name="proposal"),
    path("reviews/<int:pk>/approve", views.approve, name="approve"),
    path("reviews/<int:pk>/reject", views.reject, name="reject"),
    path("reviews/<int:pk>/undo", views.undo, name="undo"),
    path("reviews/<int:pk>/release", views.release, name="release"),
    path("api/v1/reviews", api_views.reviews, name="api-reviews"),
    path("api/v1/memory/<str:target>", api_views.memory_snapshot, name="api-memory"),
]
