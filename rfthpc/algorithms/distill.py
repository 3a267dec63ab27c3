"""On-policy distillation: the student (the policy) samples, a teacher model scores each sampled token,
and the advantage of a token is how much likelier the teacher finds it than the student did.

Trinity-RFT's `on_policy_distill` (after Tinker's): with the per-token reverse KL estimate
log pi_student - log pi_teacher, A_t = -kl_coef (log pi_student - log pi_teacher); trained with the
`importance_sampling` loss, minimising it minimises the reverse KL of the student to the teacher on the
student's own samples. The teacher is `model.teacher_model_path`, loaded frozen in the trainer.
"""

from __future__ import annotations

import torch

from rfthpc.algorithms.advantages import AdvantageInputs
from rfthpc.algorithms.declare import declare
from rfthpc.errors import ConfigError


@declare("advantage", "on_policy_distill", teacher=True)
@torch.no_grad()
def on_policy_distill(inputs: AdvantageInputs, *, kl_coef: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """A_t = kl_coef (log pi_teacher(y_t) - log mu(y_t)) on response tokens, mu the student's sampling
    (behaviour) log-probabilities, as Trinity-RFT's. Returns (A, A)."""
    if inputs.teacher_log_probs is None or inputs.behaviour_log_probs is None:
        raise ConfigError("algorithm.advantage_fn: 'on_policy_distill' needs the teacher's log-probabilities of "
                          "the sampled tokens and the student's; set model.teacher_model_path (the trainer scores "
                          "the batch with it)")
    gap = inputs.teacher_log_probs - inputs.behaviour_log_probs
    advantages = torch.where(inputs.response_mask.bool(), kl_coef * gap, torch.zeros_like(gap))
    return advantages, advantages
