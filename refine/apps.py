from django.apps import AppConfig


class RefineConfig(AppConfig):
    name = "refine"
    verbose_name = "Self-Refine"

    def ready(self) -> None:
        from lessonboard.overview import SECTIONS, Count
        from refine import checks  # noqa: F401 - registers the system checks
        from refine.models import RefineRun

        SECTIONS.extend(
            [
                Count("Refine", "Refine runs", lambda: RefineRun.objects.count(), "refine:runs"),
                Count("Refine", "Runs in flight", lambda: RefineRun.objects.in_flight().count(), None),
                Count("Refine", "Runs rolled back", lambda: RefineRun.objects.filter(rolled_back=True).count(), None),
                Count("Refine", "Runs converged", lambda: RefineRun.objects.filter(converged=True).count(), None),
            ]
        )
