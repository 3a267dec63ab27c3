"""`rfthpc store inspect`: counts, per-explorer rates, version and staleness histograms."""

from __future__ import annotations

from pathlib import Path

import pytest

from rfthpc.errors import UserError
from rfthpc.store.inspect import format_inspect, inspect_store
from rfthpc.store.reader import StoreReader
from rfthpc.store.writer import ChunkWriter
from rfthpc.tasks.claims import TaskClaims

from .groups import make_group


def test_counts_rates_and_histograms(run_dir: Path) -> None:
    a = ChunkWriter(run_dir, "ea", 0, groups_per_chunk=4)
    for v in [0, 0, 1, 1, 2, 2, 3, 3]:
        a.add(make_group(f"a{v}", version=v, explorer="ea"))
    b = ChunkWriter(run_dir, "eb", 5, groups_per_chunk=4)
    for i in range(3):
        b.add(make_group(f"b{i}", version=3, explorer="eb", rank=5, is_eval=i == 0))
    b.flush()
    claims = TaskClaims(run_dir, "gsm8k", 10, owner="ea/0")
    claims.complete(claims.claim(4))
    reader = StoreReader(run_dir, max_staleness=1)
    # trainer at version 2: versions 0 are stale (staleness 2); a1, a1 consumed; a2 ...
    reader.take(3, current_version=2, timeout_s=1)
    reader.mark_checkpointed(reader.state())  # writes the progress file now

    d = inspect_store(run_dir)
    c = d["counts"]
    assert c["consumed"] == 3 and c["dropped_stale"] == 2 and c["pending"] == 6
    assert c["committed"] == 11 and c["pending_eval"] == 1
    assert d["explorers"]["ea"]["chunks"] == 2 and d["explorers"]["ea"]["groups"] == 8
    assert d["explorers"]["eb"]["ranks"] == 1 and d["explorers"]["eb"]["groups_per_s"] > 0
    assert d["policy_version_hist_pending"] == {"2": 1, "3": 5}
    # taken at the next step, version 3: never negative
    assert d["staleness_hist_pending"] == {"0": 5, "1": 1}
    assert d["staleness_hist_consumed"] == {"0": 1, "1": 2}
    assert d["tasksets"]["gsm8k"]["completed"] == 4
    text = format_inspect(d)
    for word in ("committed", "consumed", "dropped_stale", "pending", "groups/s", "gsm8k", "staleness"):
        assert word in text


def test_inspect_refuses_a_directory_without_a_store(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("x")
    with pytest.raises(UserError, match="experiences/STORE.json is missing"):
        inspect_store(tmp_path)


def test_store_inspect_command(run_dir: Path, tmp_path: Path) -> None:
    """`rfthpc store inspect` prints the table; on a directory without a store it exits 2."""
    import subprocess
    import sys

    from rfthpc.store import ChunkWriter
    from tests.store.groups import make_group

    writer = ChunkWriter(run_dir, "ex", 0, groups_per_chunk=2)
    for i in range(4):
        writer.add(make_group(f"t{i}"))
    writer.close()
    out = subprocess.run([sys.executable, "-m", "rfthpc", "store", "inspect", str(run_dir)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "committed" in out.stdout and "ex" in out.stdout
    empty = tmp_path / "not-a-run"
    empty.mkdir()
    out = subprocess.run([sys.executable, "-m", "rfthpc", "store", "inspect", str(empty)],
                         check=False, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
