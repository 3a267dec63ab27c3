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
    response_tokens  int32, logprobs float32, loss_mask int8, token_rewards float32 (only when
                     some experience has them): one value per response token

Tables are HDF5 compound datasets (numpy structured arrays); strings are JSON in UTF-8 string
datasets: a handful of datasets per chunk, because each one costs more to create than a group's
tokens cost to write. HDF5 file locking is off: it fails on Lustre/GPFS/NFS, and every chunk has
one writer for its whole life.
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HDF5_USE_FILE_LOCKING", "FALSE")

import h5py
import numpy as np

from rfthpc.store.schema import CheckedExperience, Experience, Group

CHUNK_FORMAT = "rfthpc-experience-chunk"
CHUNK_VERSION = 1

GROUP_TABLE = np.dtype([
    ("policy_version", "<i8"), ("is_eval", "i1"), ("created_at", "<f8"), ("finished_at", "<f8"),
    ("first_experience", "<i8"), ("n_experiences", "<i8"),
])
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


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    # Responses to one task usually share the very prompt array: skip the comparison then.
    return a is b or (a.shape == b.shape and bool(np.array_equal(a, b)))


def _cat(parts: list[np.ndarray], dtype: type) -> np.ndarray:
    return np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype)


def write_chunk(path: Path, groups: list[PendingGroup], meta: dict[str, Any]) -> None:
    """Write `groups` to a new HDF5 file at `path` (a temporary name; the caller publishes it).

    `meta` (explorer, rank, stream, seq) goes into the `meta` attribute with the counts and origin.
    """
    exps = [e for p in groups for e in p.experiences]
    table = np.zeros(len(groups), GROUP_TABLE)
    table["policy_version"] = [p.group.policy_version for p in groups]
    table["is_eval"] = [p.group.is_eval for p in groups]
    table["created_at"] = [p.group.created_at for p in groups]
    table["finished_at"] = [p.group.finished_at for p in groups]
    table["n_experiences"] = [len(p.experiences) for p in groups]
    table["first_experience"] = np.cumsum(table["n_experiences"]) - table["n_experiences"]

    # A prompt is stored again only when it differs from the previous response's in the same group.
    prompts: list[np.ndarray] = []
    p_start: list[int] = []
    n_prompt = 0
    for pending in groups:
        last: np.ndarray | None = None
        for e in pending.experiences:
            if last is None or not _same(e.prompt_ids, last):
                prompts.append(e.prompt_ids)
                n_prompt += e.prompt_ids.shape[0]
                last = e.prompt_ids
            p_start.append(n_prompt - last.shape[0])
    rows = np.zeros(len(exps), EXPERIENCE_TABLE)
    rows["reward"] = [e.reward for e in exps]
    rows["prompt_start"] = p_start
    rows["prompt_len"] = [e.prompt_ids.shape[0] for e in exps]
    rows["response_len"] = [e.response_ids.shape[0] for e in exps]
    rows["response_start"] = np.cumsum(rows["response_len"]) - rows["response_len"]
    rows["has_token_rewards"] = [e.token_rewards is not None for e in exps]

    with h5py.File(path, "w", locking=False) as f:
        f.attrs["format"] = CHUNK_FORMAT
        f.attrs["version"] = CHUNK_VERSION
        f.attrs["meta"] = json.dumps({
            **meta, "n_groups": len(groups), "n_experiences": len(exps), "host": socket.gethostname(),
            "pid": os.getpid(), "written_at": time.time(),
        })
        f["groups"] = table
        f["group_text"] = json.dumps({
            "task_id": [p.group.task_id for p in groups],
            "group_id": [p.group.group_id for p in groups],
            "info": [json.loads(p.info_json) for p in groups],
        })
        f["experiences"] = rows
        f["experience_info"] = "[" + ",".join(e.info_json for e in exps) + "]"
        f["prompt_tokens"] = _cat(prompts, np.int32)
        f["response_tokens"] = _cat([e.response_ids for e in exps], np.int32)
        f["logprobs"] = _cat([e.logprobs for e in exps], np.float32)
        f["loss_mask"] = _cat([e.loss_mask for e in exps], np.int8)
        if rows["has_token_rewards"].any():
            f["token_rewards"] = _cat(
                [e.token_rewards if e.token_rewards is not None else np.zeros(len(e.response_ids), np.float32)
                 for e in exps],
                np.float32,
            )


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
    except FileNotFoundError:
        raise
    except (OSError, KeyError, ValueError, TypeError) as e:
        raise ChunkCorrupt(path, f"{type(e).__name__}: {e}") from None
    return meta


