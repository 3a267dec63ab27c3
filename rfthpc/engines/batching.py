"""Many workflows, one engine call: gather the generate calls of concurrent workflow threads.

Workflows are plain sequential functions (`workflow(task, ctx)`), one per task. The explorer runs
`runner_per_model` of them in threads; each one's `ctx.engine.generate(...)` blocks while the
explorer's main thread, in `serve`, collects the calls and, once every running workflow is
waiting, hands them to the engine as one `generate_batch` call. So a step's tasks are generated
together, as one vLLM `generate` with `n = repeat_times` per prompt would be, and multi-turn
workflows batch their later turns the same way.

Agents behind the policy's endpoint (`agent_workflow`) call from threads of their own: each running
episode counts as a caller too (`outside`), so their turns are batched as the workflows' are.

A workflow busy elsewhere (e.g. in a slow reward function) must not hold the others up for long:
the batch also goes once `max_wait_s` passed without news, i.e. since a call came in, a workflow
started or came back from elsewhere (`elsewhere`), or a batch's results were handed back, each a
sign that workflows are on their way to their next call. (Timed from the oldest call instead, a
batch went early whenever the workflows' work between two engine calls, e.g. starting 64 tasks or
building 64 episodes' next turns on a loaded CPU, took longer than `max_wait_s`; the late
workflows' calls then took an engine call of their own, turn after turn: twice the engine calls
of a 64-task multi-turn batch.) A running workflow makes one call per batch, so news soon stops.

Only the serving thread touches the engines, so engines need not be thread-safe.

A client may cap the samples of one request (`explorer.max_repeat_times_per_runner`, Trinity-RFT's
key): a call for n samples of a prompt then becomes requests of at most that many, served in the
same engine call, and the caller still gets its n samples in one list.

A request the engine refuses (a `ValueError`, e.g. `PromptTooLong`) fails only the call that made
it. Any other error of the engine's generate call means the engine failed (vLLM's EngineDeadError
after a CUDA error: every later call would fail too): the batcher keeps it as `failure` and fails
that call and every later one with `EngineFailed`, without touching the engine again.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from rfthpc.engines.base import GenerateRequest, PolicyEngine
from rfthpc.engines.sampling import Completion, SamplingArgs


class GenerationCancelled(Exception):
    """The explorer is stopping (or the workflow ran out of time): this generate call is not served."""


class EngineFailed(RuntimeError):
    """The engine's generate call raised an error that is no request's fault: the engine is unusable."""

    def __init__(self, engine: str, error: BaseException) -> None:
        super().__init__(f"engine {engine!r} failed: {type(error).__name__}: {error}")
        self.engine = engine
        self.error = error
        # The engine's own traceback is the one worth reading.
        self.__cause__ = error


@dataclass
class _Call:
    engine: str
    requests: list[GenerateRequest]
    runner: int
    done: threading.Event = field(default_factory=threading.Event)
    result: list[list[Completion]] | None = None
    error: BaseException | None = None


def split_samples(n: int, params: SamplingArgs, most: int | None) -> list[tuple[int, SamplingArgs]]:
    """`n` samples of one prompt as requests of at most `most` samples each (None: one request), as
    (samples, sampling) pairs. The request starting at sample b of a seeded request is seeded seed + b:
    vLLM samples the i-th of a request with seed + i, so the split gives the samples one request would."""
    if most is None or n <= most:
        return [(n, params)]
    return [(min(most, n - b), params if params.seed is None else dataclasses.replace(params, seed=params.seed + b))
            for b in range(0, n, most)]


class BatchedClient:
    """What a workflow sees as its engine: `generate` blocks until the serving thread has run it."""

    def __init__(self, batcher: RequestBatcher, engine: str, max_n: int | None = None) -> None:
        self._batcher = batcher
        self.engine = engine
        self.max_n = max_n
        """Most samples one request asks for (`split_samples`); None: no limit."""

    @property
    def max_model_len(self) -> int | None:
        """The served engine's context length."""
        return self._batcher.engines[self.engine].max_model_len

    def waiting_elsewhere(self) -> contextlib.AbstractContextManager[int]:
        """Mark the calling workflow as waiting on calls other threads make for it (an agent behind the
        policy's endpoint), so no batch is held back for a call of its own."""
        return self._batcher.elsewhere()

    def outside_caller(self) -> contextlib.AbstractContextManager[None]:
        """Count the calling thread as a caller for the block (an agent's episode): batches wait for its
        calls as for a workflow's (`RequestBatcher.outside`)."""
        return self._batcher.outside()

    def generate(
        self, prompts_token_ids: Sequence[Sequence[int]], n: int, params: SamplingArgs
    ) -> list[list[Completion]]:
        """For each prompt, `n` samples (served together with the other runners' calls)."""
        chunks = split_samples(n, params, self.max_n)
        requests = [GenerateRequest(list(p), k, chunk) for p in prompts_token_ids for k, chunk in chunks]
        results = self._batcher.submit(self.engine, requests)
        if len(chunks) == 1:
            return results
        return [[c for part in results[i:i + len(chunks)] for c in part] for i in range(0, len(results), len(chunks))]


