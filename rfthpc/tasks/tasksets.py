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
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError, UserError
from rfthpc.tasks.columns import FILE_BUILDERS, column_problem, column_value, field_paths, required_columns

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
    """The user message: the `format.prompt_key` value (prompt_type messages: the chat's last message)."""
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
    messages: tuple[Mapping[str, Any], ...] | None = None
    """prompt_type messages: the chat the policy answers (the `format.messages_key` value); None: plaintext."""
    reply_prefix: str | None = None
    """Text the reply starts with, appended after the generation prompt (`format.reply_prefix`)."""


def _is_saved_to_disk(path: Path) -> bool:
    return (path / "dataset_dict.json").is_file() or (
        (path / "state.json").is_file() and (path / "dataset_info.json").is_file()
    )


def _read_file(path: Path, split: str, cache_dir: str | None) -> dict[str, Any]:
    import datasets

    builder = FILE_BUILDERS.get(path.suffix.lower())
    if builder is None:
        raise UserError(
            f"dataset file {path}: unsupported type {path.suffix!r}; use one of {', '.join(FILE_BUILDERS)}"
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
    path: str | Path | Sequence[str], subset_name: str | None = None, split: str = "train",
    cache_dir: str | None = None
) -> Any:
    """One split of a local dataset as a `datasets.Dataset` (see the module doc for the layouts); of a
    list of datasets, their rows concatenated in order."""
    if not isinstance(path, (str, Path)):
        import datasets

        parts = [read_split(p, subset_name, split, cache_dir) for p in path]
        try:
            return datasets.concatenate_datasets(parts)
        except ValueError as e:  # columns of different names or types
            raise UserError(f"datasets {', '.join(map(str, path))} cannot be read as one: {e}; give files with the "
                            "same columns") from None
    cache_dir = cache_dir or default_cache_dir()
    p = Path(path).expanduser()
    if not p.exists():
        raise UserError(f"dataset path {p} does not exist; {_DOWNLOAD_HINT}")
    try:
        splits = _read_file(p, split, cache_dir) if p.is_file() else _read_dir(p, subset_name, split, cache_dir)
    except UserError:
        raise
    except Exception as e:
        cause = e.__cause__ or e  # DatasetGenerationError wraps the parser's message
        raise UserError(f"cannot read dataset {p}: {type(cause).__name__}: {cause}") from e
    if split not in splits:
        where = f"{p} (subset {subset_name!r})" if subset_name else str(p)
        raise UserError(f"dataset {where} has no split {split!r}; set split to one of: {', '.join(splits)}")
    return splits[split]


def _field(row: Mapping[str, Any], key: str, where: str, index: int) -> Any:
    """The value a format key names in a row (`column_value`); UserError if the row lacks it."""
    try:
        return column_value(row, key)
    except KeyError:
        raise UserError(f"{where} row {index}: has no {key!r} (a record above it is empty); fix the data") from None


def _text(value: Any, key: str, where: str, index: int) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    raise UserError(f"{where} row {index}: column {key!r} is {value!r}, not text; fix the data or choose another key")


def _chat(value: Any, key: str, where: str, index: int) -> tuple[dict[str, Any], ...]:
    """A row's chat (prompt_type messages): {role, content} mappings, not ending with the answer."""
    shape = f"{where} row {index}: column {key!r} must be a non-empty list of {{role, content}} messages"
    if not isinstance(value, list) or not value:
        raise UserError(f"{shape} (format.prompt_type messages), got {value!r}")
    chat = []
    for message in value:
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str) \
                or not isinstance(message.get("content"), str):
            raise UserError(f"{shape}; {message!r} is not one (role and content must be text)")
        # Arrow gives every message the union of all messages' keys, the missing ones as None.
        chat.append({k: v for k, v in message.items() if v is not None})
    if chat[-1]["role"] == "assistant":
        raise UserError(
            f"{where} row {index}: the chat in column {key!r} ends with an assistant turn, but a taskset's chat "
            "is the prompt the policy answers; drop the final answer (give it as format.response_key) or, to "
            "start the reply with fixed text, set format.reply_prefix"
        )
    return tuple(chat)


@contextmanager
def _progress_bars(enabled: bool) -> Iterator[None]:
    """`datasets`' progress bars on or off for the block (they are a global switch of `datasets`)."""
    import datasets

    was = datasets.is_progress_bar_enabled()
    datasets.enable_progress_bars() if enabled else datasets.disable_progress_bars()
    try:
        yield
    finally:
        datasets.enable_progress_bars() if was else datasets.disable_progress_bars()


