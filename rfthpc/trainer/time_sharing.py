"""The trainer's side of time-sharing the node's GPUs with the explorers colocated with it
(`explorer.rollout_model.enable_sleep_mode`; the protocol is rfthpc.engines.time_sharing's).

The trainer holds its turn while it computes, publishes and checkpoints, and gives it up while it waits for
experience: its models' weights and gradients and its optimizers' state move to CPU memory, the CUDA cache is
emptied, and the explorers' engines wake into the memory freed. Rank 0 takes the turns of all the node's
GPUs for every rank (the ranks meet at a barrier before computing on them, and again before rank 0 gives
them up), so one trainer holds the node or none of it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from rfthpc.engines.time_sharing import GpuTurns
from rfthpc.trainer.dist import DistEnv

log = logging.getLogger(__name__)

Holdings = Callable[[], tuple[list[torch.nn.Module], list[torch.optim.Optimizer]]]
"""What the trainer holds on its GPUs now: its models and its optimizers."""


class TrainerTurns:
    """The trainer's turns on the node's GPUs; its state leaves the GPUs whenever it gives them up."""

    def __init__(self, turns: GpuTurns | None, env: DistEnv, holdings: Holdings, move_models: bool = True) -> None:
        """`turns`: rank 0's (None on the others); `move_models`: false where FSDP already keeps the
        parameters in CPU memory (`trainer.param_offload`), which moving them would undo."""
        self.turns = turns
        self.env = env
        self.holdings = holdings
        self.move_models = move_models
        self.held = False
        self.waited_s = 0.0
        """Seconds waited for turns since the last `take_waited`."""
        self._moved: list[tuple[dict, str]] = []

    def take(self) -> None:
        """Take the turns (rank 0 waits for them, every rank at a barrier) and bring the state back."""
        if self.held:
            return
        if self.turns is not None:
            self.waited_s += self.turns.acquire() or 0.0
        self.env.barrier()
        self._to_gpu()
        self.held = True

    def give(self) -> None:
        """Move the state to CPU memory and give the turns up (after every rank has moved its own)."""
        if not self.held:
            return
        self._to_cpu()
        self.env.barrier()
        if self.turns is not None:
            self.turns.release()
        self.held = False

    def abandon(self) -> None:
        """Let the turns go as the trainer fails: no state moved, no barrier (the other ranks may never meet it;
        the process is ending)."""
        if self.turns is not None:
            self.turns.release()
        self.held = False

    @contextmanager
    def away(self) -> Iterator[None]:
        """Without the turns for the block (waiting for experience), holding them again after it."""
        held = self.held
        self.give()
        try:
            yield
        except BaseException:
            self.abandon()
            raise
        if held:
            self.take()

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Holding the turns for the block (publishing while waiting), as before it after."""
        held = self.held
        self.take()
        try:
            yield
        except BaseException:
            self.abandon()
            raise
        if not held:
            self.give()

    def take_waited(self) -> float:
        """Seconds waited for turns since the last call."""
        waited, self.waited_s = self.waited_s, 0.0
        return waited

    def _to_cpu(self) -> None:
        if self.env.device.type != "cuda":
            return
        models, optimizers = self.holdings()
        if self.move_models:
            for model in models:
                model.to("cpu")
        self._moved = []
        for optimizer in optimizers:
            for state in optimizer.state.values():
                for key, value in state.items():
                    # Adam's `step` counters live on the CPU already; only what is on the GPU comes back to it.
                    if isinstance(value, torch.Tensor) and value.device.type == "cuda":
                        state[key] = value.to("cpu", non_blocking=True)
                        self._moved.append((state, key))
        torch.cuda.synchronize()
        torch.cuda.empty_cache()

    def _to_gpu(self) -> None:
        if self.env.device.type != "cuda":
            return
        models, _ = self.holdings()
        if self.move_models:
            for model in models:
                model.to(self.env.device)
        for state, key in self._moved:
            state[key] = state[key].to(self.env.device, non_blocking=True)
        self._moved = []
        torch.cuda.synchronize()
