"""The server role (`rfthpc.engines.server`) with a stand-in for vLLM's server (tests/engines/fake_vllm.py;
the real one runs on the local Slurm cluster in tests/launch/test_aux_server.py): it publishes its
address once the server answers; a server process that dies is started again on a new port, with the
next generation, and a client's request waiting meanwhile goes through; it stops when the run is
finished (exit 0) or on SIGTERM (exit 124, for requeue), and marks its address stopped."""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rfthpc.engines.remote import RemoteEngine
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.engines.server import finished, vllm_command
from rfthpc.errors import EXIT_PREEMPTED
from rfthpc.rundir.explorer_meta import ExplorerProgress
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.servers import ServerAddress, read_address
from rfthpc.rundir.trainer_meta import TrainerMeta, write_trainer_meta
from rfthpc.sharedfs.fileops import write_json_atomic
from tests.engines.serve_script import JUDGE

HERE = Path(__file__).parent
REPO = HERE.parents[1]


def start_server(run: Path, engine: int, log: Path, model: Path | None = None) -> subprocess.Popen[bytes]:
    """`rfthpc.engines.server` for auxiliary model `judge` in a process of its own: the stand-in server, or
    vLLM's on `model`."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    with open(log, "ab") as out:
        return subprocess.Popen([sys.executable, str(HERE / "serve_script.py"), str(run), str(engine),
                                 *([str(model)] if model else [])], env=env, stdout=out, stderr=subprocess.STDOUT)


def wait_address(run: Path, engine: int, generation: int, log: Path, timeout_s: float = 30) -> ServerAddress:
    """The engine's address once it serves with `generation` (the test fails after `timeout_s`)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = read_address(run, "judge", engine)
        if found is not None and found.generation >= generation and found.serving:
            return found
        time.sleep(0.1)
    pytest.fail(f"no generation {generation} of engine {engine} within {timeout_s} s:\n{log.read_text()}")


def _record(run: RunDir, rank: int, state: str, updated: float | None = None) -> None:
    progress = ExplorerProgress(name="explorer", rank=rank, state=state, lease_s=60,
                                updated=time.time() if updated is None else updated)
    write_json_atomic(run.explorer_meta("explorer", rank), dataclasses.asdict(progress))


def test_serves_restarts_a_dead_server_and_stops_with_the_run(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    log = tmp_path / "serve.log"
    proc = start_server(run.root, 1, log)
    try:
        first = wait_address(run.root, 1, 1, log)
        assert first.url.startswith(f"http://{socket.gethostname()}:") and first.served_model == "judge"
        client = RemoteEngine(run.root, "judge", timeout_s=60)
        params = SamplingArgs(max_tokens=3)
        assert client.generate([[5, 6]], 2, params)[0][1].token_ids == [2, 1, 1]
        assert client.max_model_len == 321
        os.kill(first.pid, signal.SIGKILL)  # vLLM's server crashes: the task starts it again
        answer: dict[str, object] = {}
        asker = threading.Thread(target=lambda: answer.update(out=client.generate([[1]], 1, params)))
        time.sleep(0.2)
        asker.start()
        second = wait_address(run.root, 1, 2, log)
        asker.join(timeout=30)
        assert answer["out"][0][0].token_ids == [1, 1, 0]  # type: ignore[index]
        assert (second.pid, second.url, second.api_key) != (first.pid, first.url, first.api_key)
        assert client.retries >= 1
        # The run goes on while an explorer works, and ends once the trainer is done and every explorer finished.
        write_trainer_meta(run, TrainerMeta(step=3, done=True, state="done"))
        _record(run, 0, "exploring")
        time.sleep(1)
        assert proc.poll() is None
        _record(run, 0, "done")
        assert proc.wait(timeout=30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped = read_address(run.root, "judge", 1)
    assert stopped is not None and (stopped.state, stopped.generation) == ("stopped", 2)
    assert "serving at http://" in log.read_text()


def test_a_stop_signal_stops_the_server_for_requeue(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    log = tmp_path / "serve.log"
    proc = start_server(run.root, 0, log)
    try:
        served = wait_address(run.root, 0, 1, log)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == EXIT_PREEMPTED, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert read_address(run.root, "judge", 0).state == "stopped"
    with pytest.raises(ProcessLookupError):
        os.kill(served.pid, 0)
    # The requeued task's start publishes the next generation.
    proc = start_server(run.root, 0, log)
    try:
        assert wait_address(run.root, 0, 2, log).generation == 2
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=40) == EXIT_PREEMPTED
    finally:
        if proc.poll() is None:
            proc.kill()


def test_when_the_run_needs_its_servers_no_more(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    now = time.time()
    assert finished(run, has_trainer=True) is None and finished(run, has_trainer=False) is None
    _record(run, 0, "exploring")
    _record(run, 1, "done")
    assert finished(run, has_trainer=False) is None
    _record(run, 0, "stopped", updated=now - 10)  # preempted: its requeue will ask again
    assert finished(run, has_trainer=False) is None
    _record(run, 0, "stopped", updated=now - 600)  # gone for longer than its lease
    assert finished(run, has_trainer=False) == "no trainer and 2 explorer process(es) have finished"
    _record(run, 0, "failed")
    assert finished(run, has_trainer=True) is None  # the trainer has not reported done
    write_trainer_meta(run, TrainerMeta(step=2, state="training"))
    assert finished(run, has_trainer=False) is None  # a trainer reports: it counts
    write_trainer_meta(run, TrainerMeta(step=4, done=True, state="done"))
    assert finished(run, has_trainer=True) == "the trainer is done and 2 explorer process(es) have finished"


def test_the_vllm_command_follows_the_engine_settings() -> None:
    argv = vllm_command(dataclasses.replace(JUDGE, max_model_len=2048, tensor_parallel_size=2), 1, 4242, on_cpu=False)
    assert argv[1:3] == ["-m", "vllm.entrypoints.openai.api_server"]
    flags = " ".join(argv[3:])
    for expected in ("--model /unused", "--served-model-name judge", "--host 0.0.0.0", "--port 4242", "--dtype auto",
                     "--seed 1", "--tensor-parallel-size 2", "--logprobs-mode processed_logprobs",
                     "--no-enable-prefix-caching", "--max-model-len 2048"):
        assert expected in flags
    assert "--enforce-eager" not in argv
    cpu = vllm_command(JUDGE, 0, 4242, on_cpu=True)
    assert "--enforce-eager" in cpu and cpu[cpu.index("--dtype") + 1] == "float32"
