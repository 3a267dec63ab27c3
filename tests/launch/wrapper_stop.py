"""The submitit job callable (RoleJob) wrapping a torchrun trainer that stops slowly on SIGTERM: prints
what the callable returns, or the error it raises."""

from __future__ import annotations

import sys
from collections.abc import Mapping

from rfthpc.launch.submitit_jobs import RoleJob


class SlowStopTrainer(RoleJob):
    """A one-node, two-rank trainer whose ranks are tests.launch.slow_stop."""

    def command(self, env: Mapping[str, str]) -> list[str]:
        return [self.python, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                "-m", "tests.launch.slow_stop", self.run_dir]


if __name__ == "__main__":
    job = SlowStopTrainer(sys.argv[1], "trainer", sys.executable, max_requeues=1, nproc_per_node=2)
    try:
        print(f"returned: {job()}", flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads what the job callable raised
        print(f"raised: {type(e).__name__}: {e}", flush=True)
