"""Build a small random-init Qwen2 chat model with its tokenizer, offline (same as `rfthpc tiny-model`).

Usage:
    python tools/make_tiny_model.py --out DIR [--size tiny|small|bench30m] [--seed 0]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfthpc.demos.tinymodel import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
