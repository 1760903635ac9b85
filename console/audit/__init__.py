"""The audit log: its page (``views``) and URL (``urls``); the ``AuditEvent`` model is in ``lessonboard.models``."""
