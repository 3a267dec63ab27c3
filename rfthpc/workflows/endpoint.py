"""The policy behind an OpenAI-compatible HTTP API, recording every call exactly, for agents users wrote.

An explorer process serves its rollout engine on a free port of its own node (`PolicyEndpoint`). Each
episode of an agent gets a base URL of its own, `http://<host>:<port>/episodes/<id>/v1`, so the calls
of concurrent episodes are told apart without the agent's help; every request must carry the
endpoint's key (`Authorization: Bearer <key>`), fresh for every process, which only the episodes it
serves are given.

    POST <base>/chat/completions   messages (and tools) rendered with the policy's chat template
    POST <base>/completions        a prompt given as text or as token ids
    GET  <base>/models             the served model

Each completion is recorded as a `Call`: the prompt's token ids as the engine received them, the
response's token ids as sampled and their behaviour log-probabilities, so what the trainer trains
is exactly what the policy generated (nothing is re-tokenised). Sampling follows the episode's task
(`rollout_args`: temperature, top_p, top_k), since the trainer scores the tokens at that temperature;
a request may ask for fewer tokens, never more. `stream: true` is answered as server-sent events
carrying the whole reply in one chunk (the engine returns completed replies), and with
`stream_options: {include_usage: true}` a last chunk of the usage. `tool_choice: none` leaves the tools out of
the prompt and the reply unparsed, as vLLM does; `required` or a named function are read as `auto` (the
policy's tokens are not constrained: what it sampled is what is trained). A message's content may be text or a
list of text parts (as AgentScope sends it). Tool calls are read
from the reply as the chat templates of Qwen2.5/Qwen3 and Hermes render them
(`<tool_call>{"name": ..., "arguments": ...}</tool_call>`).
"""

from __future__ import annotations

import dataclasses
import hmac
import json
import re
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.tasks.tasksets import PromptBuilder
from rfthpc.workflows.base import RolloutEngine

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_ROUTE = re.compile(r"^/episodes/(?P<episode>[0-9a-f]{32})/v1/(?P<what>chat/completions|completions|models)/?$")


@dataclass
class Call:
    """One completion the policy gave an episode."""

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str


