#!/usr/bin/env python
"""Merge sharded trainer checkpoints into Hugging Face models, without the `rfthpc` command.

Usage:
    python tools/convert_checkpoint.py --checkpoint-dir RUN_DIR [--base-model-dir B] [--force]
        [--dtype bf16|fp16|fp32] [--role actor|critic|all] [--max-shard-size 5GB]

Same options and behaviour as `rfthpc convert` (see docs/convert.md).
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rfthpc.convert.cli import main

if __name__ == "__main__":
    sys.exit(main())
