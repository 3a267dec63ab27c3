"""A step's batch as padded (B, R) tensors, with rewards shaped and advantages computed.

Every rank holds the whole batch and computes the advantages itself (they are cheap and
group-relative estimators need all responses of a task), so no advantage is ever communicated.

Token scores s_t: the workflow's token-level rewards when it gave them, else the sequence reward
on the last response token. With a KL penalty, r_t = s_t - beta * kl(log mu_t, log pi_ref_t),
taken with the behaviour log-probabilities mu (the policy that sampled the tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from rfthpc import algorithms as algos
from rfthpc.algorithms import rollout_correction as rollout_fns
from rfthpc.trainer.batching import pad_rows
from rfthpc.trainer.losses import Algorithm
from rfthpc.trainer.samples import Sample, advantage_groups, episode_ids, state_ids, step_rewards


@dataclass
class StepTensors:
    """Per-token tensors of the whole batch, (B, R) with R the longest response (CPU)."""

    mask: torch.Tensor
    """(B, R) loss mask: the response tokens trained (without the responses the advantage leaves out)."""
    rewards: torch.Tensor
    """(B,) sequence rewards."""
    behaviour: torch.Tensor | None = None
    old: torch.Tensor | None = None
    """Recomputed log-probabilities of the policy before the update (PPO's ratio)."""
    ref: torch.Tensor | None = None
    values: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    returns: torch.Tensor | None = None
    rollout_is_weights: torch.Tensor | None = None
    """Rollout-correction importance weights against the policy at the step's start (Algorithm.correct_rollouts)."""
    pair_sign: torch.Tensor | None = None
    """(B,) DPO: +1 chosen, -1 rejected (`Sample.preference`)."""
    partner_log_ratio: torch.Tensor | None = None
    """(B,) DPO: the log-ratio to the reference of each response's pair partner, at the step's start."""

    def rows(self, name: str, indices: list[int], width: int, device: torch.device) -> torch.Tensor | None:
        """Rows `indices` of tensor `name`, first `width` tokens, on `device` (None if absent)."""
        full = getattr(self, name)
        if full is None:
            return None
        picked = full[indices]
        if picked.dim() == 2:
            if picked.shape[1] < width:
                picked = torch.nn.functional.pad(picked, (0, width - picked.shape[1]))
            picked = picked[:, :width]
        return picked.to(device)


def preference_pairs(samples: list[Sample], start: torch.Tensor, ref: torch.Tensor,
                     mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(pair_sign, partner_log_ratio), (B,) each, of a batch of DPO pairs: each sample's
    `preference`, and the log-ratio sum_t m_t (log pi_start - log pi_ref) of the other sample of its
    pair (its `group`). Raises ValueError unless every group is one chosen and one rejected sample."""
    ratios = ((start - ref) * mask).sum(dim=-1)
    members: dict[int, list[int]] = {}
    for i, s in enumerate(samples):
        members.setdefault(s.group, []).append(i)
    partner = torch.zeros(len(samples), dtype=torch.long)
    for group, rows in members.items():
        if sorted(samples[i].preference for i in rows) != [-1, 1]:
            raise ValueError(f"preference pair {group}: needs one chosen and one rejected sample, got preferences "
                             f"{[samples[i].preference for i in rows]}")
        partner[rows[0]], partner[rows[1]] = rows[1], rows[0]
    sign = torch.tensor([float(s.preference) for s in samples])
    return sign, ratios[partner]


def _tensor(rows: list[np.ndarray | None], width: int) -> torch.Tensor:
    return torch.from_numpy(pad_rows(rows, width))


def _stats(prefix: str, values: torch.Tensor, mask: torch.Tensor | None = None) -> dict[str, float]:
    if mask is not None:
        values = values[mask.bool()]
    if values.numel() == 0:
        return {f"{prefix}/mean": 0.0, f"{prefix}/max": 0.0, f"{prefix}/min": 0.0}
    v = values.double()
    return {f"{prefix}/mean": v.mean().item(), f"{prefix}/max": v.max().item(), f"{prefix}/min": v.min().item()}


def build_step_tensors(
    samples: list[Sample],
    algorithm: Algorithm,
    ref: list[np.ndarray] | None = None,
    old: list[np.ndarray] | None = None,
    values: list[np.ndarray] | None = None,
    max_prompt_tokens: int | None = None,
    max_response_tokens: int | None = None,
    forward_stats: dict[str, list[np.ndarray]] | None = None,
    teacher: list[np.ndarray] | None = None,
) -> tuple[StepTensors, dict[str, float]]:
    """Pad the batch, shape the rewards (KL penalty) and compute advantages; return the tensors and
    veRL's batch metrics (critic/score, critic/rewards, critic/advantages, response_length, ...).
    The length limits (the model's) give veRL's `*_length/clip_ratio`: the share of samples at the limit.
    `forward_stats` (with `old`, from one forward pass: forward output name -> one array per sample) is
    for an advantage that declares those outputs; `teacher`, the teacher's log-probabilities of each
    sample's tokens, for one that declares teacher=True (metric distill/reverse_kl: the token mean of
    log mu - log pi_teacher)."""
    width = max(1, max(len(s.response_ids) for s in samples))
    mask = torch.from_numpy(pad_rows([s.loss_mask for s in samples], width, dtype=bool, fill=False))
    rewards = torch.tensor([s.reward for s in samples], dtype=torch.float32)
    t = StepTensors(mask=mask, rewards=rewards)
    lengths = torch.tensor([len(s.response_ids) for s in samples], dtype=torch.float32)
    prompt_lengths = torch.tensor([len(s.prompt_ids) for s in samples], dtype=torch.float32)
    metrics = {**_stats("response_length", lengths), **_stats("prompt_length", prompt_lengths)}
    for name, counts, limit in (("response_length", lengths, max_response_tokens),
                                ("prompt_length", prompt_lengths, max_prompt_tokens)):
        if limit is not None:
            metrics[f"{name}/clip_ratio"] = (counts >= limit).float().mean().item()
    if algorithm.is_preference:
        t.ref, t.old = _tensor(ref, width), _tensor(old, width)
        t.pair_sign, t.partner_log_ratio = preference_pairs(samples, t.old, t.ref, mask)
    if algorithm.is_sft:
        return t, metrics
    t.behaviour = _tensor([s.behaviour_logprobs for s in samples], width)
    t.ref = None if ref is None else _tensor(ref, width)
    t.old = None if old is None else _tensor(old, width)
    t.values = None if values is None else _tensor(values, width)
    scores = None
    if any(s.token_rewards is not None for s in samples):
        # Rows without token rewards (another workflow's) keep their outcome reward on the last token.
        given = torch.tensor([s.token_rewards is not None for s in samples]).unsqueeze(-1)
        scores = torch.where(given, _tensor([s.token_rewards for s in samples], width),
                             algos.outcome_token_rewards(rewards, mask))
    token_rewards = scores
    if algorithm.kl_penalty_fn != "none" and t.ref is not None:
        base = scores if scores is not None else algos.outcome_token_rewards(rewards, mask)
        token_rewards, kl_metrics = algos.apply_kl_penalty(
            base, t.behaviour, t.ref, mask, kl_fn=algorithm.kl_penalty_fn, controller=algorithm.kl_controller
        )
        metrics.update(kl_metrics)
    inputs = algos.AdvantageInputs(
        rewards=rewards,
        response_mask=mask,
        token_level_rewards=token_rewards,
        group_ids=torch.tensor(advantage_groups(samples), dtype=torch.long),
        episode_ids=torch.tensor(episode_ids(samples), dtype=torch.long),
        steps=torch.tensor([s.step for s in samples], dtype=torch.long),
        step_rewards=torch.tensor(step_rewards(samples), dtype=torch.float32),
        state_ids=torch.tensor(state_ids(samples), dtype=torch.long),
        values=t.values,
        old_log_probs=t.old,
        behaviour_log_probs=t.behaviour,
        sum_pi_squared=_forward_stat(forward_stats, "sum_pi_squared", width),
        entropy=_forward_stat(forward_stats, "entropy", width),
        reward_components=_reward_components(samples) if algorithm.advantage_needs.reward_components else None,
        # NaN marks a group without a greedy baseline; None when no group has one (remax names both).
        baseline_rewards=_baselines(samples),
        # As response_length/clip_ratio counts them: a response at the limit was cut there.
        truncated=lengths >= max_response_tokens if max_response_tokens is not None else None,
        rollout_is_weights=_advantage_is_weights(algorithm, t.old, t.behaviour, mask),
        teacher_log_probs=None if teacher is None else _tensor(teacher, width),
    )
    if inputs.teacher_log_probs is not None:
        metrics["distill/reverse_kl"] = algos.masked_mean(t.behaviour - inputs.teacher_log_probs, mask).item()
    t.advantages, t.returns, *trained = algorithm.advantage(inputs)
    if algorithm.advantage_needs.drops_responses:
        # The responses the advantage leaves out (grpo's std_threshold) leave the loss mask.
        t.mask = mask = mask & trained[0].unsqueeze(-1)
        metrics["critic/dropped_responses"] = float((~trained[0]).sum())
    elif algorithm.advantage_needs.drops_tokens:
        # The tokens it leaves out (clipb's) leave the loss mask.
        kept = mask & trained[0]
        metrics["critic/dropped_token_fraction"] = 1.0 - kept.sum().item() / max(mask.sum().item(), 1)
        t.mask = mask = kept
    seq_rewards = token_rewards.sum(-1) if token_rewards is not None else rewards
    metrics.update(_stats("critic/score", scores.sum(-1) if scores is not None else rewards))
    metrics.update(_stats("critic/rewards", seq_rewards))
    metrics.update(_stats("critic/advantages", t.advantages, mask))
    metrics.update(_stats("critic/returns", t.returns, mask))
    if t.values is not None:
        metrics.update(_stats("critic/values", t.values, mask))
        metrics["critic/vf_explained_var"] = _explained_variance(t.returns, t.values, mask)
    return t, metrics


def _advantage_is_weights(algorithm: Algorithm, start: torch.Tensor | None, behaviour: torch.Tensor | None,
                          mask: torch.Tensor) -> torch.Tensor | None:
    """The rollout IS weights an advantage declared with rollout_is_weights=True reads: the policy at the
    step's start against the behaviour policy, as the rollout correction computes them (None: it is off)."""
    if (not algorithm.advantage_needs.rollout_is_weights or algorithm.rollout.rollout_is is None
            or start is None or behaviour is None):
        return None
    return rollout_fns.importance_weights(rollout_fns.log_ratio(start, behaviour, mask), mask, algorithm.rollout)


def _forward_stat(stats: dict[str, list[np.ndarray]] | None, name: str, width: int) -> torch.Tensor | None:
    """(B, width) forward output `name` of the policy before the update, if the step computed it."""
    return None if stats is None or name not in stats else _tensor(stats[name], width)


def _reward_components(samples: list[Sample]) -> dict[str, torch.Tensor]:
    """Name -> (B,) value of each reward component any sample has; 0 for a sample without it (its
    reward, their sum, got nothing from it)."""
    names = sorted({name for s in samples for name in (s.reward_components or {})})
    return {name: torch.tensor([(s.reward_components or {}).get(name, 0.0) for s in samples], dtype=torch.float32)
            for name in names}


def _baselines(samples: list[Sample]) -> torch.Tensor | None:
    """(B,) greedy baseline rewards of the samples' groups (NaN where none); None if no group has one."""
    baselines = torch.tensor([s.baseline_reward for s in samples], dtype=torch.float32)
    return None if torch.isnan(baselines).all() else baselines


def _explained_variance(returns: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> float:
    """veRL's critic/vf_explained_var: 1 - Var(returns - values) / Var(returns) over response tokens."""
    r, v = returns[mask].double(), values[mask].double()
    if r.numel() < 2:
        return 0.0
    return (1.0 - (r - v).var() / (r.var() + 1e-5)).item()
