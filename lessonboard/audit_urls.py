from django.urls import path

from lessonboard import audit

app_name = "audit"

urlpatterns = [path("audit/", audit.audit_list, name="list")]
