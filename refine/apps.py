from django.apps import AppConfig


class RefineConfig(AppConfig):
    name = "refine"
    verbose_name = "Self-Refine"

    def ready(self) -> None:
        from lessonboard import breaker
        from lessonboard.overview import SECTIONS, Count
        from refine import checks  # noqa: F401 - registers the system checks
        from refine.models import RefineRun

        SECTIONS.extend(
            [
                Count("Refine", "Refine runs", lambda: RefineRun.objects.count(), "refine:runs"),
                Count("Refine", "Runs in flight", lambda: RefineRun.objects.in_flight().count(), None),
                Count(
                    "Refine",
                    "Runs rolled back",
                    lambda: RefineRun.objects.filter(rolled_back=True).count(),
                    "refine:runs",
                    "rolled_back=yes",
                ),
                Count(
                    "Refine",
                    "Runs converged",
                    lambda: RefineRun.objects.filter(converged=True).count(),
                    "refine:runs",
                    "converged=yes",
                ),
            ]
        )
        if _requeue_when_the_llm_is_back not in breaker.RECOVERY_HOOKS:
            breaker.RECOVERY_HOOKS.append(_requeue_when_the_llm_is_back)


def _requeue_when_the_llm_is_back() -> None:
    """The LLM breaker closed: publish the runs that waited for it."""
    from refine.tasks import requeue_stalled

    requeue_stalled.delay()
