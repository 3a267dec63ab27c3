"""A mix stage's expert data checked before a run (`algorithm.sample_strategy: mix`, Trinity-RFT's mix and
mix_chord): the strategy and the policy loss agree, the expert dataset is named and readable, and each step's
`buffer.train_batch_size` splits into expert rows and whole groups of rollouts."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rfthpc.algorithms.mix_settings import expert_rows, expert_split_problems

if TYPE_CHECKING:
    from rfthpc.config.schema import Config

MIX_ARGS = {"expert_data_ratio": 0.5, "sft_dataset_name": "sft_dataset"}
"""`algorithm.sample_strategy_args` of the mix strategy, with their defaults (Trinity-RFT's)."""
_AUX = "buffer.trainer_input.auxiliary_buffers"


def mix_args(cfg: Config) -> dict[str, Any]:
    """The mix strategy's arguments with the defaults filled in."""
    return {**MIX_ARGS, **cfg.algorithm.sample_strategy_args}


def expert_problems(cfg: Config, reads_expert_data: bool, check_paths: bool) -> list[str]:
    """What is wrong with one stage's expert data; `reads_expert_data`: its policy loss trains expert rows."""
    alg = cfg.algorithm
    strategy = alg.sample_strategy
    aux = cfg.buffer.trainer_input.auxiliary_buffers
    if reads_expert_data and strategy != "mix":
        return [f"algorithm.sample_strategy: {strategy!r}, but policy loss {alg.policy_loss_fn!r} trains expert rows "
                "that only the mix strategy reads; set sample_strategy: mix (its default for this loss)"]
    if strategy != "mix":
        if aux:
            return [f"{_AUX}: {sorted(aux)} are read only by algorithm.sample_strategy mix (with policy loss mix or "
                    "mix_chord, or algorithm_type mix or mix_chord); remove them or mix them in"]
        if alg.sample_strategy_args:
            return ["algorithm.sample_strategy_args: arguments of the mix strategy, which this stage does not use; "
                    "remove them or set sample_strategy: mix"]
        return []
    if not reads_expert_data:
        return [f"algorithm.sample_strategy: 'mix' adds expert rows to each step, but policy loss "
                f"{alg.policy_loss_fn!r} would train them as rollouts; use policy loss mix or mix_chord (or "
                "algorithm_type mix or mix_chord)"]
    unknown = sorted(set(alg.sample_strategy_args) - set(MIX_ARGS))
    if unknown:
        return [f"algorithm.sample_strategy_args: unknown {unknown}; the mix strategy takes {', '.join(MIX_ARGS)}"]
    args = mix_args(cfg)
    name = args["sft_dataset_name"]
    data = aux.get(name)
    if data is None:
        return [f"{_AUX}.{name}: missing; the mix strategy reads each step's expert rows from this SFT dataset "
                f"(path, split, format as an sft stage's; sample_strategy_args.sft_dataset_name names it)"]
    out = expert_split_problems(int(cfg.buffer.train_batch_size or 0), args["expert_data_ratio"],
                                int(alg.repeat_times or 1))
    if not data.path:
        out.append(f"{_AUX}.{name}.path: missing; give the expert SFT dataset's local path")
    elif check_paths and not Path(data.path).expanduser().exists():
        out.append(f"{_AUX}.{name}.path: {data.path} does not exist; give the expert SFT dataset's local path")
    return out


def rollout_groups_per_step(cfg: Config) -> int:
    """Groups of rollouts one trainer step reads: `buffer.train_batch_size` less a mix stage's expert rows, in
    groups of `algorithm.repeat_times` (at least 1; a bad split is reported by `expert_problems`)."""
    b, alg = cfg.buffer, cfg.algorithm
    rows = int(b.train_batch_size or 0)
    ratio = mix_args(cfg)["expert_data_ratio"]
    if alg.sample_strategy == "mix" and isinstance(ratio, (int, float)) and 0 <= ratio < 1:
        rows -= expert_rows(rows, ratio)
    return max(1, rows // max(1, int(alg.repeat_times or 1)))
