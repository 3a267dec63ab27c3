"""What each `algorithm.*` key may name: the built-in functions, by name, and the loss modes.

The built-ins are the functions declared with `@declare` in this package's modules (see
`declare`), found from their source, so that a config is checked without importing torch (seconds
on a login node): a registry imports a function's module only when the function is used, and
checks its arguments and reads its needs from the module's source.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic

from rfthpc.algorithms.declare import Needs, builtins, declared
from rfthpc.errors import ConfigError
from rfthpc.registry import F, Registry, source_defaults, tunable_args

if TYPE_CHECKING:
    from rfthpc.algorithms.advantages import AdvantageFn
    from rfthpc.algorithms.entropy import EntropyLossFn
    from rfthpc.algorithms.kl import KLFn
    from rfthpc.algorithms.policy_loss import PolicyLossFn


class AlgorithmRegistry(Registry[F], Generic[F]):
    """The functions of one `declare` kind: built-ins found from their declarations, or user code."""

    def __init__(self, kind: str, config_key: str, declared_kind: str) -> None:
        super().__init__(kind, config_key, lambda: {n: t for n, (t, _) in builtins()[declared_kind].items()})
        self.declared_kind = declared_kind

    def needs(self, name: str) -> Needs:
        """What function `name` needs: a built-in's from its source, a user function's from its
        `@declare` (importing it); nothing beyond the usual inputs if it declares nothing."""
        found = builtins()[self.declared_kind].get(name)
        if found is not None:
            return found[1]
        decl = declared(self.get(name))
        return Needs() if decl is None else decl.needs

    def check(self, name: str, args: Mapping[str, Any] | None = None) -> None:
        """The registry's check of `name` and its argument names, then the values, by the function's
        `checked_by` (with its defaults filled in), where it declares one."""
        super().check(name, args)
        checker = self.needs(name).checked_by
        if checker is None:
            return
        target = self._builtins.get(name)
        defaults = source_defaults(target) if target is not None else {
            k: v for k, v in tunable_args(self.get(name)).items() if v is not inspect.Parameter.empty}
        module, _, function = checker.partition(":")
        getattr(importlib.import_module(module), function)(**{**defaults, **(args or {})})


ADVANTAGE_FNS: AlgorithmRegistry[AdvantageFn] = AlgorithmRegistry(
    "advantage function", "algorithm.advantage_fn", "advantage")
POLICY_LOSS_FNS: AlgorithmRegistry[PolicyLossFn] = AlgorithmRegistry(
    "policy loss", "algorithm.policy_loss_fn", "policy_loss")
KL_FNS: AlgorithmRegistry[KLFn] = AlgorithmRegistry(
    "KL estimator", "algorithm.kl_loss_fn / algorithm.kl_penalty_fn", "kl")
ENTROPY_LOSS_FNS: AlgorithmRegistry[EntropyLossFn] = AlgorithmRegistry(
    "entropy loss", "algorithm.entropy_loss_fn", "entropy_loss")

LOSS_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm",
                  "token-sum-norm")
"""`algorithm.loss_agg_mode`: how token losses become one number (see `aggregation.aggregate_loss`)."""

SCALED_MODES = ("seq-mean-token-sum-norm", "token-sum-norm")
"""The modes that divide by a constant length L (`algorithm.loss_scale_factor`)."""


def check_loss_agg_mode(mode: str) -> None:
    """Raise ConfigError unless `mode` is one of LOSS_AGG_MODES (the one check of the name: validation,
    the trainer and the loss functions call it)."""
    if mode not in LOSS_AGG_MODES:
        raise ConfigError(f"algorithm.loss_agg_mode: unknown mode {mode!r}; known: {', '.join(LOSS_AGG_MODES)}")


def loss_scale_problem(mode: str | None, factor: float | None) -> str | None:
    """What is wrong with `algorithm.loss_scale_factor` for loss_agg_mode `mode` (None: nothing):
    the SCALED_MODES divide by a positive constant length; the other modes take none."""
    key = "algorithm.loss_scale_factor"
    if mode not in SCALED_MODES:
        if factor is not None:
            return (f"{key}: {factor} is used by loss_agg_mode {' and '.join(SCALED_MODES)} only, and the mode is "
                    f"{mode!r}; remove it, or set one of those modes")
        return None
    if factor is None:
        return (f"{key}: missing; {mode} divides by a constant length: set it, or "
                "model.max_response_tokens (its default)")
    if factor <= 0 or not math.isfinite(factor):
        return f"{key}: {factor}; the constant length must be a positive number (e.g. the longest response)"
    return None
