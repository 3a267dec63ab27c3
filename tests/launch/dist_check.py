"""A torchrun worker for the rendezvous test: all-reduce over gloo, then record what each rank saw.

Usage (under torchrun): python -m tests.launch.dist_check OUT_DIR
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    record = {"rank": rank, "world": world, "sum": value.item(), "node": os.environ.get("SLURMD_NODENAME"),
              "host": socket.gethostname(), "master": os.environ.get("MASTER_ADDR")}
    Path(sys.argv[1], f"rank{rank}.json").write_text(json.dumps(record))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
