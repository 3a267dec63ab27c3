"""A shared auxiliary model as an engine: its server's OpenAI-compatible API, reached over HTTP.

An auxiliary model with `placement: shared` runs in a server job of its own (`rfthpc.engines.server`:
vLLM's `vllm.entrypoints.openai.api_server`, one per engine), whose engines publish their
addresses in the run directory (`rfthpc.rundir.servers`). `RemoteEngine` is what an explorer
holds instead of an in-process engine: `generate(prompt token ids, n, params)` posts one
`/v1/completions` request with the prompts as token ids and asks for the sampled token ids
(`return_token_ids`) and their logprobs (vLLM's processed logprobs, as the server runs with
`--logprobs-mode processed_logprobs`: the convention of `rfthpc.engines.base`), so workflows get
the same `Completion`s as from an in-process vLLM engine. Requests are spread over the engines
round-robin. Only the standard library is used (the client runs in every explorer, with or
without vLLM installed), and proxies from the environment are bypassed (the servers are on the
cluster's own network).

Failures: a request the server refuses (HTTP 400 or 422: a prompt too long, a bad parameter) is a
`RequestRejected`, the request's fault. Anything else (nothing listening, a reset connection, a
time-out, HTTP 401/404 from a new process on a reused port, a server error) means no engine
answers right now: the client reads the addresses again and retries, with backoff (0.5 s doubling
up to 10 s) and at once when an engine publishes a new address (the model's doorbell rings),
through the one waiting mechanism of `rfthpc.sharedfs.handoff`. A requeued server job publishes its next
generation and the request goes through. After `timeout_s` without an answer it raises
`ServerUnavailable`, naming the addresses it tried. A request in flight is given up when
`cancelled()` says why (the explorer stops, the workflow ran out of time): `GenerationCancelled`.
"""

from __future__ import annotations

import http.client
import itertools
import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rfthpc.engines.base import RequestRejected, is_greedy
from rfthpc.engines.batching import EngineFailed, GenerationCancelled, RequestBatcher
from rfthpc.engines.sampling import Completion, SamplingArgs
from rfthpc.rundir.servers import ServerAddress, doorbell, read_addresses, servers_dir
from rfthpc.sharedfs.handoff import Signature, Waiter, WaitPolicy

log = logging.getLogger(__name__)

CancelCheck = Callable[[], str | None]
"""Why the request is no longer wanted (None while it is)."""

RETRY_POLICY = WaitPolicy(fast_s=0.05, due_s=2.0, slow_s=0.5, growth=1.5)
"""How a request waiting for a server looks at the model's doorbell: its backoff (`Backoff`) is checked
at least every `slow_s`."""
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
CANCEL_POLL_S = 0.1
"""How often a request in flight checks whether it is still wanted."""
NO_LOGPROB = -9999.0
"""What vLLM's OpenAI server sends for a logprob of -inf (a token cut by top-k or top-p)."""
TOKEN_ID_PREFIX = "token_id:"


class ServerUnavailable(RuntimeError):
    """No engine of a shared auxiliary model's server answered within its `server_timeout`."""


class _Retry(Exception):
    """This engine did not answer (the server may be restarting): try again later."""


class Backoff:
    """When the next attempt is due: after a failure, BACKOFF_FIRST_S doubling up to BACKOFF_MAX_S, or
    at once when the addresses changed (the doorbell's signature)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.delay = 0.0
        self.next_s = 0.0
        self.signature: Signature = None

    def due(self, signature: Signature) -> bool:
        """True if an attempt should be made now."""
        return signature != self.signature or self.clock() >= self.next_s

    def failed(self, signature: Signature) -> None:
        """An attempt failed with the addresses as of `signature`."""
        self.delay = BACKOFF_FIRST_S if self.delay == 0 else min(2 * self.delay, BACKOFF_MAX_S)
        self.next_s = self.clock() + self.delay
        self.signature = signature


def _token_id(key: str) -> int:
    """The id in vLLM's `token_id:<id>` rendering of a token (`return_tokens_as_token_ids`)."""
    if not key.startswith(TOKEN_ID_PREFIX):
        raise ValueError(f"expected a token rendered as {TOKEN_ID_PREFIX}<id>, got {key!r}")
    return int(key[len(TOKEN_ID_PREFIX):])


