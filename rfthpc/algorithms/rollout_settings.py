"""`algorithm.rollout_correction`, parsed and checked without torch (a config is validated on a login node).

The keys and their spellings are veRL 0.9.1's `algorithm.rollout_correction` (RolloutCorrectionConfig):

- `rollout_is`: null (no importance weights), "token" or "sequence";
- `rollout_is_threshold`: a number u (TIS: weights truncated at u) or a string "lo_hi" (IcePop /
  masked IS: weights outside [lo, hi] set to 0);
- `rollout_is_batch_normalize`: divide the weights by their batch mean;
- `rollout_rs`: null or a comma-separated list of rejection rules `token_k1`, `token_k2`,
  `token_k3`, `seq_sum_k{1,2,3}`, `seq_mean_k{1,2,3}`, `seq_max_k{2,3}` (every rule must pass);
- `rollout_rs_threshold`: one threshold for all rules or one per rule, comma-separated. A k1 rule
  takes "lo_hi" (a single number u means "1/u_u"); k2/k3 rules take an upper bound;
- `bypass_mode`, `loss_type`: veRL's bypass mode (the loss compares directly with the behaviour
  policy, nothing is recomputed); `loss_type` "ppo_clip" trains `ppo`, "reinforce" trains
  `bypass_mode` (REINFORCE with the rollout IS weights).

`seq_mean_k1` is the geometric-mean rejection ("Geo-RS"): the mean of log(mu/pi) over a response
is -log of the geometric mean of its ratios pi/mu.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rfthpc.errors import ConfigError

KEY = "algorithm.rollout_correction"
IS_LEVELS = ("token", "sequence")
LOSS_TYPES = ("ppo_clip", "reinforce")
BYPASS_LOSSES = {"ppo_clip": "ppo", "reinforce": "bypass_mode"}
"""bypass_mode's `loss_type` -> the rfthpc policy loss it trains (veRL's PPO-clip is rfthpc's `ppo`)."""
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3",
              "seq_mean_k1", "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3")


@dataclass(frozen=True)
class RejectionRule:
    """One `rollout_rs` rule: a divergence statistic per token, reduced per response, kept within bounds.

    Statistics of the log-ratio l = log pi - log mu: k1 = -l, k2 = l^2 / 2, k3 = e^l - 1 - l.
    `reduce`: "token" (each token on its own) or "sum" / "mean" / "max" over a response's tokens.
    k1 keeps log(lower) <= stat <= log(upper); k2 and k3 keep stat <= upper.
    """

    option: str
    stat: str
    reduce: str
    upper: float
    lower: float | None = None


@dataclass(frozen=True)
class RolloutCorrection:
    """The parsed `algorithm.rollout_correction` (defaults: everything off)."""

    rollout_is: str | None = None
    is_upper: float = 2.0
    is_lower: float | None = None
    """Set: IcePop (weights outside [is_lower, is_upper] become 0); None: TIS (truncate at is_upper)."""
    batch_normalize: bool = False
    rejection: tuple[RejectionRule, ...] = ()
    bypass_mode: bool = False
    loss_type: str = "ppo_clip"

    @property
    def active(self) -> bool:
        """Importance weights or rejection are asked for (the trainer then computes the policy at the
        start of each step, and the rollout_corr/* metrics)."""
        return self.rollout_is is not None or bool(self.rejection)

    @classmethod
    def of(cls, cfg: Any) -> RolloutCorrection:
        """Parse a RolloutCorrectionConfig (or anything with its attributes); ConfigError naming the key."""
        level = cfg.rollout_is
        if level is not None and level not in IS_LEVELS:
            raise ConfigError(f"{KEY}.rollout_is: {level!r}; use null, 'token' or 'sequence'")
        if cfg.loss_type not in LOSS_TYPES:
            raise ConfigError(f"{KEY}.loss_type: {cfg.loss_type!r}; use 'ppo_clip' or 'reinforce'")
        upper, lower = _is_threshold(cfg.rollout_is_threshold)
        rules: tuple[RejectionRule, ...] = ()
        if cfg.rollout_rs is not None and str(cfg.rollout_rs).strip():
            rules = _rejection_rules(str(cfg.rollout_rs), cfg.rollout_rs_threshold)
        return cls(level, upper, lower, bool(cfg.rollout_is_batch_normalize), rules, bool(cfg.bypass_mode),
                   cfg.loss_type)


