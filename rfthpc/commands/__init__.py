"""One module per `rfthpc` sub-command; each defines `register(subparsers)`.

Handlers take `(args, overrides)` and return an exit code. Keep heavy imports (torch, vllm) inside
handlers so that `rfthpc --help` stays fast on a login node.
"""

from __future__ import annotations

import sys


def print_notes(notes: list[str]) -> None:
    """Print config notes (where rfthpc reads a Trinity-RFT value differently) on stderr."""
    for note in notes:
        print(f"rfthpc: note: {note}", file=sys.stderr)
