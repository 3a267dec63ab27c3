"""Survey a folder of run configs (e.g. Trinity-RFT's `examples/`): which does rfthpc accept?

usage: python tools/survey_configs.py DIR [--no-env-placeholders] [--width 160]

Every `*.yaml` / `*.yml` under DIR that is a run config goes through the same check as
`rfthpc config validate --no-path-checks --config FILE` (the CLI, one process per file, with this
checkout's `rfthpc` first on PYTHONPATH), run from DIR so that relative paths in the configs
(`examples/...`) mean what they mean from the root of the repository they came from. Files that are
not run configs (veRL trainer configs, which have `actor_rollout_ref` at the top; Data-Juicer
recipes, which have `process`; anything that is not a mapping) are listed as skipped.

An example that reads `${oc.env:VAR}` with no default expects its user to set VAR; unless
`--no-env-placeholders` is given, each such VAR that is unset here is set to `/placeholder/VAR` for
that file's check (listed per file), so that the check reaches the config itself.

Each file is accepted (exit 0), refused (exit 2 with rfthpc's message) or crashed (any other exit
code, or a traceback: a bug in rfthpc, reported separately). For refused files the problems are
read from the message, which groups them by kind (rfthpc/config/typed.py `Problems.message`); an
error raised outside that grouping (one line, e.g. an interpolation that cannot be resolved) is of
kind "single error". A problem is identified across files by its kind, the last part of its key
and its message, so that the same problem under `tasksets[0]` and `eval_tasksets[0]` counts once.

Prints a table per file, each refused file's problems, a table per problem (how many files it
blocks, most first, with one full example), the crashed files, and last the line
`FIGURES trinity_examples=N accepted=A refused=R` (N = A + R + crashed; skipped files not counted).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]

ACCEPTED, REFUSED, CRASHED = "accepted", "refused", "crashed"
SINGLE = "single error"
"""The kind of an error raised outside rfthpc's grouped message."""

