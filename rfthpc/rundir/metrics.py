"""Each role's metric records: `monitor/<role>.jsonl`, one JSON object per line, one writer per file.

The writer is the role's `rfthpc.observe.monitor.Monitor`; `rfthpc run`'s progress line, the
timeline, the charts and the demos' figures read the records back with `read_metrics`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """Records of one role's jsonl file; a torn last line (a killed writer) is skipped."""
    records = []
    try:
        lines = Path(path).read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
