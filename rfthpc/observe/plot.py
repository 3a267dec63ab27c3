"""`rfthpc plot RUN_DIR`: PNG charts of a run from its metrics files and its experience store.

Charts (written to `<run dir>/monitor/plots/`, each alone and all together in `overview.png`):
- `reward.png`: mean reward of each trainer batch per global step (and the SFT loss of warm-up
  stages or of a mix stage's expert rows, and the per-token reverse KL to the teacher of distillation
  stages), with the stage boundaries marked;
- `eval.png`: greedy eval accuracy (multi-turn episodes: success rate) per policy version, per eval taskset;
- `episodes.png`: multi-turn runs (`env_workflow`): success rate and policy turns per episode of
  the explorers' training episodes, per explorer step;
- `staleness.png`: histogram of (trainer version - policy version) over the consumed experience;
- `throughput.png`: trainer and explorer tokens/s over the run's wall time;
- `timeline.png`: what each role did when (computing, generating, waiting for the other,
  publishing, loading, evaluating; `rfthpc.observe.timeline`): whether the roles overlap, at a glance.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rfthpc.errors import UserError
from rfthpc.observe.timeline import spans_of
from rfthpc.rundir.metrics import read_metrics
from rfthpc.rundir.paths import RunDir

REWARD_KEY = "critic/score/mean"
SFT_LOSS_KEY = "actor/sft_loss"
EXPERT_LOSS_KEY = "expert/sft_loss"
"""A mix stage's SFT loss on its expert rows (`rfthpc.algorithms.mixing`), charted as the SFT loss."""
REVERSE_KL_KEY = "distill/reverse_kl"
STAGE_KEY = "training/stage_index"
SMOOTH_STEPS = 10
EVAL_METRICS = ("/accuracy", "/success_rate")
"""Eval metrics charted: single-turn accuracy, multi-turn episodes' success rate."""
EPISODE_SERIES = {"rollout/success_rate": "success rate", "rollout/turns_mean": "turns per episode"}
"""The explorers' episode metrics (`rfthpc.explorer.episodes`) → their labels on the episodes chart."""


