"""The request batcher with the real transformers engine: concurrent workflow calls become one engine
call, a bad request fails only its own caller, a failed engine fails every caller for good, and a
cancel releases every waiting caller."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from rfthpc.engines import EngineSettings, make_engine
from rfthpc.engines.base import GenerateRequest, PromptTooLong
from rfthpc.engines.batching import EngineFailed, GenerationCancelled, RequestBatcher, split_samples
from rfthpc.engines.sampling import Completion, SamplingArgs
from tests.engines.helpers import DyingEngine


@pytest.fixture(scope="module")
def engine(tiny_model: Path):
    eng = make_engine("transformers", EngineSettings(str(tiny_model), max_model_len=64, seed=0))
    yield eng
    eng.close()


def run_callers(batcher: RequestBatcher, prompts: list[list[int]], n: int = 2) -> tuple[list, list[threading.Thread]]:
    """One runner thread per prompt, each making one generate call; returns their results slots."""
    results: list = [None] * len(prompts)
    started = threading.Barrier(len(prompts) + 1)

    def call(i: int) -> None:
        with batcher.runner():
            started.wait()
            try:
                results[i] = batcher.client("policy").generate([prompts[i]], n, SamplingArgs(max_tokens=6))
            except Exception as e:  # noqa: BLE001 - the test inspects what each caller got
                results[i] = e

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(len(prompts))]
    for t in threads:
        t.start()
    started.wait()
    return results, threads


def serve_until_done(batcher: RequestBatcher, threads: list[threading.Thread]) -> None:
    while any(t.is_alive() for t in threads):
        batcher.serve(0.2)
    for t in threads:
        t.join()


def test_concurrent_calls_are_served_as_one_batch(engine) -> None:
    batcher = RequestBatcher({"policy": engine}, max_wait_s=30.0)
    results, threads = run_callers(batcher, [[1, 20, 21], [1, 22], [1, 23, 24, 25]])
    serve_until_done(batcher, threads)
    assert batcher.batches_served == 1 and batcher.calls_served == 3
    for r in results:
        assert len(r) == 1 and len(r[0]) == 2
        assert all(1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids) for c in r[0])


def test_a_bad_request_fails_only_its_caller(engine) -> None:
    batcher = RequestBatcher({"policy": engine}, max_wait_s=30.0)
    too_long = [1] * 64
    results, threads = run_callers(batcher, [[1, 20, 21], too_long, [1, 22]])
    serve_until_done(batcher, threads)
    assert isinstance(results[1], PromptTooLong) and "max_model_len=64" in str(results[1])
    assert len(results[0][0]) == 2 and len(results[2][0]) == 2


def test_a_failed_engine_fails_every_caller_for_good(tiny_model: Path) -> None:
    """Unlike a refused request, an engine error is not retried call by call, and later calls fail at
    once, naming the engine's error, without reaching the engine."""
    dying = DyingEngine(EngineSettings(str(tiny_model), max_model_len=64, seed=0), requests=0)
    batcher = RequestBatcher({"policy": dying}, max_wait_s=30.0)
    results, threads = run_callers(batcher, [[1, 20, 21], [1, 22]])
    serve_until_done(batcher, threads)
    assert batcher.batches_served == 1
    assert all(isinstance(r, EngineFailed) and "EngineDeadError" in str(r) for r in results)
    assert isinstance(batcher.failure, EngineFailed) and batcher.failure.engine == "policy"
    dying.requests_left = 10
    results, threads = run_callers(batcher, [[1, 23]])
    serve_until_done(batcher, threads)
    assert isinstance(results[0], EngineFailed) and dying.requests_left == 10


def test_cancel_releases_waiting_callers_and_refuses_new_calls(engine) -> None:
    batcher = RequestBatcher({"policy": engine}, max_wait_s=30.0)
    results, threads = run_callers(batcher, [[1, 20], [1, 21]])
    while batcher.pending < 2:
        threading.Event().wait(0.01)
    batcher.cancel("SIGTERM")
    for t in threads:
        t.join(timeout=10)
    assert all(isinstance(r, GenerationCancelled) for r in results)
    with batcher.runner(), pytest.raises(GenerationCancelled, match="SIGTERM"):
        batcher.client("policy").generate([[1, 2]], 1, SamplingArgs(max_tokens=2))
    batcher.resume()
    results, threads = run_callers(batcher, [[1, 20]])
    serve_until_done(batcher, threads)
    assert len(results[0][0]) == 2


def test_unknown_engine_name(engine) -> None:
    with pytest.raises(KeyError, match="judge"):
        RequestBatcher({"policy": engine}).client("judge")


