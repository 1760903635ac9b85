from django.apps import AppConfig
from django.db.models.signals import post_migrate


class LessonboardConfig(AppConfig):
    name = "lessonboard"
    verbose_name = "lessonboard"

    def import_models(self) -> None:
        # The data dir's folders and the secret key, once per process, before any app's models are imported
        # (prometheus_client opens its multiprocess files as soon as a metric is defined; the apps before
        # this one in INSTALLED_APPS define none). Importing the settings alone touches no disk.
        from lessonboard import datadir

        datadir.prepare()
        super().import_models()

    def ready(self) -> None:
        # Framework hook only: keep the role groups in line with the permissions after each migrate.
        from lessonboard.roles import sync_roles

        post_migrate.connect(sync_roles, dispatch_uid="lessonboard.sync_roles")

        from axes.signals import user_locked_out

        from lessonboard.login import record_lockout

        user_locked_out.connect(record_lockout, dispatch_uid="lessonboard.record_lockout")

        from django.db.models.signals import post_delete, post_save

        from lessonboard.models import AgentToken
        from lessonboard.tokens import forget_changed

        # A deleted token (admin, shell, cascade) must stop authenticating at once, offline copy included;
        # an edited one (scopes, workspaces) must not keep its old rights in that copy.
        post_delete.connect(forget_changed, sender=AgentToken, dispatch_uid="lessonboard.forget_deleted_token")
        post_save.connect(forget_changed, sender=AgentToken, dispatch_uid="lessonboard.forget_saved_token")

        from lessonboard import metrics
        from lessonboard.llm import breaker, gateway
        from lessonboard.llm.gauges import LLMBreakerCollector

        # The breaker's half-open probe is one small chat call through the gateway (``breaker.probe``); the
        # gateway calls the breaker, so the breaker does not import it back.
        breaker.use_for_probes(ping=gateway.ping, is_configured=gateway.is_configured)

        if not any(isinstance(c, LLMBreakerCollector) for c in metrics.EXTRA_COLLECTORS):
            metrics.EXTRA_COLLECTORS.append(LLMBreakerCollector())

        from lessonboard import schedules

        schedules.connect()  # the Schedules page's last-run record, kept by the workers that run beat's tasks
