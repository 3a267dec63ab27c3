"""The code snapshot queued jobs run: a private copy of the package, named by its content."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from rfthpc.launch.snapshot import package_dir, snapshot_code


def test_snapshot_is_a_private_content_named_copy(tmp_path: Path) -> None:
    source = tmp_path / "src" / "rfthpc"
    shutil.copytree(package_dir(), source, ignore=shutil.ignore_patterns("__pycache__"))
    old = os.umask(0o077)
    try:
        first = snapshot_code(tmp_path / "code", source)
        assert snapshot_code(tmp_path / "code", source) == first  # same code: reused
        edited = source / "launch" / "job_states.py"
        edited.write_text(edited.read_text() + "\n# edit\n")
        second = snapshot_code(tmp_path / "code", source)
    finally:
        os.umask(old)
    assert second != first
    assert sorted(p.name for p in (tmp_path / "code").iterdir()) == sorted([first.name, second.name])
    # The snapshot taken before the edit does not see it.
    assert "# edit" not in (first / "rfthpc" / "launch" / "job_states.py").read_text()
    assert (first / "rfthpc" / "launch" / "submitit_jobs.py").is_file()
    assert not list(first.rglob("__pycache__"))
    modes = {stat.S_IMODE(p.stat().st_mode) for p in first.rglob("*")}
    assert modes <= {0o600, 0o700}


def test_python_imports_the_snapshot_from_inside_a_checkout(tmp_path: Path) -> None:
    """What the jobs do: PYTHONPATH=<snapshot> PYTHONSAFEPATH=1, started in the submit directory (a checkout)."""
    snap = snapshot_code(tmp_path / "code")
    checkout = package_dir().parent
    probe = [sys.executable, "-c", "import rfthpc; print(rfthpc.__file__)"]
    env = {**os.environ, "PYTHONPATH": str(snap)}
    out = subprocess.run(probe, cwd=checkout, capture_output=True, text=True, timeout=60, check=True,
                         env={**env, "PYTHONSAFEPATH": "1"})
    assert out.stdout.strip() == str(snap / "rfthpc" / "__init__.py")
    # Without PYTHONSAFEPATH the checkout in the working directory would win.
    out = subprocess.run(probe, cwd=checkout, capture_output=True, text=True, timeout=60, check=True, env=env)
    assert out.stdout.strip() == str(checkout / "rfthpc" / "__init__.py")