@dataclass
class _Episode:
    params: SamplingArgs
    chat_template: str | None
    calls: list[Call] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class RequestError(Exception):
    """A request the endpoint refuses: the HTTP status and the message the client gets."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # Every episode of every task in flight may connect at once; socketserver's backlog of 5 resets the rest.
    request_queue_size = 1024


class PolicyEndpoint:
    """An OpenAI-compatible server of `engine` on `host` (a free port), its episodes' calls recorded."""

    def __init__(self, engine: RolloutEngine, prompts: PromptBuilder, model_name: str = "policy",
                 host: str = "127.0.0.1") -> None:
        self.engine = engine
        self.prompts = prompts
        self.model_name = model_name
        self.key = secrets.token_urlsafe(24)
        self._episodes: dict[str, _Episode] = {}
        self._lock = threading.Lock()
        self._server = _Server((host, 0), _handler(self))
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="policy-endpoint", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        """Where it serves: `http://<host>:<port>`."""
        return f"http://{self.host}:{self.port}"

    def open_episode(self, params: SamplingArgs, chat_template: str | None = None) -> tuple[str, str]:
        """Start recording an episode sampled with `params`: (its id, its base URL)."""
        episode = uuid.uuid4().hex
        with self._lock:
            self._episodes[episode] = _Episode(params, chat_template)
        return episode, f"{self.url}/episodes/{episode}/v1"

    def close_episode(self, episode: str) -> list[Call]:
        """Stop serving an episode (later requests get 404) and return its calls in the order they ended."""
        with self._lock:
            record = self._episodes.pop(episode)
        with record.lock:
            return list(record.calls)

    def close(self) -> None:
        """Stop the server."""
        self._server.shutdown()
        self._server.server_close()

    def authorized(self, header: str | None) -> bool:
        """Whether an Authorization header carries this endpoint's key."""
        return header is not None and hmac.compare_digest(header.encode(), f"Bearer {self.key}".encode())

    def episode(self, episode: str) -> _Episode:
        with self._lock:
            record = self._episodes.get(episode)
        if record is None:
            raise RequestError(404, f"episode {episode} is not served (it ended, or never started)")
        return record

    def generate(self, record: _Episode, prompt_ids: list[int], body: Mapping[str, Any]) -> list[Completion]:
        """Sample the request's completions with the episode's sampling, recording each as a Call."""
        n = body.get("n", 1)
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise RequestError(400, f"n={n!r}: use an integer >= 1")
        params = record.params
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        if asked is not None:
            if not isinstance(asked, int) or isinstance(asked, bool) or asked < 1:
                raise RequestError(400, f"max_tokens={asked!r}: use an integer >= 1")
            params = dataclasses.replace(params, max_tokens=min(asked, params.max_tokens))
        limit = self.engine.max_model_len
        if limit is not None:
            room = limit - len(prompt_ids)
            if room < 1:
                raise RequestError(400, f"the prompt is {len(prompt_ids)} tokens, the model holds {limit}: "
                                        "shorten the conversation")
            params = dataclasses.replace(params, max_tokens=min(params.max_tokens, room))
        completions = self.engine.generate([prompt_ids], n, params)[0]
        with record.lock:
            record.calls += [Call(list(prompt_ids), list(c.token_ids), list(c.logprobs), c.text, c.finish_reason)
                             for c in completions]
        return completions

    def chat(self, record: _Episode, body: Mapping[str, Any]) -> dict[str, Any]:
        """/chat/completions."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise RequestError(400, "messages: give a non-empty list of {role, content} objects")
        tools = body.get("tools")
        if tools is not None and not isinstance(tools, list):
            raise RequestError(400, "tools: give a list of tool definitions")
        choice = body.get("tool_choice", "auto")
        if choice not in ("auto", "none", "required") and not (isinstance(choice, Mapping)
                                                               and choice.get("type") == "function"):
            raise RequestError(400, f"tool_choice={choice!r}: use auto, none, required or a function")
        if choice == "none":  # as vLLM: the tools are neither shown to the model nor read from its reply
            tools = None
        plain = [_plain(m) for m in messages]
        try:
            prompt_ids = self.prompts.render(plain, record.chat_template, tools=tools)
        except Exception as e:  # the chat template's own error (a role it does not know, ...)
            raise RequestError(400, f"the chat template cannot render these messages: {e}") from None
        choices = []
        completions = self.generate(record, prompt_ids, body)
        for i, c in enumerate(completions):
            message: dict[str, Any] = {"role": "assistant", "content": c.text}
            finish = c.finish_reason
            calls = _tool_calls(c.text) if tools else []
            if calls:
                head = c.text[:c.text.index("<tool_call>")].strip()
                message = {"role": "assistant", "content": head or None, "tool_calls": calls}
                finish = "tool_calls"
            choices.append({"index": i, "message": message, "finish_reason": finish, "logprobs": None})
        return self._reply("chat.completion", choices, prompt_ids, completions)

    def complete(self, record: _Episode, body: Mapping[str, Any]) -> dict[str, Any]:
        """/completions."""
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt_ids = list(self.prompts.tokenizer.encode(prompt, add_special_tokens=False))
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            prompt_ids = list(prompt)
        else:
            raise RequestError(400, "prompt: give text or a list of token ids")
        completions = self.generate(record, prompt_ids, body)
        choices = [{"index": i, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
                   for i, c in enumerate(completions)]
        return self._reply("text_completion", choices, prompt_ids, completions)

    def _reply(self, kind: str, choices: list[dict[str, Any]], prompt_ids: list[int],
               completions: Sequence[Completion]) -> dict[str, Any]:
        generated = sum(len(c.token_ids) for c in completions)
        return {"id": f"rfthpc-{uuid.uuid4().hex}", "object": kind, "created": int(time.time()),
                "model": self.model_name, "choices": choices,
                "usage": {"prompt_tokens": len(prompt_ids), "completion_tokens": generated,
                          "total_tokens": len(prompt_ids) + generated}}


def _plain(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as chat templates read it: its content as one text (OpenAI's list of content parts, as
    AgentScope's formatter sends every message, joined; templates concatenate content as a string) and tool
    calls' arguments as objects, not JSON text."""
    out = dict(message)
    content = out.get("content")
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(400, f"content part {part!r}: the policy reads text parts only "
                                        "({\"type\": \"text\", \"text\": ...})")
            texts.append(part["text"])
        out["content"] = "\n".join(texts)
    calls = out.get("tool_calls")
    if isinstance(calls, list):
        fixed = []
        for call in calls:
            fn = dict(call.get("function", {})) if isinstance(call, Mapping) else {}
            if isinstance(fn.get("arguments"), str):
                try:
                    fn["arguments"] = json.loads(fn["arguments"])
                except ValueError:
                    pass
            fixed.append({**call, "function": fn} if isinstance(call, Mapping) else call)
        out["tool_calls"] = fixed
    if out.get("content") is None:
        out["content"] = ""
    return out