def _number(text: str, key: str, spec: Any) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ConfigError(f"{KEY}.{key}: {spec!r} is not a number or a 'lower_upper' pair such as '0.5_2.0'") \
            from None
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{KEY}.{key}: {spec!r}: bounds must be positive finite numbers")
    return value


def _pair(spec: str, key: str) -> tuple[float, float]:
    lo_text, hi_text = spec.split("_", 1)
    lo, hi = _number(lo_text, key, spec), _number(hi_text, key, spec)
    if lo > hi:
        raise ConfigError(f"{KEY}.{key}: {spec!r}: the lower bound {lo} exceeds the upper bound {hi}; "
                          f"write it as '{hi_text}_{lo_text}'")
    return lo, hi


def _is_threshold(spec: Any) -> tuple[float, float | None]:
    """(upper, lower or None) from `rollout_is_threshold`: a number (TIS) or "lo_hi" (IcePop)."""
    if isinstance(spec, bool) or spec is None:
        raise ConfigError(f"{KEY}.rollout_is_threshold: {spec!r}; give a number (e.g. 2.0) or 'lower_upper'")
    text = str(spec).strip()
    if "_" in text:
        lo, hi = _pair(text, "rollout_is_threshold")
        return hi, lo
    return _number(text, "rollout_is_threshold", spec), None


def _rejection_rules(options_text: str, spec: Any) -> tuple[RejectionRule, ...]:
    options: list[str] = []
    for opt in (o.strip() for o in options_text.split(",")):
        if not opt:
            continue
        if opt not in RS_OPTIONS:
            raise ConfigError(f"{KEY}.rollout_rs: unknown rule {opt!r}; known: {', '.join(RS_OPTIONS)} "
                              "(comma-separated; seq_mean_k1 is the geometric-mean rejection)")
        if opt not in options:
            options.append(opt)
    if spec is None or isinstance(spec, bool) or not str(spec).strip():
        raise ConfigError(f"{KEY}.rollout_rs_threshold: missing for rollout_rs {options_text!r}; give one "
                          "threshold per rule, e.g. '0.999_1.001' for seq_mean_k1 or 0.01 for seq_mean_k3")
    specs = [s.strip() for s in str(spec).split(",") if s.strip()]
    if len(specs) == 1:
        specs *= len(options)
    if len(specs) != len(options):
        raise ConfigError(f"{KEY}.rollout_rs_threshold: {len(specs)} thresholds for {len(options)} rules; give "
                          "one for all rules or one per rule, comma-separated, in the order of rollout_rs")
    rules = []
    for opt, text in zip(options, specs):
        reduce, stat = ("token", opt[6:]) if opt.startswith("token_") else tuple(opt[4:].split("_"))
        if stat == "k1":
            lo, hi = _pair(text, "rollout_rs_threshold") if "_" in text else (
                1.0 / _number(text, "rollout_rs_threshold", spec), _number(text, "rollout_rs_threshold", spec))
            if lo > hi:
                raise ConfigError(f"{KEY}.rollout_rs_threshold: {text!r} for {opt}: a single bound u means "
                                  "[1/u, u], so u must be >= 1")
            rules.append(RejectionRule(opt, stat, reduce, hi, lo))
        else:
            if "_" in text:
                raise ConfigError(f"{KEY}.rollout_rs_threshold: {text!r} for {opt}: a {stat} rule takes one upper "
                                  "bound (a divergence), not a 'lower_upper' pair")
            rules.append(RejectionRule(opt, stat, reduce, _number(text, "rollout_rs_threshold", spec)))
    return tuple(rules)
