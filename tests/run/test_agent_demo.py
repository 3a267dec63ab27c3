"""`rfthpc make-demo --task frozenlake`: the agentic demo's maps, demonstrations and tokenizer."""

from __future__ import annotations

import json
import random
import shutil
import statistics
from pathlib import Path

import pytest

from rfthpc.commands.make_demo import split_task
from rfthpc.demos.frozenlake import (
    ACTIONS,
    FrozenLakeDemoArgs,
    default_make_env,
    demonstration,
    draw_tasks,
    goal_distances,
    make_frozenlake_demo,
    moves,
    optimal_moves,
    start,
    task_map,
    walk,
)
from rfthpc.errors import UserError

SMALL = {"train": 40, "test": 10, "sft": 20}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small FrozenLake demo directory (seed 3)."""
    out = tmp_path_factory.mktemp("frozenlake")
    make_frozenlake_demo(FrozenLakeDemoArgs(out=out, seed=3, **SMALL))
    return out


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_shortest_paths_avoid_holes() -> None:
    grid = ["SFFF", "FHFH", "FFFH", "HFFG"]
    distance = goal_distances(grid)
    assert distance[(0, 0)] == 6 and (1, 1) not in distance and distance[(3, 3)] == 0
    # From the start and from (2, 1) two moves begin a shortest path; from (0, 3) only Left (Down is a hole).
    assert sorted(optimal_moves(grid, distance, (0, 0))) == ["Down", "Right"]
    assert sorted(optimal_moves(grid, distance, (2, 1))) == ["Down", "Right"]
    assert optimal_moves(grid, distance, (0, 3)) == ["Left"]
    # Always optimal: a shortest path, reaching the goal.
    for seed in range(5):
        assert len(walk(grid, random.Random(seed), optimal=1.0, max_turns=20)) == 6


def _replayed_to_the_goal(out: Path, n_demonstrations: int, optimal: float = 0.0) -> int:
    """Replay the demonstrations of `out` (made with seed 3) in the environment, checking each move is a valid move
    that moves the player and does not enter a hole and each observation is the environment's, and that
    sft.jsonl holds exactly their moves, one per row, each after the observation it answers; how many reach the
    goal."""
    train = _rows(out / "train.jsonl")
    rng = random.Random(3)
    chats = [demonstration(default_make_env, row["env_args"], rng, optimal, FrozenLakeDemoArgs.max_turns)
             for row in train[:n_demonstrations]]
    rows = [row["messages"] for row in _rows(out / "sft.jsonl")]
    assert rows == moves(chats, rng)
    assert sorted(map(json.dumps, rows)) == sorted(json.dumps([chat[i], chat[i + 1]]) for chat in chats
                                                   for i in range(0, len(chat), 2))
    reached = 0
    for row, chat in zip(train, chats, strict=False):
        args = row["env_args"]
        env = default_make_env({k: v for k, v in args.items() if k != "seed"})
        observation, _ = env.reset(seed=args["seed"])
        assert [m["role"] for m in chat] == ["user", "assistant"] * (len(chat) // 2)
        assert chat[0]["content"] == observation
        for i in range(1, len(chat), 2):
            assert chat[i]["content"] in ACTIONS
            observation, _, terminated, _, info = env.step(chat[i]["content"])
            assert not info.get("invalid_action")
            if terminated:
                assert info["success"] and i == len(chat) - 1, "a demonstration fell into a hole"
                reached += 1
            else:
                assert i == len(chat) - 1 or chat[i + 1]["content"] == observation
                assert "You are at the edge" not in observation, "a demonstrated move did not move"
        assert len(chat) // 2 <= FrozenLakeDemoArgs.max_turns
    return reached


def test_demonstrations_are_safe_moves_that_replay_to_the_same_chat(made: Path) -> None:
    # Random safe moves (the default): none falls into a hole; most wander to the turn limit.
    assert _replayed_to_the_goal(made, SMALL["sft"]) < SMALL["sft"]


def test_shortest_path_demonstrations_reach_the_goal(tmp_path: Path) -> None:
    make_frozenlake_demo(FrozenLakeDemoArgs(out=tmp_path, seed=3, optimal=1.0, **SMALL))
    assert _replayed_to_the_goal(tmp_path, SMALL["sft"], optimal=1.0) == SMALL["sft"]


def test_assets_are_reproducible_by_seed(made: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    make_frozenlake_demo(FrozenLakeDemoArgs(out=again, seed=3, **SMALL))
    for name in ("train.jsonl", "test.jsonl", "sft.jsonl", "model/tokenizer.json", "model/model.safetensors"):
        assert (again / name).read_bytes() == (made / name).read_bytes(), name
    other = tmp_path / "other"
    make_frozenlake_demo(FrozenLakeDemoArgs(out=other, seed=4, **SMALL))
    assert (other / "train.jsonl").read_text() != (made / "train.jsonl").read_text()


def test_held_out_maps_are_not_training_maps(made: Path) -> None:
    train, test = _rows(made / "train.jsonl"), _rows(made / "test.jsonl")
    assert len(train) == SMALL["train"] and len(test) == SMALL["test"]
    assert all(r["env_args"]["size"] == 4 and r["env_args"]["is_slippery"] is False for r in train + test)
    assert not {r["env_args"]["seed"] for r in train} & {r["env_args"]["seed"] for r in test}
    maps = {task_map(default_make_env, r["env_args"]) for r in train}
    assert len(maps) > SMALL["train"] / 2
    assert not maps & {task_map(default_make_env, r["env_args"]) for r in test}


def test_held_out_maps_are_drawn_like_the_training_maps() -> None:
    """Held-out maps are a random share of the distinct maps, not the rare ones the training tasks
    happen to miss (those have about twice as many holes)."""
    train, test = draw_tasks(default_make_env, 4, 1500, 150, seed=0)

    def holes(rows: list[dict]) -> float:
        return statistics.mean("".join(start(default_make_env, r["env_args"])[2]["map"]).count("H") for r in rows)

    assert abs(holes(train) - holes(test)) < 0.5


def test_tokenizer_round_trips_the_environment_and_keeps_cells_apart(made: Path) -> None:
    from transformers import AutoTokenizer

    # Loaded as vLLM and the trainer load it (transformers may replace the pre-split by Qwen2's).
    tok = AutoTokenizer.from_pretrained(made / "model")
    shown = [start(default_make_env, r["env_args"])[1] for r in _rows(made / "test.jsonl")]
    assert all("Around you:" in text and "Legend:" not in text for text in shown)
    # The grid, where a user's config shows it (`show_map: true`): every cell one token.
    grids = [start(default_make_env, {**r["env_args"], "show_map": True})[1] for r in _rows(made / "test.jsonl")]
    texts = [m["content"] for row in _rows(made / "sft.jsonl") for m in row["messages"]] + shown + grids
    cut = 0
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == text
        for line in text.splitlines():
            if line and set(line) <= set("_PGO"):
                assert len(tok.encode(line, add_special_tokens=False)) == len(line), line
                cut += 1
    assert cut == 4 * len(grids)
    for action in ACTIONS:
        assert len(tok.encode(action, add_special_tokens=False)) == 1, action


def test_same_settings_are_made_once(made: Path) -> None:
    stamp = (made / "demo.json").stat().st_mtime_ns
    make_frozenlake_demo(FrozenLakeDemoArgs(out=made, seed=3, **SMALL))
    assert (made / "demo.json").stat().st_mtime_ns == stamp


def test_a_directory_of_the_former_layout_is_made_again(made: Path, tmp_path: Path) -> None:
    """A directory made before the demonstrations were one move per row (its stamp has no layout) is not taken
    as made: the config would train on whole chats that its prompts no longer look like."""
    old = tmp_path / "old"
    shutil.copytree(made, old)
    stamp = json.loads((old / "demo.json").read_text())
    del stamp["layout"]
    (old / "demo.json").write_text(json.dumps(stamp))
    (old / "sft.jsonl").write_text("")
    make_frozenlake_demo(FrozenLakeDemoArgs(out=old, seed=3, **SMALL))
    assert (old / "sft.jsonl").read_bytes() == (made / "sft.jsonl").read_bytes()
    assert json.loads((old / "demo.json").read_text())["layout"] == 2


@pytest.mark.parametrize(("change", "message"), [
    ({"sft": 50}, "--sft <= --train"),
    ({"optimal": 1.5}, "--optimal 1.5: a probability"),
    ({"max_turns": 0}, "at least 1 turn"),
])
def test_bad_settings_are_user_errors(tmp_path: Path, change: dict, message: str) -> None:
    with pytest.raises(UserError, match=message):
        make_frozenlake_demo(FrozenLakeDemoArgs(out=tmp_path, **{**SMALL, **change}))


def test_make_demo_task_flag() -> None:
    assert split_task(["--out", "x"]) == ("arith", ["--out", "x"])
    assert split_task(["--task", "frozenlake", "--seed", "2"]) == ("frozenlake", ["--seed", "2"])
    assert split_task(["--task=frozenlake"]) == ("frozenlake", [])
    with pytest.raises(UserError, match="choose one of arith, frozenlake"):
        split_task(["--task", "chess"])
    with pytest.raises(UserError, match="name one of"):
        split_task(["--task"])


@pytest.mark.slow
def test_a_short_run_of_the_config_finishes(made: Path, tmp_path: Path) -> None:
    """configs/frozenlake-cpu.yaml, shortened (2 SFT steps, 2 RL steps, the transformers engine): both stages
    run (the warm-up on single moves, then Trinity-RFT's GiGPO over step-wise episodes), every experience is one
    move whose prompt is its observation alone, and the held-out maps are evaluated before and after."""
    import yaml

    from rfthpc.demos.frozenlake import print_figures
    from tests.run.conftest import ROOT, _merge, env_for, finish, rfthpc

    demo = tmp_path / "demo"
    demo.mkdir()
    (demo / "frozenlake").symlink_to(made)
    raw = yaml.safe_load((ROOT / "configs" / "frozenlake-cpu.yaml").read_text())
    played = raw["buffer"]["explorer_input"]["taskset"]["workflow_args"]
    assert raw["stages"][1]["algorithm"]["algorithm_type"] == "gigpo" and played["step_wise"] is True
    assert played["history_turns"] == 0
    raw = _merge(raw, {"buffer": {"total_steps": 2, "batch_size": 2},
                       "explorer": {"rollout_model": {"engine_type": "transformers"}, "runner_per_model": 2},
                       "monitor": {"monitor_type": ["console"]}})
    raw["stages"][0] = _merge(raw["stages"][0], {"buffer": {"total_steps": 2, "train_batch_size": 4}})
    raw["stages"][1] = _merge(raw["stages"][1], {"algorithm": {"repeat_times": 4}})
    config = tmp_path / "frozenlake.yaml"
    config.write_text(yaml.safe_dump(raw, sort_keys=False))
    code, out, err = finish(rfthpc("run", "--config", str(config), env=env_for(demo, tmp_path / "ckpt")), 600)
    assert code == 0, f"exit {code}\n{out[-2000:]}\n{err[-3000:]}"
    run_dir = tmp_path / "ckpt" / "rfthpc-demo" / "frozenlake-cpu"
    trainer = _rows(run_dir / "monitor" / "trainer.jsonl")
    assert [r["training/stage_index"] for r in trainer] == [0, 0, 1, 1]
    assert all(r["response_length/max"] <= 4 and r["prompt_length/max"] <= 128 for r in trainer[2:])
    explorer = _rows(run_dir / "monitor" / "explorer_explorer_0.jsonl")
    assert any("rollout/turns_mean" in r for r in explorer)
    print_figures(run_dir, 1.0)  # raises unless the held-out maps were evaluated at versions 2 and 4
