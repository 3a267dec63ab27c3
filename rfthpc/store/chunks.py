"""One chunk file: several whole groups in plain HDF5 arrays (no pickles, nothing runs on load).

Variable-length data is concatenated into flat arrays, indexed by two tables:

    attrs            format, version, meta (JSON: explorer, rank, stream, seq, n_groups,
                     n_experiences, host, pid, written_at)
    groups           table [G]: policy_version (int64), is_eval (int8), created_at, finished_at
                     (float64), first_experience, n_experiences (int64)
    group_text       UTF-8 JSON: {"task_id": [G], "group_id": [G], "info": [G objects]}
    experiences      table [E]: reward (float64), prompt_start, prompt_len, response_start,
                     response_len (int64), has_token_rewards (int8)
    experience_info  UTF-8 JSON: a list of E objects
    prompt_tokens    int32: prompts, each stored once per group when its responses share it
    response_tokens  int32, logprobs float32, loss_mask int8, token_rewards float32 and
                     teacher_logprobs float32 (each only when some experience has them; NaN
                     teacher log-probabilities: an experience no teacher scored): one value per
                     response token

Tables are HDF5 compound datasets (numpy structured arrays); strings are JSON in UTF-8 string
datasets: a handful of datasets per chunk, because each one costs more to create than a group's
tokens cost to write. HDF5 file locking is off: it fails on Lustre/GPFS/NFS, and every chunk has
one writer for its whole life.
"""

from __future__ import annotations

import io
import json
import math
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import h5py
import numpy as np
from h5py import h5d, h5s, h5t

from rfthpc.sharedfs.fileops import write_new_file
from rfthpc.store.schema import CheckedExperience, Group, StoredExperience, check_token_ids, out_of_range

CHUNK_FORMAT = "rfthpc-experience-chunk"
CHUNK_VERSION = 1

GROUP_TABLE = np.dtype([
    ("policy_version", "<i8"), ("is_eval", "i1"), ("created_at", "<f8"), ("finished_at", "<f8"),
    ("first_experience", "<i8"), ("n_experiences", "<i8"),
])
OPTIONAL = {"token_rewards": 0.0, "teacher_logprobs": math.nan}
"""The per-token arrays a chunk holds only when some experience of it has them, and the value the others
get there (an experience's token rewards are then flagged in its row, `has_token_rewards`; a NaN teacher
log-probability marks one no teacher scored)."""
EXPERIENCE_TABLE = np.dtype([
    ("reward", "<f8"), ("prompt_start", "<i8"), ("prompt_len", "<i8"), ("response_start", "<i8"),
    ("response_len", "<i8"), ("has_token_rewards", "i1"),
])


class ChunkCorrupt(Exception):
    """A chunk file cannot be read back as the groups it should hold (truncated, damaged, foreign)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"experience chunk {path} is unreadable: {reason}")
        self.path = Path(path)
        self.reason = reason


@dataclass
class PendingGroup:
    """A validated group waiting in a writer's buffer."""

    group: Group
    experiences: list[CheckedExperience]
    info_json: str


def _dataset(f: h5py.File, name: str, data: np.ndarray) -> None:
    """Write `data` as a new contiguous dataset through h5py's low-level API: the same file as
    `f[name] = data` for about 60 % of the cost (a chunk's datasets cost more than its tokens)."""
    ds = h5d.create(f.id, name.encode(), h5t.py_create(data.dtype, logical=True), h5s.create_simple(data.shape))
    if data.size:
        ds.write(h5s.ALL, h5s.ALL, np.ascontiguousarray(data))


