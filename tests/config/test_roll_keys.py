"""ROLL's top-level keys rfthpc understands: `async_generation_ratio` (the staleness bound) and
`pg_variant` (the policy loss)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import trainer_settings
from rfthpc.errors import ConfigError
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)


@pytest.mark.parametrize("ratio", [0, 1, 4])
def test_async_generation_ratio_is_the_sync_offset(tmp_path: Path, base: str, ratio: int) -> None:  # noqa: F811
    loaded = load_config(write(tmp_path, base + f"async_generation_ratio: {ratio}\n"))
    sync = loaded.config.synchronizer
    assert (sync.sync_interval, sync.sync_offset, sync.max_staleness) == (1, ratio, ratio)
    assert trainer_settings(loaded.stages).stages[0].max_staleness == ratio


def test_a_synchronizer_that_agrees_is_accepted(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + "async_generation_ratio: 2\nsynchronizer:\n  sync_offset: 2\n"
    assert load_config(write(tmp_path, text)).config.synchronizer.sync_offset == 2


@pytest.mark.parametrize(("extra", "message"), [
    ("async_generation_ratio: 1\nsynchronizer:\n  sync_interval: 2\n",
     (r"async_generation_ratio: 1 means synchronizer.sync_interval: 1 and sync_offset: 1, but the config sets "
      r"synchronizer.sync_interval: 2; keep one of the two")),
    ("async_generation_ratio: 1\nsynchronizer:\n  sync_offset: 3\n", r"sets synchronizer.sync_offset: 3"),
    ("async_generation_ratio: 0.5\n", r"async_generation_ratio: 0.5; use a whole number >= 0"),
    ("async_generation_ratio: -1\n", r"async_generation_ratio: -1; use a whole number >= 0"),
    ("pg_variant: ppo_clip\n", r"pg_variant: 'ppo_clip'; ROLL's variants rfthpc has: vanilla, tis, topr"),
])
def test_a_contradiction_is_named(tmp_path: Path, base: str, extra: str, message: str) -> None:  # noqa: F811
    with pytest.raises(ConfigError, match=message):
        load_config(write(tmp_path, base + extra))


@pytest.mark.parametrize("variant", ["vanilla", "topr", "tis", "cispo", "kimi15"])
def test_pg_variant_names_the_policy_loss(tmp_path: Path, base: str, variant: str) -> None:  # noqa: F811
    alg = load_config(write(tmp_path, base + f"pg_variant: {variant}\n")).config.algorithm
    assert alg.policy_loss_fn == variant


def test_an_explicit_policy_loss_wins_over_pg_variant(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base.replace("  repeat_times: 4\n", "  repeat_times: 4\n  policy_loss_fn: ppo\n") + "pg_variant: tis\n"
    assert load_config(write(tmp_path, text)).config.algorithm.policy_loss_fn == "ppo"


def test_advantage_clip_is_lite_ppos_argument(tmp_path: Path, base: str) -> None:  # noqa: F811
    """ROLL's advantage_clip is the clip of rfthpc's lite_ppo (ROLL's advantage pipeline), not a refusal."""
    text = base.replace("algorithm:\n", "algorithm:\n  advantage_fn: lite_ppo\n", 1) + "advantage_clip: 2.0\n"
    loaded = load_config(write(tmp_path, text))
    assert loaded.config.algorithm.advantage_fn_args["advantage_clip"] == 2.0
