"""A taskset's `format` keys with the tiny model's real tokenizer: chat data (`prompt_type: messages`),
per-row system prompts, a reply prefix, the chat template's thinking switch, and the progress bar."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rfthpc.demos.tinymodel import CHAT_TEMPLATE
from rfthpc.errors import ConfigError, UserError
from rfthpc.tasks.tasksets import PromptBuilder, Task, load_taskset

# The tiny model's template plus Qwen3's switch: `enable_thinking=False` opens the reply with an
# empty think block.
THINKING_TEMPLATE = CHAT_TEMPLATE + (
    "{%- if add_generation_prompt and enable_thinking is defined and not enable_thinking -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}"
)
ASSISTANT = "<|im_start|>assistant\n"


def _write(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _load(path: Path, tmp_path: Path, **kwargs) -> list[Task]:
    return load_taskset(path, name="chat", cache_dir=str(tmp_path / "cache"), **kwargs)


def _text(tokenizer, builder: PromptBuilder, task: Task, system: str | None = None) -> str:
    prompt = builder.task_prompt(task, system)
    assert prompt is not None
    return tokenizer.decode(prompt.token_ids)


def test_messages_prompt_type_reads_the_chat(tmp_path: Path, tiny_tokenizer) -> None:
    rows = [
        {"chat": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
                  {"role": "user", "content": "What is 2 plus 3?"}], "answer": "5", "question": "unused"},
        {"chat": [{"role": "system", "content": "Own."}, {"role": "user", "content": "What is 1 plus 1?"}],
         "answer": "2", "question": "unused"},
    ]
    tasks = _load(_write(tmp_path / "chat.jsonl", rows), tmp_path, prompt_type="messages", messages_key="chat",
                  response_key="answer")
    assert tasks[0].prompt == "What is 2 plus 3?" and tasks[0].truth == "5"
    builder = PromptBuilder(tiny_tokenizer)
    # The system prompt goes first unless the chat brings its own.
    assert _text(tiny_tokenizer, builder, tasks[0], "Solve it.") == (
        "<|im_start|>system\nSolve it.<|im_end|>\n<|im_start|>user\nHi.<|im_end|>\n"
        "<|im_start|>assistant\nHello.<|im_end|>\n<|im_start|>user\nWhat is 2 plus 3?<|im_end|>\n" + ASSISTANT
    )
    assert _text(tiny_tokenizer, builder, tasks[1], "Solve it.") == (
        "<|im_start|>system\nOwn.<|im_end|>\n<|im_start|>user\nWhat is 1 plus 1?<|im_end|>\n" + ASSISTANT
    )


def test_long_chat_is_truncated_in_its_last_message(tmp_path: Path, tiny_tokenizer) -> None:
    question = " ".join(f"Sam has {i} cards." for i in range(40)) + " How many cards?"
    rows = [{"messages": [{"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."},
                          {"role": "user", "content": question}], "response": "1"}]
    (task,) = _load(_write(tmp_path / "chat.jsonl", rows), tmp_path, prompt_type="messages", response_key="response")
    builder = PromptBuilder(tiny_tokenizer, max_prompt_tokens=60)
    prompt = builder.task_prompt(task)
    assert prompt is not None and prompt.truncated and len(prompt.token_ids) <= 60
    text = tiny_tokenizer.decode(prompt.token_ids)
    assert text.startswith("<|im_start|>user\nHi.<|im_end|>\n<|im_start|>assistant\nHello.<|im_end|>\n")
    assert text.endswith("How many cards?<|im_end|>\n" + ASSISTANT)


@pytest.mark.parametrize(
    ("chat", "message"),
    [
        ([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}], "ends with an assistant turn"),
        ("What is 1 plus 1?", "must be a non-empty list"),
        ([], "must be a non-empty list"),
        ([{"role": "user"}], "role and content must be text"),
    ],
)
def test_bad_chats_are_user_errors(tmp_path: Path, chat, message: str) -> None:
    path = _write(tmp_path / "chat.jsonl", [{"messages": chat, "response": "1"}])
    with pytest.raises(UserError, match=f"row 0: .*{message}"):
        _load(path, tmp_path, prompt_type="messages", response_key="response")


def test_messages_key_must_be_a_column(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.jsonl", [{"question": "Q", "answer": "1"}])
    with pytest.raises(UserError, match=r"format.messages_key='messages' is not a column.*question, answer"):
        _load(path, tmp_path, prompt_type="messages")
    with pytest.raises(ConfigError, match="prompt_type='chat'"):
        _load(path, tmp_path, prompt_type="chat")


def test_system_prompt_key_overrides_per_row(tmp_path: Path, tiny_tokenizer) -> None:
    rows = [{"question": "Q1", "answer": "1", "sys": "Row's own."}, {"question": "Q2", "answer": "2", "sys": ""},
            {"question": "Q3", "answer": "3", "sys": None}]
    tasks = _load(_write(tmp_path / "t.jsonl", rows), tmp_path, system_prompt_key="sys", system_prompt="Taskset's.")
    assert [t.system_prompt for t in tasks] == ["Row's own.", "Taskset's.", "Taskset's."]
    text = _text(tiny_tokenizer, PromptBuilder(tiny_tokenizer), tasks[0], "Workflow's.")
    assert text.startswith("<|im_start|>system\nRow's own.<|im_end|>\n")
    with pytest.raises(UserError, match="format.system_prompt_key='system'"):
        _load(tmp_path / "t.jsonl", tmp_path, system_prompt_key="system")


def test_reply_prefix_follows_the_generation_prompt(tmp_path: Path, tiny_tokenizer) -> None:
    (task,) = _load(_write(tmp_path / "t.jsonl", [{"question": "What is 1 plus 1?", "answer": "2"}]), tmp_path,
                    reply_prefix="Answer:")
    assert task.reply_prefix == "Answer:"
    prompt = PromptBuilder(tiny_tokenizer).task_prompt(task)
    assert prompt is not None
    assert tiny_tokenizer.decode(prompt.token_ids) == (
        "<|im_start|>user\nWhat is 1 plus 1?<|im_end|>\n" + ASSISTANT + "Answer:"
    )
    # The prefix's tokens are those of the prefix alone, whatever precedes them.
    prefix = tiny_tokenizer.encode("Answer:", add_special_tokens=False)
    assert prompt.token_ids[-len(prefix):] == prefix


def test_reply_prefix_counts_against_max_prompt_tokens(tiny_tokenizer) -> None:
    question = " ".join(f"Sam has {i} cards." for i in range(40)) + " How many cards?"
    messages = [{"role": "user", "content": question}]
    builder = PromptBuilder(tiny_tokenizer, max_prompt_tokens=60)
    prompt = builder.encode(messages, reply_prefix="Let me count the cards one by one:")
    assert prompt is not None and prompt.truncated and len(prompt.token_ids) <= 60
    assert tiny_tokenizer.decode(prompt.token_ids).endswith(
        "How many cards?<|im_end|>\n" + ASSISTANT + "Let me count the cards one by one:"
    )
    # A prefix that leaves no room for the question: the prompt is skipped, and counted.
    assert builder.encode(messages, reply_prefix="word " * 60) is None and builder.skipped == 1
    strict = PromptBuilder(tiny_tokenizer, max_prompt_tokens=12, enable_prompt_truncation=False)
    short = [{"role": "user", "content": "Hi"}]
    assert strict.encode(short) is not None
    assert strict.encode(short, reply_prefix="Let me think about this.") is None


@pytest.mark.parametrize(("switch", "opening"), [(None, ""), (True, ""), (False, "<think>\n\n</think>\n\n")])
def test_enable_thinking_reaches_the_chat_template(tiny_model: Path, switch: bool | None, opening: str) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = THINKING_TEMPLATE
    builder = PromptBuilder(tokenizer, enable_thinking=switch)
    prompt = builder.encode([{"role": "user", "content": "Hi"}], reply_prefix="So:")
    assert prompt is not None
    assert tokenizer.decode(prompt.token_ids) == "<|im_start|>user\nHi<|im_end|>\n" + ASSISTANT + opening + "So:"


@pytest.mark.parametrize("enabled", [True, False])
def test_enable_progress_bar_shows_or_hides_the_datasets_bars(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], enabled: bool
) -> None:
    import datasets

    path = _write(tmp_path / "t.jsonl", [{"question": "Q", "answer": "1"}])
    before = datasets.is_progress_bar_enabled()
    capfd.readouterr()
    _load(path, tmp_path, enable_progress_bar=enabled)  # a fresh cache: `datasets` converts the file
    shown = "Generating train split" in capfd.readouterr().err
    assert shown is enabled
    assert datasets.is_progress_bar_enabled() is before, "the global switch of `datasets` is restored"
