"""Taskset loading from every local layout a user has, its errors, and prompt building."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

from rfthpc.demos.synth_gsm8k import (
    generate_splits,
    write_hf_disk,
    write_hub_layout,
    write_json,
    write_jsonl,
    write_parquet,
    write_splits,
)
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.errors import ConfigError, UserError
from rfthpc.tasks.tasksets import PromptBuilder, Task, load_taskset, read_split

SPLITS = generate_splits(12, 4, seed=5)


@pytest.fixture
def cache(tmp_path: Path) -> str:
    return str(tmp_path / "hf_cache")


def _load(path: Path, cache: str, **kwargs) -> list[Task]:
    return load_taskset(path, name="gsm", cache_dir=cache, **kwargs)


def _check(tasks: list[Task], split: str) -> None:
    records = SPLITS[split]
    assert [t.prompt for t in tasks] == [r["question"] for r in records]
    assert [t.truth for t in tasks] == [r["answer"] for r in records]
    assert [t.task_id for t in tasks] == [f"gsm/{i}" for i in range(len(records))]
    assert tasks[0].raw == records[0]


@pytest.mark.parametrize("fmt", ["jsonl", "json", "parquet"])
def test_directory_of_split_files(tmp_path: Path, cache: str, fmt: str) -> None:
    write_splits(tmp_path / "d", SPLITS, fmt)  # type: ignore[arg-type]
    _check(_load(tmp_path / "d", cache, split="test"), "test")
    _check(_load(tmp_path / "d", cache), "train")


@pytest.mark.parametrize(
    "writer,name", [(write_jsonl, "x.jsonl"), (write_json, "x.json"), (write_parquet, "x.parquet")]
)
def test_single_file_is_the_requested_split(tmp_path: Path, cache: str, writer, name: str) -> None:
    writer(tmp_path / name, SPLITS["test"])
    _check(_load(tmp_path / name, cache, split="test"), "test")


def test_save_to_disk_directory(tmp_path: Path, cache: str) -> None:
    write_hf_disk(tmp_path / "saved", SPLITS)
    _check(_load(tmp_path / "saved", cache, split="test"), "test")
    with pytest.raises(UserError, match="has no subsets"):
        _load(tmp_path / "saved", cache, subset_name="main")


def test_downloaded_hub_repo_with_subsets(tmp_path: Path, cache: str) -> None:
    repo = tmp_path / "gsm8k"
    write_hub_layout(repo, SPLITS, config="main")
    write_hub_layout(repo, {"train": SPLITS["test"]}, config="socratic")
    assert (repo / "main" / "train-00000-of-00001.parquet").is_file()
    _check(_load(repo, cache, subset_name="main", split="test"), "test")
    assert [t.prompt for t in _load(repo, cache, subset_name="socratic")] == [r["question"] for r in SPLITS["test"]]
    with pytest.raises(UserError, match="no subset 'nope'.*main, socratic"):
        _load(repo, cache, subset_name="nope")
    with pytest.raises(UserError, match="several subsets.*main"):
        _load(repo, cache)
    with pytest.raises(UserError, match="no split 'validation'.*train, test|no split 'validation'.*test, train"):
        _load(repo, cache, subset_name="main", split="validation")


def test_hub_layout_without_readme_uses_the_subset_directory(tmp_path: Path, cache: str) -> None:
    repo = write_hub_layout(tmp_path / "gsm8k", SPLITS)
    (repo / "README.md").unlink()
    _check(_load(repo, cache, subset_name="main", split="test"), "test")


def test_missing_path_says_how_to_download(tmp_path: Path, cache: str) -> None:
    with pytest.raises(UserError, match=r"does not exist.*huggingface-cli download --repo-type dataset"):
        _load(tmp_path / "openai" / "gsm8k", cache)


def test_missing_split_lists_the_splits(tmp_path: Path, cache: str) -> None:
    write_splits(tmp_path, SPLITS, "jsonl")
    with pytest.raises(UserError, match="no split 'validation'; set split to one of: train, test"):
        _load(tmp_path, cache, split="validation")


def test_missing_keys_list_the_columns(tmp_path: Path, cache: str) -> None:
    path = write_jsonl(tmp_path / "t.jsonl", SPLITS["train"])
    with pytest.raises(UserError, match="prompt_key='problem' is not a column; the columns are: question, answer"):
        _load(path, cache, prompt_key="problem")
    with pytest.raises(UserError, match="response_key='solution' is not a column"):
        _load(path, cache, response_key="solution")
    tasks = _load(path, cache, response_key=None)
    assert tasks[0].truth is None


def test_unreadable_data_is_a_user_error(tmp_path: Path, cache: str) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(UserError, match="unsupported type '.txt'"):
        _load(tmp_path / "notes.txt", cache)
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="cannot read dataset"):
        _load(tmp_path / "empty", cache)
    (tmp_path / "bad.jsonl").write_text('{"question": "a"\n')
    with pytest.raises(UserError, match="cannot read dataset .*JSON parse error"):
        _load(tmp_path / "bad.jsonl", cache)
    write_jsonl(tmp_path / "null.jsonl", [{"question": None, "answer": "1"}])
    with pytest.raises(UserError, match="row 0: column 'question' is None"):
        _load(tmp_path / "null.jsonl", cache)
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "header.csv").write_text("question,answer\n")
    for empty in ("empty.jsonl", "header.csv"):
        with pytest.raises(UserError, match="cannot read dataset"):
            _load(tmp_path / empty, cache)


def test_task_options_and_per_row_overrides(tmp_path: Path, cache: str) -> None:
    overrides = [("simple_workflow", "format_reward"), ("", "")] * 2
    rows = [dict(r, wf=w, rf=f) for r, (w, f) in zip(SPLITS["test"], overrides)]
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    args = SamplingArgs(temperature=0.7, top_p=0.9, top_k=20, max_tokens=64)
    tasks = _load(
        path, cache, workflow_key="wf", reward_fn_key="rf", reward_fn="math_reward", rollout_args=args,
        repeat_times=4, system_prompt="S", is_eval=True, workflow_args={"system_prompt": "x"},
    )
    assert (tasks[0].workflow, tasks[0].reward_fn) == ("simple_workflow", "format_reward")
    assert (tasks[1].workflow, tasks[1].reward_fn) == ("math_workflow", "math_reward")
    assert all(t.rollout_args == args and t.repeat_times == 4 and t.is_eval for t in tasks)
    assert tasks[0].workflow_args == {"system_prompt": "x"} and tasks[0].system_prompt == "S"
    with pytest.raises(ConfigError, match="repeat_times=0"):
        _load(path, cache, repeat_times=0)


def test_read_split_caches_on_the_node_by_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "node_tmp"))
    write_splits(tmp_path / "data", SPLITS, "parquet")
    assert read_split(tmp_path / "data", split="test").column_names == ["question", "answer"]
    assert any((tmp_path / "node_tmp" / f"rfthpc-datasets-{os.getuid()}").iterdir())


def _task(prompt: str, system: str | None = None, chat_template: str | None = None) -> Task:
    return Task(
        "t/0", "t", 0, {}, prompt, "1", "math_workflow", None, system_prompt=system, chat_template=chat_template
    )


def test_prompt_builder_renders_system_and_user(tiny_tokenizer) -> None:
    builder = PromptBuilder(tiny_tokenizer)
    task = _task("Tom has 3 apples.")
    messages = builder.messages(task, default_system_prompt="Solve it.")
    assert messages == [{"role": "system", "content": "Solve it."}, {"role": "user", "content": "Tom has 3 apples."}]
    assert builder.messages(_task("Q", system="Mine"), "Solve it.")[0]["content"] == "Mine"
    assert builder.messages(_task("Q", system=""), "Solve it.") == [{"role": "user", "content": "Q"}]
    ids = builder.encode(messages).token_ids
    assert tiny_tokenizer.decode(ids) == (
        "<|im_start|>system\nSolve it.<|im_end|>\n"
        "<|im_start|>user\nTom has 3 apples.<|im_end|>\n<|im_start|>assistant\n"
    )
    plain = builder.encode(messages, chat_template="{% for m in messages %}{{ m['content'] }}|{% endfor %}")
    assert tiny_tokenizer.decode(plain.token_ids) == "Solve it.|Tom has 3 apples.|"


def test_long_prompt_is_truncated_keeping_framing_and_tail(tiny_tokenizer) -> None:
    question = " ".join(f"Sam has {i} cards." for i in range(40)) + " How many cards does Sam have now?"
    messages = PromptBuilder.messages(_task(question), "Solve it.")
    full = PromptBuilder(tiny_tokenizer).encode(messages).token_ids
    builder = PromptBuilder(tiny_tokenizer, max_prompt_tokens=60)
    prompt = builder.encode(messages)
    assert len(full) > 60 and prompt.truncated and len(prompt.token_ids) <= 60
    text = tiny_tokenizer.decode(prompt.token_ids)
    assert text.startswith("<|im_start|>system\nSolve it.<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("How many cards does Sam have now?<|im_end|>\n<|im_start|>assistant\n")
    assert (builder.truncated, builder.skipped) == (1, 0)
    assert builder.encode(PromptBuilder.messages(_task("Short."))).truncated is False
    assert builder.truncated == 1


def test_long_prompt_is_skipped_when_truncation_is_off_or_impossible(tiny_tokenizer) -> None:
    messages = PromptBuilder.messages(_task("Sam has 3 cards. " * 30), "Solve it.")
    builder = PromptBuilder(tiny_tokenizer, max_prompt_tokens=60, enable_prompt_truncation=False)
    assert builder.encode(messages) is None
    assert (builder.truncated, builder.skipped) == (0, 1)
    tight = PromptBuilder(tiny_tokenizer, max_prompt_tokens=5)  # less than the chat framing itself
    assert tight.encode(messages) is None and tight.skipped == 1
    with pytest.raises(ConfigError, match="max_prompt_tokens=0"):
        PromptBuilder(tiny_tokenizer, max_prompt_tokens=0)


def test_tokenizer_without_chat_template_is_a_user_error(tiny_model: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = None
    with pytest.raises(UserError, match="format.chat_template"):
        PromptBuilder(tok).encode([{"role": "user", "content": "Q"}])


def test_rollout_args_are_validated() -> None:
    for bad in ({"temperature": -1}, {"top_p": 0}, {"top_k": 0}, {"max_tokens": 0}):
        with pytest.raises(ConfigError, match="rollout_args"):
            SamplingArgs(**bad)
    # vLLM raises a temperature in [1e-5, 0.01) to 0.01 and samples there, while the trainer would take
    # logprobs at the value given; below 1e-5 both engines decode greedily.
    with pytest.raises(ConfigError, match=r"temperature=0.005: use 0 \(greedy\) or at least 0.01"):
        SamplingArgs(temperature=0.005)
    assert SamplingArgs(temperature=1e-6).temperature == 1e-6 and SamplingArgs(temperature=0.01).temperature == 0.01


def test_json_dir_file_is_a_list(tmp_path: Path) -> None:
    write_splits(tmp_path, SPLITS, "json")
    assert json.loads((tmp_path / "train.json").read_text()) == SPLITS["train"]


def test_columns_are_read_from_the_header_of_every_layout(tmp_path: Path) -> None:
    """`dataset_columns` (validation before the queue) agrees with what the loader reads, for each
    layout; a JSON document (columns only by reading it all) is left to the loader."""
    from rfthpc.tasks.columns import dataset_columns

    columns = list(SPLITS["train"][0])
    for fmt in ("jsonl", "parquet"):
        write_splits(tmp_path / fmt, SPLITS, fmt)  # type: ignore[arg-type]
        assert dataset_columns(tmp_path / fmt, split="test") == columns
    write_hf_disk(tmp_path / "saved", SPLITS)
    assert dataset_columns(tmp_path / "saved", split="train") == columns
    repo = write_hub_layout(tmp_path / "hub", SPLITS, config="main")
    assert dataset_columns(repo, "main", "test") == columns
    csv_file = tmp_path / "x.csv"
    csv_file.write_text(",".join(columns) + "\n" + ",".join("v" for _ in columns) + "\n")
    assert dataset_columns(csv_file) == columns
    import pyarrow as pa

    table = pa.table({c: [r[c] for r in SPLITS["test"]] for c in columns})
    with pa.OSFile(str(tmp_path / "x.arrow"), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    assert dataset_columns(tmp_path / "x.arrow") == columns
    assert [t.prompt for t in load_taskset(tmp_path / "x.arrow", name="a", split="train")][:1] == \
        [SPLITS["test"][0]["question"]]
    write_json(tmp_path / "doc.json", SPLITS["test"])
    assert dataset_columns(tmp_path / "doc.json") is None


def _verl_rows(n: int) -> list[dict]:
    """Rows in veRL's layout (its examples/data_preprocess/gsm8k.py): a chat, the answer in a record."""
    return [{"data_source": "openai/gsm8k",
             "prompt": [{"role": "user", "content": f"What is {i} + {i}?"}],
             "ability": "math",
             "reward_model": {"style": "rule", "ground_truth": str(2 * i)},
             "extra_info": {"split": "train", "index": i}} for i in range(n)]


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_keys_name_fields_inside_records_by_dotted_path(tmp_path: Path, cache: str, fmt: str) -> None:
    """veRL's rows keep the reference answer at reward_model.ground_truth: a dotted key reads it, in the
    loader and in the header check alike."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rfthpc.tasks.columns import dataset_columns

    path = tmp_path / f"train.{fmt}"
    if fmt == "parquet":
        pq.write_table(pa.Table.from_pylist(_verl_rows(3)), path)
    else:
        write_jsonl(path, _verl_rows(3))
    columns = dataset_columns(path)
    assert columns is not None and {"reward_model", "reward_model.ground_truth", "extra_info.index"} <= set(columns)
    tasks = _load(path, cache, prompt_type="messages", messages_key="prompt", response_key="reward_model.ground_truth")
    assert [(t.prompt, t.truth) for t in tasks] == [(f"What is {i} + {i}?", str(2 * i)) for i in range(3)]
    with pytest.raises(UserError, match="response_key='reward_model.answer' is not a column; the columns are: "
                                        "data_source, prompt, ability, reward_model, reward_model.style"):
        _load(path, cache, prompt_type="messages", messages_key="prompt", response_key="reward_model.answer")


def test_an_empty_record_is_a_user_error(tmp_path: Path, cache: str) -> None:
    rows = _verl_rows(2)
    rows[1]["reward_model"] = None
    path = write_jsonl(tmp_path / "t.jsonl", rows)
    with pytest.raises(UserError, match=r"row 1: has no 'reward_model.ground_truth'"):
        _load(path, cache, prompt_type="messages", messages_key="prompt", response_key="reward_model.ground_truth")
