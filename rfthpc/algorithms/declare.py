"""What each algorithm function needs from the rest of rfthpc, declared beside the function.

A built-in advantage estimator, policy loss, KL estimator or entropy term is registered by a
decorator on its definition:

    @declare("policy_loss", "gspo", old_log_prob="proximal")
    def gspo(inputs, *, clip_range_low=3e-4, ...): ...

`declare(kind, *names, **needs)` names the function (the names a config may use, aliases too) and
says what the trainer and the explorers must provide for it (`Needs`). The registries find the
built-ins by reading the decorators from the source of every module of this package, without
importing them (they import torch), so adding an algorithm is one module (or one function in a
module) and its test: nothing else lists it.

A user's own function (`module:function` in the config) may carry the same decorator without
names: `@declare("advantage", groups=True)`; without one it needs nothing beyond the inputs every
function gets.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Literal, TypeVar

from rfthpc.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])

KINDS = ("advantage", "policy_loss", "kl", "entropy_loss")
"""What a declared function is: the config key `algorithm.<kind>_fn` names it (both KL keys for kl)."""

FORWARD_OUTPUTS = ("entropy", "sum_pi_squared")
"""Extra per-token outputs of the trainer's forward pass a function may ask for."""


@dataclass(frozen=True)
class Needs:
    """What a function needs beyond the inputs every function of its kind gets."""

    critic: bool = False
    """Advantage: reads values V(s_t) of a trained critic (PPO's GAE)."""
    groups: bool = False
    """Advantage: compares the responses to one task, so a task needs repeat_times > 1."""
    old_log_prob: Literal["proximal", "behaviour"] = "behaviour"
    """Policy loss: what its `old_log_prob` is. "proximal": the policy at the start of the trainer
    step (recomputed when a step makes several updates; PPO's ratio). "behaviour": the policy that
    generated the tokens (the log-probabilities the explorer stored; off-policy corrections)."""
    behaviour_log_prob: bool = False
    """Policy loss: also reads the behaviour log-probabilities next to a proximal `old_log_prob`
    (decoupled PPO, rollout importance weights)."""
    rollout_is_weights: bool = False
    """Policy loss or advantage: reads the rollout-correction importance weights
    (`algorithm.rollout_correction`; an advantage gets those of the policy at the step's start)."""
    forward_outputs: tuple[str, ...] = ()
    """Extra outputs of the trainer's forward pass (see FORWARD_OUTPUTS)."""
    greedy_baseline: bool = False
    """Advantage: the explorer also generates one greedy response per task and stores its reward."""
    reward_components: bool = False
    """Advantage: reads the reward's components (several named rewards per response)."""
    drops_responses: bool = False
    """Advantage: returns a third tensor, (B,) bool, False for the responses the step leaves out: their
    tokens leave the loss mask, so no term of the loss (policy, KL, entropy) and no denominator counts
    them, as if they were not in the batch (grpo's std_threshold)."""
    preference_pairs: bool = False
    """Policy loss: trains on preference pairs (DPO): the stage reads (prompt, chosen, rejected) rows from
    its dataset, and the loss gets the frozen reference model's log-probabilities and, per response, its
    pair's other response's log-ratio to the reference under the policy at the start of the step."""
    drops_tokens: bool = False
    """Advantage: returns a third tensor, (B, T) bool, False for the tokens the step leaves out, which
    leave the loss mask as drops_responses' responses do (clipb)."""
    teacher: bool = False
    """Advantage: reads the teacher model's log-probabilities of the sampled tokens (on-policy distillation;
    `model.teacher_model_path`, scored by the trainer)."""
    ratio_weighted: bool = False
    """KL: its loss weights each token by the policy's ratio to the old policy of the policy loss (Trinity-RFT's
    corrected_k3): `kl_loss` passes those log-probabilities as `old_log_prob=`; as a reward penalty, and
    wherever there are none, the estimator is computed without them."""
    expert_data: bool = False
    """Policy loss: the step also trains on expert rows of an SFT dataset read beside the experience
    (`algorithm.sample_strategy: mix`, Trinity-RFT's mix and mix_chord): the function is the loss of the
    rollouts, and the trainer adds the expert rows' SFT loss weighted by mu (`rfthpc.algorithms.mixing`)."""
    checked_by: str | None = None
    """Any kind: "module:function" of a plain-Python function (no torch) that raises ConfigError for a bad
    value of the function's keyword arguments. The function calls it with its arguments, and validation
    with those the config gives (its defaults filled in), so a bad value is reported before a run starts."""

    def __post_init__(self) -> None:
        if self.old_log_prob not in ("proximal", "behaviour"):
            raise ConfigError(f"old_log_prob={self.old_log_prob!r}: use 'proximal' or 'behaviour'")
        unknown = sorted(set(self.forward_outputs) - set(FORWARD_OUTPUTS))
        if unknown:
            raise ConfigError(f"forward_outputs {unknown}: known outputs are {', '.join(FORWARD_OUTPUTS)}")

    @property
    def narrows_mask(self) -> bool:
        """Advantage: its third tensor takes responses or tokens out of the step's loss mask."""
        return self.drops_responses or self.drops_tokens

    @classmethod
    def of(cls, declared: dict[str, Any], where: str) -> Needs:
        """Needs from a declaration's keyword arguments; ConfigError naming `where` for an unknown one."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(declared) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown need(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values = dict(declared)
        if "forward_outputs" in values:
            values["forward_outputs"] = tuple(values["forward_outputs"])
        return cls(**values)


@dataclass(frozen=True)
class Declared:
    """A function's declaration: its kind, built-in names and needs."""

    kind: str
    names: tuple[str, ...]
    needs: Needs


