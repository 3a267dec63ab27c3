"""Tasksets: load a user's data into Tasks, and turn a Task into prompt token ids.

Data is read with `datasets` from a local path only (compute nodes have no internet):
  - a directory written by `save_to_disk` (`dataset_dict.json` or `state.json`);
  - a downloaded Hub dataset repo (`huggingface-cli download --repo-type dataset openai/gsm8k
    --local-dir DIR`): subsets are its config directories such as `main/`;
  - a directory of data files (`train.jsonl`, `test.parquet`, …: the split is the file name);
  - one `.jsonl`, `.json`, `.parquet`, `.csv` or `.arrow` file (it is the requested split).

`datasets` converts data files into an Arrow cache guarded by file locks, which do not exclude
across nodes on NFS/GPFS; so unless `cache_dir` or HF_DATASETS_CACHE says otherwise, each node
caches in its own temporary directory (`$TMPDIR`, job-local under Slurm).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rfthpc.errors import ConfigError, UserError
from rfthpc.workflows.base import SamplingArgs

_FILE_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".csv": "csv", ".arrow": "arrow"}
_DOWNLOAD_HINT = (
    "compute nodes have no internet, so datasets are read from local paths only; download it first, "
    "e.g. `huggingface-cli download --repo-type dataset openai/gsm8k --local-dir /shared/data/gsm8k`, "
    "and set the taskset path to that directory"
)


@dataclass(frozen=True)
class Task:
    """One row of a taskset, with everything the explorer needs to run its workflow."""

    task_id: str
    """Stable id: `<taskset name>/<row index>`."""
    taskset: str
    index: int
    raw: dict[str, Any]
    """The row as read."""
    prompt: str
    """Value of `format.prompt_key` (the user message)."""
    truth: str | None
    """Value of `format.response_key` (the reference answer), None if no key was given."""
    workflow: str
    reward_fn: str | None
    workflow_args: Mapping[str, Any] = field(default_factory=dict)
    reward_fn_args: Mapping[str, Any] = field(default_factory=dict)
    rollout_args: SamplingArgs = SamplingArgs()
    repeat_times: int = 1
    system_prompt: str | None = None
    chat_template: str | None = None
    """Overrides the tokenizer's chat template (`format.chat_template`)."""
    is_eval: bool = False


def _is_saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def _read_file(path: Path, split: str, cache_dir: str | None) -> dict[str, Any]:
    import datasets

    builder = _FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise UserError(
            f"dataset file {path}: unsupported type {path.suffix!r}; use one of {', '.join(_FILE_BUILDERS)}"
        )
    return {split: datasets.load_dataset(builder, data_files={split: str(path)}, split=split, cache_dir=cache_dir)}


def _read_saved(path: Path, split: str) -> Mapping[str, Any]:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    return loaded if isinstance(loaded, datasets.DatasetDict) else {split: loaded}


def _read_dir(path: Path, subset_name: str | None, split: str, cache_dir: str | None) -> Mapping[str, Any]:
    import datasets

    if _is_saved_to_disk(path):
        if subset_name is not None:
            raise UserError(
                f"dataset {path} was written by save_to_disk and has no subsets; "
                f"remove subset_name={subset_name!r} or point path at the subset's directory"
            )
        return _read_saved(path, split)
    if subset_name is not None and (path / subset_name).is_dir() and _is_saved_to_disk(path / subset_name):
        return _read_saved(path / subset_name, split)
    configs = datasets.get_dataset_config_names(str(path))
    if subset_name is not None and subset_name not in configs:
        if (path / subset_name).is_dir():
            return _read_dir(path / subset_name, None, split, cache_dir)
        subdirs = sorted(p.name for p in path.iterdir() if p.is_dir() and not p.name.startswith("."))
        known = sorted(set(configs) - {"default"} | set(subdirs))
        raise UserError(
            f"dataset {path} has no subset {subset_name!r}; set subset_name to one of: "
            f"{', '.join(known) or '(none: remove subset_name)'}"
        )
    if subset_name is None and len(configs) > 1:
        raise UserError(f"dataset {path} has several subsets; set subset_name to one of: {', '.join(configs)}")
    return datasets.load_dataset(str(path), subset_name, cache_dir=cache_dir)


def default_cache_dir() -> str | None:
    """HF_DATASETS_CACHE if set (then `datasets` uses it), else a node-local temporary directory."""
    if os.environ.get("HF_DATASETS_CACHE"):
        return None
    return str(Path(tempfile.gettempdir()) / f"rfthpc-datasets-{os.getuid()}")


def read_split(
    path: str | Path, subset_name: str | None = None, split: str = "train", cache_dir: str | None = None
) -> Any:
    """One split of a local dataset as a `datasets.Dataset` (see the module doc for the layouts)."""
    cache_dir = cache_dir or default_cache_dir()
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"dataset path {p} does not exist; {_DOWNLOAD_HINT}")
    try:
        splits = _read_file(p, split, cache_dir) if p.is_file() else _read_dir(p, subset_name, split, cache_dir)
    except UserError:
        raise
    except Exception as e:  # noqa: BLE001 - `datasets` fails on bad or empty files with many types
        cause = e.__cause__ or e  # DatasetGenerationError wraps the parser's message
        raise UserError(f"cannot read dataset {p}: {type(cause).__name__}: {cause}") from e
    if split not in splits:
        where = f"{p} (subset {subset_name!r})" if subset_name else str(p)
        raise UserError(f"dataset {where} has no split {split!r}; set split to one of: {', '.join(splits)}")
    return splits[split]


