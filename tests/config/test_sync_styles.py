"""`synchronizer.sync_style`: Trinity-RFT's three styles (and its former names), the staleness bound
each implies, and the combinations that are errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.config import load_config
from rfthpc.config.settings import explorer_settings, trainer_settings
from rfthpc.errors import ConfigError
from rfthpc.launch.run_dir import prepare_run_dir
from tests.config.conftest import write
from tests.config.test_bad_input import base  # noqa: F401  (fixture)


def _sync(text: str) -> str:
    return "synchronizer:\n" + "".join(f"  {line}\n" for line in text.split(", "))


@pytest.mark.parametrize(("given", "style", "bound"), [
    ("sync_style: fixed", "fixed", 2 - 1 + 1),
    ("sync_style: explorer_driven", "explorer_driven", 2 - 1 + 1),
    ("sync_style: trainer_driven", "trainer_driven", 2 * 2 - 1 + 1),
    # Trinity-RFT's former names, which it still reads (in any case).
    ("sync_style: dynamic_by_explorer", "explorer_driven", 2),
    ("sync_style: Dynamic_By_Trainer", "trainer_driven", 4),
])
def test_each_style_and_its_staleness_bound(tmp_path: Path, base: str, given: str, style: str,  # noqa: F811
                                            bound: int) -> None:
    loaded = load_config(write(tmp_path, base + _sync(f"{given}, sync_interval: 2, sync_offset: 1")))
    assert (loaded.config.synchronizer.sync_style, loaded.config.synchronizer.max_staleness) == (style, bound)
    (trainer,), (explorer,) = trainer_settings(loaded.stages).stages, explorer_settings(loaded.stages).stages
    assert (trainer.sync_style, trainer.sync_interval, trainer.max_staleness) == (style, 2, bound)
    assert (explorer.sync_style, explorer.sync_interval, explorer.sync_offset, explorer.max_staleness) == (
        style, 2, 1, bound)


def test_a_stage_may_choose_its_own_style(tmp_path: Path, base: str) -> None:  # noqa: F811
    text = base + "stages:\n  - stage_name: a\n  - stage_name: b\n    synchronizer:\n      sync_style: dynamic_by_trainer\n"
    stages = load_config(write(tmp_path, text)).stages
    assert [(s.config.synchronizer.sync_style, s.config.synchronizer.max_staleness) for s in stages] == [
        ("fixed", 0), ("trainer_driven", 1)]


@pytest.mark.parametrize(("style", "least", "formula"), [
    ("explorer_driven", 3, "sync_interval - 1 + sync_offset = 3"),
    ("trainer_driven", 5, "2 * sync_interval - 1 + sync_offset = 5"),
])
def test_a_bound_below_what_the_style_needs_is_an_error(tmp_path: Path, base: str, style: str, least: int,  # noqa: F811
                                                        formula: str) -> None:
    cfg = write(tmp_path, base + _sync(f"sync_style: {style}, sync_interval: 2, sync_offset: 2, max_staleness: 1"))
    with pytest.raises(ConfigError) as e:
        load_config(cfg)
    msg = str(e.value)
    assert f"synchronizer.max_staleness: 1 is below what sync_style {style} needs ({formula})" in msg
    assert f"Remove max_staleness (it defaults to {least})" in msg and "use sync_style fixed" in msg
    # At the bound, or above it, it is the user's choice; fixed takes any bound, as before.
    ok = write(tmp_path, base + _sync(f"sync_style: {style}, sync_interval: 2, sync_offset: 2, "
                                      f"max_staleness: {least}"))
    assert load_config(ok).config.synchronizer.max_staleness == least
    fixed = write(tmp_path, base + _sync("sync_interval: 2, sync_offset: 2, max_staleness: 1"))
    assert load_config(fixed).config.synchronizer.max_staleness == 1


def test_fully_async_names_the_closest_style(tmp_path: Path, base: str) -> None:  # noqa: F811
    with pytest.raises(ConfigError, match=r"synchronizer.sync_style: 'fully_async' .* 'fixed' comes closest"):
        load_config(write(tmp_path, base + _sync("sync_style: fully_async")))


def test_the_two_halves_of_a_pair_must_agree_on_the_style(tmp_path: Path, base: str) -> None:  # noqa: F811
    """An async pair's trainer (`mode: train`) and explorer (`mode: explore`) configs share one run
    directory: under explorer_driven the trainer publishes only when explorers ask, so a trainer and
    explorers of different styles would wait for each other."""
    root = f"checkpoint_root_dir: {tmp_path / 'ckpt'}\n"
    trainer = write(tmp_path, base + root + "mode: train\n" + _sync("sync_style: explorer_driven"), "train.yaml")
    explorer = write(tmp_path, base + root + "mode: explore\n" + _sync("sync_style: trainer_driven"), "explore.yaml")
    run = prepare_run_dir(load_config(trainer))
    with pytest.raises(ConfigError) as e:
        prepare_run_dir(load_config(explorer))
    msg = str(e.value)
    assert "synchronizer.sync_style 'trainer_driven' (stage 'rft') differs from 'explorer_driven'" in msg
    assert str(run.config) in msg and "Set the same sync_style in both configs" in msg
    assert not run.explorer_config("explorer").exists()
    # The other order: the explorer's config is there first.
    agreeing = write(tmp_path, base + root + "mode: explore\n" + _sync("sync_style: explorer_driven"), "ok.yaml")
    prepare_run_dir(load_config(agreeing))
    changed = write(tmp_path, base + root + "mode: train\n" + _sync("sync_style: fixed"), "train2.yaml")
    with pytest.raises(ConfigError, match=r"'fixed' \(stage 'rft'\) differs from 'explorer_driven' in .*explorers"):
        prepare_run_dir(load_config(changed), resume=True)


def test_each_non_fixed_style_says_how_rfthpc_runs_it(tmp_path: Path, base: str) -> None:  # noqa: F811
    fixed = load_config(write(tmp_path, base + _sync("sync_style: fixed"))).notes
    assert not any("sync_style" in n for n in fixed)
    (note,) = [n for n in load_config(write(tmp_path, base + _sync("sync_style: dynamic_by_explorer"))).notes
               if "sync_style" in n]
    assert "explorer_driven: explorers ask for weights through files under <run dir>/weights/.requests/" in note
    text = base + "stages:\n  - stage_name: a\n    synchronizer:\n      sync_style: trainer_driven\n  - stage_name: b\n"
    (note,) = [n for n in load_config(write(tmp_path, text)).notes if "sync_style" in n]
    assert "trainer_driven: the trainer publishes every sync_interval steps without waiting" in note