def declare(kind: str, *names: str, **needs: Any) -> Callable[[F], F]:
    """Declare an algorithm function: its kind (one of KINDS), its built-in names (none for a user's
    own function) and its needs (the fields of `Needs`)."""
    if kind not in KINDS:
        raise ConfigError(f"declare: unknown kind {kind!r}; known: {', '.join(KINDS)}")
    declared = Declared(kind, names, Needs.of(needs, f"declare({kind!r})"))

    def mark(fn: F) -> F:
        fn.rfthpc_declared = declared  # type: ignore[attr-defined]
        return fn

    return mark


def declared(fn: Callable[..., Any]) -> Declared | None:
    """The declaration a function carries (None if it has none)."""
    found = getattr(fn, "rfthpc_declared", None)
    if found is None and isinstance(fn, functools.partial):
        found = getattr(fn.func, "rfthpc_declared", None)
    return found if isinstance(found, Declared) else None


def _declaration(node: ast.FunctionDef, module: str) -> Declared | None:
    """The `@declare(...)` on a function definition, read from its literal arguments."""
    for deco in node.decorator_list:
        if not (isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id == "declare"):
            continue
        where = f"{module}:{node.name}"
        try:
            kind, *names = (ast.literal_eval(a) for a in deco.args)
            needs = {k.arg: ast.literal_eval(k.value) for k in deco.keywords if k.arg is not None}
        except ValueError:
            raise ConfigError(f"{where}: @declare takes literal arguments only") from None
        return Declared(kind, tuple(names), Needs.of(needs, where))
    return None


@functools.cache
def builtins() -> dict[str, dict[str, tuple[str, Needs]]]:
    """kind -> built-in name -> ("module:function", needs), from the declarations in this package's
    modules (their source is read, not run). Two functions claiming one name is an error."""
    found: dict[str, dict[str, tuple[str, Needs]]] = {k: {} for k in KINDS}
    package = Path(__file__).parent
    for path in sorted(package.glob("*.py")):
        module = f"{__package__}.{path.stem}"
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.FunctionDef):
                continue
            decl = _declaration(node, module)
            if decl is None:
                continue
            target = f"{module}:{node.name}"
            for name in decl.names:
                other = found[decl.kind].get(name)
                if other is not None:
                    raise ConfigError(f"{decl.kind} name {name!r} is declared twice: {other[0]} and {target}")
                found[decl.kind][name] = (target, decl.needs)
    return found
