"""`trinity.common.models.model.ModelWrapper` as a plugin workflow uses it: the policy behind rfthpc's
endpoint, through OpenAI clients (`get_openai_client`, `get_openai_async_client`, which AgentScope and the
OpenAI Agents SDK take), `chat` and `extract_experience_from_history`. Every answered request is one call of
the episode, counted here in the order the answers arrive, as the endpoint records them."""

from __future__ import annotations

import threading
from typing import Any

from trinity.common.experience import Experience

_CALL_PATHS = ("/chat/completions", "/completions")


class ModelWrapper:
    """The policy an episode of a plugin workflow talks to."""

    def __init__(self, base_url: str, api_key: str, model_path: str, rollout_args: dict[str, Any]) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.model_path = model_path
        self.model_name = model_path
        self._rollout_args = rollout_args
        self._lock = threading.Lock()
        self._history: list[Experience] = []
        self.calls_made = 0
        """The episode's calls so far (the history may have been taken out)."""

    # ---- calls -------------------------------------------------------------------------------

    def _answered(self, path: str, status: int) -> None:
        if status == 200 and path.endswith(_CALL_PATHS):
            with self._lock:
                self._history.append(Experience(call=self.calls_made))
                self.calls_made += 1

    def get_openai_client(self) -> Any:
        """A synchronous `openai.OpenAI` client of the policy; its calls are the episode's."""
        import httpx
        import openai

        def hook(response: httpx.Response) -> None:
            self._answered(response.request.url.path, response.status_code)

        client = openai.OpenAI(base_url=self.base_url, api_key=self.api_key,
                               http_client=httpx.Client(event_hooks={"response": [hook]}, timeout=None))
        client.model_path = self.model_path
        return client

    def get_openai_async_client(self) -> Any:
        """An `openai.AsyncOpenAI` client of the policy; its calls are the episode's."""
        import httpx
        import openai

        async def hook(response: httpx.Response) -> None:
            self._answered(response.request.url.path, response.status_code)

        client = openai.AsyncOpenAI(base_url=self.base_url, api_key=self.api_key,
                                    http_client=httpx.AsyncClient(event_hooks={"response": [hook]}, timeout=None))
        client.model_path = self.model_path
        return client

    def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[Experience]:
        """`n` (default 1) replies to `messages`, one request each, as experiences with their texts; keyword
        arguments are sampling settings (temperature, max_tokens, top_p, ...) over the task's."""
        args = {**self._rollout_args, **kwargs}
        n = int(args.pop("n", 1))
        client = self.get_openai_client()
        out = []
        for _ in range(n):
            reply = client.chat.completions.create(model=self.model_path, messages=messages, **args)
            with self._lock:
                made = self._history[-1]
            made.response_text = reply.choices[0].message.content or ""
            made.prompt_text = str(messages[-1].get("content", "")) if messages else ""
            out.append(made)
        return out

    async def chat_async(self, messages: list[dict[str, Any]], **kwargs: Any) -> list[Experience]:
        """`chat`, awaitable (Trinity's asynchronous workflows call this)."""
        import asyncio

        return await asyncio.to_thread(self.chat, messages, **kwargs)

    def extract_experience_from_history(self, clear_history: bool = True) -> list[Experience]:
        """The calls made so far, one experience each, in order (and forgotten, with `clear_history`)."""
        with self._lock:
            made = list(self._history)
            if clear_history:
                self._history = []
        return made
