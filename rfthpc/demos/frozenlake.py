"""The agentic CPU demo's model and data (`rfthpc make-demo --task frozenlake`), and its figures.

The demo (configs/frozenlake-cpu.yaml, docs/agents.md) teaches a tiny Qwen2 to walk FrozenLake
maps (4x4, not slippery): the environment says where the goal is and what lies one move away, the
model answers with a move, and so on until it reaches the goal, falls into a hole or runs out of
turns. An SFT warm-up on demonstrated moves comes first, then Trinity-RFT's GiGPO with vLLM rollouts
over step-wise `env_workflow` episodes; success on held-out maps is evaluated before and after,
sampled as in training and greedily.
Everything is made here, offline:

    <out>/model/        the random-init model, its tokenizer trained on the environment's text
    <out>/train.jsonl   training tasks: one environment seed per row (`env_args`)
    <out>/test.jsonl    held-out eval tasks: other seeds, on a tenth of the distinct maps (never training maps)
    <out>/sft.jsonl     warm-up demonstrations on training maps, one move per row: a chat (`messages`) of
                        the observation and the move, as the step-wise policy is prompted
    <out>/demo.json     what was made (a re-run with the same settings does nothing)

A demonstration plays one training map from its reset: each move is, with probability
`--optimal`, one that starts a shortest path to the goal, and otherwise a random safe move (one
that moves the player and does not fall into a hole). With the default (`--optimal 0`) every move
is a random safe one: the warm-up teaches the reply format and valid moves, not the way to the
goal, which RL then learns from the environment's reward (docs/agents.md, "Measured"). Its moves
are written one per row, in an order shuffled across demonstrations (the SFT stage reads rows in
order, and a batch of one episode's moves would be one map's).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import tyro

from rfthpc.demos.tinymodel import PRETOKENIZE_PATTERN
from rfthpc.envs.base import TextEnv
from rfthpc.errors import UserError
from rfthpc.sharedfs.fileops import write_json_atomic

ENV_NAME = "frozen_lake"
ACTIONS = ("Left", "Down", "Right", "Up")
"""FrozenLake's moves as the policy writes them (a bare word is a valid reply)."""
MOVES = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
"""(row, column) step of each move."""
GRID_CELLS = "_PGO"
"""The letters FrozenLake draws its map with (ice, player, goal, hole)."""
GRID_PATTERN = f"[{GRID_CELLS}](?=[{GRID_CELLS}]*$)|{PRETOKENIZE_PATTERN}"
"""The pre-split the tokenizer is trained with: each character of a map row (a line of cell letters
only) on its own, other text as in the arithmetic demo. No merge of two map letters is learned, so
every cell is one token even where transformers loads the tokenizer with Qwen2's own pre-split: the
cell below the player is always the same number of tokens further on, a pattern a 2-layer model
can learn."""
STAMP = "demo.json"
LAYOUT = 2
"""What the files hold, in the stamp: 2 since the demonstrations are one move per row and the maps are
shown as their surroundings (a directory made before is made again)."""
SEED_RANGE = 1_000_000
"""Environment seeds are drawn from [0, SEED_RANGE)."""


@dataclass
class FrozenLakeDemoArgs:
    """Write the agentic CPU demo's model and data (the paths configs/frozenlake-cpu.yaml reads)."""

    out: Path = Path("demo-data/frozenlake")
    """Output directory (the config reads $RFTHPC_DEMO_DIR/frozenlake, default ./demo-data/frozenlake)."""
    seed: int = 0
    """Seed of the model's initial weights, of the environment seeds drawn and of the demonstrations."""
    size: int = 4
    """Map side (size x size cells)."""
    train: int = 4000
    """Training tasks (maps) for the explorers."""
    test: int = 100
    """Held-out eval tasks (maps not among the training maps)."""
    sft: int = 3000
    """Warm-up demonstrations (one episode each, on the first training maps)."""
    optimal: float = 0.0
    """Probability that a demonstrated move starts a shortest path (otherwise: a random safe move);
    the default shows valid moves only, and leaves reaching the goal to reinforcement learning."""
    max_turns: int = 10
    """Most moves per demonstration (and per episode in the config)."""


