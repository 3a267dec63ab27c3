"""The HTTP client of shared auxiliary models (`rfthpc.engines.remote`) against small stand-in servers
that answer `/v1/completions` the way vLLM's OpenAI-compatible server does (the real server is
tested on the local Slurm cluster, tests/launch/test_aux_server.py): requests spread over the
engines; an engine that goes away is retried, with backoff, until its restart publishes a new
address (the requeue path); a server that stays away is a clear error after `timeout_s`; refused
requests, wrong keys and cancelled requests behave as the explorer needs."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from rfthpc.engines.base import RequestRejected
from rfthpc.engines.batching import EngineFailed, GenerationCancelled, RequestBatcher
from rfthpc.engines.remote import (
    Backoff,
    RemoteClient,
    RemoteEngine,
    ServerUnavailable,
    completion_of,
    completions_body,
)
from rfthpc.engines.sampling import SamplingArgs
from rfthpc.rundir.servers import ServerAddress, next_generation, publish
from tests.engines.fake_vllm import FakeVLLM

PARAMS = SamplingArgs(temperature=1.0, max_tokens=3, logprobs=2)


@contextmanager
def serving(run: Path, engine: int, publish_address: bool = True, **kwargs: Any) -> Iterator[FakeVLLM]:
    """A stand-in engine serving in a thread, its address published as a server task would."""
    fake = FakeVLLM(engine, **kwargs)
    thread = threading.Thread(target=fake.serve_forever, daemon=True)
    thread.start()
    if publish_address:
        announce(run, fake)
    try:
        yield fake
    finally:
        fake.shutdown()
        fake.server_close()


def announce(run: Path, fake: FakeVLLM, **fields: Any) -> ServerAddress:
    values = {"url": fake.url, "api_key": fake.api_key, "served_model": "judge-model", "max_model_len": 512, **fields}
    address = ServerAddress(name="judge", engine=fake.engine, generation=next_generation(run, "judge", fake.engine),
                            **values)
    publish(run, address)
    return address


def test_requests_carry_the_sampling_and_answers_become_completions() -> None:
    body, per_prompt = completions_body("m", [[1, 2], [3]], 2, SamplingArgs(temperature=0.7, top_k=5, seed=3,
                                                                            max_tokens=9), min_tokens=1)
    assert per_prompt == 2 and body["prompt"] == [[1, 2], [3]]
    assert {k: body[k] for k in ("n", "temperature", "top_k", "seed", "max_tokens", "min_tokens", "logprobs")} == \
        {"n": 2, "temperature": 0.7, "top_k": 5, "seed": 3, "max_tokens": 9, "min_tokens": 1, "logprobs": 0}
    assert body["return_token_ids"] and body["return_tokens_as_token_ids"]
    # vLLM refuses n > 1 when greedy: each prompt goes n times, once each; no top-k means -1.
    body, per_prompt = completions_body("m", [[1, 2], [3]], 3, SamplingArgs(temperature=0.0), min_tokens=0)
    assert per_prompt == 1 and body["prompt"] == [[1, 2]] * 3 + [[3]] * 3
    assert (body["temperature"], body["top_k"], "seed" in body) == (0.0, -1, False)
    choice = {"token_ids": [5, 7], "text": "hi", "finish_reason": "stop",
              "logprobs": {"token_logprobs": [-0.1, -0.2],
                           "top_logprobs": [{"token_id:5": -0.1, "token_id:6": -3.0, "token_id:4": -2.0},
                                            {"token_id:7": -0.2, "token_id:1": -9999.0}]}}
    c = completion_of(choice, 2)
    assert (c.token_ids, c.logprobs, c.text, c.finish_reason) == ([5, 7], [-0.1, -0.2], "hi", "stop")
    # The k best of each position; -inf (cut by top-k/top-p) left out, as the in-process engine does.
    assert c.top_logprobs == [{5: -0.1, 4: -2.0}, {7: -0.2}]
    assert completion_of(choice, 0).top_logprobs is None
    # A scoring request: vLLM's prompt_logprobs, a map per prompt token (none for the first).
    body, _ = completions_body("m", [[1, 2, 3]], 1, SamplingArgs(max_tokens=1, prompt_logprobs=True), min_tokens=4)
    assert (body["prompt_logprobs"], body["min_tokens"]) == (0, 1)
    scored = {**choice, "prompt_logprobs": [None, {"2": {"logprob": -1.5, "rank": 3}},
                                            {"3": {"logprob": -0.25, "rank": 1}, "8": {"logprob": -0.1, "rank": 0}}]}
    assert completion_of(scored, 0, [1, 2, 3]).prompt_logprobs == [-1.5, -0.25]
    assert completion_of(scored, 0).prompt_logprobs is None
    with pytest.raises(ValueError, match="scores 3 of the prompt's 4 tokens"):
        completion_of(scored, 0, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="no token ids"):
        completion_of({"text": "x"}, 0)


def test_requests_spread_over_the_engines(tmp_path: Path) -> None:
    with serving(tmp_path, 0) as a, serving(tmp_path, 1) as b:
        engine = RemoteEngine(tmp_path, "judge", timeout_s=10, min_response_tokens=0)
        out = [engine.generate([[1, 2, 3], [4]], 2, PARAMS) for _ in range(4)]
        assert len(a.requests) == len(b.requests) == 2
        assert a.requests[0]["model"] == "judge-model" and a.requests[0]["prompt"] == [[1, 2, 3], [4]]
        first = out[0]
        assert [len(group) for group in first] == [2, 2]
        assert [c.token_ids[0] for c in first[0]] == [3, 3] and [c.token_ids[2] for c in first[1]] == [0, 1]
        assert first[0][0].logprobs == [-0.5, -0.25, -0.125]
        assert first[0][0].top_logprobs[0] == {99: -0.1, 3: -0.5}
        assert {c.text for group in out for c in group[0]} == {"engine 0", "engine 1"}
        assert engine.max_model_len == 512 and engine.retries == 0


def test_a_server_that_restarts_elsewhere_is_retried_until_it_is_back(tmp_path: Path) -> None:
    """The requeue path: the engine's process goes away (its address still says serving), requests fail and
    are retried; the requeued task serves on another port with a new key and publishes its next generation,
    and the waiting request goes through at once (the doorbell rang)."""
    engine = RemoteEngine(tmp_path, "judge", timeout_s=30, min_response_tokens=0)
    with serving(tmp_path, 0) as first:
        assert engine.generate([[1]], 1, PARAMS)[0][0].text == "engine 0"
    done: dict[str, Any] = {}

    def ask() -> None:
        started = time.monotonic()
        done["out"] = engine.generate([[1, 2]], 1, PARAMS)
        done["s"] = time.monotonic() - started

    asker = threading.Thread(target=ask)
    asker.start()
    time.sleep(1.5)
    assert "out" not in done and engine.retries >= 2
    with serving(tmp_path, 0, publish_address=False, api_key="new-key") as second:
        assert second.url != first.url
        published = time.monotonic()
        assert announce(tmp_path, second).generation == 2
        asker.join(timeout=10)
        assert done["out"][0][0].token_ids == [2, 0, 0]
        assert time.monotonic() - published < 2.0  # not the backoff's next turn: the ring
        assert len(second.requests) == 1


def test_an_engine_that_never_answers_is_a_clear_error(tmp_path: Path) -> None:
    engine = RemoteEngine(tmp_path, "judge", timeout_s=1.5)
    started = time.monotonic()
    with pytest.raises(ServerUnavailable, match=r"no engine of its server answered for 2 s .*server_timeout.*"
                                                r"no engine has published an address in .*servers/judge"):
        engine.generate([[1]], 1, PARAMS)
    assert 1.4 < time.monotonic() - started < 5
    with serving(tmp_path, 0) as fake:
        dead = fake.url
    with pytest.raises(ServerUnavailable, match=rf"engine 0 at {dead}: URLError.*engine 0 at {dead} \(generation 1, "
                                                r"serving"):
        engine.generate([[1]], 1, PARAMS)


def test_refusals_wrong_keys_and_cancellation(tmp_path: Path) -> None:
    with serving(tmp_path, 0) as fake:
        engine = RemoteEngine(tmp_path, "judge", timeout_s=20)
        fake.reject = True
        with pytest.raises(RequestRejected, match="maximum context length is 512"):
            engine.generate([[1]], 1, PARAMS)
        assert len(fake.requests) == 1  # the request's fault: not retried
        fake.reject = False
        # A key that no longer opens the server (e.g. another process took the port) is retried.
        announce(tmp_path, fake, api_key="stale")
        republish = threading.Timer(1.0, lambda: announce(tmp_path, fake))
        republish.start()
        assert engine.generate([[1]], 1, PARAMS)[0][0].text == "engine 0"
        republish.join()
        fake.delay_s = 5.0
        asked = time.monotonic()
        with pytest.raises(GenerationCancelled, match="explorer stopping"):
            engine.generate([[1]], 1, PARAMS,
                            cancelled=lambda: "explorer stopping" if time.monotonic() - asked > 0.3 else None)
        assert time.monotonic() - asked < 2


def test_a_server_gone_for_good_stops_the_explorer_as_a_failed_engine(tmp_path: Path) -> None:
    batcher = RequestBatcher({})
    client = RemoteClient(batcher, RemoteEngine(tmp_path, "judge", timeout_s=0.5))
    with pytest.raises(EngineFailed, match="engine 'judge' failed: ServerUnavailable"):
        client.generate([[1]], 1, PARAMS)
    assert isinstance(batcher.failure, EngineFailed)
    with pytest.raises(EngineFailed):  # later calls fail at once
        client.generate([[1]], 1, PARAMS)


def test_backoff_doubles_and_a_ring_cuts_it_short() -> None:
    now = [0.0]
    backoff = Backoff(clock=lambda: now[0])
    assert backoff.due(None)
    delays = []
    for _ in range(7):
        backoff.failed((1, 1, 1))
        delays.append(backoff.delay)
    assert delays == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    now[0] = 9.0
    assert not backoff.due((1, 1, 1)) and backoff.due((2, 1, 1))
    now[0] = 10.0
    assert backoff.due((1, 1, 1))