def _tool_calls(text: str) -> list[dict[str, Any]]:
    """The tool calls a reply makes in the Qwen/Hermes form; [] if it makes none that parse."""
    calls = []
    for body in _TOOL_CALL.findall(text):
        try:
            call = json.loads(body)
        except ValueError:
            return []
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return []
        arguments = call.get("arguments", {})
        calls.append({"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                      "function": {"name": call["name"], "arguments": json.dumps(arguments)}})
    return calls


def _handler(endpoint: PolicyEndpoint) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # A reply goes out as headers, then body: with Nagle's algorithm the body waited for the client's
        # delayed ACK of the headers on a kept-alive connection (~40 ms a call, 10x the call's own work).
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
            """Requests are not logged: an episode makes many."""

        def do_GET(self) -> None:  # noqa: N802 (the base class's name)
            self._serve(lambda record, what, body: {"object": "list", "data": [
                {"id": endpoint.model_name, "object": "model", "owned_by": "rfthpc"}]} if what == "models" else None,
                body_expected=False)

        def do_POST(self) -> None:  # noqa: N802 (the base class's name)
            def answer(record: _Episode, what: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
                if what == "chat/completions":
                    return endpoint.chat(record, body)
                if what == "completions":
                    return endpoint.complete(record, body)
                return None

            self._serve(answer, body_expected=True)

        def _serve(self, answer: Any, body_expected: bool) -> None:
            try:
                body: dict[str, Any] = {}
                if body_expected:
                    raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    try:
                        body = json.loads(raw or b"{}")
                    except ValueError:
                        raise RequestError(400, "the request body is not JSON") from None
                    if not isinstance(body, dict):
                        raise RequestError(400, "the request body is not a JSON object")
                if not endpoint.authorized(self.headers.get("Authorization")):
                    raise RequestError(401, "give the episode's API key as `Authorization: Bearer <key>`")
                route = _ROUTE.match(self.path.split("?", 1)[0])
                if route is None:
                    raise RequestError(404, f"no such path {self.path}; use the episode's base URL")
                result = answer(endpoint.episode(route["episode"]), route["what"], body)
                if result is None:
                    raise RequestError(405, f"{self.command} is not served at {self.path}")
            except RequestError as e:
                self._send(e.status, {"error": {"message": str(e), "type": "invalid_request_error", "code": e.status}})
                return
            if body.get("stream"):
                options = body.get("stream_options")
                self._stream(result, isinstance(options, Mapping) and bool(options.get("include_usage")))
            else:
                self._send(200, result)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, result: dict[str, Any], include_usage: bool) -> None:
            events = []
            chat = result["object"] == "chat.completion"
            kind = "chat.completion.chunk" if chat else "text_completion"
            head = {**{k: result[k] for k in ("id", "created", "model")}, "object": kind}
            for choice in result["choices"]:
                if chat:
                    delta = dict(choice["message"])
                    for i, call in enumerate(delta.get("tool_calls", [])):
                        call["index"] = i
                    piece = {"index": choice["index"], "delta": delta, "finish_reason": None}
                    end = {"index": choice["index"], "delta": {}, "finish_reason": choice["finish_reason"]}
                else:
                    piece = {"index": choice["index"], "text": choice["text"], "finish_reason": None}
                    end = {"index": choice["index"], "text": "", "finish_reason": choice["finish_reason"]}
                events += [{**head, "choices": [c]} for c in (piece, end)]
            if include_usage:  # OpenAI's last chunk when asked: no choices, the request's usage
                events.append({**head, "choices": [], "usage": result["usage"]})
            data = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler


_endpoints: dict[int, PolicyEndpoint] = {}
_endpoints_lock = threading.Lock()


def endpoint_for(engine: RolloutEngine, prompts: PromptBuilder,
                 started: Callable[[str], None] | None = None) -> PolicyEndpoint:
    """The endpoint serving `engine` in this process, started on first use (one per engine, shared by the
    episodes of every task the process runs); `started` is told its URL when it starts."""
    with _endpoints_lock:
        found = _endpoints.get(id(engine))
        if found is None or found.engine is not engine:
            found = _endpoints[id(engine)] = PolicyEndpoint(engine, prompts)
            if started is not None:
                started(found.url)
        return found
