"""`buffer` section: tasksets the explorers read and the experience buffer the trainer reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Optional

import tyro


@dataclass
class FormatConfig:
    """How records of a dataset become prompts and ground truths. A key naming a column may instead name a
    field inside a column of records by its dotted path (`reward_model.ground_truth`, veRL's layout)."""

    prompt_type: Literal["plaintext", "messages"] = "plaintext"
    """plaintext: the `prompt_key` column is the user message; messages: the `messages_key` column is a
    chat (a list of {role, content}) that the model answers."""
    prompt_key: str = "prompt"
    """Column holding the question / prompt (prompt_type plaintext)."""
    response_key: str = "response"
    """Column holding the reference answer (ground truth, or the SFT target); "" for a taskset without one
    (e.g. environment tasks, whose environment scores the episodes)."""
    chosen_key: str = "chosen"
    """DPO datasets: column holding the preferred reply (plaintext: its text; messages: a list of messages
    continuing the `messages_key` chat, e.g. one assistant turn)."""
    rejected_key: str = "rejected"
    """DPO datasets: column holding the dispreferred reply, in the form of `chosen_key`'s."""
    messages_key: str = "messages"
    """Column holding a chat when `prompt_type` is messages (tasksets: it must not end with an assistant turn)."""
    system_prompt: Optional[str] = None
    """System message put before every prompt (a chat that starts with its own system message keeps that)."""
    system_prompt_key: Optional[str] = None
    """Column holding a per-record system message; where it is empty, `system_prompt` applies."""
    reply_prefix: Optional[str] = None
    """Tasksets: text the assistant's reply starts with (e.g. `<think>`), appended to the prompt after
    the chat template's generation prompt; the response (and what the reward function sees) is the
    text generated after it."""
    chat_template: Optional[str] = None
    """A Jinja chat template for this dataset, replacing the tokenizer's."""
    workflow_key: Optional[str] = None
    """Tasksets: column naming a row's workflow (overrides `default_workflow_type` where non-empty)."""
    reward_fn_key: Optional[str] = None
    """Tasksets: column naming a row's reward function (overrides `default_reward_fn_type` where non-empty)."""


@dataclass
class RolloutArgs:
    """Sampling parameters of one taskset; unset values come from `model`."""

    temperature: Optional[float] = None
    """Sampling temperature."""
    top_p: Optional[float] = None
    """Nucleus sampling threshold."""
    top_k: Optional[int] = None
    """Top-k (-1: off)."""
    max_tokens: Optional[int] = None
    """Response token limit; defaults to `model.max_response_tokens`."""
    logprobs: Optional[int] = None
    """Top alternatives (0-20) per response token handed to workflows with their logprobs; defaults to
    `model.logprobs`. The store keeps the sampled token's logprob only."""
    seed: Optional[int] = None
    """Sampling seed of every request of this taskset: the same policy and prompt give the same
    responses (e.g. a reproducible evaluation); None: not seeded."""


@dataclass
class TaskSelectorConfig:
    """Order in which tasks of a taskset are handed out (Trinity-RFT's `data_selector`)."""

    selector_type: Literal["sequential", "shuffle"] = "sequential"
    """sequential: dataset order; shuffle: a new seeded permutation per epoch. Trinity-RFT's random,
    offline_easy2hard and difficulty_based are errors that name the alternative."""
    seed: int = 42
    """Seed of the shuffle."""


@dataclass
class TasksetConfig:
    """One taskset (train or eval) read by the explorers (veRL's `data.train_files` / `val_files`)."""

    name: str = ""
    """Name of the taskset; keys its claims and metrics."""
    storage_type: Literal["file"] = "file"
    """Where tasks come from: a local file or dataset directory."""
    path: Optional[str | list[str]] = None
    """Local HF dataset directory, parquet, jsonl or json file (compute nodes have no internet); or a
    list of them with the same columns, read as one taskset whose rows are theirs in that order
    (veRL's list of `data.train_files`, which it concatenates)."""
    subset_name: Optional[str] = None
    """Dataset configuration (e.g. `main` for openai/gsm8k)."""
    split: str = "train"
    """Dataset split."""
    repeat_times: Optional[int] = None
    """Responses per task; defaults to `algorithm.repeat_times` (1 for eval tasksets)."""
    format: FormatConfig = field(default_factory=FormatConfig)
    """Column names and prompt building."""
    rollout_args: RolloutArgs = field(default_factory=RolloutArgs)
    """Sampling parameters for this taskset."""
    default_workflow_type: Optional[str] = None
    """Workflow for this taskset; defaults to the buffer-wide `default_workflow_type`."""
    default_reward_fn_type: Optional[str] = None
    """Reward function for this taskset; defaults to the buffer-wide `default_reward_fn_type`."""
    workflow_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the workflow."""
    reward_fn_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the reward function."""
    task_selector: TaskSelectorConfig = field(default_factory=TaskSelectorConfig)
    """Task order (training tasksets; an evaluation runs every task of an eval taskset). Also read
    under Trinity-RFT's current name `data_selector` (both given and different: an error)."""
    total_epochs: Optional[int] = None
    """Passes over this training taskset; defaults to `buffer.total_epochs` (eval tasksets: every
    evaluation is one pass)."""
    enable_progress_bar: bool = False
    """Show the `datasets` progress bars while the explorer reads this taskset (off: quiet Slurm logs)."""


@dataclass
class ExplorerInputConfig:
    """What the explorers read."""

    # Hidden from the command line: loading moves it into `tasksets`, overridden as `tasksets.0.*`.
    taskset: Annotated[Optional[TasksetConfig], tyro.conf.Suppress] = None
    """A single training taskset (Trinity's shorthand for a one-element `tasksets`)."""
    tasksets: list[TasksetConfig] = field(default_factory=list)
    """Training tasksets."""
    eval_tasksets: list[TasksetConfig] = field(default_factory=list)
    """Evaluation tasksets; their results are metrics, never training data."""
    default_workflow_type: Optional[str] = None
    """Workflow used by tasksets that do not name one (e.g. math_workflow)."""
    default_eval_workflow_type: Optional[str] = None
    """Workflow for eval tasksets that do not name one; defaults to `default_workflow_type`."""
    default_reward_fn_type: Optional[str] = None
    """Reward function used by tasksets that do not name one."""
    system_prompt: Optional[str] = None
    """System prompt for tasksets whose format does not set one."""
    reply_prefix: Optional[str] = None
    """Reply prefix (see `format.reply_prefix`) for tasksets whose format does not set one."""


@dataclass
class ReplayBufferConfig:
    """Experience replay (RL stages): the highest-priority groups are read first, and may be read again.

    Trinity-RFT's priority-queue buffer, kept in the trainer's checkpoints (docs/store.md, "Replay")."""

    enable: bool = False
    """Read through the replay buffer. Off: each group once, in commit order."""
    priority_fn: str = "linear_decay"
    """What is read first: `linear_decay` (policy_version - decay x reads: the newest policy's groups, the
    less read first), `decay_limit_randomization` (the same plus N(0, sigma) noise; a group leaves after
    `use_count_limit` reads, <= 0: never), or your own `module:function` taking (policy_version, reads,
    rng, *, <args>) and returning a priority, or None to let the group leave."""
    reuse_cooldown_time: float | None = None
    """Seconds after a read before a group may be read again; null: each group is read once (the buffer
    only orders reading). Every read counts against `synchronizer.max_staleness`: a group leaves once
    it is too stale."""
    priority_fn_args: dict[str, Any] = field(default_factory=lambda: {"decay": 2.0})
    """Keyword arguments of the priority function (`decay`; also `use_count_limit`, `sigma` for
    decay_limit_randomization); unset ones keep the function's defaults."""


@dataclass
class ExperienceBufferConfig:
    """The trainer's input. In RL stages it is the run directory's HDF5 store; in SFT stages a dataset."""

    name: str = "experience_buffer"
    """Name of the buffer."""
    storage_type: Literal["queue", "file", "sql"] = "queue"
    """Trinity's buffer kind. rfthpc always exchanges RL experience through its HDF5 store; `file` with
    a `path` is an SFT dataset."""
    path: Optional[str] = None
    """SFT stages: the dataset (HF dir, parquet, jsonl, json). RL stages: ignored (the store lives in
    the run directory)."""
    subset_name: Optional[str] = None
    """Dataset configuration of an SFT dataset."""
    split: str = "train"
    """Split of an SFT dataset."""
    format: FormatConfig = field(default_factory=FormatConfig)
    """Column names of an SFT dataset."""
    max_read_timeout: float = 1800.0
    """Seconds the trainer waits for enough experience before it stops with an error."""
    groups_per_chunk: int = 64
    """Experience groups an explorer writes per HDF5 chunk at most (fewer, larger files suit Lustre's
    metadata servers)."""
    max_chunk_delay: float = 5.0
    """Seconds an explorer may hold finished groups before committing a partial chunk (it also commits
    at the end of each batch of tasks and before waiting for new weights)."""
    capacity: int = 10000
    """With `replay_buffer.enable`: the most groups the replay buffer holds (Trinity-RFT counts explorer
    writes); a group entering a full buffer pushes out the lowest-priority one, counted as lost
    if it was never read. Without replay it has no effect: explorers are held back by
    `synchronizer.max_staleness` instead."""
    replay_buffer: ReplayBufferConfig = field(default_factory=ReplayBufferConfig)
    """Experience replay: reading order and reuse of groups."""


@dataclass
class TrainerInputConfig:
    """What the trainer reads."""

    experience_buffer: ExperienceBufferConfig = field(default_factory=ExperienceBufferConfig)
    """The experience buffer (or SFT dataset)."""
    auxiliary_buffers: dict[str, ExperienceBufferConfig] = field(default_factory=dict)
    """Datasets read beside the experience, by name: a mix stage's expert SFT data
    (`algorithm.sample_strategy: mix`, under `sample_strategy_args.sft_dataset_name`, default `sft_dataset`)."""


@dataclass
class BufferConfig:
    """Batch sizes, epochs, and the inputs of explorers and trainer."""

    batch_size: int = 1
    """Tasks per explorer step (veRL's `ppo_mini_batch_size`)."""
    train_batch_size: Optional[int] = None
    """Experiences per trainer step (whole groups of `repeat_times`); defaults to `batch_size * repeat_times`.
    Where explorers and trainer run together it may not exceed that: explorers count `batch_size` tasks to a
    trainer step and generate within `max_staleness` of it."""
    total_epochs: int = 1
    """Passes over the training tasksets."""
    total_steps: Optional[int] = None
    """Trainer steps; when set it bounds the run regardless of `total_epochs`."""
    explorer_input: ExplorerInputConfig = field(default_factory=ExplorerInputConfig)
    """Explorer-side inputs."""
    trainer_input: TrainerInputConfig = field(default_factory=TrainerInputConfig)
    """Trainer-side inputs."""