def _top(position: dict[str, float] | None, k: int) -> dict[int, float]:
    """The `k` most likely tokens of one position (vLLM sends the sampled token too, however it ranks);
    tokens cut by top-k/top-p are left out, as `rfthpc.engines.vllm_engine` does."""
    ranked = sorted(((_token_id(t), lp) for t, lp in (position or {}).items()), key=lambda x: -x[1])[:k]
    return {t: float(lp) for t, lp in ranked if lp > NO_LOGPROB}


def completion_of(choice: dict[str, Any], k: int, prompt: Sequence[int] | None = None) -> Completion:
    """One `choices` entry of a `/v1/completions` answer as a `Completion` (`k` top alternatives; the
    scores of `prompt`, the choice's prompt, where it was asked for them)."""
    tokens = choice.get("token_ids")
    if tokens is None:
        raise ValueError("the answer holds no token ids (`return_token_ids` needs vLLM 0.10.2 or newer)")
    lp = choice.get("logprobs") or {}
    logprobs = [float(x) if x is not None else 0.0 for x in lp.get("token_logprobs") or []]
    if len(logprobs) != len(tokens):
        raise ValueError(f"the answer has {len(tokens)} tokens but {len(logprobs)} logprobs")
    top = [_top(position, k) for position in lp.get("top_logprobs") or []] if k else None
    return Completion([int(t) for t in tokens], logprobs, choice.get("text") or "",
                      choice.get("finish_reason") or "length", top, _prompt_scores(choice, prompt))


def _prompt_scores(choice: dict[str, Any], prompt: Sequence[int] | None) -> list[float] | None:
    """The prompt's scores in an answer asked for `prompt_logprobs` (vLLM's extension: per prompt token a
    map from token id to its log-probability, None for the first), or None where `prompt` was not scored."""
    if prompt is None:
        return None
    positions = choice.get("prompt_logprobs")
    if not isinstance(positions, list) or len(positions) != len(prompt):
        raise ValueError(f"the answer scores {len(positions) if isinstance(positions, list) else 'none'} of the "
                         f"prompt's {len(prompt)} tokens (prompt_logprobs needs a vLLM server)")
    return [float(_logprob(position[str(t)])) for position, t in zip(positions[1:], prompt[1:], strict=True)]


def _logprob(entry: Any) -> float:
    return float(entry["logprob"] if isinstance(entry, dict) else entry)


