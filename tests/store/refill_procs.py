"""Explorer and trainer processes that talk only through the store, for the refill tests (run as scripts).

    python tests/store/refill_procs.py explorer RUN_DIR OWNER SETTINGS_JSON [STRAGGLE_UNTIL_STEP]
    python tests/store/refill_procs.py trainer RUN_DIR SETTINGS_JSON

They follow the roles' protocols with the real store classes and no model. The explorer claims
tasks two at a time, waits (like `rfthpc.explorer.staleness`) until the trainer has published a
version recent enough for the claims' positions, commits one group per task (one chunk each) and
completes the claims; with nothing left to claim it waits while the trainer may still need
replacements, as the explorer loop does. With STRAGGLE_UNTIL_STEP it holds its first claims until
the trainer has done that many steps, so their groups arrive stale and are dropped.

The trainer takes `batch` groups per step at version step - 1 with `max_staleness`, publishes its
version in `version.json`, logs each step's groups to `steps.jsonl` and checkpoints its reader
state every second step (a restarted trainer truncates the log to its checkpoint). When the claim
sets say nothing more will come it writes `exhausted.json`; at the end `done.json`.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from rfthpc.sharedfs.fileops import append_line, read_json, write_json_atomic, write_text_atomic
from rfthpc.store.reader import StoreReader, StoreTimeout
from rfthpc.store.reader_files import ReaderState
from rfthpc.store.schema import Group
from rfthpc.store.schema import StoredExperience as Experience
from rfthpc.store.writer import ChunkWriter
from rfthpc.tasks.claims import Claim, TaskClaims

TASKSET = "ts"
TIMEOUT_S = 120.0


def _published(run: Path) -> dict[str, Any]:
    return read_json(run / "version.json") or {"version": 0, "step": 0}


def _group(claim: Claim, version: int, owner: str) -> Group:
    rng = np.random.default_rng(claim.serial)
    exps = [Experience(prompt_ids=rng.integers(0, 100, 4), response_ids=rng.integers(0, 100, 3),
                       logprobs=np.full(3, -1.0, np.float32), loss_mask=np.ones(3, np.int8), reward=float(i))
            for i in range(2)]
    return Group(task_id=f"{TASKSET}/{claim.index}", experiences=exps, policy_version=version,
                 explorer=owner.split("/")[0], rank=int(owner.split("/")[1]),
                 info={"claims": claim.taskset, "epoch": claim.epoch, "index": claim.index, "serial": claim.serial})


def _wait(what: str, cond) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.02)


def explorer(run_dir: str, owner: str, settings: str, straggle_until: str = "0") -> None:
    run, cfg = Path(run_dir), json.loads(settings)
    claims = TaskClaims(run, TASKSET, cfg["tasks"], total_epochs=cfg["epochs"], owner=owner,
                        max_tasks=cfg["steps"] * cfg["batch"])
    writer = ChunkWriter(run, owner.split("/")[0], int(owner.split("/")[1]), groups_per_chunk=1)
    straggle = int(straggle_until)
    while True:
        batch = claims.claim(2, timeout_s=0.2, poll_s=0.02)
        if not batch:
            status = claims.status()
            if (run / "done.json").exists() or (run / "exhausted.json").exists() or status.exhausted:
                break
            time.sleep(0.05)  # finished for now: the trainer may still drop groups and need more
            continue
        # The trainer consumes position p at step 1 + p // batch, holding version step - 1.
        need = max(0, max(c.position for c in batch) // cfg["batch"] - cfg["max_staleness"])
        _wait(f"version {need}", lambda need=need: _published(run)["version"] >= need or (run / "done.json").exists())
        version = _published(run)["version"]
        if straggle:
            _wait(f"trainer step {straggle}", lambda until=straggle: _published(run)["step"] >= until)
            straggle = 0
        time.sleep(0.05)  # exploring
        for c in batch:
            writer.add(_group(c, version, owner))
        writer.flush()
        claims.complete(batch)
    writer.close()


def trainer(run_dir: str, settings: str) -> None:
    run, cfg = Path(run_dir), json.loads(settings)
    log, ckpt = run / "steps.jsonl", run / "trainer_ckpt.json"
    reader = StoreReader(run, max_staleness=cfg["max_staleness"], poll_s=0.02)
    reader.track_tasksets([TASKSET])
    saved = read_json(ckpt)
    step, lines = 0, []
    if saved is not None:
        reader.load_state(ReaderState.from_dict(saved["state"]))
        step = saved["step"]
        lines = log.read_text().splitlines(keepends=True)[:step]
    write_text_atomic(log, "".join(lines))
    write_json_atomic(run / "version.json", {"version": step, "step": step})
    while step < cfg["steps"]:
        deadline = time.monotonic() + TIMEOUT_S
        while True:
            try:
                groups = reader.take(cfg["batch"], current_version=step, timeout_s=0.2)
                break
            except StoreTimeout:
                status = TaskClaims.read_status(run, TASKSET, lost=reader.losses().get(TASKSET, 0))
                if status is not None and status.finished:
                    write_json_atomic(run / "exhausted.json", {"step": step, "exhausted": status.exhausted,
                                                               "metrics": reader.metrics()})
                    return
                if time.monotonic() > deadline:
                    raise SystemExit(f"step {step + 1}: no batch in {TIMEOUT_S} s") from None
        step += 1
        append_line(log, json.dumps({"step": step, "groups": [
            [g.group_id, g.info["epoch"], g.info["index"], g.policy_version] for g in groups]}))
        if step % 2 == 0:
            write_json_atomic(ckpt, {"state": reader.state().to_dict(), "step": step})
        write_json_atomic(run / "version.json", {"version": step, "step": step})
    write_json_atomic(run / "done.json", {"state": reader.state().to_dict()})


if __name__ == "__main__":
    {"explorer": explorer, "trainer": trainer}[sys.argv[1]](*sys.argv[2:])
