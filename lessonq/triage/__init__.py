"""DLQ triage: what the queue pages read (``queries``), the bulk-action and retention rows (``models``),
their admin (``admin``) and the triage gauges (``metrics``). The actions themselves are ``lessonq.dlq``
(one job), ``lessonq.bulk`` (many) and ``lessonq.retention``.
"""