def rolling_mean(values: list[float], window: int) -> list[float]:
    """Mean of each value and the up to `window - 1` values before it."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def _series(records: list[dict[str, Any]], key: str, x: str = "step") -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for r in records:
        if isinstance(r.get(key), (int, float)) and isinstance(r.get(x), (int, float)):
            xs.append(r[x])
            ys.append(r[key])
    return xs, ys


Series = tuple[list[float], list[float]]


def _merged(a: Series, b: Series) -> Series:
    """Two series of disjoint steps as one, in step order."""
    points = sorted(zip(a[0] + b[0], a[1] + b[1], strict=True))
    return [x for x, _ in points], [y for _, y in points]


def _stage_starts(trainer: list[dict[str, Any]]) -> list[int]:
    """Global steps after which a new stage began (the last step of the stage before)."""
    starts, last = [], None
    for r in trainer:
        index = r.get(STAGE_KEY)
        if index is not None and last is not None and index != last:
            starts.append(int(r["step"]) - 1)
        last = index if index is not None else last
    return starts


def collect(run: RunDir) -> dict[str, Any]:
    """The series the charts draw, read from `monitor/*.jsonl` and the store."""
    trainer = read_metrics(run.monitor / "trainer.jsonl")
    explorers = {p.stem.removeprefix("explorer_"): read_metrics(p)
                 for p in sorted(run.monitor.glob("explorer_*.jsonl"))}
    data: dict[str, Any] = {
        "reward": _series(trainer, REWARD_KEY),
        "sft_loss": _merged(_series(trainer, SFT_LOSS_KEY), _series(trainer, EXPERT_LOSS_KEY)),
        "reverse_kl": _series(trainer, REVERSE_KL_KEY),
        "stage_starts": _stage_starts(trainer), "eval": {}, "episodes": {}, "throughput": {}, "staleness": {}, "timeline": {},
    }
    t0 = min([r["time"] for recs in [trainer, *explorers.values()] for r in recs[:1] if "time" in r], default=0.0)
    for name, recs in explorers.items():
        for key in sorted({k for r in recs for k in r if k.startswith("eval/") and k.endswith(EVAL_METRICS)}):
            taskset, metric = key[len("eval/"):].rsplit("/", 1)
            label = taskset if metric == "accuracy" else f"{taskset} ({metric.replace('_', ' ')})"
            data["eval"][label if len(explorers) == 1 else f"{name}: {label}"] = _series(recs, key)
        for key, series in EPISODE_SERIES.items():
            xs, ys = _series(recs, key)
            if xs:
                data["episodes"][f"{series} ({name})" if len(explorers) > 1 else series] = (xs, ys)
        xs, ys = _series(recs, "rollout/tokens_per_s", x="time")
        if xs:
            data["throughput"][f"explorer {name} (generated)"] = ([x - t0 for x in xs], ys)
    data["timeline"] = {role: [(sp.start - t0, sp.end - t0, sp.phase) for sp in spans]
                        for role, spans in spans_of(trainer, explorers).items()}
    xs, ys = _series(trainer, "perf/throughput", x="time")
    if xs:
        data["throughput"]["trainer (trained)"] = ([x - t0 for x in xs], ys)
    try:
        from rfthpc.store import inspect_store

        hist = inspect_store(run.root)["staleness_hist_consumed"]
        data["staleness"] = {int(k): int(v) for k, v in hist.items()}
    except UserError:
        pass  # A run without a store (SFT only, or not started) still gets its other charts.
    return data


def _no_data(ax: Any) -> None:
    ax.text(0.5, 0.5, "no data yet", ha="center", va="center", transform=ax.transAxes)


def _mark_stages(ax: Any, data: dict[str, Any]) -> None:
    for step in data["stage_starts"]:
        ax.axvline(step, color="grey", linestyle="--", linewidth=1)


def draw_reward(ax: Any, data: dict[str, Any]) -> None:
    """Batch reward per trainer step; SFT loss and the reverse KL to a teacher on a second axis; stage
    boundaries dashed."""
    xs, ys = data["reward"]
    lx, ly = data["sft_loss"]
    kx, ky = data["reverse_kl"]
    if not xs and not lx and not kx:
        _no_data(ax)
    if xs:
        ax.plot(xs, ys, color="tab:blue", alpha=0.35, linewidth=1, label="batch reward (RFT)")
        ax.plot(xs, rolling_mean(ys, SMOOTH_STEPS), color="tab:blue", linewidth=2,
                label=f"mean of the last {SMOOTH_STEPS} steps")
        ax.legend(loc="upper left", fontsize=8)
    if lx or kx:
        loss_ax = ax.twinx()
        if lx:
            loss_ax.plot(lx, ly, color="tab:orange", label="SFT loss")
        if kx:
            loss_ax.plot(kx, ky, color="tab:red", alpha=0.35, linewidth=1,
                         label="reverse KL to the teacher (per token)")
            loss_ax.plot(kx, rolling_mean(ky, SMOOTH_STEPS), color="tab:red", linewidth=2,
                         label=f"reverse KL, mean of the last {SMOOTH_STEPS} steps")
        loss_ax.set_ylabel(" / ".join(n for n, series in (("SFT loss", lx), ("reverse KL", kx)) if series))
        loss_ax.legend(loc="upper right", fontsize=8)
    _mark_stages(ax, data)
    ax.set(title="Training", xlabel="trainer step", ylabel="mean reward")


def draw_eval(ax: Any, data: dict[str, Any]) -> None:
    """Eval accuracy per policy version, with the first and last value written on the chart."""
    for label, (xs, ys) in data["eval"].items():
        ax.plot(xs, ys, marker="o", label=label)
        for x, y in {xs[0]: ys[0], xs[-1]: ys[-1]}.items():
            ax.annotate(f"{y:.2f}", (x, y), textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    if data["eval"]:
        ax.legend(fontsize=8)
    else:
        _no_data(ax)
    _mark_stages(ax, data)
    ax.set(title="Eval accuracy (greedy, held-out)", xlabel="policy version (trainer step)", ylabel="accuracy",
           ylim=(-0.02, 1.05))


def draw_episodes(ax: Any, data: dict[str, Any]) -> None:
    """Success rate (left axis) and turns per episode (right axis) of the training episodes."""
    rates = {k: v for k, v in data["episodes"].items() if k.startswith("success rate")}
    turns = {k: v for k, v in data["episodes"].items() if k.startswith("turns per episode")}
    if not rates and not turns:
        _no_data(ax)
    for label, (xs, ys) in rates.items():
        ax.plot(xs, rolling_mean(ys, SMOOTH_STEPS), color="tab:green", label=f"{label} (mean of {SMOOTH_STEPS})")
    if rates:
        ax.legend(loc="upper left", fontsize=8)
    if turns:
        turn_ax = ax.twinx()
        for label, (xs, ys) in turns.items():
            turn_ax.plot(xs, rolling_mean(ys, SMOOTH_STEPS), color="tab:brown", label=label)
        turn_ax.set_ylabel("turns per episode")
        turn_ax.legend(loc="upper right", fontsize=8)
    ax.set(title="Episodes (training, multi-turn)", xlabel="explorer step", ylabel="success rate",
           ylim=(-0.02, 1.05))


def draw_staleness(ax: Any, data: dict[str, Any]) -> None:
    """Histogram of the staleness of the experience the trainer consumed."""
    hist = data["staleness"]
    if hist:
        ax.bar(list(hist), list(hist.values()))
        ax.set_xticks(sorted(hist))
    else:
        _no_data(ax)
    ax.set(title="Staleness of trained experience", xlabel="trainer version - policy version", ylabel="groups")


def draw_throughput(ax: Any, data: dict[str, Any]) -> None:
    """Tokens/s of the trainer and of each explorer over wall time."""
    for label, (xs, ys) in data["throughput"].items():
        ax.plot(xs, ys, label=label, linewidth=1)
    if data["throughput"]:
        ax.legend(fontsize=8)
    else:
        _no_data(ax)
    ax.set(title="Throughput", xlabel="seconds since start", ylabel="tokens/s")


PHASE_COLOURS = {
    "computing": "tab:blue", "generating": "tab:blue", "waiting for experience": "lightgrey",
    "waiting for weights": "lightgrey", "publishing weights": "tab:green", "checkpointing": "tab:orange",
    "evaluating": "tab:purple",
}


def draw_timeline(ax: Any, data: dict[str, Any]) -> None:
    """One row per role, one bar per phase over wall time: overlapping blue bars are roles working
    at once; grey is a role waiting for the other."""
    roles = list(data["timeline"])
    for row, role in enumerate(roles):
        for phase, colour in PHASE_COLOURS.items():
            bars = [(start, end - start) for start, end, p in data["timeline"][role] if p == phase]
            if bars:
                ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colour, label=phase)
    if roles:
        ax.set_yticks(range(len(roles)), roles)
        handles, labels = ax.get_legend_handles_labels()
        unique = dict(zip(labels, handles, strict=True))
        ax.legend(unique.values(), unique.keys(), fontsize=7, loc="upper right", ncol=2)
    else:
        _no_data(ax)
    ax.set(title="Timeline", xlabel="seconds since start")


CHARTS: dict[str, Callable[[Any, dict[str, Any]], None]] = {
    "reward": draw_reward, "eval": draw_eval, "episodes": draw_episodes, "staleness": draw_staleness,
    "throughput": draw_throughput, "timeline": draw_timeline,
}


def plot_run(run_dir: Path) -> list[Path]:
    """Write the charts of a run (one PNG each, and `overview.png`); return the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rfthpc.sharedfs.fileops import make_dirs

    run = RunDir(run_dir)
    data = collect(run)
    out = make_dirs(run.monitor / "plots")
    paths = []
    for name, draw in CHARTS.items():
        fig, ax = plt.subplots(figsize=(6, 4))
        draw(ax, data)
        fig.tight_layout()
        paths.append(_save(fig, out / f"{name}.png"))
        plt.close(fig)
    # All six charts in a 3 x 2 grid.
    fig = plt.figure(figsize=(12, 11))
    grid = fig.add_gridspec(3, 2)
    axes = [fig.add_subplot(grid[i // 2, i % 2]) for i in range(len(CHARTS))]
    for ax, draw in zip(axes, CHARTS.values(), strict=True):
        draw(ax, data)
    fig.suptitle(f"{run.root.parent.name}/{run.root.name}")
    fig.tight_layout()
    paths.append(_save(fig, out / "overview.png"))
    plt.close(fig)
    return paths


def _save(fig: Any, path: Path) -> Path:
    """Save a figure atomically (a viewer may be reading the old one)."""
    from rfthpc.sharedfs.fileops import atomic_path

    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=100, format="png")
    return path
