"""`explorer.max_repeat_times_per_runner` (Trinity-RFT's key): the rollout engine is asked for at most
that many responses per request, and every committed group still holds all `repeat_times` responses."""

from __future__ import annotations

from pathlib import Path

from rfthpc.engines import make_engine
from tests.explorer_loop.conftest import explorer, groups, make_run, taskset, write_jsonl


def test_groups_are_whole_when_requests_are_capped(tmp_path: Path, tiny_model: Path, questions) -> None:
    data = write_jsonl(tmp_path / "train.jsonl", questions[:2])
    run = make_run(tmp_path, tiny_model, [taskset("arith", data)],
                   algorithm={"repeat_times": 5}, explorer={"max_repeat_times_per_runner": 2})
    asked: list[int] = []

    def recording_engine(engine_type: str, settings):
        engine = make_engine(engine_type, settings)
        generate_batch = engine.generate_batch

        def record(requests):
            asked.extend(r.n for r in requests)
            return generate_batch(requests)

        engine.generate_batch = record
        return engine

    assert explorer(run, engine_factory=recording_engine).run() == 0
    assert sorted(asked) == [1, 1, 2, 2, 2, 2]
    assert sorted((g.task_id, len(g.experiences)) for g in groups(run)) == [("arith/0", 5), ("arith/1", 5)]
