"""Sokoban levels: their text form, and random levels that are solvable by construction.

A random level is made as ROLL's (after gym-sokoban's) are: carve a room out of walls by a random walk,
put every box on a target (a solved state), then play backwards: the player walks at random and pulls
boxes behind it. Pulling is pushing in reverse, so the forward moves that undo the walk solve the
level from any state the walk passed through; the state kept is the one where the boxes lie farthest
from their targets. Every random choice comes from one `random.Random(seed)`: a seed is a level.

Text form (also the observation's grid): `#` wall, `_` floor, `O` target, `X` box, `*` box on a target,
`P` player, `+` player on a target. Cells outside the rows count as walls.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

Pos = tuple[int, int]

DIRECTIONS: dict[str, Pos] = {"Up": (-1, 0), "Down": (1, 0), "Left": (0, -1), "Right": (0, 1)}
CELLS = "#_OX*P+"
_TURN = 0.35
"""Chance that the carving walk changes direction at a step (lower: longer corridors)."""
_WIDEN = 0.3
"""Chance that the carving walk also opens a cell beside its own (wider rooms leave boxes room to move)."""
_PULL = 0.8
"""Chance that the backward walk pulls the box behind the player when there is one."""
_OPEN_SHARE = 0.55
"""Share of the cells inside the outer walls that the carving walk opens (the rest stay walls)."""
_ATTEMPTS = 100


@dataclass(frozen=True)
class Level:
    """A Sokoban state: the fixed room (floor cells, targets) and the moving parts (boxes, player)."""

    rows: int
    cols: int
    floor: frozenset[Pos]
    targets: frozenset[Pos]
    boxes: frozenset[Pos]
    player: Pos

    def render(self) -> str:
        """The level in its text form, one line per row."""
        def cell(pos: Pos) -> str:
            if pos not in self.floor:
                return "#"
            on_target = pos in self.targets
            if pos == self.player:
                return "+" if on_target else "P"
            if pos in self.boxes:
                return "*" if on_target else "X"
            return "O" if on_target else "_"
        return "\n".join("".join(cell((r, c)) for c in range(self.cols)) for r in range(self.rows))

    @property
    def solved(self) -> bool:
        """Every box is on a target."""
        return self.boxes == self.targets


def parse_level(rows: list[str]) -> Level:
    """The level drawn by `rows` in the text form; ValueError if it is not a playable level."""
    cells = {(r, c): ch for r, row in enumerate(rows) for c, ch in enumerate(row)}
    players = [pos for pos, ch in cells.items() if ch in "P+"]
    boxes = frozenset(pos for pos, ch in cells.items() if ch in "X*")
    targets = frozenset(pos for pos, ch in cells.items() if ch in "O*+")
    if len(players) != 1:
        raise ValueError(f"must hold exactly one player (P or +), not {len(players)}")
    if not boxes or len(boxes) != len(targets):
        raise ValueError(f"must hold as many boxes (X, *) as targets (O, *, +), and at least one: "
                         f"{len(boxes)} boxes, {len(targets)} targets")
    floor = frozenset(pos for pos, ch in cells.items() if ch != "#")
    return Level(len(rows), len(rows[0]), floor, targets, boxes, players[0])


def _step(pos: Pos, d: Pos, times: int = 1) -> Pos:
    return pos[0] + d[0] * times, pos[1] + d[1] * times


def _carve(rng: random.Random, rows: int, cols: int) -> set[Pos]:
    """Floor cells opened in a room of walls by a random walk inside its border."""
    inside = {(r, c) for r in range(1, rows - 1) for c in range(1, cols - 1)}
    pos = (rng.randrange(1, rows - 1), rng.randrange(1, cols - 1))
    direction = rng.choice(list(DIRECTIONS.values()))
    floor = {pos}
    wanted = int(_OPEN_SHARE * len(inside))
    # The walk reaches `wanted` cells long before this bound in all but freak runs.
    for _ in range(50 * len(inside)):
        if len(floor) >= wanted:
            break
        if rng.random() < _TURN:
            direction = rng.choice(list(DIRECTIONS.values()))
        if _step(pos, direction) in inside:
            pos = _step(pos, direction)
            floor.add(pos)
        if rng.random() < _WIDEN:
            beside = _step(pos, rng.choice(list(DIRECTIONS.values())))
            if beside in inside:
                floor.add(beside)
    return floor


def _play_backwards(rng: random.Random, floor: set[Pos], num_boxes: int, steps: int) -> tuple[
        frozenset[Pos], frozenset[Pos], Pos] | None:
    """(targets, boxes, player) of the hardest state a backward walk from a solved state reaches; None
    if no box left its target."""
    cells = sorted(floor)
    if len(cells) < num_boxes + 1:
        return None
    targets = rng.sample(cells, num_boxes)
    # Each box's current cell, listed in the order of the target it started on.
    boxes = list(targets)
    player = rng.choice([c for c in cells if c not in boxes])
    best, best_score = None, 0
    for _ in range(steps):
        d = rng.choice(list(DIRECTIONS.values()))
        ahead, behind = _step(player, d), _step(player, d, -1)
        if ahead not in floor or ahead in boxes:
            continue
        if behind in boxes and rng.random() < _PULL:
            boxes[boxes.index(behind)] = player
        player = ahead
        off = sum(b not in targets for b in boxes)
        score = off * sum(abs(b[0] - t[0]) + abs(b[1] - t[1]) for b, t in zip(boxes, targets))
        if score > best_score:
            best, best_score = (frozenset(targets), frozenset(boxes), player), score
    return best


def generate_level(seed: int, rows: int, cols: int, num_boxes: int, search_depth: int) -> Level:
    """A random solvable level of the given size (walls included) for `seed`; `search_depth` steps of
    backward play. ValueError if the room is too small for the boxes."""
    rng = random.Random(seed)
    for _ in range(_ATTEMPTS):
        floor = _carve(rng, rows, cols)
        found = _play_backwards(rng, floor, num_boxes, search_depth)
        if found is not None:
            targets, boxes, player = found
            return Level(rows, cols, frozenset(floor), targets, boxes, player)
    raise ValueError(f"no level with {num_boxes} boxes found in {_ATTEMPTS} rooms of {rows}x{cols}: "
                     "use a larger room, fewer boxes or a larger search_depth")
