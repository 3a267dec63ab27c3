"""SFT+RL mixing, Trinity-RFT's `mix` and `mix_chord`: every trainer step trains on the rollouts and on expert
rows of an SFT dataset read beside them (`algorithm.sample_strategy: mix`, the dataset
`buffer.trainer_input.auxiliary_buffers.<sample_strategy_args.sft_dataset_name>`):

    L = (1 - mu) L_RL(rollouts) + mu L_SFT(expert rows)

L_RL is PPO's clipped loss on the rollouts (with the stage's entropy and KL terms, which see the rollouts only:
Trinity's `mix` entropy term), each term aggregated over the rollouts of the mini-batch as the stage's
loss_agg_mode says; L_SFT is -log pi over the expert rows' response tokens, a mean over their tokens (the
default) or over rows (`sft_loss_agg_mode`, or the older `use_token_level_loss_in_sft: false`). MIX keeps mu
fixed; CHORD (arXiv:2508.11408) schedules it (`mix_settings.chord_mu`: a linear warm-up to `mu_peak`, a cosine
decay to `mu_valley`) and, with `enable_phi_function`, weights each expert token by phi = p (1 - p) of its
probability p (detached), which downweights the tokens the policy already finds certain or impossible.

Where rfthpc differs from Trinity-RFT: each of the two means is exact over the mini-batch (the trainer runs the
rollouts' and the expert rows' micro-batches as two parts of one optimizer update, each normalised by its own
count), where Trinity weights each micro-batch's two means by its row counts over per-GPU batch sizes given in
`policy_loss_fn_args` (`ppo_mini_batch_size`, `ngpus_trainer`, `train_batch_size_usual`/`_expert`, ...: read and
not needed here); the expert rows are spread evenly over the step's mini-batches, where Trinity's sequential split
of (rollouts, then expert rows) puts them in the last ones; and mu's schedule counts the trainer's global steps
before the current one.
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.aggregation import aggregate_loss, aggregation_count
from rfthpc.algorithms.declare import declare
from rfthpc.algorithms.mix_settings import ExpertMix, mix_args, mix_chord_args
from rfthpc.algorithms.policy_loss import PolicyLossInputs, ppo


@declare("policy_loss", "mix", old_log_prob="proximal", expert_data=True,
         checked_by="rfthpc.algorithms.mix_settings:mix_args")
def mix(inputs: PolicyLossInputs, *, mu: float = 0.1, clip_range: float = 0.2, clip_range_low: float | None = None,
        clip_range_high: float | None = None, use_token_level_loss_in_sft: bool = True,
        sft_loss_agg_mode: str | None = None,
        loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """MIX (Trinity-RFT's `mix`): the rollouts' term, PPO's clipped loss (clip_range, clip_range_low /
    clip_range_high as `ppo`'s). `mu` (the expert term's fixed weight) and the expert term's aggregation
    (`sft_loss_agg_mode`, else `use_token_level_loss_in_sft`: token-mean, or seq-mean-token-mean) are the trainer's
    (`rfthpc.algorithms.mix_settings.ExpertMix`), which adds the expert rows' term."""
    mix_args(mu=mu, sft_loss_agg_mode=sft_loss_agg_mode, use_token_level_loss_in_sft=use_token_level_loss_in_sft)
    return ppo(inputs, clip_range=clip_range, clip_range_low=clip_range_low, clip_range_high=clip_range_high,
               loss_agg_mode=loss_agg_mode)


@declare("policy_loss", "mix_chord", old_log_prob="proximal", expert_data=True,
         checked_by="rfthpc.algorithms.mix_settings:mix_chord_args")
def mix_chord(inputs: PolicyLossInputs, *, mu_warmup_steps: int = 0, mu_decay_steps: int = 0, mu_peak: float = 0.1,
              mu_valley: float = 0.1, enable_phi_function: bool = True, clip_range: float = 0.2,
              clip_range_low: float | None = None, clip_range_high: float | None = None,
              use_token_level_loss_in_sft: bool = True, sft_loss_agg_mode: str | None = None,
              loss_agg_mode: str = "token-mean") -> tuple[torch.Tensor, dict[str, float]]:
    """CHORD (Trinity-RFT's `mix_chord`): the rollouts' term, PPO's clipped loss as `mix`'s. The schedule of mu
    (`mu_warmup_steps`, `mu_decay_steps`, `mu_peak`, `mu_valley`: `chord_mu`), `enable_phi_function` (phi-weighted
    expert tokens) and the expert term's aggregation (as `mix`'s) are the trainer's
    (`rfthpc.algorithms.mix_settings.ExpertMix`)."""
    mix_chord_args(mu_warmup_steps=mu_warmup_steps, mu_decay_steps=mu_decay_steps, mu_peak=mu_peak,
                   mu_valley=mu_valley, sft_loss_agg_mode=sft_loss_agg_mode,
                   use_token_level_loss_in_sft=use_token_level_loss_in_sft)
    return ppo(inputs, clip_range=clip_range, clip_range_low=clip_range_low, clip_range_high=clip_range_high,
               loss_agg_mode=loss_agg_mode)


def expert_loss(mix_: ExpertMix, log_prob: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
    """The expert rows' SFT term on one micro-batch: -log pi per response token, times phi = p (1 - p) (p the
    token's probability, detached) where `mix_.phi`; aggregated by `mix_.agg_mode` (a mean over the tokens, or
    over the rows). Metric `expert/sft_loss` (with phi, `expert/sft_phi_loss`)."""
    per_token = -log_prob
    if mix_.phi:
        p = log_prob.detach().exp()
        per_token = per_token * p * (1 - p)
    loss = aggregate_loss(per_token, mask, mix_.agg_mode)
    return loss, {f"expert/{'sft_phi_loss' if mix_.phi else 'sft_loss'}": loss.detach().item()}


def expert_weight(mix_: ExpertMix, mask: torch.Tensor) -> float:
    """The units `expert_loss` averages over in a micro-batch: its expert tokens, or its non-empty expert rows."""
    return float(aggregation_count(mask, mix_.agg_mode))
