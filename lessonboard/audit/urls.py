from django.urls import path

from lessonboard.audit import views as audit

app_name = "audit"

urlpatterns = [path("audit/", audit.audit_list, name="list")]