class _Flat:
    """A growable flat array: the concatenation of what was appended since the last `clear`.

    Its memory is kept across chunks, so a writer allocates (and the kernel maps) it once.
    """

    def __init__(self, dtype: type) -> None:
        self.data = np.empty(0, dtype)
        self.size = 0

    def reserve(self, n: int, expected: int) -> np.ndarray:
        """Room for `n` more values after `size` (not yet counted: `size` moves on `commit`); when it
        must grow, it grows to hold `expected` more at least (what the rest of the chunk will need)."""
        end = self.size + n
        if end > self.data.shape[0]:
            grown = np.empty(max(end, self.size + expected, 2 * self.data.shape[0]), self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        return self.data[self.size : end]

    def commit(self, n: int) -> None:
        self.size += n

    def view(self) -> np.ndarray:
        return self.data[: self.size]


def _cat_into(out: np.ndarray, parts: list[np.ndarray]) -> None:
    if len(parts) == 1:
        out[...] = parts[0]
    elif parts:
        np.concatenate(parts, out=out)


class ChunkBuilder:
    """The groups a writer has buffered, already laid out as a chunk's flat arrays.

    `add` copies a group's tokens into the flat arrays (the only copy before the file write) and
    checks their ids there, in the same pass over memory; `write` then writes the arrays as they
    are. One builder serves chunk after chunk (`clear`), reusing its memory.
    """

    def __init__(self, groups_per_chunk: int = 1) -> None:
        self.groups_per_chunk = groups_per_chunk
        self._prompts, self._responses = _Flat(np.int32), _Flat(np.int32)
        self._logprobs, self._loss_mask = _Flat(np.float32), _Flat(np.int8)
        self._optional: dict[str, _Flat] = {}
        """The per-token arrays only some chunks have (OPTIONAL), once a group brought them."""
        self.clear()

    def clear(self) -> None:
        """Forget every group (after a commit)."""
        self._groups: list[tuple[int, bool, float, float, int]] = []
        self._group_text: dict[str, list[str]] = {"task_id": [], "group_id": [], "info": []}
        self._rows: list[tuple[float, int, int, int, int, bool]] = []
        self._exp_info: list[str] = []
        for flat in (self._prompts, self._responses, self._logprobs, self._loss_mask, *self._optional.values()):
            flat.size = 0
        self._has: set[str] = set()
        """The OPTIONAL arrays this chunk holds."""

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, pending: PendingGroup, group_id: str) -> None:
        """Append a group checked by `check_group(..., check_ids=False)` under `group_id`; raise
        UserError (and keep nothing of it) if a token id is outside [0, 2**31). Everything the chunk
        needs is taken now: the caller may reuse the group and its arrays."""
        group, exps = pending.group, pending.experiences
        # A prompt is stored again only when it differs from the previous response's in the same
        # group; responses to one task usually share the very prompt array, which needs no comparison.
        prompts: list[np.ndarray] = []
        p_start: list[int] = []
        end = self._prompts.size
        last: np.ndarray | None = None
        for e in exps:
            p = e.prompt_ids
            if last is None or (p is not last and (p.shape != last.shape or not np.array_equal(p, last))):
                prompts.append(p)
                end += p.shape[0]
                last = p
            p_start.append(end - last.shape[0])
        n_prompt = end - self._prompts.size
        n_response = sum(e.response_ids.shape[0] for e in exps)
        # Sized once for a chunk of groups like this one, rather than grown (and copied) step by step.
        to_come = max(1, self.groups_per_chunk - len(self._groups))
        prompt_out = self._prompts.reserve(n_prompt, n_prompt * to_come)
        response_out = self._responses.reserve(n_response, n_response * to_come)
        _cat_into(prompt_out, prompts)
        _cat_into(response_out, [e.response_ids for e in exps])
        if (n_prompt and out_of_range(prompt_out)) or (n_response and out_of_range(response_out)):
            check_token_ids(group, exps)
        _cat_into(self._logprobs.reserve(n_response, n_response * to_come), [e.logprobs for e in exps])
        _cat_into(self._loss_mask.reserve(n_response, n_response * to_come), [e.loss_mask for e in exps])
        for name, fill in OPTIONAL.items():
            if name in self._has or any(getattr(e, name) is not None for e in exps):
                self._add_optional(name, fill, exps, n_response * to_come)
        r_start = self._responses.size
        for e, ps in zip(exps, p_start):
            n = e.response_ids.shape[0]
            self._rows.append((e.reward, ps, e.prompt_ids.shape[0], r_start, n, e.token_rewards is not None))
            r_start += n
        self._exp_info.extend(e.info_json for e in exps)
        self._groups.append((group.policy_version, group.is_eval, group.created_at, group.finished_at, len(exps)))
        self._group_text["task_id"].append(group.task_id)
        self._group_text["group_id"].append(group_id)
        self._group_text["info"].append(pending.info_json)
        for flat, n in ((self._prompts, n_prompt), (self._responses, n_response), (self._logprobs, n_response),
                        (self._loss_mask, n_response)):
            flat.commit(n)

    def _add_optional(self, name: str, fill: float, exps: list[CheckedExperience], expected: int) -> None:
        tr = self._optional.setdefault(name, _Flat(np.float32))
        if name not in self._has:
            # The first group with these values in this chunk: `fill` for the responses before it.
            tr.size = 0
            tr.reserve(self._responses.size, self._responses.size + expected)[...] = fill
            tr.commit(self._responses.size)
            self._has.add(name)
        parts = [value if (value := getattr(e, name)) is not None
                 else np.full(e.response_ids.shape[0], fill, np.float32) for e in exps]
        n = sum(p.shape[0] for p in parts)
        _cat_into(tr.reserve(n, expected), parts)
        tr.commit(n)

    def write(self, path: Path, meta: dict[str, Any]) -> None:
        """Write the buffered groups to a new HDF5 file at `path` (a temporary name that must not
        exist; the caller publishes it), fsynced, with the run's file mode. `meta` (explorer, rank,
        stream, seq) goes into the `meta` attribute with the counts and origin.

        The file is built in memory and written with one call: HDF5 writes a file in dozens of small
        pieces, and on a network filesystem each is a round trip (a chunk costs 2.5x as much to
        write that way on the test bed's GlusterFS)."""
        image = io.BytesIO()
        self._write_hdf5(image, meta)
        write_new_file(path, image.getbuffer())

    def _write_hdf5(self, target: io.BytesIO, meta: dict[str, Any]) -> None:
        table = np.zeros(len(self._groups), GROUP_TABLE)
        for name, column in zip(("policy_version", "is_eval", "created_at", "finished_at", "n_experiences"),
                                zip(*self._groups)):
            table[name] = column
        table["first_experience"] = np.cumsum(table["n_experiences"]) - table["n_experiences"]
        rows = np.array(self._rows, EXPERIENCE_TABLE)
        text = self._group_text
        # The groups' info is JSON already: splice it in rather than parse and re-serialise it.
        group_text = (
            f'{{"task_id":{json.dumps(text["task_id"])},"group_id":{json.dumps(text["group_id"])},'
            f'"info":[{",".join(text["info"])}]}}'
        )
        with h5py.File(target, "w") as f:
            f.attrs["format"] = CHUNK_FORMAT
            f.attrs["version"] = CHUNK_VERSION
            f.attrs["meta"] = json.dumps({
                **meta, "n_groups": len(self._groups), "n_experiences": len(rows), "host": socket.gethostname(),
                "pid": os.getpid(), "written_at": time.time(),
            })
            _dataset(f, "groups", table)
            f["group_text"] = group_text
            _dataset(f, "experiences", rows)
            f["experience_info"] = "[" + ",".join(self._exp_info) + "]"
            _dataset(f, "prompt_tokens", self._prompts.view())
            _dataset(f, "response_tokens", self._responses.view())
            _dataset(f, "logprobs", self._logprobs.view())
            _dataset(f, "loss_mask", self._loss_mask.view())
            for name in self._has:
                _dataset(f, name, self._optional[name].view())