_ENV_NO_DEFAULT = re.compile(r"\$\{oc\.env:([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER = re.compile(r"^rfthpc: error: invalid config \(.*\): \d+ problems?$")
_KIND = re.compile(r"^([a-zA-Z][a-zA-Z ]*):$")
_ITEM = "  - "
_STAGES = re.compile(r"^stages? '[^']*'(?:, '[^']*')*: ")
_KEYS = re.compile(r"^([A-Za-z_][\w.\[\]-]*(?:, [A-Za-z_][\w.\[\]-]*)*): ")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One problem line of rfthpc's message."""

    kind: str
    """The heading it was listed under (typed.KINDS), or SINGLE."""
    text: str
    """The line as printed, without the list marker."""

    @property
    def signature(self) -> tuple[str, str, str]:
        """(kind, last part of each key, message): the same problem in another file or list entry."""
        text = _STAGES.sub("", self.text)
        m = _KEYS.match(text)
        if not m:
            return self.kind, "", text
        keys = sorted({re.sub(r"\[\d+\]", "", k).rsplit(".", 1)[-1] for k in m.group(1).split(", ")})
        return self.kind, ", ".join(keys), text[m.end():]


@dataclasses.dataclass
class Result:
    """What checking one file gave."""

    path: str
    """The file, relative to the surveyed folder."""
    status: str
    """ACCEPTED, REFUSED or CRASHED."""
    returncode: int
    problems: list[Problem] = dataclasses.field(default_factory=list)
    notes: int = 0
    """How many `rfthpc: note:` lines the check printed."""
    placeholders: list[str] = dataclasses.field(default_factory=list)
    """The environment variables set to placeholders for this file."""
    output: str = ""
    """stderr of a crashed check (for the report)."""


def skip_reason(path: Path) -> str | None:
    """Why `path` is not a run config (None if it is one)."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
        return f"not readable as YAML ({type(e).__name__})"
    if not isinstance(data, dict):
        return "not a mapping"
    if "actor_rollout_ref" in data:
        return "veRL trainer config (actor_rollout_ref at the top)"
    if "process" in data and not {"model", "buffer", "algorithm"} & set(data):
        return "Data-Juicer recipe (process at the top)"
    if not {"model", "buffer", "algorithm", "explorer", "trainer", "stages"} & set(data):
        return "no run-config section (model, buffer, algorithm, explorer, trainer, stages)"
    return None


def find_configs(root: Path) -> list[Path]:
    """Every YAML file under `root`, sorted."""
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml"))


def env_placeholders(text: str, environ: dict[str, str]) -> dict[str, str]:
    """The variables `text` reads as `${oc.env:VAR}` without a default that `environ` lacks, each
    mapped to `/placeholder/VAR` (lines that are YAML comments do not count)."""
    read = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    return {name: f"/placeholder/{name}" for name in dict.fromkeys(_ENV_NO_DEFAULT.findall(read))
            if name not in environ}


def parse_problems(stderr: str) -> list[Problem]:
    """The problems in rfthpc's error output: the grouped message's items by kind, or the one
    `rfthpc: error:` line of an error raised outside it (kind SINGLE)."""
    lines = [line for line in stderr.splitlines() if not line.startswith("rfthpc: note:")]
    start = next((i for i, line in enumerate(lines) if _HEADER.match(line)), None)
    if start is None:
        errors = [line.removeprefix("rfthpc: error: ") for line in lines if line.startswith("rfthpc: error: ")]
        return [Problem(SINGLE, errors[0] if errors else "\n".join(lines).strip() or "(no message)")]
    problems: list[Problem] = []
    kind = ""
    for line in lines[start + 1:]:
        if m := _KIND.match(line):
            kind = m.group(1)
        elif line.startswith(_ITEM):
            problems.append(Problem(kind, line[len(_ITEM):]))
        elif line.startswith("    ") and problems:  # a message that goes on over lines
            last = problems.pop()
            problems.append(Problem(last.kind, f"{last.text} {line.strip()}"))
    return problems


def strip_path_prefix(line: str, config: str) -> str:
    """A single error line without the `FILE: ` that starts it (the file is listed anyway)."""
    return line.removeprefix(f"{config}: ")


def classify(returncode: int, stderr: str) -> str:
    """ACCEPTED, REFUSED or CRASHED for a check's exit code and stderr."""
    if "Traceback (most recent call last)" in stderr or returncode not in (0, 2):
        return CRASHED
    return ACCEPTED if returncode == 0 else REFUSED


def check_file(root: Path, rel: str, placeholders: bool = True, timeout: float = 120) -> Result:
    """Run `rfthpc config validate --no-path-checks --config REL` from `root` and read the outcome."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    added = env_placeholders((root / rel).read_text(encoding="utf-8"), env) if placeholders else {}
    env.update(added)
    cmd = [sys.executable, "-m", "rfthpc.cli", "config", "validate", "--no-path-checks", "--config", rel]
    try:
        proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as e:
        return Result(rel, CRASHED, -1, placeholders=sorted(added), output=f"timed out after {e.timeout} s")
    status = classify(proc.returncode, proc.stderr)
    notes = sum(line.startswith("rfthpc: note:") for line in proc.stderr.splitlines())
    result = Result(rel, status, proc.returncode, notes=notes, placeholders=sorted(added))
    if status == REFUSED:
        result.problems = [Problem(p.kind, strip_path_prefix(p.text, rel)) if p.kind == SINGLE else p
                           for p in parse_problems(proc.stderr)]
    elif status == CRASHED:
        result.output = (proc.stderr or proc.stdout)[-4000:]
    return result


def survey(root: Path, placeholders: bool = True) -> tuple[list[Result], list[tuple[str, str]]]:
    """Check every run config under `root`; also return the skipped files with the reason."""
    results, skipped = [], []
    for path in find_configs(root):
        rel = path.relative_to(root).as_posix()
        reason = skip_reason(path)
        if reason:
            skipped.append((rel, reason))
        else:
            results.append(check_file(root, rel, placeholders))
    return results, skipped


def tally(results: Iterable[Result]) -> list[tuple[tuple[str, str, str], Problem, list[str]]]:
    """Each distinct problem (by signature) with its first example and the files it blocks, the
    most files first."""
    found: dict[tuple[str, str, str], tuple[Problem, list[str]]] = {}
    for r in results:
        for p in r.problems:
            _, files = found.setdefault(p.signature, (p, []))
            if r.path not in files:
                files.append(r.path)
    return sorted(((sig, ex, files) for sig, (ex, files) in found.items()), key=lambda t: (-len(t[2]), t[0]))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def report(results: Sequence[Result], skipped: Sequence[tuple[str, str]], width: int = 160) -> str:
    """The tables and the FIGURES line."""
    out: list[str] = []
    name_w = max([len(r.path) for r in results] + [4])
    out.append(f"{'file':<{name_w}}  {'status':<8}  {'problems':>8}  {'notes':>5}  kinds")
    for r in results:
        kinds = ", ".join(dict.fromkeys(p.kind for p in r.problems))
        out.append(f"{r.path:<{name_w}}  {r.status:<8}  {len(r.problems):>8}  {r.notes:>5}  {kinds}")
    placed = [r for r in results if r.placeholders]
    if placed:
        out += ["", "environment variables the examples read without a default, set to /placeholder/VAR:"]
        out += [f"  {r.path}: {', '.join(r.placeholders)}" for r in placed]
    refused = [r for r in results if r.status == REFUSED]
    if refused:
        out += ["", "problems of each refused file:"]
        for r in refused:
            out.append(f"{r.path}:")
            out += [f"  [{p.kind}] {_cut(p.text, width)}" for p in r.problems]
    problems = tally(results)
    if problems:
        out += ["", f"{'files':>5}  {'kind':<20}  {'key':<34}  problem (one example, in full, below each)"]
        for (kind, key, message), example, files in problems:
            out.append(f"{len(files):>5}  {kind:<20}  {_cut(key, 34):<34}  {_cut(message, width)}")
            out.append(f"{'':>5}  e.g. {files[0]}: {example.text}")
    crashed = [r for r in results if r.status == CRASHED]
    if crashed:
        out += ["", "CRASHED (a bug in rfthpc: a traceback or an unexpected exit code):"]
        for r in crashed:
            out.append(f"{r.path} (exit {r.returncode}):")
            out += [f"    {line}" for line in r.output.strip().splitlines()]
    if skipped:
        out += ["", "skipped (not run configs):"]
        out += [f"  {rel}: {reason}" for rel, reason in skipped]
    accepted = sum(r.status == ACCEPTED for r in results)
    out += ["", f"FIGURES trinity_examples={len(results)} accepted={accepted} refused={len(refused)}"
            + (f" crashed={len(crashed)}" if crashed else "")]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Survey DIR and print the report; exit 1 if a check crashed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("dir", type=Path, help="folder of configs (searched recursively)")
    parser.add_argument("--no-env-placeholders", action="store_true",
                        help="leave ${oc.env:VAR} without a default unresolved when VAR is unset")
    parser.add_argument("--width", type=int, default=160, help="cut messages in the tables to this many characters")
    args = parser.parse_args(argv)
    root = args.dir.resolve()
    if not root.is_dir():
        parser.error(f"{args.dir} is not a directory")
    results, skipped = survey(root, placeholders=not args.no_env_placeholders)
    print(report(results, skipped, args.width))
    return 1 if any(r.status == CRASHED for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
