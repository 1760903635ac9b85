from django.urls import path

from console.audit import views as audit

app_name = "audit"

urlpatterns = [path("audit/", audit.audit_list, name="list")]
