"""Write tests/unit/verl_policy_loss_cases.py: veRL 0.9.1's policy losses on small literal batches.

Run with a Python that has veRL 0.9.1 installed (rfthpc never imports veRL):

    python tools/verl_policy_loss_reference.py > tests/unit/verl_policy_loss_cases.py

For each loss, batch and loss_agg_mode it records veRL's loss, gradient with respect to log_prob
and the metrics pg_clipfrac, pg_clipfrac_lower and ppo_kl that veRL reports; the test
(tests/unit/test_policy_loss_verl.py) runs rfthpc's loss of the same name on the same inputs.
"""

from __future__ import annotations

import pprint

import torch
import verl
from verl.trainer.ppo import core_algos
from verl.workers.config.actor import ActorConfig, PolicyLossConfig

# Four responses of up to 4 tokens: row 0 A > 0 with ratios on both sides of every clip range,
# row 1 A < 0 with a hole in its mask (an observation token between turns) and a ratio beyond the
# dual clip bound, row 2 a one-token response, row 3 fully padded. Masked positions hold finite
# junk (veRL multiplies by the mask, so inf/NaN there would poison its own numbers).
BATCHES = {
    "main": {
        "log_prob": [[-0.1, -1.0, -0.7, -2.5], [-0.2, -3.0, -2.2, -0.9], [-0.4, -5.0, -5.0, -5.0],
                  [-1.0, -1.0, -1.0, -1.0]],
        "old_log_prob": [[-1.0, -0.3, -0.75, -1.0], [-1.8, -0.5, -0.9, -0.95], [-0.3, -0.1, -0.1, -0.1],
                      [-0.5, -0.5, -0.5, -0.5]],
        "advantages": [[1.0, 1.0, 1.0, 1.0], [-0.7, -0.7, -0.7, -0.7], [0.5, 0.5, 0.5, 0.5],
                    [0.3, 0.3, 0.3, 0.3]],
        "response_mask": [[1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]],
    },
    # Response-level ratios on the side where GSPO's clip acts: row 0 A > 0 with s = e^0.3, row 1 A < 0
    # with s = e^-0.3 (a hole in its mask), row 2 one token inside the clip range, row 3 padded.
    "seq": {
        "log_prob": [[-0.2, -0.5, -1.0, -0.3], [-1.5, -0.4, -0.6, -2.0], [-0.5, -1.0, -1.0, -1.0],
                  [-0.7, -0.7, -0.7, -0.7]],
        "old_log_prob": [[-0.7, -0.6, -1.2, -0.7], [-1.0, -3.0, -0.6, -1.6], [-0.6, -0.2, -0.2, -0.2],
                      [-0.1, -0.1, -0.1, -0.1]],
        "advantages": [[0.8, 0.8, 0.8, 0.8], [-1.2, -1.2, -1.2, -1.2], [1.5, 1.5, 1.5, 1.5], [0.0, 0.0, 0.0, 0.0]],
        "response_mask": [[1, 1, 1, 1], [1, 0, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]],
    },
    # log-ratios of +-25, beyond the +-20 clamp (for the losses where veRL clamps like rfthpc).
    "far": {
        "log_prob": [[-0.01, -26.0], [-0.02, -30.0]],
        "old_log_prob": [[-25.01, -1.0], [-25.02, -5.0]],
        "advantages": [[1.0, 1.0], [-1.0, -1.0]],
        "response_mask": [[1, 1], [1, 1]],
    },
}

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum")