def _scored(values: np.ndarray) -> np.ndarray | None:
    """An experience's teacher log-probabilities, None where no teacher scored it (NaN)."""
    return None if values.shape[0] and np.isnan(values[0]) else values


def _check(cond: bool, reason: str) -> None:
    if not cond:
        raise ValueError(reason)


def _meta(f: h5py.File) -> dict[str, Any]:
    _check(f.attrs.get("format") == CHUNK_FORMAT, f"format attribute is {f.attrs.get('format')!r}")
    _check(f.attrs.get("version") == CHUNK_VERSION, f"unsupported chunk version {f.attrs.get('version')!r}")
    meta = json.loads(f.attrs["meta"])
    _check(isinstance(meta, dict), "meta attribute is not a JSON object")
    return meta


def read_chunk_attrs(path: Path) -> dict[str, Any]:
    """A chunk's `meta` plus its groups' `policy_versions` and `eval_flags` (reads no tokens).

    Raises ChunkCorrupt if unreadable, FileNotFoundError if it vanished.
    """
    try:
        with h5py.File(path, "r", locking=False) as f:
            meta = _meta(f)
            table = f["groups"][()]
            meta["policy_versions"] = table["policy_version"].tolist()
            meta["eval_flags"] = table["is_eval"].astype(bool).tolist()
    except OSError as e:
        if e.errno is not None:
            raise  # the filesystem's error (vanished, EIO, ESTALE, EACCES...), not the file's content
        raise ChunkCorrupt(path, f"{type(e).__name__}: {e}") from None
    except (KeyError, ValueError, TypeError) as e:
        raise ChunkCorrupt(path, f"{type(e).__name__}: {e}") from None
    return meta


