"""Lock-step (on-policy) vs bounded-staleness asynchronous RFT: wall time for the same trainer steps.

usage: python tools/bench_async.py [--steps 30] [--sync-offset 1] [--repeat 8] [--batch-size 16]
                                   [--demo-dir DIR] [--dir DIR]

Two runs of the demo's GRPO stage (configs/tiny-cpu.yaml without its SFT warm-up and without
evaluation, model and data from `rfthpc make-demo`), the same config and budget except the
staleness bound, each started like `rfthpc run` (rfthpc.launch.local) with the trainer pinned to core 0
and the vLLM explorer to core 1 (`taskset`, OMP_NUM_THREADS=1):

- sync:  `sync_interval: 1, sync_offset: 0`: the explorer waits for the weights of step t before
         generating the batch of step t + 1, so generation and training alternate;
- async: `sync_offset: --sync-offset`: the explorer may run that many versions ahead, so it
         generates the next batch while the trainer trains on this one.

The wall time counted is from the end of trainer step 1 to the end of step `--steps` (start-up,
which both pay alike, is left out). With generation time G and training time T per step, sync
needs about G + T per step and async max(G, T), so the ratio is at most 2 when G = T; the measured
G and T are printed to show the balance. Last line:
`FIGURES async_vs_sync=… sync_wall_s=… async_wall_s=…`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=30, help="trainer steps per run")
    p.add_argument("--sync-offset", type=int, default=1, help="versions the async explorer may run ahead")
    p.add_argument("--repeat", type=int, default=8, help="responses per task (repeat_times)")
    p.add_argument("--batch-size", type=int, default=16, help="tasks per trainer step")
    p.add_argument("--demo-dir", type=Path, default=None, help="demo model and data (default: made in --dir)")
    p.add_argument("--dir", type=Path, default=None, help="work directory (default: a temporary one)")
    return p.parse_args()


def bench_config(demo_dir: Path, root: Path, name: str, args: argparse.Namespace, sync_offset: int) -> Path:
    """The demo config reduced to its RL stage, with this benchmark's budget and staleness bound."""
    raw = yaml.safe_load((ROOT / "configs" / "tiny-cpu.yaml").read_text())
    raw.pop("stages")
    raw.update(name=name, checkpoint_root_dir=str(root), monitor={"monitor_type": []})
    raw["model"]["model_path"] = str(demo_dir / "model")
    raw["algorithm"]["repeat_times"] = args.repeat
    buf = raw["buffer"]
    buf.update(total_steps=args.steps, batch_size=args.batch_size)
    buf["explorer_input"]["taskset"]["path"] = str(demo_dir / "gsm8k")
    buf["explorer_input"]["eval_tasksets"] = []
    raw["synchronizer"].update(sync_interval=1, sync_offset=sync_offset)
    # One optimizer update per step: training then takes about as long as generation here.
    raw["trainer"].pop("ppo_mini_batch_size")
    raw["trainer"]["save_hf_checkpoint"] = "never"
    raw["explorer"]["weights_poll_interval"] = 0.1
    raw["filesystem"] = {"poll_interval_s": 0.1}
    path = root / f"{name}.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def run_once(config: Path) -> dict[str, Any]:
    """Run a config like `rfthpc run` with the trainer on core 0 and the explorer on core 1."""
    from rfthpc.config import load_config
    from rfthpc.launch.local import plan_roles, run_local
    from rfthpc.launch.run_dir import prepare_run_dir

    loaded = load_config(config)
    run = prepare_run_dir(loaded)
    roles = plan_roles(loaded.stages, run)
    for core, role in enumerate(roles):
        role.argv = ["taskset", "-c", str(core % (os.cpu_count() or 1)), *role.argv]
        role.env["OMP_NUM_THREADS"] = "1"
    code = run_local(run, roles, progress_every_s=5.0)
    if code != 0:
        raise SystemExit(f"bench run {config} failed with exit {code}; see {run.log}")
    trainer = [json.loads(line) for line in (run.monitor / "trainer.jsonl").read_text().splitlines()]
    explorer = [json.loads(line) for f in sorted(run.monitor.glob("explorer_*.jsonl"))
                for line in f.read_text().splitlines()]
    rollouts = [r for r in explorer if "rollout/time_s" in r]
    return {
        "wall_s": trainer[-1]["time"] - trainer[0]["time"],
        "steps": len(trainer) - 1,
        "train_s": statistics.median(r["perf/time_per_step"] for r in trainer),
        "generate_s": statistics.median(r["rollout/time_s"] for r in rollouts),
        "staleness": statistics.mean(r["staleness/mean"] for r in trainer),
    }


def main() -> int:
    args = parse_args()
    if args.steps < 3:
        raise SystemExit("--steps: use 3 or more (the first step is start-up and not counted)")
    work = args.dir or Path(tempfile.mkdtemp(prefix="rfthpc-bench-async-"))
    work.mkdir(parents=True, exist_ok=True)
    demo_dir = args.demo_dir
    if demo_dir is None:
        from rfthpc.demos.gsm8k import MakeDemoArgs, make_demo

        demo_dir = work / "demo-data"
        make_demo(MakeDemoArgs(out=demo_dir))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    results = {}
    for label, offset in (("sync", 0), ("async", args.sync_offset)):
        print(f"== {label} (sync_offset {offset}), {args.steps} steps", flush=True)
        results[label] = run_once(bench_config(demo_dir.absolute(), work.absolute(), f"{label}-{stamp}", args, offset))
    print(f"{'run':6} {'steps':>5} {'wall s':>8} {'s/step':>7} {'train s':>8} {'generate s':>10} {'staleness':>9}")
    for label, r in results.items():
        print(f"{label:6} {r['steps']:5d} {r['wall_s']:8.1f} {r['wall_s'] / r['steps']:7.2f} {r['train_s']:8.2f} "
              f"{r['generate_s']:10.2f} {r['staleness']:9.2f}")
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").is_file() else "n/a"
    print(f"load average at the end: {load} on {os.cpu_count()} cores")
    ratio = results["sync"]["wall_s"] / results["async"]["wall_s"]
    print(f"FIGURES async_vs_sync={ratio:.2f} sync_wall_s={results['sync']['wall_s']:.1f} "
          f"async_wall_s={results['async']['wall_s']:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