EnvFactory = Callable[[Mapping[str, Any]], TextEnv]
"""Makes the environment from its constructor arguments (a task's `env_args` without the seed)."""


def env_args(size: int, seed: int) -> dict[str, Any]:
    """A task's `env_args`: one map of the given size, not slippery, shown only as its surroundings
    in words (the demo's model is too small to read its position off the grid in minutes, and its
    warm-up steps cost half as much without the grid); the seed is the episodes' seed."""
    return {"size": size, "seed": seed, "is_slippery": False, "describe_surroundings": True, "show_map": False}


def task_row(size: int, seed: int) -> dict[str, Any]:
    """A taskset row: the environment's `env_args`, and a `prompt` naming the task (the taskset
    loader reads a prompt column; `env_workflow` shows the environment's observations instead)."""
    return {"prompt": f"{ENV_NAME} size {size} seed {seed}", "env_args": env_args(size, seed)}


def default_make_env(args: Mapping[str, Any]) -> TextEnv:
    """The built-in FrozenLake environment, as `env_workflow` constructs it for a task."""
    from rfthpc.envs.registry import make_env

    return make_env(ENV_NAME, dict(args))


def start(make_env: EnvFactory, args: Mapping[str, Any]) -> tuple[TextEnv, str, dict[str, Any]]:
    """A task's environment, reset as `env_workflow` resets it: (env, first observation, reset info)."""
    env = make_env({k: v for k, v in args.items() if k != "seed"})
    observation, info = env.reset(seed=args["seed"])
    return env, observation, info


def distinct_seeds(rng: random.Random) -> Iterator[int]:
    """Seeds from [0, SEED_RANGE) in random order, none twice."""
    drawn: set[int] = set()
    while len(drawn) < SEED_RANGE:
        s = rng.randrange(SEED_RANGE)
        if s not in drawn:
            drawn.add(s)
            yield s


def task_map(make_env: EnvFactory, args: Mapping[str, Any]) -> tuple[str, ...]:
    """The map of the task with `args` (rows in gymnasium's letters), as its reset reports it."""
    env, _, info = start(make_env, args)
    env.close()
    return tuple(str(row) for row in info["map"])


HELD_OUT_SHARE = 0.1
"""Share of the distinct maps whose tasks are held out for eval."""


def held_out(grid: Sequence[str], seed: int) -> bool:
    """Whether the map `grid` is held out, by a stable hash.

    Maps are split, not seeds: a map held out is never a training map. Splitting the distinct maps at
    random (rather than keeping for eval only maps the training tasks happen to miss, which are the
    rare ones, with about twice as many holes) gives both sides the same distribution of maps. The map
    itself is hashed, not the observation: the demo's observations show only the player's surroundings,
    which many maps share.
    """
    digest = hashlib.sha256(f"{seed}:{'/'.join(grid)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") < HELD_OUT_SHARE * 2 ** 64