def _text(value: Any, key: str, where: str, index: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise UserError(f"{where} row {index}: column {key!r} is {value!r}, not text; fix the data or choose another key")


def load_taskset(
    path: str | Path,
    *,
    name: str,
    subset_name: str | None = None,
    split: str = "train",
    prompt_key: str = "question",
    response_key: str | None = "answer",
    system_prompt: str | None = None,
    chat_template: str | None = None,
    workflow: str = "math_workflow",
    reward_fn: str | None = None,
    workflow_key: str | None = None,
    reward_fn_key: str | None = None,
    workflow_args: Mapping[str, Any] | None = None,
    reward_fn_args: Mapping[str, Any] | None = None,
    rollout_args: SamplingArgs = SamplingArgs(),
    repeat_times: int = 1,
    is_eval: bool = False,
    cache_dir: str | None = None,
) -> list[Task]:
    """Read one split of a local dataset into Tasks with ids `<name>/<row>`.

    `workflow_key` / `reward_fn_key` name optional columns that override the workflow or reward
    function per row (as Trinity-RFT's `format.workflow_key` / `format.reward_fn_key`).
    """
    if repeat_times < 1:
        raise ConfigError(f"taskset {name!r}: repeat_times={repeat_times}; use at least 1")
    ds = read_split(path, subset_name, split, cache_dir)
    where = f"taskset {name!r} ({path}, split {split!r})"
    columns = list(ds.column_names)
    for option, key in (("prompt_key", prompt_key), ("response_key", response_key),
                        ("workflow_key", workflow_key), ("reward_fn_key", reward_fn_key)):
        if key is not None and key not in columns:
            raise UserError(f"{where}: format.{option}={key!r} is not a column; the columns are: {', '.join(columns)}")
    tasks = []
    for i, row in enumerate(ds):
        tasks.append(
            Task(
                task_id=f"{name}/{i}",
                taskset=name,
                index=i,
                raw=row,
                prompt=_text(row[prompt_key], prompt_key, where, i),
                truth=None if response_key is None else _text(row[response_key], response_key, where, i),
                workflow=row[workflow_key] if workflow_key and row[workflow_key] else workflow,
                reward_fn=row[reward_fn_key] if reward_fn_key and row[reward_fn_key] else reward_fn,
                workflow_args=dict(workflow_args or {}),
                reward_fn_args=dict(reward_fn_args or {}),
                rollout_args=rollout_args,
                repeat_times=repeat_times,
                system_prompt=system_prompt,
                chat_template=chat_template,
                is_eval=is_eval,
            )
        )
    return tasks


@dataclass(frozen=True)
class EncodedPrompt:
    """Prompt token ids ready for the engine."""

    token_ids: list[int]
    truncated: bool = False


class PromptBuilder:
    """Renders chat messages with the tokenizer's chat template and enforces `max_prompt_tokens`.

    A prompt longer than `max_prompt_tokens` is skipped, or, with `enable_prompt_truncation`,
    shortened by dropping the start of its last user message: the system prompt, the chat framing
    and the generation prompt stay intact, and the end of the message (where the question usually
    is) is kept. Both cases are counted in `truncated` / `skipped`.
    """

    def __init__(self, tokenizer: Any, max_prompt_tokens: int | None = None, enable_prompt_truncation: bool = True):
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens={max_prompt_tokens}: use a positive count or leave it unset")
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.enable_prompt_truncation = enable_prompt_truncation
        self.truncated = 0
        self.skipped = 0

    @staticmethod
    def messages(task: Task, default_system_prompt: str | None = None) -> list[dict[str, str]]:
        """`[system?, user]` messages of a single-turn task (the task's system prompt wins)."""
        system = task.system_prompt if task.system_prompt is not None else default_system_prompt
        out = [{"role": "system", "content": system}] if system else []
        return out + [{"role": "user", "content": task.prompt}]

    def render(self, messages: Sequence[Mapping[str, str]], chat_template: str | None = None) -> list[int]:
        """Token ids of `messages` followed by the assistant generation prompt."""
        if chat_template is None and not getattr(self.tokenizer, "chat_template", None):
            raise UserError(
                "the policy model's tokenizer has no chat template; set format.chat_template on the taskset"
            )
        return list(
            self.tokenizer.apply_chat_template(
                list(messages), chat_template=chat_template, add_generation_prompt=True,
                tokenize=True, return_dict=False,
            )
        )

    def encode(self, messages: Sequence[Mapping[str, str]], chat_template: str | None = None) -> EncodedPrompt | None:
        """Render and apply the length policy; None if the prompt is skipped."""
        ids = self.render(messages, chat_template)
        limit = self.max_prompt_tokens
        if limit is None or len(ids) <= limit:
            return EncodedPrompt(ids)
        if self.enable_prompt_truncation:
            shortened = self._truncate(list(messages), chat_template, len(ids), limit)
            if shortened is not None:
                self.truncated += 1
                return EncodedPrompt(shortened, truncated=True)
        self.skipped += 1
        return None

    def _truncate(
        self, messages: list[Mapping[str, str]], chat_template: str | None, length: int, limit: int
    ) -> list[int] | None:
        content = messages[-1]["content"]
        content_ids = self.tokenizer.encode(content, add_special_tokens=False)
        keep = len(content_ids) - (length - limit)
        # Re-tokenising decoded text can merge differently at the cut; shrink until it fits.
        while keep > 0:
            tail = self.tokenizer.decode(content_ids[-keep:])
            ids = self.render([*messages[:-1], {**messages[-1], "content": tail}], chat_template)
            if len(ids) <= limit:
                return ids
            keep -= len(ids) - limit
        return None  # The system prompt and framing alone exceed the limit.