# loss name in veRL -> (rfthpc name, veRL actor config, rfthpc arguments, modes, batches)
CLIP = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
RF_CLIP = {"clip_range_low": 0.2, "clip_range_high": 0.28}
LOSSES = {
    "vanilla": ("ppo", dict(CLIP, clip_ratio_c=3.0), dict(RF_CLIP, clip_ratio_c=3.0), MODES, ("main", "far")),
    "cispo": ("cispo", CLIP, RF_CLIP, MODES, ("main", "far")),
    "gpg": ("gpg", {}, {}, MODES, ("main",)),
    "gspo": ("gspo", CLIP, RF_CLIP, MODES, ("main", "seq", "far")),
    # veRL's sapo always aggregates with seq-mean-token-mean
    "sapo": ("sapo", {"tau_pos": 1.0, "tau_neg": 1.05}, {"tau_pos": 1.0, "tau_neg": 1.05},
             ("seq-mean-token-mean",), ("main", "far")),
    # veRL's geo_mean ignores loss_agg_mode (mean over rows); rfthpc matches it with seq-mean-token-mean
    "geo_mean": ("geo_mean", {"clip_ratio": 0.4, "clip_ratio_low": 0.3, "clip_ratio_high": 0.4},
                 {"clip_range_low": 0.3, "clip_range_high": 0.4}, ("seq-mean-token-mean",), ("main", "seq")),
    "clip_cov": ("clip_cov", dict(CLIP, policy_loss={"clip_cov_ratio": 0.25, "clip_cov_lb": 0.05, "clip_cov_ub": 5.0}),
                 dict(RF_CLIP, clip_cov_ratio=0.25, clip_cov_lb=0.05, clip_cov_ub=5.0), MODES, ("main",)),
    "kl_cov": ("kl_cov", {"policy_loss": {"kl_cov_ratio": 0.25, "ppo_kl_coef": 0.1}},
               {"kl_cov_ratio": 0.25, "ppo_kl_coef": 0.1}, MODES, ("main",)),
    "dppo_tv": ("dppo_tv", {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.25, "clip_ratio_c": 3.0},
                {"clip_range_low": 0.2, "clip_range_high": 0.25, "clip_ratio_c": 3.0}, MODES, ("main", "far")),
    "dppo_kl": ("dppo_kl", {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.25, "clip_ratio_c": 3.0},
                {"clip_range_low": 0.2, "clip_range_high": 0.25, "clip_ratio_c": 3.0}, MODES, ("main", "far")),
    "dro": ("dro", {"policy_loss": {"dro_beta": 0.5}}, {"beta": 0.5}, MODES, ("main",)),
}


def actor_config(loss_mode: str, settings: dict) -> ActorConfig:
    settings = dict(settings)
    policy_loss = PolicyLossConfig(loss_mode=loss_mode, **settings.pop("policy_loss", {}))
    return ActorConfig(strategy="fsdp", ppo_micro_batch_size_per_gpu=1, ppo_mini_batch_size=1, rollout_n=1,
                       use_dynamic_bsz=False, policy_loss=policy_loss, **settings)


def run(loss_mode: str, settings: dict, batch: dict, mode: str) -> dict:
    t = {k: torch.tensor(v, dtype=torch.float64) for k, v in batch.items()}
    log_prob = t["log_prob"].clone().requires_grad_(True)
    fn = core_algos.get_policy_loss_fn(loss_mode)
    loss, metrics = fn(old_log_prob=t["old_log_prob"], log_prob=log_prob, advantages=t["advantages"],
                       response_mask=t["response_mask"], loss_agg_mode=mode, config=actor_config(loss_mode, settings))
    loss.backward()
    keep = ("actor/pg_clipfrac", "actor/pg_clipfrac_lower", "actor/ppo_kl")
    return {"loss": loss.item(), "grad": log_prob.grad.tolist(),
                "metrics": {k: float(v) for k, v in metrics.items() if k in keep}}


def main() -> None:
    torch.manual_seed(0)
    cases = []
    for verl_name, (name, settings, args, modes, batches) in LOSSES.items():
        for batch in batches:
            for mode in modes:
                expected = run(verl_name, settings, BATCHES[batch], mode)
                cases.append({"verl": verl_name, "verl_config": settings, "name": name, "args": args, "batch": batch,
                              "mode": mode, "expected": expected})
    print(f'"""Generated by tools/verl_policy_loss_reference.py with veRL {verl.__version__} '
          '(verl.trainer.ppo.core_algos policy losses, float64):\n'
          "each case's `expected` is veRL's loss, gradient with respect to log_prob and metrics for the "
          'named veRL loss_mode, ActorConfig settings as in that script, on BATCHES[batch]."""\n')
    print("# fmt: off")
    print("BATCHES = " + pprint.pformat(BATCHES, width=118, sort_dicts=False))
    print()
    print("CASES = " + pprint.pformat(cases, width=118, sort_dicts=False))


if __name__ == "__main__":
    main()
