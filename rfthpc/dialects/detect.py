"""Which framework a config file is written for: rfthpc's own shape (Trinity-RFT's), ROLL's or veRL's.

`rfthpc config validate|show`, `run` and `submit` take a ROLL or veRL config as it is: the loader asks
`foreign_dialect` and, for a foreign one, translates it with that framework's importer first (as
`rfthpc config import` would) and goes on with the result.

A file is foreign when its top level has another framework's marks and none of rfthpc's own
sections: ROLL keys mixed into an rfthpc config (`rfthpc.dialects.roll`) stay that config's keys.
A Hydra `defaults:` list (which rfthpc's own configs do not have) is composed first, so a file that
only includes its settings is recognised by what it includes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rfthpc.dialects.hydra import compose
from rfthpc.dialects.translation import SECTIONS
from rfthpc.errors import ConfigError

_SHARED = ("algorithm", "trainer")
"""rfthpc sections that veRL's config has too (so they do not mark a file as rfthpc's)."""
_OWN = tuple(s for s in SECTIONS if s not in _SHARED)

_ROLL_MARKS = ("actor_train", "actor_infer", "pipeline_cls", "rollout_batch_size", "pretrain", "custom_envs",
               "train_env_manager", "num_return_sequences_in_group", "async_generation_ratio")
_VERL_MARKS = ("actor_rollout_ref",)


@dataclass(frozen=True)
class Dialect:
    """A foreign config's framework and the top-level keys that gave it away."""

    name: str
    """"roll" or "verl", as `rfthpc config import --from` names them."""
    title: str
    """How messages name the framework ("ROLL", "veRL")."""
    marks: tuple[str, ...]


def foreign_dialect(path: Path, top: dict[str, Any]) -> Dialect | None:
    """The framework of the config at `path` whose top level (uninterpolated YAML) is `top`; None when
    it is rfthpc's own shape (or nothing else's)."""
    if any(k in top for k in _OWN):
        return None
    keys = top
    if isinstance(top.get("defaults"), list):
        # A file whose includes cannot be composed is left to the loader, whose errors say what is wrong.
        try:
            keys = compose(path).data
        except ConfigError:
            return None
    roll = tuple(k for k in _ROLL_MARKS if k in keys)
    if roll:
        return Dialect("roll", "ROLL", roll)
    algorithm = keys.get("algorithm")
    verl = tuple(k for k in _VERL_MARKS if k in keys)
    if not verl and "data" in keys and isinstance(algorithm, dict) and "adv_estimator" in algorithm:
        verl = ("data", "algorithm.adv_estimator")
    return Dialect("verl", "veRL", verl) if verl else None
