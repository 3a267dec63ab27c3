"""On-policy distillation: the student (the policy) samples, a teacher model scores each sampled token,
and the advantage of a token is how much likelier the teacher finds it than the student did.

Trinity-RFT's `on_policy_distill` (after Tinker's): with the per-token reverse KL estimate
log pi_student - log pi_teacher, A_t = -kl_coef (log pi_student - log pi_teacher); trained with the
`importance_sampling` loss, minimising it minimises the reverse KL of the student to the teacher on the
student's own samples. Trinity-RFT's `jsd` replaces the reverse KL by a Jensen-Shannon divergence estimated
on the sampled token. The teacher's scores come from the explorer's teacher (`explorer.teacher_model`, stored
with each sample) or from `model.teacher_model_path`, loaded frozen in the trainer.
"""

from __future__ import annotations

import math

import torch

from rfthpc.algorithms.advantage_args import jsd_args
from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError


@declare("advantage", "on_policy_distill", teacher=True)
@torch.no_grad()
def on_policy_distill(inputs: AdvantageInputs, *, kl_coef: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A_t = kl_coef (log pi_teacher(y_t) - log mu(y_t)) on response tokens, mu the student's sampling
    (behaviour) log-probabilities, as Trinity-RFT's. Returns (A, A)."""
    teacher, student = _scores(inputs, "on_policy_distill")
    return _masked(inputs, kl_coef * (teacher - student))


@declare("advantage", "jsd", teacher=True, checked_by="rfthpc.algorithms.advantage_args:jsd_args")
@torch.no_grad()
def jsd(inputs: AdvantageInputs, *, lambda_coef: float = 0.5, kl_coef: float = 1.0, temperature: float = 1.0,
        chunk_size: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """A_t = -kl_coef D_t, D_t Trinity-RFT's per-token Jensen-Shannon estimate on the sampled token y_t, from
    s = log mu(y_t) / temperature (the student's sampling log-probability) and t = log pi_teacher(y_t) / temperature:

        log m = log(lambda e^t + (1 - lambda) e^s)         (the mixture, in log space)
        D_t = lambda (t - log m) + (1 - lambda) (s - log m)

    and, as Trinity computes them, D_t = s - t at lambda_coef 0 and t - s at 1 (these two end points are not the
    limits of the formula, which tends to 0 at both). `chunk_size` only bounds Trinity's memory; the values are
    the same, and these few (B, T) tensors need no chunking. Returns (A, A)."""
    jsd_args(lambda_coef=lambda_coef, kl_coef=kl_coef, temperature=temperature, chunk_size=chunk_size)
    teacher, student = _scores(inputs, "jsd")
    t, s = teacher / temperature, student / temperature
    if lambda_coef == 0:
        divergence = s - t
    elif lambda_coef == 1:
        divergence = t - s
    else:
        log_m = torch.logaddexp(t + math.log(lambda_coef), s + math.log1p(-lambda_coef))
        divergence = lambda_coef * (t - log_m) + (1 - lambda_coef) * (s - log_m)
    return _masked(inputs, -kl_coef * divergence)


def _scores(inputs: AdvantageInputs, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(the teacher's log-probabilities of the sampled tokens, the student's sampling ones)."""
    if inputs.teacher_log_probs is None or inputs.behaviour_log_probs is None:
        raise ConfigError(f"algorithm.advantage_fn: {name!r} needs the teacher's log-probabilities of the sampled "
                          "tokens and the student's; set explorer.teacher_model (an auxiliary model scores each "
                          "sample) or model.teacher_model_path (the trainer scores the batch with it)")
    return inputs.teacher_log_probs, inputs.behaviour_log_probs


def _masked(inputs: AdvantageInputs, per_token: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    advantages = torch.where(inputs.response_mask.bool(), per_token, torch.zeros_like(per_token))
    return advantages, advantages