def read_chunk(path: Path) -> tuple[dict[str, Any], list[Group]]:
    """Read a chunk file back into its `meta` and its groups, in the order they were written; each
    group's `chunk` is `path`.

    Raises ChunkCorrupt when the file is truncated, damaged or not a chunk of this format, and
    FileNotFoundError when it vanished (garbage-collected, or an NFS directory cache was stale).
    """
    try:
        with h5py.File(path, "r", locking=False) as f:
            meta = _meta(f)
            table = f["groups"][()]
            text = json.loads(f["group_text"].asstr()[()])
            rows = f["experiences"][()]
            e_info = json.loads(f["experience_info"].asstr()[()])
            prompt, response = f["prompt_tokens"][()], f["response_tokens"][()]
            logprobs, loss_mask = f["logprobs"][()], f["loss_mask"][()]
            token_rewards = f["token_rewards"][()] if "token_rewards" in f else None
        groups = _groups(meta, table, text, rows, e_info, prompt, response, logprobs, loss_mask, token_rewards)
    except FileNotFoundError:
        raise
    except (OSError, KeyError, ValueError, TypeError, IndexError) as e:
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
    token_rewards: np.ndarray | None,
) -> list[Group]:
    """Check the arrays of a chunk against each other and build its groups (views into the arrays)."""
    n_groups, n_exp = meta["n_groups"], meta["n_experiences"]
    _check(table.shape == (n_groups,) and rows.shape == (n_exp,), "tables disagree with the counts in meta")
    _check(all(len(text[k]) == n_groups for k in ("task_id", "group_id", "info")), "group_text disagrees with n_groups")
    _check(isinstance(e_info, list) and len(e_info) == n_exp, "experience_info disagrees with n_experiences")
    first, count = table["first_experience"], table["n_experiences"]
    _check(bool(np.all(count > 0)) and int(count.sum()) == n_exp and bool(np.all(first == np.cumsum(count) - count)),
           "group table does not index the experiences in order")
    _check(bool(np.all(rows["prompt_start"] >= 0)) and bool(np.all(rows["prompt_start"] + rows["prompt_len"] <= len(prompt))),
           "prompt spans exceed the prompt token array")
    _check(bool(np.all(rows["response_start"] >= 0))
           and bool(np.all(rows["response_start"] + rows["response_len"] <= len(response))),
           "response spans exceed the response token array")
    _check(logprobs.shape == response.shape == loss_mask.shape, "per-token arrays differ in length")
    _check(token_rewards is None or token_rewards.shape == response.shape, "token_rewards differ in length")
    ps, pl = rows["prompt_start"].tolist(), rows["prompt_len"].tolist()
    rs, rl = rows["response_start"].tolist(), rows["response_len"].tolist()
    reward, has_tr = rows["reward"].tolist(), rows["has_token_rewards"].tolist()
    experiences = [
        Experience(
            prompt_ids=prompt[ps[i] : ps[i] + pl[i]],
            response_ids=response[rs[i] : rs[i] + rl[i]],
            logprobs=logprobs[rs[i] : rs[i] + rl[i]],
            loss_mask=loss_mask[rs[i] : rs[i] + rl[i]],
            reward=reward[i],
            token_rewards=token_rewards[rs[i] : rs[i] + rl[i]] if token_rewards is not None and has_tr[i] else None,
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
