"""The password hasher of the users tests create, in the test process and in the servers tests start.

Django's PBKDF2 at 1,000,000 iterations costs ~0.3 s of CPU per hash. Test users are hashed with the same
algorithm (``pbkdf2_sha256``) at 1,000 iterations; a PBKDF2 hash carries its iteration count, and Django
verifies a hash with the hasher of its algorithm, so a server started by a test checks these passwords
with its real, unchanged ``PBKDF2PasswordHasher``. What this hasher changes, by being the preferred one,
is only that a correct login does not re-hash the password at the full count (``must_update``): in a
gunicorn under test that re-hash cost seconds per login on a loaded machine, and timed logins out.
"""

from __future__ import annotations

from django.contrib.auth.hashers import PBKDF2PasswordHasher


class FastPBKDF2PasswordHasher(PBKDF2PasswordHasher):
    iterations = 1000

    def must_update(self, encoded: str) -> bool:
        return False
