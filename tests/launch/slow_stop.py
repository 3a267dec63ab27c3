"""A torchrun rank that needs a while to stop: on SIGTERM it 'checkpoints' for 3 s, writes a marker, exits 124."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path


def main(marker: Path) -> None:
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    marker.with_suffix(".ready").write_text("ready")
    while not stop:
        time.sleep(0.05)
    time.sleep(3.0)
    marker.write_text("saved")
    sys.exit(124)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
