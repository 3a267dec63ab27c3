"""`rfthpc run` as a user runs it: the async pair in either order, Ctrl-C then --resume, a failing role.

Every test starts the real CLI in subprocesses (real trainer, real explorer with the transformers
engine, real HDF5 store) on the demo's model and data with small budgets.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import read_trainer_meta
from rfthpc.weights.published import read_latest
from tests.run.conftest import env_for, finish, monitor_records, rfthpc, rl_only, store_counts

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow

BATCH = 4


def _wait_for(what: str, cond, timeout: float, procs=()) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        for p in procs:
            if p.poll() is not None:
                out, err = p.communicate()
                pytest.fail(f"{p.args} exited {p.returncode} while waiting for {what}\n{out[-2000:]}\n{err[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.5)


def _trainer_step(run: RunDir) -> int:
    meta = read_trainer_meta(run)
    return 0 if meta is None else meta.step


def _assert_consumed_once(run: RunDir, steps: int) -> None:
    """Every committed group was trained on exactly once: the store's counts add up to the steps run."""
    counts = store_counts(run.root)
    assert counts["consumed"] == steps * BATCH, counts
    assert counts["committed"] == counts["consumed"], counts  # nothing pending, dropped or quarantined
    (claims,) = counts["tasksets"].values()
    assert claims["completed"] == steps * BATCH and claims["outstanding"] == 0, claims
    trainer = monitor_records(run.root)
    assert [r["step"] for r in trainer] == list(range(1, steps + 1))
    assert trainer[-1]["store/consumed"] == steps * BATCH


@pytest.mark.parametrize("first", ["explore", "train"])
def test_async_pair_runs_in_either_order(first: str, demo_dir: Path, tmp_path: Path) -> None:
    """The two halves of an asynchronous pair (`mode: explore`, `mode: train`, one run directory)
    are two `rfthpc run` commands; either may start first, and every group is consumed once."""
    _run_pair(first, demo_dir, tmp_path)


def test_async_pair_explores_an_environment_taskset(demo_dir: Path, tmp_path: Path) -> None:
    """The pair with a taskset of FrozenLake maps (`env_workflow` episodes): the same hand-off, every
    multi-turn group consumed once, episode metrics in the explorer's log."""
    lake = tmp_path / "lake"
    lake.mkdir()
    rows = [{"prompt": f"frozen lake {seed}", "env_args": {"seed": seed}} for seed in range(40)]
    (lake / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = _run_pair("train", demo_dir, tmp_path, buffer={"explorer_input": {
        "taskset": {"name": "lake", "path": str(lake), "split": "train",
                    "format": {"prompt_key": "prompt", "response_key": ""},
                    "workflow_args": {"env": "frozen_lake", "env_args": {"size": 3, "max_steps": 2},
                                      "max_turns": 3, "max_tokens_per_turn": 8}},
        "default_workflow_type": "env_workflow"}}, model={"max_prompt_tokens": 160, "max_response_tokens": 400})
    rollouts = monitor_records(run.root, "explorer_explorer_0")
    grouped = [r for r in rollouts if "rollout/groups" in r]
    assert grouped and all("rollout/turns_mean" in r and "rollout/success_rate" in r for r in grouped)


def _run_pair(first: str, demo_dir: Path, tmp_path: Path, **changes) -> RunDir:
    """Run the two halves of a pair, `first` started first, and check that every group was consumed once."""
    steps = 4
    env = env_for(demo_dir, tmp_path / "ckpt")
    configs = {mode: rl_only(tmp_path / f"{mode}.yaml", "pair", mode=mode, steps=steps,
                             synchronizer={"sync_offset": 1}, **changes) for mode in ("explore", "train")}
    run = RunDir(tmp_path / "ckpt" / "rfthpc-demo" / "pair")
    second = "train" if first == "explore" else "explore"
    a = rfthpc("run", "--config", str(configs[first]), env=env)
    if first == "explore":
        # The explorer runs ahead by at most the staleness bound, then waits for the trainer.
        _wait_for("the explorer's first groups", lambda: store_counts_or_none(run) > 0, 240, [a])
    else:
        _wait_for("the trainer's initial weights", lambda: read_latest(run.root) is not None, 240, [a])
    b = rfthpc("run", "--config", str(configs[second]), env=env)
    for proc in (a, b):
        code, out, err = finish(proc, 300)
        assert code == 0, f"{proc.args}: exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    meta = read_trainer_meta(run)
    assert meta.done and meta.step == steps
    _assert_consumed_once(run, steps)
    return run


def store_counts_or_none(run: RunDir) -> int:
    """Committed groups so far (0 before the store exists)."""
    from rfthpc.errors import UserError

    try:
        return store_counts(run.root)["committed"]
    except UserError:
        return 0


def test_ctrl_c_stops_cleanly_and_resume_continues(demo_dir: Path, tmp_path: Path) -> None:
    """Ctrl-C: every role saves its state and `rfthpc run` exits 130; `--resume` finishes the run
    with nothing lost or repeated.

    The run is long enough that the interrupt finds it running: the demo config's steps take ~0.1 s
    on an idle machine, so 8 steps could end between seeing step 3 and the stop reaching the roles.
    """
    steps = 40
    env = env_for(demo_dir, tmp_path / "ckpt")
    config = rl_only(tmp_path / "run.yaml", "interrupt", steps=steps)
    run = RunDir(tmp_path / "ckpt" / "rfthpc-demo" / "interrupt")
    proc = rfthpc("run", "--config", str(config), env=env)
    _wait_for("trainer step 3", lambda: _trainer_step(run) >= 3, 300, [proc])
    proc.send_signal(signal.SIGINT)
    code, out, err = finish(proc, 200)
    assert code == 130, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    assert "--resume" in err
    stopped_at = _trainer_step(run)
    assert 3 <= stopped_at < steps
    # The trainer checkpointed the step it stopped at; the explorer gave its unfinished claims back.
    assert int(run.latest_checkpoint_file.read_text()) == stopped_at
    (claims,) = store_counts(run.root)["tasksets"].values()
    assert claims["outstanding"] == 0, claims
    assert "stop requested" in (run.log / "explorer_0.log").read_text()

    code, out, err = finish(rfthpc("run", "--config", str(config), "--resume", env=env), 300)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    _assert_consumed_once(run, steps)


def test_failing_role_stops_the_run_and_shows_its_log(demo_dir: Path, tmp_path: Path) -> None:
    """An explorer that fails (here: its taskset's chat column holds text, which only reading the rows
    shows) ends the run with exit 1, the trainer is stopped, and the explorer's log tail is printed."""
    env = env_for(demo_dir, tmp_path / "ckpt")
    config = rl_only(tmp_path / "run.yaml", "failing", buffer={"explorer_input": {"taskset": {"format": {
        "prompt_type": "messages", "messages_key": "question"}}}})
    started = time.monotonic()
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env), 240)
    assert code == 1, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    assert "explorer_0 failed (exit 2)" in err
    assert "must be a non-empty list of {role, content} messages" in err  # from the explorer's log tail
    assert time.monotonic() - started < 200
    run = RunDir(tmp_path / "ckpt" / "rfthpc-demo" / "failing")
    assert "=== " in (run.log / "trainer.log").read_text()


