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
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rfthpc.data.tasksets import EncodedPrompt, PromptBuilder
from rfthpc.errors import UserError

_PLACEHOLDER = "."
"""Content of the fixed user and assistant turns the framing is measured after (any text works)."""


class ChatTurns:
    """The token ids of a chat's turns under the policy's chat template and one system prompt."""

    def __init__(self, prompts: PromptBuilder, system_prompt: str | None, chat_template: str | None = None) -> None:
        self.prompts = prompts
        self.chat_template = chat_template
        self.head: list[dict[str, Any]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        tokenizer = prompts.tokenizer
        eos: int | None = tokenizer.eos_token_id
        self._before = self._render([*self.head, _user(_PLACEHOLDER), {"role": "assistant", "content": _PLACEHOLDER}],
                                    generation_prompt=False)
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

    def _render(self, messages: list[Mapping[str, Any]], generation_prompt: bool) -> list[int]:
        if generation_prompt:
            return self.prompts.render(messages, self.chat_template)
        switch = {} if self.prompts.enable_thinking is None else {"enable_thinking": self.prompts.enable_thinking}
        return list(self.prompts.tokenizer.apply_chat_template(
            messages, chat_template=self.chat_template, add_generation_prompt=False, tokenize=True,
            return_dict=False, **switch))

    def first_prompt(self, observation: str) -> EncodedPrompt | None:
        """The opening prompt: system prompt, the first observation as the user turn, the generation
        prompt; within `max_prompt_tokens` as any prompt (None: skipped, too long)."""
        return self.prompts.encode([*self.head, _user(observation)], self.chat_template)

    def next_turn(self, reply: list[int], observation: str) -> list[int]:
        """The ids that follow the policy's `reply` (as generated): the end of the assistant turn (its
        end-of-turn token too, if the reply was cut before it), `observation` as the next user turn,
        and the generation prompt."""
        after = self._render([*self.head, _user(_PLACEHOLDER), {"role": "assistant", "content": _PLACEHOLDER},
                              _user(observation)], generation_prompt=True)
        if after[:len(self._before)] != self._before:
            raise UserError(
                "the chat template renders earlier turns differently once a user turn follows, so the "
                "conversation cannot grow by appending turns; use a chat template (format.chat_template) "
                "that renders each turn on its own"
            )
        closed = [] if reply and reply[-1] == self.end_of_turn else [self.end_of_turn]
        return closed + self._closing + after[len(self._before):]


def _user(content: str) -> dict[str, Any]:
    return {"role": "user", "content": content}
