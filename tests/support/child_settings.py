"""The settings of the processes tests start (gunicorn, Celery workers, ``manage.py`` and ``serve``):
lessonboard's own, with the test users' hasher preferred (tests/support/hashers.py), so a login checks
the password with the real PBKDF2 hasher and does not re-hash it at 1,000,000 iterations."""

from django.conf import global_settings

from lessonboard.settings import *  # noqa: F403

# lessonboard keeps Django's default hashers (it sets no PASSWORD_HASHERS of its own).
PASSWORD_HASHERS = ["tests.support.hashers.FastPBKDF2PasswordHasher", *global_settings.PASSWORD_HASHERS]