def test_a_role_that_cannot_start_stops_the_roles_already_started(tmp_path: Path) -> None:
    """Roles run in their own sessions (out of Ctrl-C's reach), so the runner stops them whatever ends it."""
    from rfthpc.launch.local import Role, run_local

    started = Role("explorer_0", ["sleep", "120"], tmp_path / "log" / "explorer_0.log")
    broken = Role("trainer", [str(tmp_path / "no-such-program")], tmp_path / "log" / "trainer.log")
    try:
        with pytest.raises(FileNotFoundError):
            run_local(RunDir(tmp_path), [started, broken], stop_grace_s=5)
        assert started.proc is not None and started.proc.poll() == -signal.SIGTERM
    finally:
        if started.running:
            started.proc.kill()


@pytest.mark.parametrize("nohup", [False, True])
def test_a_closed_terminal_stops_the_roles_unless_under_nohup(tmp_path: Path, nohup: bool) -> None:
    """SIGHUP (the terminal closed) stops every role as Ctrl-C does, instead of killing the runner and
    leaving its roles running; under nohup the run goes on."""
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from rfthpc.launch.local import Role, run_local\n"
        "from rfthpc.rundir.paths import RunDir\n"
        "out = Path(sys.argv[1])\n"
        "roles = [Role(f'explorer_{i}', ['sleep', '300'], out / f'{i}.log') for i in range(2)]\n"
        "class Announce(Role):\n"
        "    def start(self):\n"
        "        super().start()\n"
        "        (out / 'pids.json').write_text(json.dumps([r.proc.pid for r in roles]))\n"
        "sys.exit(run_local(RunDir(out), roles + [Announce('explorer_2', ['sleep', '300'], out / '2.log')],\n"
        "                   stop_grace_s=5))\n"
    )
    # Set either way: a test suite itself started under nohup passes SIGHUP ignored to its children.
    disposition = signal.SIG_IGN if nohup else signal.SIG_DFL
    pids: list[int] = []
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], cwd=REPO,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, disposition),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "pids.json").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        pids += json.loads((tmp_path / "pids.json").read_text())
        proc.send_signal(signal.SIGHUP)
        if nohup:
            time.sleep(2)
            assert proc.poll() is None and all(_alive(p) for p in pids)
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 130
        assert not any(_alive(p) for p in pids)
    finally:
        proc.kill()
        for pid in filter(_alive, pids):  # what a failing runner left behind
            os.kill(pid, signal.SIGKILL)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_each_role_gets_its_share_of_the_cores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rfthpc run` splits the cores it may use between its processes (OMP_NUM_THREADS), unless the
    user set OMP_NUM_THREADS, which every role then keeps."""
    from rfthpc.config import load_config
    from rfthpc.launch.local import available_cores, plan_roles

    stages = load_config(rl_only(tmp_path / "run.yaml", "threads"), check_paths=False).stages
    run = RunDir(tmp_path / "run")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)

    def threads(**kwargs: int) -> dict[str, str]:
        return {r.name: r.env["OMP_NUM_THREADS"] for r in plan_roles(stages, run, **kwargs)}

    assert threads(cores=2) == {"trainer": "1", "explorer_0": "1"}
    assert threads(cores=8, explorers=3) == {"trainer": "2", "explorer_0": "2", "explorer_1": "2", "explorer_2": "2"}
    # torchrun's workers are processes too: 2 trainer ranks and 2 explorers on 8 cores get 2 threads each.
    assert threads(cores=8, trainer_procs=2, explorers=2) == {"trainer": "2", "explorer_0": "2", "explorer_1": "2"}
    assert threads(cores=1, explorers=2) == {"trainer": "1", "explorer_0": "1", "explorer_1": "1"}
    # By default: the CPUs this process may run on (its affinity, as Slurm or taskset set it).
    assert available_cores() == len(os.sched_getaffinity(0))
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert set(threads(cores=8).values()) == {"3"}


def test_shared_auxiliary_models_are_served_by_local_processes(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A shared judge of 2 engines: two `rfthpc serve` processes, started first, counted in the cores' split."""
    from rfthpc.config import load_config
    from rfthpc.launch.local import plan_roles

    judge = {"name": "judge", "model_path": "/models/judge", "engine_num": 2}
    stages = load_config(rl_only(tmp_path / "run.yaml", "served", explorer={"auxiliary_models": [judge]}),
                         check_paths=False).stages
    run = RunDir(tmp_path / "run")
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    roles = plan_roles(stages, run, cores=8)
    assert [(r.name, r.service, r.env["OMP_NUM_THREADS"]) for r in roles] == [
        ("server_judge_0", True, "2"), ("server_judge_1", True, "2"), ("trainer", False, "2"),
        ("explorer_0", False, "2")]
    assert roles[1].argv[3:] == ["serve", "--run-dir", str(run.root), "--model", "judge", "--engine", "1",
                                 "--explorer", "explorer"]
    assert roles[1].log_path == run.log / "server_judge_1.log"


def test_services_are_stopped_when_the_run_is_done(tmp_path: Path) -> None:
    """The run waits for its workers, not for the servers they use; those are stopped at its end."""
    from rfthpc.launch.local import Role, run_local

    server = Role("server_judge_0", ["sleep", "300"], tmp_path / "log" / "server.log", service=True)
    explorer = Role("explorer_0", ["sleep", "1"], tmp_path / "log" / "explorer_0.log")
    started = time.monotonic()
    try:
        assert run_local(RunDir(tmp_path), [server, explorer], stop_grace_s=5) == 0
        assert time.monotonic() - started < 30
        assert server.proc is not None and server.proc.poll() == -signal.SIGTERM
    finally:
        if server.running:
            server.proc.kill()


def _assert_phases_reported(run: RunDir, out: str) -> None:
    """`rfthpc run` printed its roles' start-up and shutdown phases, in the order they happened, and the
    trainer's first step record carries its start-up phases as metrics."""
    import re

    from rfthpc.rundir.phases import read_phases

    lines = out.splitlines()
    startup = next(ln for ln in lines if ln.startswith("rfthpc run: start-up, seconds after the roles started"))
    trainer = dict(re.findall(r"(imports|model built|first weights published|first step) ([\d.]+)",
                              startup.split(";")[0]))
    assert list(trainer) == ["imports", "model built", "first weights published", "first step"], startup
    times = [float(v) for v in trainer.values()]
    assert times == sorted(times) and times[0] > 0, startup
    assert "explorer_explorer_0: imports" in startup and "first batch" in startup, startup
    shutdown = next(ln for ln in lines if ln.startswith("rfthpc run: shutdown, seconds after the last step"))
    assert "final checkpoint" in shutdown and "command returned" in shutdown, shutdown
    phases = read_phases(run.root)
    # A process's start is known to the clock tick (/proc: 10 ms).
    assert phases["run"]["roles_started"] - 0.05 <= phases["trainer"]["process_start"] < phases["trainer"]["first_step"]
    assert phases["trainer"]["last_step"] <= phases["trainer"]["exit"] <= phases["run"]["returned"]
    first = json.loads((run.monitor / "trainer.jsonl").read_text().splitlines()[0])
    assert 0 < first["startup/imports_s"] < first["startup/first_step_s"], first


@pytest.mark.parametrize("style", ["explorer_driven", "trainer_driven"])
def test_each_sync_style_runs_to_the_end(style: str, demo_dir: Path, tmp_path: Path) -> None:
    """Trainer and explorer processes of each non-fixed style (sync_interval 2) finish the run with
    every group trained on once and none dropped as stale. trainer_driven publishes every second
    step; explorer_driven when the explorer asks (when depends on the two processes' pace)."""
    import re

    from rfthpc.weights import asking as weight_requests

    steps = 4
    env = env_for(demo_dir, tmp_path / "ckpt")
    config = rl_only(tmp_path / "run.yaml", style, steps=steps,
                     synchronizer={"sync_style": style, "sync_interval": 2})
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env), 300)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run = RunDir(tmp_path / "ckpt" / "rfthpc-demo" / style)
    _assert_consumed_once(run, steps)
    _assert_phases_reported(run, out)
    # The explorer shares the trainer's machine: it takes the trainer's node-local copies of the versions.
    assert "the trainer's node-local copy" in (run.log / "explorer_0.log").read_text()
    published = [int(v) for v in re.findall(r"published policy version (\d+)", (run.log / "trainer.log").read_text())]
    answers = run.weights / weight_requests.REQUESTS / weight_requests.ANSWERS
    if style == "trainer_driven":
        assert published == [0, 2, 4] and not answers.exists()
    else:
        from rfthpc.sharedfs.journal import journal_at

        _, newest = journal_at(answers, keep=weight_requests.ANSWERS_KEPT).latest()
        assert newest is not None and "explorer-0" in json.loads(newest)["answered"]
        assert published[0] == 0 and published[-1] == steps and published == sorted(set(published))


@pytest.mark.parametrize("engine", ["transformers", "vllm"])
def test_a_colocated_run_in_sleep_mode_takes_turns_on_the_machine(engine: str, demo_dir: Path, tmp_path: Path) -> None:
    """`slurm.layout: colocated` with `enable_sleep_mode`: the trainer and the explorer take turns on the
    machine's devices. While a third process holds the turn, both roles start but neither builds its model or
    engine, publishes or steps; once it lets go the run ends with every group trained on once. (On a CPU the
    engines have no memory to release; vLLM's sleep and wake are GPU-only, tools/gpu_check.py.)"""
    from rfthpc.engines.time_sharing import GpuTurns, turns_dir
    from rfthpc.weights.node_local import default_staging_root

    steps = 4
    config = rl_only(tmp_path / "run.yaml", "turns", steps=steps, slurm={"layout": "colocated"},
                     explorer={"rollout_model": {"engine_type": engine, "enable_sleep_mode": True}})
    run = RunDir(tmp_path / "ckpt" / "rfthpc-demo" / "turns")
    mine = GpuTurns(turns_dir(default_staging_root(), run.root), ["node"], "test")
    assert mine.acquire() is not None  # before the run starts: nothing else can hold it
    proc = rfthpc("run", "--config", str(config), env=env_for(demo_dir, tmp_path / "ckpt"))
    try:
        def started() -> bool:
            logs = [run.log / "trainer.log", run.log / "explorer_0.log"]
            return all(p.is_file() and "time-sharing GPUs node" in p.read_text() for p in logs)

        _wait_for("both roles to start", started, 300, [proc])
        time.sleep(2)
        # Neither has had a turn: no model built, nothing published, no engine started, no step.
        assert read_latest(run.root) is None and _trainer_step(run) == 0
        explored = run.monitor / "explorer_explorer_0.jsonl"
        assert not explored.is_file() or not explored.read_text().strip()
        mine.release()
        code, out, err = finish(proc, 300)
    finally:
        mine.release()
        if proc.poll() is None:
            proc.kill()
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    _assert_consumed_once(run, steps)
    trainer = monitor_records(run.root)
    assert all(r["timing/gpu_turn_wait_s"] >= 0 for r in trainer)
    batches = monitor_records(run.root, "explorer_explorer_0")
    assert batches[-1]["rollout/gpu_turns"] >= steps + 1  # its engine start, then a turn per batch at least
    assert trainer[0]["timing/gpu_turn_wait_s"] >= 2  # its start waited for the test's turn