def read_chunk(path: Path) -> tuple[dict[str, Any], list[Group]]:
    """Read a chunk file back into its `meta` and its groups, in the order they were written; each
    group's `chunk` is `path`.

    Raises ChunkCorrupt when the file is truncated, damaged or not a chunk of this format, and
    OSError with an errno when the filesystem fails to read it (FileNotFoundError: it vanished,
    garbage-collected or listed from a stale NFS directory cache; EIO, ESTALE...: maybe transient).
    """
    try:
        # Read whole (the groups need every dataset) with one open and one read, not HDF5's many small
        # reads: each is a round trip on a network filesystem.
        with open(path, "rb") as raw:
            image = io.BytesIO(raw.read())
        with h5py.File(image, "r") as f:
            meta = _meta(f)
            table = f["groups"][()]
            text = json.loads(f["group_text"].asstr()[()])
            rows = f["experiences"][()]
            e_info = json.loads(f["experience_info"].asstr()[()])
            prompt, response = f["prompt_tokens"][()], f["response_tokens"][()]
            logprobs, loss_mask = f["logprobs"][()], f["loss_mask"][()]
            optional = {name: f[name][()] for name in OPTIONAL if name in f}
        groups = _groups(meta, table, text, rows, e_info, prompt, response, logprobs, loss_mask, optional)
    except OSError as e:
        if e.errno is not None:
            raise  # the filesystem's error (vanished, EIO, ESTALE, EACCES...), not the file's content
        raise ChunkCorrupt(path, f"{type(e).__name__}: {e}") from None
    except (KeyError, ValueError, TypeError, IndexError) as e:
        raise ChunkCorrupt(path, f"{type(e).__name__}: {e}") from None
    for g in groups:
        g.chunk = Path(path)
    return meta, groups


def _groups(
    meta: dict[str, Any],
    table: np.ndarray,
    text: dict[str, list],
    rows: np.ndarray,
    e_info: list[dict],
    prompt: np.ndarray,
    response: np.ndarray,
    logprobs: np.ndarray,
    loss_mask: np.ndarray,
    optional: dict[str, np.ndarray],
) -> list[Group]:
    """Check the arrays of a chunk against each other and build its groups (views into the arrays)."""
    n_groups, n_exp = meta["n_groups"], meta["n_experiences"]
    _check(table.shape == (n_groups,) and rows.shape == (n_exp,), "tables disagree with the counts in meta")
    _check(all(len(text[k]) == n_groups for k in ("task_id", "group_id", "info")), "group_text disagrees with n_groups")
    _check(isinstance(e_info, list) and len(e_info) == n_exp, "experience_info disagrees with n_experiences")
    first, count = table["first_experience"], table["n_experiences"]
    _check(bool(np.all(count > 0)) and int(count.sum()) == n_exp and bool(np.all(first == np.cumsum(count) - count)),
           "group table does not index the experiences in order")
    _check(bool(np.all(rows["prompt_start"] >= 0))
           and bool(np.all(rows["prompt_start"] + rows["prompt_len"] <= len(prompt))),
           "prompt spans exceed the prompt token array")
    _check(bool(np.all(rows["response_start"] >= 0))
           and bool(np.all(rows["response_start"] + rows["response_len"] <= len(response))),
           "response spans exceed the response token array")
    _check(logprobs.shape == response.shape == loss_mask.shape, "per-token arrays differ in length")
    for name, values in optional.items():
        _check(values.shape == response.shape, f"{name} differ in length")
    token_rewards, teacher = optional.get("token_rewards"), optional.get("teacher_logprobs")
    ps, pl = rows["prompt_start"].tolist(), rows["prompt_len"].tolist()
    rs, rl = rows["response_start"].tolist(), rows["response_len"].tolist()
    reward, has_tr = rows["reward"].tolist(), rows["has_token_rewards"].tolist()
    experiences = [
        StoredExperience(
            prompt_ids=prompt[ps[i] : ps[i] + pl[i]],
            response_ids=response[rs[i] : rs[i] + rl[i]],
            logprobs=logprobs[rs[i] : rs[i] + rl[i]],
            loss_mask=loss_mask[rs[i] : rs[i] + rl[i]],
            reward=reward[i],
            token_rewards=token_rewards[rs[i] : rs[i] + rl[i]] if token_rewards is not None and has_tr[i] else None,
            teacher_logprobs=_scored(teacher[rs[i] : rs[i] + rl[i]]) if teacher is not None else None,
            info=e_info[i],
        )
        for i in range(n_exp)
    ]
    firsts, counts = first.tolist(), count.tolist()
    return [
        Group(
            task_id=text["task_id"][g],
            experiences=experiences[firsts[g] : firsts[g] + counts[g]],
            policy_version=int(table["policy_version"][g]),
            explorer=str(meta.get("explorer", "")),
            rank=int(meta.get("rank", -1)),
            group_id=text["group_id"][g],
            is_eval=bool(table["is_eval"][g]),
            created_at=float(table["created_at"][g]),
            finished_at=float(table["finished_at"][g]),
            info=text["info"][g],
        )
        for g in range(n_groups)
    ]
