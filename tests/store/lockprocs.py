"""Lock holders for the lock tests (run as scripts; imports only the lock module, to start fast).

    python tests/store/lockprocs.py incrementer LOCK_PATH LOCK_KIND COUNTER_FILE N
    python tests/store/lockprocs.py holder LOCK_PATH LOCK_KIND

The incrementer adds 1 to the number in COUNTER_FILE N times, each a read-modify-write under the
lock; the holder takes the lock, prints "held" and sleeps until killed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from rfthpc.sharedfs.locks import make_lock


def incrementer(lock_path: str, kind: str, counter: str, n: str) -> None:
    for _ in range(int(n)):
        with make_lock(Path(lock_path), kind, timeout_s=60):  # type: ignore[arg-type]
            value = int(Path(counter).read_text())
            time.sleep(0.001)  # widen the window a missing exclusion would show in
            Path(counter).write_text(str(value + 1))


def holder(lock_path: str, kind: str) -> None:
    with make_lock(Path(lock_path), kind, timeout_s=60):  # type: ignore[arg-type]
        print("held", flush=True)
        time.sleep(3600)


if __name__ == "__main__":
    {"incrementer": incrementer, "holder": holder}[sys.argv[1]](*sys.argv[2:])