class RequestBatcher:
    """Collects generate calls from runner threads; `serve` (one thread) runs them in batches."""

    def __init__(self, engines: Mapping[str, PolicyEngine], max_wait_s: float = 0.05,
                 outside_wait_s: float = 0.5) -> None:
        self.engines = dict(engines)
        self.max_wait_s = max_wait_s
        self.outside_wait_s = outside_wait_s
        """`max_wait_s` while callers outside the runners are live: an agent's next call comes after an HTTP
        reply is parsed and a request built in its own thread, dozens of them at once on a loaded CPU, so
        news pauses longer than between workflows' calls; a batch sent early leaves the late calls an engine
        call of their own, turn after turn."""
        self._cond = threading.Condition()
        self._pending: list[_Call] = []
        self._active: set[int] = set()
        self._cancelled: dict[int, str] = {}
        self._cancel_all: str | None = None
        self._elsewhere: set[int] = set()
        """Runners waiting on something other than this batcher (a shared auxiliary model's server)."""
        self._outside = 0
        """Callers that are not runners but make calls for one (the agents of episodes behind the endpoint)."""
        self._news = time.monotonic()
        """When a call last came in, a workflow started or came back from elsewhere, or a batch's
        results were handed back."""
        self.calls_served = 0
        self.batches_served = 0
        self.failure: EngineFailed | None = None
        """The first engine failure; then every call fails at once (a failed engine does not recover)."""

    def client(self, engine: str, max_n: int | None = None) -> BatchedClient:
        """A `RolloutEngine` for workflows that routes to the engine named `engine`, asking for at most
        `max_n` samples per request (None: no limit)."""
        if engine not in self.engines:
            raise KeyError(f"no engine named {engine!r}; engines: {', '.join(self.engines)}")
        return BatchedClient(self, engine, max_n)

    @contextmanager
    def runner(self) -> Iterator[int]:
        """Mark the calling thread as a running workflow for the duration of the block."""
        ident = threading.get_ident()
        with self._cond:
            self._active.add(ident)
            self._cancelled.pop(ident, None)
            self._news = time.monotonic()
        try:
            yield ident
        finally:
            with self._cond:
                self._active.discard(ident)
                self._cond.notify_all()

    @contextmanager
    def elsewhere(self) -> Iterator[int]:
        """Mark the calling runner as waiting outside the batcher (a request to a server) for the block,
        so a batch is not held back for its call; yields its ident."""
        ident = threading.get_ident()
        with self._cond:
            self._elsewhere.add(ident)
            self._cond.notify_all()
        try:
            yield ident
        finally:
            with self._cond:
                self._elsewhere.discard(ident)
                self._news = time.monotonic()

    @contextmanager
    def outside(self) -> Iterator[None]:
        """Count the calling thread, for the block, as a caller outside the runners (an agent's episode, whose
        calls reach the batcher through the policy's endpoint), so a batch waits for its call as for a
        runner's: ready once every running workflow and every such caller has a call in, or `outside_wait_s`
        after the last news."""
        with self._cond:
            self._outside += 1
            self._news = time.monotonic()
        try:
            yield
        finally:
            with self._cond:
                self._outside -= 1
                self._news = time.monotonic()
                self._cond.notify_all()

    def cancel_reason(self, runner: int) -> str | None:
        """Why calls of `runner` are cancelled (`cancel`); None while they are not."""
        with self._cond:
            return self._cancel_all or self._cancelled.get(runner)

    def record_failure(self, failure: EngineFailed) -> None:
        """Keep `failure` (an engine outside the batcher failed) as if a served engine had: every later
        call fails, and the explorer stops."""
        with self._cond:
            if self.failure is None:
                self.failure = failure

    @property
    def active(self) -> int:
        """Workflow threads currently running."""
        with self._cond:
            return len(self._active)

    @property
    def pending(self) -> int:
        """Calls waiting to be served."""
        with self._cond:
            return len(self._pending)

    def submit(self, engine: str, requests: list[GenerateRequest]) -> list[list[Completion]]:
        """Queue one call and wait until it is served; raise GenerationCancelled if it will not be."""
        ident = threading.get_ident()
        call = _Call(engine, requests, ident)
        with self._cond:
            reason = self._cancel_all or self._cancelled.get(ident)
            if reason is not None:
                raise GenerationCancelled(reason)
            self._pending.append(call)
            self._news = time.monotonic()
            self._cond.notify_all()
        call.done.wait()
        if call.error is not None:
            raise call.error
        assert call.result is not None
        return call.result

    def cancel(self, reason: str, runner: int | None = None) -> None:
        """Fail the pending and later calls of `runner` (None: of every runner) with GenerationCancelled."""
        with self._cond:
            if runner is None:
                self._cancel_all = reason
            else:
                self._cancelled[runner] = reason
            keep = []
            for call in self._pending:
                if runner is None or call.runner == runner:
                    call.error = GenerationCancelled(reason)
                    call.done.set()
                else:
                    keep.append(call)
            self._pending = keep
            self._cond.notify_all()

    def resume(self) -> None:
        """Serve calls again after `cancel` (the next batch of workflows starts afresh)."""
        with self._cond:
            self._cancel_all = None
            self._cancelled.clear()

    def _ready(self) -> bool:
        if not self._pending:
            return False
        if len(self._pending) >= len(self._active - self._elsewhere) + self._outside:
            return True
        return time.monotonic() - self._news >= self._wait_s()

    def _wait_s(self) -> float:
        return self.outside_wait_s if self._outside else self.max_wait_s

    def wake(self) -> None:
        """Wake a `serve` that waits, so that it checks its `until` again."""
        with self._cond:
            self._cond.notify_all()

    def serve(self, timeout_s: float, until: Callable[[], bool] | None = None) -> int:
        """Wait up to `timeout_s` for a batch to be ready, run it; return the number of calls served.
        Returns at once, serving nothing, when `until()` holds (checked whenever woken: `wake`)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not self._ready():
                left = deadline - time.monotonic()
                if left <= 0 or (until is not None and until()):
                    return 0
                wait = left
                if self._pending:
                    wait = min(left, max(0.0, self._news + self._wait_s() - time.monotonic()))
                self._cond.wait(wait)
            calls, self._pending = self._pending, []
        for engine in {c.engine for c in calls}:
            self._run(engine, [c for c in calls if c.engine == engine])
        with self._cond:
            self._news = time.monotonic()
        self.calls_served += len(calls)
        self.batches_served += 1
        return len(calls)

    def _run(self, engine: str, calls: list[_Call]) -> None:
        if self.failure is not None:
            self._fail(calls, self.failure)
            return
        requests = [r for c in calls for r in c.requests]
        try:
            results = self.engines[engine].generate_batch(requests)
        except ValueError as e:  # a refused request: handed to the workflow that made the call
            if len(calls) == 1:
                calls[0].error = e
                calls[0].done.set()
                return
            # One bad request (e.g. an over-long prompt) must not fail the other workflows' calls.
            for call in calls:
                self._run(engine, [call])
            return
        except Exception as e:  # noqa: BLE001 - the engine failed: kept, and handed to every caller
            self.failure = EngineFailed(engine, e)
            self._fail(calls, self.failure)
            return
        start = 0
        for call in calls:
            call.result = results[start : start + len(call.requests)]
            start += len(call.requests)
            call.done.set()

    @staticmethod
    def _fail(calls: list[_Call], failure: EngineFailed) -> None:
        for call in calls:
            # One exception object per caller: each runner thread raises its own.
            call.error = EngineFailed(failure.engine, failure.error)
            call.done.set()