class RecordingEngine:
    """Answers each request with its n samples, each naming the request and the sample's place in it."""

    max_model_len = None

    def __init__(self) -> None:
        self.calls: list[list[GenerateRequest]] = []

    def generate_batch(self, requests: list[GenerateRequest]) -> list[list[Completion]]:
        self.calls.append(list(requests))
        return [[Completion([i], [0.0], f"{r.prompt_token_ids[0]}/{r.params.seed}/{j}", "stop") for j in range(r.n)]
                for i, r in enumerate(requests)]


def test_split_samples_caps_each_request_and_offsets_seeds() -> None:
    unseeded, seeded = SamplingArgs(), SamplingArgs(seed=10)
    assert split_samples(5, unseeded, None) == [(5, unseeded)] == split_samples(5, unseeded, 5)
    assert split_samples(5, unseeded, 2) == [(2, unseeded), (2, unseeded), (1, unseeded)]
    assert [(k, p.seed) for k, p in split_samples(5, seeded, 2)] == [(2, 10), (2, 12), (1, 14)]


def test_a_capped_client_asks_in_parts_and_returns_whole_groups() -> None:
    """`explorer.max_repeat_times_per_runner`: a call for 5 samples of each of two prompts is six
    requests of at most 2 in one engine call, and each prompt gets its 5 samples back, in order."""
    engine = RecordingEngine()
    batcher = RequestBatcher({"policy": engine}, max_wait_s=30.0)
    results: list = []

    def call() -> None:
        with batcher.runner():
            results.append(batcher.client("policy", max_n=2).generate([[7], [8]], 5, SamplingArgs(seed=3)))

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    serve_until_done(batcher, [thread])
    assert [[r.n for r in call] for call in engine.calls] == [[2, 2, 1, 2, 2, 1]]
    assert [[c.text for c in group] for group in results[0]] == [
        ["7/3/0", "7/3/1", "7/5/0", "7/5/1", "7/7/0"], ["8/3/0", "8/3/1", "8/5/0", "8/5/1", "8/7/0"]]


def staggered_callers(batcher: RequestBatcher, delays: list[float], hold: threading.Event | None = None
                      ) -> list[threading.Thread]:
    """One runner per delay: it starts, works for `delay` seconds (the first one, with `hold`, until
    `hold` is set) and makes one generate call."""

    def call(i: int) -> None:
        with batcher.runner():
            if hold is not None and i == 0:
                hold.wait()
            threading.Event().wait(delays[i])
            batcher.client("policy").generate([[i]], 1, SamplingArgs())

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(len(delays))]
    for t in threads:
        t.start()
    return threads


def test_calls_that_keep_coming_are_one_batch_though_the_first_waited_longer_than_max_wait() -> None:
    """Workflows whose work before their call takes them longer, together, than `max_wait_s` (as
    starting many tasks or building many episodes' next turns can) still share one engine call: the
    wait restarts with each call that comes in."""
    engine = RecordingEngine()
    batcher = RequestBatcher({"policy": engine}, max_wait_s=1.0)
    serve_until_done(batcher, staggered_callers(batcher, [0.0, 0.5, 1.0, 1.5]))
    assert [len(call) for call in engine.calls] == [4]


def test_a_workflow_busy_elsewhere_holds_the_others_up_for_max_wait_only() -> None:
    engine = RecordingEngine()
    batcher = RequestBatcher({"policy": engine}, max_wait_s=0.3)
    hold = threading.Event()
    threads = staggered_callers(batcher, [0.0, 0.0, 0.0], hold=hold)
    while batcher.pending < 2:
        threading.Event().wait(0.01)
    assert batcher.serve(30.0) == 2  # served without the busy workflow's call
    hold.set()
    serve_until_done(batcher, threads)
    assert [len(call) for call in engine.calls] == [2, 1]


def test_an_agents_calls_through_the_endpoint_wait_for_the_other_episodes() -> None:
    """A runner waiting on agents (`elsewhere`) holds no batch back, but each running episode (`outside`)
    is waited for as a runner is: three episodes' staggered calls are one engine call, although the gaps
    between them pass `max_wait_s`; once the episodes end, a lone call goes at once."""
    engine = RecordingEngine()
    batcher = RequestBatcher({"policy": engine}, max_wait_s=0.05, outside_wait_s=30.0)
    started = threading.Barrier(4)

    def episode(delay: float) -> None:
        with batcher.outside():
            started.wait()
            threading.Event().wait(delay)
            batcher.client("policy").generate([[int(delay * 10)]], 1, SamplingArgs())

    def workflow() -> None:
        with batcher.runner(), batcher.elsewhere():
            threads = [threading.Thread(target=episode, args=(d,), daemon=True) for d in (0.0, 0.3, 0.6)]
            for t in threads:
                t.start()
            started.wait()
            for t in threads:
                t.join()
        with batcher.runner():
            batcher.client("policy").generate([[9]], 1, SamplingArgs())

    runner = threading.Thread(target=workflow, daemon=True)
    runner.start()
    serve_until_done(batcher, [runner])
    assert [len(call) for call in engine.calls] == [3, 1]
