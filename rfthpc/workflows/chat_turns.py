"""A conversation grown turn by turn as token ids, framed as the policy's chat template frames it.

A multi-turn workflow must train on exactly the tokens the policy generated and was conditioned
on. Re-rendering the whole chat each turn would re-tokenise the policy's replies (a reply's text
need not tokenise back to the ids that were sampled, and templates may rewrite earlier turns, e.g.
drop reasoning), so the context is kept as ids and only grows: after a reply, the template's
tokens that close the assistant turn, the next user turn (the environment's observation) and the
generation prompt are rendered once and appended.

Those framing tokens are measured from the template itself: a fixed chat ending with an assistant
turn is rendered without, and then with, one more user turn and the generation prompt; the
second rendering must extend the first (the usual case: each turn is rendered on its own), and
what follows the first rendering's last end-of-turn token is the framing.

Each turn, only the text from the fixed chat's last end-of-turn token on is tokenised, not the
fixed chat before it, which holds the system prompt (measured on the tiny model's tokenizer: 75 us
a turn instead of 90 us without a system prompt, instead of 275 us with one of 400 characters).
That gives the ids of tokenising the whole when the tokenizer cuts its input at that special token
before anything else and tokenises the pieces on their own, as Hugging Face's fast tokenizers do
with a special token that is not normalized. That is checked once, on the fixed chat; otherwise,
and on a turn whose rendering does not start with the fixed chat's text, the whole is tokenised.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from rfthpc.errors import UserError
from rfthpc.tasks.tasksets import EncodedPrompt, PromptBuilder

_PLACEHOLDER = "."
"""Content of the fixed user and assistant turns the framing is measured after (any text works)."""


class ChatTurns:
    """The token ids of a chat's turns under the policy's chat template and one system prompt."""

    def __init__(self, prompts: PromptBuilder, system_prompt: str | None, chat_template: str | None = None) -> None:
        self.prompts = prompts
        self.chat_template = chat_template
        self.head: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self._fixed = [*self.head, _user(_PLACEHOLDER), {"role": "assistant", "content": _PLACEHOLDER}]
        tokenizer = prompts.tokenizer
        eos: int | None = tokenizer.eos_token_id
        self._before = self._render(self._fixed, generation_prompt=False)
        ends = [i for i, t in enumerate(self._before) if t == eos]
        if eos is None or not ends:
            raise UserError(
                "the chat template does not end an assistant turn with the tokenizer's end-of-sequence token "
                f"({tokenizer.eos_token!r}), so the multi-turn workflow cannot tell where a reply ends; use a "
                "chat template (format.chat_template) whose assistant turns end with that token"
            )
        self.end_of_turn: int = eos
        """The token that ends an assistant turn (the tokenizer's end-of-sequence token)."""
        self._closing = self._before[ends[-1] + 1:]
        self._tail = self._before[ends[-1]:]
        """The fixed chat's ids from its last end-of-turn token on."""

    def _switch(self) -> dict[str, Any]:
        return {} if self.prompts.enable_thinking is None else {"enable_thinking": self.prompts.enable_thinking}

    def _render(self, messages: list[Mapping[str, Any]], generation_prompt: bool) -> list[int]:
        if generation_prompt:
            return self.prompts.render(messages, self.chat_template)
        return list(self.prompts.tokenizer.apply_chat_template(
            messages, chat_template=self.chat_template, add_generation_prompt=False, tokenize=True,
            return_dict=False, **self._switch()))

    def _text(self, messages: list[Mapping[str, Any]], generation_prompt: bool) -> str:
        return self.prompts.tokenizer.apply_chat_template(
            messages, chat_template=self.chat_template, add_generation_prompt=generation_prompt, tokenize=False,
            **self._switch())

    def _encode(self, text: str) -> list[int]:
        # As `apply_chat_template(tokenize=True)` tokenises its rendering.
        return list(self.prompts.tokenizer(text, add_special_tokens=False)["input_ids"])

    @functools.cached_property
    def _cut(self) -> tuple[str, int] | None:
        """The fixed chat's text and the index where its last end-of-turn token starts, if the text
        cut there tokenises as the whole does (see the module doc); else None. Found at the first
        `next_turn`: an episode of one turn needs none."""
        tokenizer = self.prompts.tokenizer
        token = getattr(tokenizer, "added_tokens_decoder", {}).get(self.end_of_turn)
        if (not getattr(tokenizer, "is_fast", False) or getattr(tokenizer, "split_special_tokens", False)
                or token is None or not token.special or token.normalized or token.lstrip):
            return None
        text = self._text(self._fixed, generation_prompt=False)
        at = text.rfind(str(token.content))
        if at <= 0 or self._encode(text[at:]) != self._tail or self._encode(text[:at]) + self._tail != self._before:
            return None
        return text, at

    def first_prompt(self, observation: str) -> EncodedPrompt | None:
        """The opening prompt: system prompt, the first observation as the user turn, the generation
        prompt; within `max_prompt_tokens` as any prompt (None: skipped, too long)."""
        return self.prompts.encode([*self.head, _user(observation)], self.chat_template)

    def next_turn(self, reply: list[int], observation: str) -> list[int]:
        """The ids that follow the policy's `reply` (as generated): the end of the assistant turn (its
        end-of-turn token too, if the reply was cut before it), `observation` as the next user turn,
        and the generation prompt."""
        closed = [] if reply and reply[-1] == self.end_of_turn else [self.end_of_turn]
        messages = [*self._fixed, _user(observation)]
        if self._cut is not None:
            before, at = self._cut
            text = self._text(messages, generation_prompt=True)
            if text.startswith(before):
                tail = self._encode(text[at:])
                if tail[:len(self._tail)] == self._tail:
                    return closed + self._closing + tail[len(self._tail):]
        after = self._render(messages, generation_prompt=True)
        if after[:len(self._before)] != self._before:
            raise UserError(
                "the chat template renders earlier turns differently once a user turn follows, so the "
                "conversation cannot grow by appending turns; use a chat template (format.chat_template) "
                "that renders each turn on its own"
            )
        return closed + self._closing + after[len(self._before):]


def _user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}
