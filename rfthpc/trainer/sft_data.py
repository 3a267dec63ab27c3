"""SFT and DPO data: a dataset (`buffer.trainer_input.experience_buffer`) as samples, in order, resumably.

Rows are read with the taskset loader (`rfthpc.tasks.tasksets.read_split`: a local HF dataset
directory, parquet, jsonl, json). Two shapes (`format.prompt_type`):
- plaintext: `prompt_key` (user message) and `response_key` (the assistant's reply), with an
  optional system prompt (`format.system_prompt` or the `system_prompt_key` column);
- messages: a chat list under `messages_key`; every assistant turn is trained on.

Tokens come from the chat template: for assistant turn i, the reply's tokens are the template of
messages[:i+1] minus the template of messages[:i] with the generation prompt. The loss covers
the reply up to and including the end-of-turn token (not the newline some templates add after).

DPO (`PreferenceData`, Trinity-RFT's dpo formatter): a row is a prompt and two replies, each made a
sample of the pair (the row's `group`):
- plaintext: `prompt_key` (user message, after the optional system prompt as above), `chosen_key` and
  `rejected_key` (the replies' texts);
- messages: the chat under `messages_key` is the prompt; `chosen_key` and `rejected_key` are lists of
  messages continuing it (an assistant turn, or several).
Each reply is tokenized as SFT's assistant turns are, after the prompt; only the reply's turns enter
the loss (the prompt's own assistant turns, if any, do not).

Step k takes rows `k * n ... (k + 1) * n - 1` (modulo the dataset size: epochs follow each other),
so the position is one number, saved in the checkpoint (a resumed run continues where it was).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from rfthpc.config.buffer import ExperienceBufferConfig
from rfthpc.errors import UserError
from rfthpc.tasks.columns import column_problem, column_value, field_paths, format_columns
from rfthpc.trainer.samples import Sample


class SFTData:
    """Samples of an SFT dataset, `n` rows per step, position kept as `consumed`."""

    kind = "SFT dataset"
    """What the dataset is called in messages."""

    def __init__(
        self,
        buffer: ExperienceBufferConfig,
        tokenizer: Any,
        max_length: int | None,
        chat_template: str | None = None,
        enable_thinking: bool | None = None,
    ) -> None:
        from rfthpc.tasks.tasksets import read_split

        if not buffer.path:
            raise UserError("buffer.trainer_input.experience_buffer.path: an sft or dpo stage trains on a dataset; "
                            "give its path")
        self.where = f"{self.kind} {buffer.path} (split {buffer.split!r})"
        self.rows = read_split(buffer.path, buffer.subset_name, buffer.split)
        if len(self.rows) == 0:
            raise UserError(f"{self.where} has no rows")
        self.format = buffer.format
        self.tokenizer = tokenizer
        self.max_length = max_length
        self.chat_template = buffer.format.chat_template or chat_template
        # The explorer's switch (`model.enable_thinking`): warm-up replies are rendered the way
        # the rollouts' prompts will be.
        self.template_kwargs = {} if enable_thinking is None else {"enable_thinking": enable_thinking}
        self.eos_id = tokenizer.eos_token_id
        self.consumed = 0
        self.truncated = 0
        problem = column_problem(self.where, field_paths(self.rows.features), self._required_columns())
        if problem:
            raise UserError(problem)

    def __len__(self) -> int:
        return len(self.rows)

    def state_dict(self) -> dict[str, int]:
        """The position (rows handed out), for the checkpoint."""
        return {"consumed": self.consumed}

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Continue from a checkpointed position."""
        self.consumed = int(state["consumed"])

    def take(self, n: int) -> list[Sample]:
        """The samples of the next `n` rows (each row its own group)."""
        out = []
        for j in range(n):
            index = (self.consumed + j) % len(self.rows)
            out += self._row_samples(self.rows[index], index, j)
        self.consumed += n
        return out

    def _required_columns(self) -> list[tuple[str, str]]:
        """(format option, column) of every column this dataset's rows are read from."""
        return format_columns(self.format, sft=True)

    def _row_samples(self, row: Mapping[str, Any], index: int, group: int) -> list[Sample]:
        """The samples of one row: its conversation, every assistant turn trained."""
        return [self._sample(self._messages(row, index), index, group, trained_from=0)]

    def _messages(self, row: Mapping[str, Any], index: int) -> list[dict[str, str]]:
        f = self.format
        if f.prompt_type == "messages":
            return self._chat(row, f.messages_key, index)
        return self._plain_prompt(row, index) + [
            {"role": "assistant", "content": str(self._value(row, f.response_key, index))}]

    def _plain_prompt(self, row: Mapping[str, Any], index: int) -> list[dict[str, str]]:
        """The system message (if any) and the user message of a plaintext row."""
        f = self.format
        system = self._value(row, f.system_prompt_key, index) if f.system_prompt_key else f.system_prompt
        out = [{"role": "system", "content": system}] if system else []
        return out + [{"role": "user", "content": str(self._value(row, f.prompt_key, index))}]

    def _chat(self, row: Mapping[str, Any], key: str, index: int) -> list[dict[str, str]]:
        """The list of messages under `key` of a row (UserError unless it is one)."""
        messages = self._value(row, key, index)
        if not isinstance(messages, Sequence) or not all(isinstance(m, Mapping) for m in messages):
            raise UserError(f"{self.where} row {index}: {key!r} must be a list of {{role, content}}")
        return [dict(m) for m in messages]

    def _value(self, row: Mapping[str, Any], key: str, index: int) -> Any:
        """The value a format key names in a row (a column, or a field inside one: `column_value`)."""
        try:
            return column_value(row, key)
        except KeyError:
            raise UserError(f"{self.where} row {index}: has no {key!r} (a record above it is empty); fix the "
                            "data") from None

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, chat_template=self.chat_template, tokenize=True,
                                                 add_generation_prompt=generation_prompt, return_dict=False,
                                                 **self.template_kwargs)
        return list(ids)

    def _sample(self, messages: list[dict[str, str]], index: int, group: int, trained_from: int,
                preference: int = 0) -> Sample:
        """The sample of a conversation whose assistant turns from message `trained_from` on are trained."""
        turns = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i >= trained_from]
        if not turns or turns[0] == 0:
            raise UserError(f"{self.where} row {index}: needs an assistant reply after at least one other message")
        prompt = self._render(messages[:turns[0]], generation_prompt=True)
        tokens, mask = list(prompt), [False] * len(prompt)
        for i in turns:
            before = self._render(messages[:i], generation_prompt=True)
            upto = self._render(messages[:i + 1], generation_prompt=False)
            if upto[:len(before)] != before or len(before) < len(tokens) or before[:len(tokens)] != tokens:
                raise UserError(
                    f"{self.where} row {index}: the chat template does not render the conversation as a prefix "
                    "of itself plus the reply, so the reply's tokens cannot be found; use a template that does "
                    "(e.g. Qwen's), or format.prompt_type plaintext"
                )
            reply = upto[len(before):]
            end = reply.index(self.eos_id) + 1 if self.eos_id in reply else len(reply)
            mask += [False] * (len(before) - len(tokens)) + [True] * end + [False] * (len(reply) - end)
            tokens = upto
        if self.max_length is not None and len(tokens) > self.max_length:
            self.truncated += 1
            tokens, mask = tokens[:self.max_length], mask[:self.max_length]
        p = len(prompt)
        return Sample(prompt_ids=np.asarray(tokens[:p], dtype=np.int64),
                      response_ids=np.asarray(tokens[p:], dtype=np.int64),
                      loss_mask=np.asarray(mask[p:], dtype=bool), group=group, preference=preference)


class PreferenceData(SFTData):
    """DPO pairs of a preference dataset (module docstring), `n` rows (2n samples) per step."""

    kind = "DPO dataset"

    def _required_columns(self) -> list[tuple[str, str]]:
        return format_columns(self.format, sft=True, pairs=True)

    def _row_samples(self, row: Mapping[str, Any], index: int, group: int) -> list[Sample]:
        """The chosen sample (preference +1), then the rejected one (-1), of one row."""
        f = self.format
        if f.prompt_type == "messages":
            prompt = self._chat(row, f.messages_key, index)
            replies = [self._chat(row, key, index) for key in (f.chosen_key, f.rejected_key)]
        else:
            prompt = self._plain_prompt(row, index)
            replies = [[{"role": "assistant", "content": str(self._value(row, key, index))}]
                       for key in (f.chosen_key, f.rejected_key)]
        return [self._sample(prompt + reply, index, group, trained_from=len(prompt), preference=sign)
                for reply, sign in zip(replies, (1, -1))]


def load_tokenizer(model_dir: Path, chat_template: str | None = None) -> Any:
    """The tokenizer of `model_dir` (with `chat_template` replacing its own when given)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    if chat_template:
        tokenizer.chat_template = chat_template
    return tokenizer