def completions_body(served_model: str, prompts: Sequence[Sequence[int]], n: int, params: SamplingArgs,
                     min_tokens: int) -> tuple[dict[str, Any], int]:
    """The `/v1/completions` request for `n` samples of each prompt, and the samples per prompt it asks
    for: vLLM refuses n > 1 with greedy decoding, so a greedy request sends each prompt n times, once
    each (greedy decoding gives identical samples), as the in-process engine does."""
    greedy = is_greedy(params.temperature)
    copies = n if greedy else 1
    body: dict[str, Any] = {
        "model": served_model,
        "prompt": [list(p) for p in prompts for _ in range(copies)],
        "n": n // copies,
        "max_tokens": params.max_tokens,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": params.top_p,
        "top_k": params.top_k if params.top_k > 0 else -1,
        "min_tokens": min(min_tokens, params.max_tokens),
        "logprobs": params.logprobs,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    if params.seed is not None:
        body["seed"] = params.seed
    if params.prompt_logprobs:
        body["prompt_logprobs"] = 0
    return body, n // copies


def _interruptible(fn: Callable[[], Any], cancelled: CancelCheck | None) -> Any:
    """`fn()`, given up (GenerationCancelled) as soon as `cancelled()` gives a reason; the abandoned call
    finishes in the background."""
    if cancelled is None:
        return fn()
    done = threading.Event()
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller
            box["error"] = e
        finally:
            done.set()

    threading.Thread(target=run, name="rfthpc-remote-request", daemon=True).start()
    while not done.wait(CANCEL_POLL_S):
        reason = cancelled()
        if reason is not None:
            raise GenerationCancelled(reason)
    if "error" in box:
        raise box["error"]
    return box["value"]


class RemoteEngine:
    """The engines of shared auxiliary model `name`, through the addresses in run directory `run_dir`."""

    def __init__(self, run_dir: Path, name: str, timeout_s: float, min_response_tokens: int = 1,
                 max_model_len: int | None = None, policy: WaitPolicy = RETRY_POLICY) -> None:
        self.run_dir = Path(run_dir)
        self.name = name
        self.timeout_s = timeout_s
        """How long a request keeps being retried while no engine answers (`server_timeout`)."""
        self.min_response_tokens = min_response_tokens
        self._max_model_len = max_model_len
        self.policy = policy
        self.bell = doorbell(self.run_dir, name)
        self._lock = threading.Lock()
        self._addresses: list[ServerAddress] = []
        self._signature: Signature = None
        self._stale = True
        self._turn = itertools.count()
        # Proxies from the environment would send cluster-internal requests to the outside world.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.retries = 0
        """Failed attempts so far (an engine that did not answer), for logs and tests."""
        self._down_since: float | None = None
        """When requests began to find no engine answering (None while one does): logged once per outage."""

    # ---- addresses -----------------------------------------------------------------------------

    def addresses(self) -> list[ServerAddress]:
        """The engines that say they serve, read again when the doorbell rang or an attempt failed."""
        signature = self.bell.signature()
        with self._lock:
            if self._stale or signature != self._signature:
                self._addresses = read_addresses(self.run_dir, self.name)
                self._signature, self._stale = signature, False
            return [a for a in self._addresses if a.serving]

    @property
    def max_model_len(self) -> int | None:
        """The served model's context length (as its server publishes it), else the configured one."""
        published = next((a.max_model_len for a in self._addresses if a.max_model_len), None)
        return published or self._max_model_len

    def describe(self) -> str:
        """The addresses as published, for error messages."""
        found = read_addresses(self.run_dir, self.name)
        if not found:
            return f"no engine has published an address in {servers_dir(self.run_dir, self.name)}"
        return "; ".join(f"engine {a.engine} at {a.url} (generation {a.generation}, {a.state}, host {a.host or '?'}"
                         f"{', job ' + a.job_id if a.job_id else ''})" for a in found)

    # ---- requests ------------------------------------------------------------------------------

    def generate(self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs,
                 cancelled: CancelCheck | None = None) -> list[list[Completion]]:
        """For each prompt, `n` samples, from whichever engine of the server answers."""
        if not prompts_token_ids:
            return []
        backoff = Backoff()
        last_error: list[str] = []

        def attempt() -> dict[str, Any] | None:
            reason = cancelled() if cancelled is not None else None
            if reason is not None:
                raise GenerationCancelled(reason)
            signature = self.bell.signature()
            if not backoff.due(signature):
                return None
            answer = self._attempt(body, cancelled, last_error)
            if answer is None:
                self._outage(last_error[-1])
                backoff.failed(signature)
            return answer

        body, per_prompt = completions_body(self.name, prompts_token_ids, n, params, self.min_response_tokens)
        answer = Waiter(self.policy).wait(
            attempt, [self.bell], timeout_s=self.timeout_s,
            stop=None if cancelled is None else (lambda: cancelled() is not None))
        if answer is None:
            reason = cancelled() if cancelled is not None else None
            if reason is not None:
                raise GenerationCancelled(reason)
            raise ServerUnavailable(
                f"auxiliary model {self.name!r}: no engine of its server answered for {self.timeout_s:.0f} s "
                f"(explorer.auxiliary_models[].server_timeout); last error: {last_error[-1] if last_error else '-'}; "
                f"addresses: {self.describe()}. Check the model's server job (`rfthpc status`, its log in the run's "
                "log/ folder)"
            )
        self._recovered()
        choices = answer.get("choices") or []
        expected = len(body["prompt"]) * per_prompt
        if len(choices) != expected:
            raise ServerUnavailable(f"auxiliary model {self.name!r}: the server answered {len(choices)} samples "
                                    f"where {expected} were asked for")
        try:
            scored = [body["prompt"][k // per_prompt] if params.prompt_logprobs else None for k in range(len(choices))]
            flat = [completion_of(c, params.logprobs, prompt) for c, prompt in zip(choices, scored, strict=True)]
        except (ValueError, TypeError, KeyError) as e:
            raise ServerUnavailable(f"auxiliary model {self.name!r}: unexpected answer from its server: {e}") from e
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts_token_ids))]

    def _outage(self, error: str) -> None:
        with self._lock:
            if self._down_since is not None:
                return
            self._down_since = time.monotonic()
        log.warning("auxiliary model %r: no engine of its server answers (%s); requests are retried for up to %.0f s "
                    "each (a starting or requeued server publishes its address)", self.name, error, self.timeout_s)

    def _recovered(self) -> None:
        with self._lock:
            since, self._down_since = self._down_since, None
        if since is not None:
            log.info("auxiliary model %r: its server answers again after %.1f s", self.name, time.monotonic() - since)

    def _attempt(self, body: dict[str, Any], cancelled: CancelCheck | None,
                 errors: list[str]) -> dict[str, Any] | None:
        """The answer of the first engine (in round-robin order) that gives one; None if none does."""
        live = self.addresses()
        if not live:
            errors.append(self.describe())
            self.retries += 1
            return None
        start = next(self._turn)
        for j in range(len(live)):
            address = live[(start + j) % len(live)]
            try:
                return _interruptible(lambda a=address: self._post(a, body), cancelled)
            except _Retry as e:
                errors.append(f"engine {address.engine} at {address.url}: {e}")
                self.retries += 1
                with self._lock:
                    self._stale = True
        return None

    def _post(self, address: ServerAddress, body: dict[str, Any]) -> dict[str, Any]:
        """POST `body` to one engine; its answer, `_Retry` if it did not give one, `RequestRejected` if it refused."""
        request = urllib.request.Request(
            f"{address.url}/v1/completions", data=json.dumps({**body, "model": address.served_model}).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {address.api_key}"},
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as e:
            detail = e.read().decode(errors="replace")[:500]
            if e.code in (400, 422):
                raise RequestRejected(f"auxiliary model {self.name!r} refused a request: {detail}") from e
            raise _Retry(f"HTTP {e.code}: {detail}") from e
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError, ValueError) as e:
            raise _Retry(f"{type(e).__name__}: {getattr(e, 'reason', e)}") from e


class RemoteClient:
    """What workflows see of a shared auxiliary model in an explorer: `RemoteEngine.generate`, called from
    the workflow's own runner thread (the server batches concurrent requests itself), given up when the
    explorer's batcher cancels the runner's calls, and a server that stays away stops the explorer as a
    failed engine does (`EngineFailed`)."""

    def __init__(self, batcher: RequestBatcher, engine: RemoteEngine) -> None:
        self._batcher = batcher
        self.engine = engine

    @property
    def max_model_len(self) -> int | None:
        """The served model's context length."""
        return self.engine.max_model_len

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` samples from the model's server."""
        if self._batcher.failure is not None:
            raise EngineFailed(self._batcher.failure.engine, self._batcher.failure.error)
        with self._batcher.elsewhere() as runner:
            try:
                return self.engine.generate(prompts_token_ids, n, params,
                                            cancelled=lambda: self._batcher.cancel_reason(runner))
            except ServerUnavailable as e:
                failure = EngineFailed(self.engine.name, e)
                self._batcher.record_failure(failure)
                raise failure from e
