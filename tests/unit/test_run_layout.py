"""A run directory made by an older rfthpc, whose hand-off files were replaced in place, is refused
with the way out, before a role of this version would miss its hand-offs."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.errors import UserError
from rfthpc.rundir.paths import RunDir, check_layout
from rfthpc.rundir.trainer_meta import TrainerMeta, write_trainer_meta
from rfthpc.weights.published import point_latest


@pytest.mark.parametrize("old", ["trainer_meta.json", "weights/latest", "experiences/_doorbell"])
def test_an_older_run_directory_is_refused(tmp_path: Path, old: str) -> None:
    run = RunDir(tmp_path / "run").create()
    (run.root / old).write_text("7\n")
    with pytest.raises(UserError, match=rf"older rfthpc \({old} is a file there.*start a new run"):
        check_layout(run)


def test_this_versions_run_directory_passes(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run").create()
    write_trainer_meta(run, TrainerMeta(step=1))
    point_latest(run.root, 1)
    check_layout(run)
