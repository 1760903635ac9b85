"""One ``PROMETHEUS_MULTIPROC_DIR`` per host, shared by every lessonboard process of the host (web, worker,
beat), so the web's ``/metrics`` serves the worker's series too (docs/operations.md#metrics).

prometheus_client names each process's files after its pid (``counter_<pid>.db``,
``gauge_livesum_<pid>.db``, …). A unit that starts must not empty the directory (the other services'
live processes write there); ``clean`` removes only the files of processes that are gone:

    python -m lessonboard.multiproc "$PROMETHEUS_MULTIPROC_DIR"

(every unit's ``ExecStartPre``). The counters of a process that is gone drop out with its files, which
Prometheus reads as a counter reset (``rate`` and ``increase`` handle it). The processes of one host must
share a PID namespace (systemd services do; containers: one metrics directory per container).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

PID_FILE = re.compile(r"^[a-z_]+_(\d+)\.db$")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def clean(folder: Path) -> list[Path]:
    """Create ``folder`` if needed and remove the metric files of processes that are not running; the
    files removed."""
    folder.mkdir(parents=True, exist_ok=True)
    removed = []
    for path in sorted(folder.iterdir()):
        match = PID_FILE.match(path.name)
        if match and not alive(int(match.group(1))):
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed


def main(argv: list[str]) -> int:
    target = argv[1] if len(argv) > 1 else os.environ.get("PROMETHEUS_MULTIPROC_DIR", "")
    if not target:
        print("usage: python -m lessonboard.multiproc DIR (or set PROMETHEUS_MULTIPROC_DIR)", file=sys.stderr)
        return 2
    removed = clean(Path(target))
    print(f"{target}: removed the metric files of {len(removed)} process file(s) that are gone")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
