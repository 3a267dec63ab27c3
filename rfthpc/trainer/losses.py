"""The configured algorithm (`algorithm.*`), bound to the functions of `rfthpc.algorithms`.

The actor's loss on a micro-batch is

    L = policy_loss(log pi, log mu, A) - entropy_coef * agg(H) + kl_coef * agg(kl(log pi, log pi_ref))

with every term aggregated by `algorithm.loss_agg_mode` (the -norm modes dividing by the
constant `algorithm.loss_scale_factor`, set for the whole loss by `Algorithm.loss_scale`). Which
log-probabilities play "old" (mu) is what the policy loss declares (`Needs.old_log_prob`): PPO's
clipped loss and veRL's other losses compare with the policy at the start of the step ("proximal",
recomputed, as veRL does); the off-policy losses (pg/vanilla, tis, topr, cispo, kimi15, opmd, m2po,
rec) correct for the policy that generated the data ("behaviour", the log-probabilities the
explorer stored).

Rollout correction (`algorithm.rollout_correction`) is applied here, for every policy loss: its
importance weights multiply the loss's per-token loss (`aggregation.token_weights`), unless the
loss declares rollout_is_weights and applies them itself; rejection has removed tokens from the
micro-batch's mask before (the trainer loop). The weights compare mu with the policy the loss
compares with: the policy at the start of the step for a loss with a proximal `old_log_prob`
(computed once per step, veRL's decoupled mode), the current policy for a loss that compares
with mu directly (per micro-batch, veRL's bypass mode).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

import torch

from rfthpc import algorithms as algos
from rfthpc.algorithms import rollout_correction as rollout_fns
from rfthpc.algorithms.advantages import AdvantageFn
from rfthpc.algorithms.aggregation import token_weights
from rfthpc.algorithms.declare import Needs
from rfthpc.algorithms.mix_settings import ExpertMix
from rfthpc.algorithms.mixing import expert_loss, expert_weight
from rfthpc.algorithms.registry import SCALED_MODES, check_loss_agg_mode, loss_scale_problem
from rfthpc.algorithms.rollout_settings import RolloutCorrection
from rfthpc.config.settings import AlgorithmSettings
from rfthpc.errors import ConfigError


@dataclass
class Algorithm:
    """One stage's algorithm: bound functions and what the step must compute for them."""

    algorithm_type: str
    policy_loss_name: str
    policy_loss: Callable[..., tuple[torch.Tensor, dict[str, float]]]
    entropy_bonus: Callable[..., tuple[torch.Tensor, dict[str, float]]]
    loss_agg_mode: str
    advantage_name: str | None = None
    advantage: AdvantageFn | None = None
    kl_loss_fn: str = "none"
    kl_loss_coef: float = 0.0
    kl_penalty_fn: str = "none"
    kl_controller: Any = None
    entropy_coef: float = 0.0
    loss_scale_factor: float | None = None
    """The constant length L of the -norm modes (SCALED_MODES; None for the other modes)."""
    rollout: RolloutCorrection = field(default_factory=RolloutCorrection)
    """`algorithm.rollout_correction`."""
    policy_needs: Needs = field(default_factory=Needs)
    """What the policy loss declared it needs."""
    expert: ExpertMix | None = None
    """A mix stage's expert term (a policy loss declared expert_data); None: the batch is rollouts only."""

    @property
    def is_sft(self) -> bool:
        """Trains on a dataset (SFT, or DPO's preference pairs): no advantages, no behaviour policy."""
        return self.advantage is None

    @property
    def is_preference(self) -> bool:
        """The policy loss trains on preference pairs (DPO)."""
        return self.policy_needs.preference_pairs

    @property
    def use_reference(self) -> bool:
        """A frozen reference model is needed (a preference loss, a KL loss or a KL penalty)."""
        return self.is_preference or (not self.is_sft and algos.needs_reference(self.kl_penalty_fn, self.kl_loss_fn))

    @property
    def use_critic(self) -> bool:
        """A value model is trained (PPO's GAE)."""
        return algos.needs_critic(self.advantage_name)

    @property
    def advantage_needs(self) -> Needs:
        """What the advantage function needs (nothing for SFT)."""
        return algos.ADVANTAGE_FNS.needs(self.advantage_name) if self.advantage_name else Needs()

    @property
    def entropy_needs_grad(self) -> bool:
        """The entropy enters the loss (a bonus with a nonzero coefficient), not only the metrics."""
        return self.entropy_coef != 0.0

    @property
    def averaged(self) -> bool:
        """The loss divides by its aggregation count (every loss_agg_mode but token-sum)."""
        return algos.averages(self.loss_agg_mode)

    @property
    def recompute_old_logprob(self) -> bool:
        """The loss's "old" log-probabilities are the current policy's before the update."""
        return self.policy_needs.old_log_prob == "proximal" and not self.rollout.bypass_mode

    @property
    def compares_with_behaviour(self) -> bool:
        """The loss's `old_log_prob` is the behaviour policy's (veRL's bypass mode, or declared so)."""
        return not self.recompute_old_logprob

    @property
    def needs_start_policy(self) -> bool:
        """Every step computes the policy's log-probabilities at its start, even with one update: for
        rollout correction (weights, rejection, the rollout_corr/* metrics), for losses that read
        the behaviour policy next to the proximal one (decoupled PPO), and for a preference loss (each
        response's partner's log-ratio)."""
        return self.is_preference or (not self.is_sft and (self.rollout.active or self.policy_needs.behaviour_log_prob
                                                           or self.policy_needs.rollout_is_weights))

    def correct_rollouts(
        self, start: torch.Tensor, behaviour: torch.Tensor, mask: torch.Tensor, staleness: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, float]]:
        """A step's rollout correction over the whole batch, from the policy at the step's start:
        (IS weights for a loss comparing with that policy, else None; keep mask or None; metrics)."""
        weights, keep, metrics = rollout_fns.step_correction(start, behaviour, mask, self.rollout, staleness)
        return (None if self.compares_with_behaviour else weights), keep, metrics

    @classmethod
    def from_settings(cls, alg: AlgorithmSettings) -> Algorithm:
        """Bind a stage's algorithm; raises ConfigError on unknown names or arguments."""
        mode = alg.loss_agg_mode
        check_loss_agg_mode(mode)
        if not alg.policy_loss_fn:
            raise ConfigError("algorithm.policy_loss_fn: missing; name a policy loss or an algorithm_type preset")
        policy = algos.POLICY_LOSS_FNS.bind(alg.policy_loss_fn, {**alg.policy_loss_fn_args, "loss_agg_mode": mode})
        entropy = algos.ENTROPY_LOSS_FNS.bind(alg.entropy_loss_fn,
                                              {**alg.entropy_loss_fn_args, "loss_agg_mode": mode})
        out = cls(alg.algorithm_type, alg.policy_loss_fn, policy, entropy, mode,
                  rollout=alg.rollout_correction, policy_needs=algos.POLICY_LOSS_FNS.needs(alg.policy_loss_fn))
        problem = loss_scale_problem(mode, alg.loss_scale_factor)
        if problem:
            raise ConfigError(problem)
        if mode in SCALED_MODES:
            out.loss_scale_factor = alg.loss_scale_factor
        if alg.entropy_loss_fn != "none":
            out.entropy_coef = float(alg.entropy_loss_fn_args.get("entropy_coef", 0.0))
        if alg.advantage_fn:
            out.advantage_name = alg.advantage_fn
            out.advantage = algos.ADVANTAGE_FNS.bind(alg.advantage_fn, alg.advantage_fn_args)
        elif alg.policy_loss_fn != "sft" and not out.is_preference:
            raise ConfigError(
                f"algorithm.advantage_fn: missing for policy loss {alg.policy_loss_fn!r}; name one (e.g. grpo) "
                "or use algorithm_type sft or dpo"
            )
        if out.policy_needs.expert_data:
            out.expert = ExpertMix.of(alg.policy_loss_fn, {**algos.POLICY_LOSS_FNS.defaults(alg.policy_loss_fn),
                                                           **alg.policy_loss_fn_args})
        out.kl_loss_fn = alg.kl_loss_fn
        out.kl_penalty_fn = alg.kl_penalty_fn
        for name in (out.kl_loss_fn, out.kl_penalty_fn):
            algos.KL_FNS.get(name)
        out.kl_loss_coef = algos.kl_loss_coef(alg.kl_loss_fn_args)
        if out.kl_penalty_fn != "none":
            out.kl_controller = algos.kl_controller(alg.kl_penalty_fn_args)
        return out

    def actor_loss(
        self,
        log_prob: torch.Tensor,
        entropy: torch.Tensor,
        mask: torch.Tensor,
        old_log_prob: torch.Tensor | None,
        advantages: torch.Tensor | None,
        rewards: torch.Tensor | None,
        ref_log_prob: torch.Tensor | None,
        behaviour_log_prob: torch.Tensor | None = None,
        rollout_is_weights: torch.Tensor | None = None,
        pair_sign: torch.Tensor | None = None,
        partner_log_ratio: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, float]]:
        """The loss L above on one micro-batch (aggregated over its own tokens) and its metrics.

        `rollout_is_weights`: the step's weights against the policy at its start (a loss with a
        proximal old_log_prob); a loss comparing with the behaviour policy gets weights against the
        current policy, computed here from `behaviour_log_prob`. `pair_sign` and `partner_log_ratio`:
        a preference loss's pairs (`PolicyLossInputs`)."""
        needs = self.policy_needs
        weights = rollout_is_weights
        if self.rollout.rollout_is is not None and self.compares_with_behaviour and behaviour_log_prob is not None:
            weights = rollout_fns.importance_weights(
                rollout_fns.log_ratio(log_prob, behaviour_log_prob, mask), mask, self.rollout)
        inputs = algos.PolicyLossInputs(
            log_prob=log_prob, response_mask=mask, old_log_prob=old_log_prob, advantages=advantages, rewards=rewards,
            behaviour_log_prob=behaviour_log_prob if needs.behaviour_log_prob or needs.rollout_is_weights else None,
            rollout_is_weights=weights if needs.rollout_is_weights else None,
            ref_log_prob=ref_log_prob if needs.preference_pairs else None,
            pair_sign=pair_sign, partner_log_ratio=partner_log_ratio,
        )
        with self.loss_scale():
            # In bypass mode veRL applies the weights only in a loss that takes them (REINFORCE): PPO's
            # ratio against mu already corrects for it.
            if weights is None or needs.rollout_is_weights or self.rollout.bypass_mode:
                loss, metrics = self.policy_loss(inputs)
            else:
                with token_weights(weights) as applied:
                    loss, metrics = self.policy_loss(inputs)
                if not applied.uses:
                    raise ConfigError(
                        f"algorithm.policy_loss_fn {self.policy_loss_name!r} does not aggregate its per-token loss with "
                        "rfthpc.algorithms.aggregate_loss, so the rollout IS weights cannot multiply it; declare it "
                        "with rollout_is_weights=True and apply inputs.rollout_is_weights, or set "
                        "algorithm.rollout_correction.rollout_is: null"
                    )
            bonus, entropy_metrics = self.entropy_bonus(entropy, mask)
            loss = loss + bonus.to(loss.dtype)
            metrics.update(entropy_metrics)
            if self.kl_loss_fn != "none" and ref_log_prob is not None:
                term, kl_metrics = algos.kl_loss(log_prob, ref_log_prob, mask, kl_fn=self.kl_loss_fn,
                                                 kl_coef=self.kl_loss_coef, loss_agg_mode=self.loss_agg_mode,
                                                 old_log_prob=old_log_prob)
                loss = loss + term
                metrics.update(kl_metrics)
        return loss, metrics

    def expert_loss(self, log_prob: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """A mix stage's expert term on one micro-batch of expert rows (`rfthpc.algorithms.mixing.expert_loss`)."""
        assert self.expert is not None, "only a mix stage has expert rows"
        return expert_loss(self.expert, log_prob, mask)

    def expert_weight(self, mask: torch.Tensor) -> float:
        """The units the expert term averages over in a micro-batch (`rfthpc.algorithms.mixing.expert_weight`)."""
        assert self.expert is not None, "only a mix stage has expert rows"
        return expert_weight(self.expert, mask)

    def loss_scale(self) -> AbstractContextManager[None]:
        """Within it, the -norm modes divide by the constant L, whatever a micro-batch's
        padded width (so that how a batch is split does not change the loss)."""
        return algos.loss_scale(self.loss_scale_factor)

    def weight(self, mask: torch.Tensor) -> float:
        """How many units (tokens or non-empty sequences, per loss_agg_mode) a micro-batch aggregates over."""
        return float(algos.aggregation_count(mask, self.loss_agg_mode))