def draw_tasks(make_env: EnvFactory, size: int, n_train: int, n_test: int, seed: int
               ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(train rows, test rows): distinct seeds, each task on the side its map falls on (`held_out`)."""
    train: list[dict[str, Any]] = []
    test: list[dict[str, Any]] = []
    for tries, s in enumerate(distinct_seeds(random.Random(seed))):
        if len(train) == n_train and len(test) == n_test:
            break
        if tries > 100 * (n_train + n_test):
            raise UserError(f"make-demo: found only {len(test)} of {n_test} held-out and {len(train)} of {n_train} "
                            f"training tasks among {size}x{size} maps; ask for fewer --train or --test tasks")
        side = test if held_out(task_map(make_env, env_args(size, s)), seed) else train
        if len(side) < (n_test if side is test else n_train):
            side.append(task_row(size, s))
    return train, test


Cell = tuple[int, int]


def _neighbour(grid: Sequence[str], cell: Cell, move: str) -> Cell:
    """Where `move` takes the player on `grid` (gymnasium's rules: a move off the map stays put)."""
    dr, dc = MOVES[move]
    r, c = cell[0] + dr, cell[1] + dc
    return (r, c) if 0 <= r < len(grid) and 0 <= c < len(grid[0]) else cell


def goal_distances(grid: Sequence[str]) -> dict[Cell, int]:
    """Moves from each cell to the goal along a shortest path avoiding holes (cells that cannot reach it are absent).

    `grid` is the map in gymnasium's letters (S start, F frozen, H hole, G goal). Moves are
    reversible, so a breadth-first search from the goal gives every cell's distance.
    """
    goal = next((r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "G")
    distance, queue = {goal: 0}, deque([goal])
    while queue:
        cell = queue.popleft()
        for move in ACTIONS:
            near = _neighbour(grid, cell, move)
            if near not in distance and grid[near[0]][near[1]] != "H":
                distance[near] = distance[cell] + 1
                queue.append(near)
    return distance


def optimal_moves(grid: Sequence[str], distance: Mapping[Cell, int], cell: Cell) -> list[str]:
    """The moves from `cell` that start a shortest path to the goal."""
    here = distance.get(cell)
    return [m for m in ACTIONS if here is not None and distance.get(_neighbour(grid, cell, m)) == here - 1]


def safe_moves(grid: Sequence[str], cell: Cell) -> list[str]:
    """The moves from `cell` that move the player and do not fall into a hole."""
    out = []
    for move in ACTIONS:
        near = _neighbour(grid, cell, move)
        if near != cell and grid[near[0]][near[1]] != "H":
            out.append(move)
    return out


def walk(grid: Sequence[str], rng: random.Random, optimal: float, max_turns: int) -> list[str]:
    """A demonstration's moves from the start: each optimal with probability `optimal`, else a
    random safe one; until the goal or `max_turns` moves."""
    distance = goal_distances(grid)
    cell = next((r, c) for r, row in enumerate(grid) for c, ch in enumerate(row) if ch == "S")
    moves: list[str] = []
    while len(moves) < max_turns and grid[cell[0]][cell[1]] != "G":
        best, safe = optimal_moves(grid, distance, cell), safe_moves(grid, cell)
        # Every cell of a generated map but the goal has a safe move: the start has a path to the goal.
        move = rng.choice(best) if best and rng.random() < optimal else rng.choice(safe)
        moves.append(move)
        cell = _neighbour(grid, cell, move)
    return moves


def demonstration(make_env: EnvFactory, args: Mapping[str, Any], rng: random.Random, optimal: float,
                  max_turns: int) -> list[dict[str, str]]:
    """One episode on the map of `args` as a chat: user turns are observations, assistant turns moves.

    The moves are planned on the map the reset reports (info `map`) and then played in the
    environment, whose observations make the chat: exactly what the policy sees in `env_workflow`.
    Raises ValueError if the environment does not take a planned move as valid and safe.
    """
    env, observation, info = start(make_env, args)
    try:
        grid = [str(row) for row in info["map"]]
        messages = [{"role": "user", "content": observation}]
        for i, move in enumerate(moves := walk(grid, rng, optimal, max_turns)):
            observation, _, terminated, truncated, step_info = env.step(move)
            last = i == len(moves) - 1
            if step_info.get("invalid_action") or (terminated and not (last and step_info.get("success"))) or (
                    truncated and not last):
                raise ValueError(f"FrozenLake seed {args['seed']}: the planned move {move!r} (turn {i + 1}) was "
                                 f"not played as a safe move: {observation!r}")
            messages.append({"role": "assistant", "content": move})
            if not (terminated or truncated):
                messages.append({"role": "user", "content": observation})
    finally:
        env.close()
    # A chat ends with the policy's turn: an observation nobody answers teaches nothing.
    return messages[:-1] if messages[-1]["role"] == "user" else messages


def moves(chats: Sequence[Sequence[Mapping[str, str]]], rng: random.Random) -> list[list[dict[str, str]]]:
    """Every demonstrated move as a chat of its own (the observation it answers, then the move), in
    an order shuffled with `rng`."""
    out = [[dict(chat[i]), dict(chat[i + 1])] for chat in chats for i in range(0, len(chat) - 1, 2)]
    rng.shuffle(out)
    return out


def tokenizer_corpus(demonstrations: Sequence[Sequence[Mapping[str, str]]]) -> list[str]:
    """The texts the demo's tokenizer is trained on: the demonstrations as the chat template frames
    them (roles included), and the moves."""
    return ["".join(f"{m['role']}\n{m['content']}\n" for m in chat) for chat in demonstrations] + [" ".join(ACTIONS)]


def make_frozenlake_demo(args: FrozenLakeDemoArgs,
                         make_env: EnvFactory = default_make_env) -> dict[str, Any]:
    """Build the model and write the data described by `args` into `args.out`; return the stamp.

    Skips the work when `args.out` already holds a demo made with the same settings.
    """
    from rfthpc.demos.synth_gsm8k import write_jsonl
    from rfthpc.demos.tinymodel import build_tiny_model

    if args.sft > args.train:
        raise UserError(f"make-demo --sft {args.sft}: the demonstrations play the first training maps; there are "
                        f"{args.train}; use --sft <= --train")
    if not 0 <= args.optimal <= 1:
        raise UserError(f"make-demo --optimal {args.optimal}: a probability, from 0 to 1")
    if args.size < 2 or args.max_turns < 1:
        raise UserError(f"make-demo --size {args.size} --max-turns {args.max_turns}: use a size of at least 2 "
                        "and at least 1 turn")
    out = Path(args.out)
    want = {"task": "frozenlake", "layout": LAYOUT,
            **{k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(args).items() if k != "out"}}
    stamp_path = out / STAMP
    if stamp_path.is_file() and json.loads(stamp_path.read_text()) == want:
        return want
    train, test = draw_tasks(make_env, args.size, args.train, args.test, args.seed)
    rng = random.Random(args.seed)
    chats = [demonstration(make_env, row["env_args"], rng, args.optimal, args.max_turns) for row in train[:args.sft]]
    write_jsonl(out / "train.jsonl", train)
    write_jsonl(out / "test.jsonl", test)
    write_jsonl(out / "sft.jsonl", [{"messages": chat} for chat in moves(chats, rng)])
    build_tiny_model(out / "model", size="demo", seed=args.seed, corpus=tokenizer_corpus(chats),
                     pretokenize_pattern=GRID_PATTERN)
    # Written last: an interrupted run is redone next time.
    write_json_atomic(stamp_path, want)
    return want


EVAL_SAMPLED, EVAL_GREEDY = "frozenlake-eval", "frozenlake-eval-greedy"
"""configs/frozenlake-cpu.yaml's eval tasksets: the held-out maps at the rollout temperature (the
demo's figure) and greedily."""


def print_figures(run_dir: str | Path, wall_s: float) -> None:
    """Print the demo's summary line: `FIGURES success_sft=… success_rft=… greedy_sft=… greedy_rft=…
    wall_s=…`: the share of held-out episodes that reach the goal, for the policy RFT starts from and
    the final policy, played at temperature 1 (`success_*`) and greedily (`greedy_*`)."""
    from rfthpc.demos.figures import demo_figures

    # `success`: the reward component of `reward_type: success`, 1 for an episode that reached the
    # goal and 0 otherwise, cut episodes included (`success_rate` leaves out episodes the workflow
    # cut, which no environment judged).
    sft, rft = demo_figures(Path(run_dir), "success", EVAL_SAMPLED)
    greedy_sft, greedy_rft = demo_figures(Path(run_dir), "success", EVAL_GREEDY)
    print(f"FIGURES success_sft={sft:.3f} success_rft={rft:.3f} greedy_sft={greedy_sft:.3f} "
          f"greedy_rft={greedy_rft:.3f} wall_s={wall_s:.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    """`rfthpc make-demo --task frozenlake`: build the agentic demo's model and data."""
    args = tyro.cli(FrozenLakeDemoArgs, args=argv, prog="rfthpc make-demo --task frozenlake")
    made = make_frozenlake_demo(args)
    print(f"FrozenLake demo model and data in {args.out} (seed {made['seed']}: {made['train']} train maps, "
          f"{made['test']} held-out maps, {made['sft']} demonstrations)")
    return 0