def load_taskset(
    path: str | Path | Sequence[str],
    *,
    name: str,
    subset_name: str | None = None,
    split: str = "train",
    prompt_type: Literal["plaintext", "messages"] = "plaintext",
    prompt_key: str | None = "question",
    response_key: str | None = "answer",
    messages_key: str = "messages",
    system_prompt: str | None = None,
    system_prompt_key: str | None = None,
    reply_prefix: str | None = None,
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
    enable_progress_bar: bool = False,
    cache_dir: str | None = None,
) -> list[Task]:
    """Read one split of a local dataset into Tasks with ids `<name>/<row>`.

    The prompt is the `prompt_key` column (plaintext; None: no prompt, for a workflow that reads none)
    or the chat in the `messages_key` column (messages); any key may name a field inside a column of records by its dotted path
    (`reward_model.ground_truth`, veRL's layout). `system_prompt_key`, `workflow_key` and `reward_fn_key` name optional columns
    that, where non-empty, override the system prompt, the workflow or the reward function per
    row (as Trinity-RFT's `format` keys of the same names).
    """
    if repeat_times < 1:
        raise ConfigError(f"taskset {name!r}: repeat_times={repeat_times}; use at least 1")
    if prompt_type not in ("plaintext", "messages"):
        raise ConfigError(f"taskset {name!r}: format.prompt_type={prompt_type!r}; use plaintext or messages")
    with _progress_bars(enable_progress_bar):
        ds = read_split(path, subset_name, split, cache_dir)
    where = f"taskset {name!r} ({path}, split {split!r})"
    chat = prompt_type == "messages"
    problem = column_problem(where, field_paths(ds.features), required_columns(
        prompt_type=prompt_type, prompt_key=prompt_key, response_key=response_key, messages_key=messages_key,
        system_prompt_key=system_prompt_key, workflow_key=workflow_key, reward_fn_key=reward_fn_key))
    if problem:
        raise UserError(problem)
    named = [k for k in (messages_key if chat else prompt_key, response_key, system_prompt_key, workflow_key,
                         reward_fn_key) if k]
    tasks = []
    for i, row in enumerate(ds):
        value = {key: _field(row, key, where, i) for key in named}
        messages = _chat(value[messages_key], messages_key, where, i) if chat else None
        row_system = value[system_prompt_key] if system_prompt_key else None
        tasks.append(
            Task(
                task_id=f"{name}/{i}",
                taskset=name,
                index=i,
                raw=row,
                prompt=messages[-1]["content"] if messages else (
                    _text(value[prompt_key], prompt_key, where, i) if prompt_key else ""),
                truth=None if response_key is None else _text(value[response_key], response_key, where, i),
                workflow=value[workflow_key] if workflow_key and value[workflow_key] else workflow,
                reward_fn=value[reward_fn_key] if reward_fn_key and value[reward_fn_key] else reward_fn,
                workflow_args=dict(workflow_args or {}),
                reward_fn_args=dict(reward_fn_args or {}),
                rollout_args=rollout_args,
                repeat_times=repeat_times,
                system_prompt=_text(row_system, system_prompt_key, where, i) if row_system else system_prompt,
                chat_template=chat_template,
                is_eval=is_eval,
                messages=messages,
                reply_prefix=reply_prefix or None,
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
    shortened by dropping the start of its last message: the system prompt, the chat framing,
    the generation prompt and any reply prefix stay intact, and the end of the message (where the
    question usually is) is kept. Both cases are counted in `truncated` / `skipped`.
    `enable_thinking`, when set, is passed to the chat template (Qwen3's thinking switch).
    """

    def __init__(
        self,
        tokenizer: Any,
        max_prompt_tokens: int | None = None,
        enable_prompt_truncation: bool = True,
        enable_thinking: bool | None = None,
    ):
        if max_prompt_tokens is not None and max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens={max_prompt_tokens}: use a positive count or leave it unset")
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        self.enable_prompt_truncation = enable_prompt_truncation
        self.enable_thinking = enable_thinking
        self.truncated = 0
        self.skipped = 0

    @staticmethod
    def messages(task: Task, default_system_prompt: str | None = None) -> list[dict[str, Any]]:
        """The task's chat: `[system?, user]`, or its own chat (prompt_type messages) with the system
        prompt put first unless the chat starts with its own. The task's system prompt wins."""
        system = task.system_prompt if task.system_prompt is not None else default_system_prompt
        head = [{"role": "system", "content": system}] if system else []
        if task.messages is not None:
            chat = [dict(m) for m in task.messages]
            return chat if chat[0]["role"] == "system" else head + chat
        return head + [{"role": "user", "content": task.prompt}]

    def task_prompt(self, task: Task, default_system_prompt: str | None = None) -> EncodedPrompt | None:
        """A single-turn task's prompt: its chat, chat template and reply prefix; None if skipped."""
        return self.encode(self.messages(task, default_system_prompt), task.chat_template, task.reply_prefix)

    def render(self, messages: Sequence[Mapping[str, Any]], chat_template: str | None = None,
               tools: Sequence[Mapping[str, Any]] | None = None) -> list[int]:
        """Token ids of `messages` followed by the assistant generation prompt (with `tools`: the tool
        definitions as the chat template renders them)."""
        if chat_template is None and not getattr(self.tokenizer, "chat_template", None):
            raise UserError(
                "the policy model's tokenizer has no chat template; set format.chat_template on the taskset"
            )
        switch = {} if self.enable_thinking is None else {"enable_thinking": self.enable_thinking}
        if tools:
            switch["tools"] = list(tools)
        return list(
            self.tokenizer.apply_chat_template(
                list(messages), chat_template=chat_template, add_generation_prompt=True,
                tokenize=True, return_dict=False, **switch,
            )
        )

    def encode(
        self, messages: Sequence[Mapping[str, Any]], chat_template: str | None = None, reply_prefix: str | None = None
    ) -> EncodedPrompt | None:
        """Render, append the reply prefix's tokens and apply the length policy; None if the prompt is skipped."""
        # Tokenised on its own, so the prefix is the same tokens whatever the template ends with.
        prefix = self.tokenizer.encode(reply_prefix, add_special_tokens=False) if reply_prefix else []
        ids = self.render(messages, chat_template)
        limit = self.max_prompt_tokens
        if limit is None or len(ids) + len(prefix) <= limit:
            return EncodedPrompt(ids + prefix)
        if self.enable_prompt_truncation:
            shortened = self._truncate(list(messages), chat_template, len(ids), limit - len(prefix))
            if shortened is not None:
                self.truncated += 1
                return EncodedPrompt(shortened + prefix, truncated=True)
        self.skipped += 1
        return None

    def _truncate(
        self, messages: list[Mapping[str, Any]], chat_template: str | None, length: int, limit: int
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
        return None  # The system prompt, framing and reply prefix alone exceed the limit.
