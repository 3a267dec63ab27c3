"""When an explorer takes new weights (`synchronizer.sync_style`), seen from the explorer: `WeightSync`.

- fixed: before every batch, the newest publication already staged (`WeightFollower.update`).
- trainer_driven: at its sync points only, the newest publication if there is one; it never waits
  there. (Trinity-RFT's trainer, at its own interval, offers a sync and waits for the explorer to
  join an NCCL broadcast, while the explorer, at its sync points, joins if one is offered and
  goes on otherwise. A publication under `weights/` stays there, so rfthpc's trainer does not wait.)
- explorer_driven: at its sync points, it asks the trainer for weights (`rfthpc.weights.asking`)
  and waits, at most `synchronizer.sync_timeout`, for the answer: the policy the trainer published
  on being asked, or the newest one if it trained nothing since. (Trinity-RFT's explorer raises
  when that wait times out; rfthpc's goes on with the weights it holds and asks again at its next
  sync point, as Trinity-RFT's documentation describes.)

A sync point is the end of the explorer's batch `b` (counted over the process's life, across
requeues, as Trinity-RFT's `explore_step_num`) with `b > sync_offset` and `(b - sync_offset) %
sync_interval == 0`: Trinity-RFT's `Explorer.need_sync`. In every style the staleness bound
(`rfthpc.explorer.staleness`) still makes an explorer wait for a new enough version before a batch;
under explorer_driven that wait asks the trainer too, since it publishes only when asked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from rfthpc.config.settings import ExplorerStageSettings
from rfthpc.errors import UserError
from rfthpc.explorer.stage_end import StageEnd
from rfthpc.rundir.explorer_meta import Progress
from rfthpc.rundir.paths import RunDir
from rfthpc.rundir.trainer_meta import read_trainer_meta, trainer_done
from rfthpc.sharedfs.handoff import Waiter
from rfthpc.signals import StopRequest
from rfthpc.weights import asking as weight_requests
from rfthpc.weights.follow import WeightFollower

log = logging.getLogger(__name__)


def is_sync_point(batches: int, sync_interval: int, sync_offset: int) -> bool:
    """True after batch `batches` (1-based) is a sync point of an explorer (trainer_driven, explorer_driven)."""
    return batches > sync_offset and (batches - sync_offset) % sync_interval == 0


class SyncTimeout(UserError):
    """No policy within the staleness bound was published in time."""


class WeightSync:
    """One explorer process's side of the weight hand-off: it loads newer published weights
    (`WeightFollower`), waits (at most `synchronizer.sync_timeout`) for a version the staleness bound
    requires, and at its sync points takes new weights as the stage's sync_style says."""

    def __init__(self, run: RunDir, name: str, rank: int, follower: WeightFollower, progress: Progress,
                 stop: StopRequest, tick: Callable[[], None], waiter: Waiter) -> None:
        """`tick`: the explorer's periodic duty while it waits; `waiter`: the explorer's (its slow interval
        `explorer.weights_poll_interval`)."""
        self.run = run
        self.name = name
        self.rank = rank
        self.follower = follower
        self.progress = progress
        self.stop = stop
        self.tick = tick
        self.waiter = waiter
        self._asked_s = 0.0
        """Seconds the last sync waited for the trainer's answer (`sync_style: explorer_driven`)."""

    def follow(self) -> bool:
        """Load newer weights if published. True if new weights were loaded."""
        loaded = self.follower.update()
        if loaded:
            w = self.follower.stats
            self.progress.update(weight_stall_s=round(w.stall_s, 4), weight_load_s=round(w.load_s, 3),
                                 weight_read_mb=round(w.bytes_read / 1e6, 2),
                                 weight_checksum_failures=w.checksum_failures)
        return loaded

    def metrics(self) -> dict[str, float]:
        """The cost of the last policy update (see `WeightStats`)."""
        w = self.follower.stats
        return {"rollout/weight_load_s": w.load_s, "rollout/weight_stall_s": w.stall_s,
                "rollout/weight_read_mb": w.bytes_read / 1e6, "rollout/weight_from_full": float(w.from_full),
                "rollout/weight_from_node_local": float(w.from_node_local),
                "rollout/weight_checksum_failures": float(w.checksum_failures)}

    def take_asked_s(self) -> float:
        """Seconds the last sync waited for the trainer's answer, counted once (explorer_driven: the wait
        after the previous batch counts as the next one's)."""
        asked, self._asked_s = self._asked_s, 0.0
        return asked

    def wait_for_version(self, need: int, stage: ExplorerStageSettings) -> StageEnd | None:
        """Wait until the policy held is at least `need`; a status if the wait ends otherwise."""
        timeout = stage.sync_timeout
        deadline = time.monotonic() + timeout
        log.info("waiting for policy version >= %d (holding %d) to stay within max_staleness=%d",
                 need, self.follower.version, stage.max_staleness)
        self.progress.update(state="waiting_for_weights", version=self.follower.version, need_version=need)

        # explorer_driven: the trainer publishes only when asked, so waiting is asking, again after
        # each answer that is not new enough.
        asking = stage.sync_style == "explorer_driven"
        request: str | None = None

        def held_or_over() -> StageEnd | bool | None:
            """True once version `need` is loaded, how the wait ended if it is over otherwise."""
            nonlocal request
            if trainer_done(self.run):
                return StageEnd.TRAINER_DONE
            if time.monotonic() >= deadline:
                raise SyncTimeout(
                    f"explorer {self.name} rank {self.rank}: no policy version >= {need} was published within "
                    f"synchronizer.sync_timeout={timeout:.0f} s (holding version {self.follower.version}); "
                    "check that the trainer is running (its log and `rfthpc status`), or raise sync_timeout / "
                    "sync_offset to let explorers run further ahead"
                )
            self.tick()
            self.follow()
            if self.follower.version >= need:
                return True
            if asking:
                answer = None if request is None else weight_requests.answer_to(self.run.root, self.name,
                                                                                self.rank, request)
                if request is None or (answer is not None and answer < need):
                    request = self._ask()
            return None

        if self.follower.version < need:
            # Woken by the publication itself (a new entry of weights/latest), or every weights_poll_interval.
            bells = [*self.follower.doorbells(), *([weight_requests.answers_doorbell(self.run.root)] if asking
                                                   else [])]
            outcome = self.waiter.wait(held_or_over, bells, None, stop=lambda: self.stop.requested)
            if outcome is None:
                return StageEnd.STOPPED
            if isinstance(outcome, StageEnd):
                return outcome
        self.progress.update(state="exploring", version=self.follower.version)
        return None

    def after_batch(self, stage: ExplorerStageSettings) -> StageEnd | None:
        """At a sync point of trainer_driven or explorer_driven, take new weights; a status if the wait
        for them ends the stage."""
        if stage.sync_style == "fixed" or not is_sync_point(self.progress.record.steps, stage.sync_interval,
                                                             stage.sync_offset):
            return None
        if stage.sync_style == "trainer_driven":
            self.follow()
            return None
        return self._ask_for_weights(stage)

    def withdraw(self) -> None:
        """Take back this process's request for weights (it stops)."""
        weight_requests.withdraw(self.run.root, self.name, self.rank)

    def _ask(self) -> str:
        """Ask the trainer for weights; the request's id."""
        return weight_requests.ask(self.run.root, self.name, self.rank, self.follower.version)

    def _ask_for_weights(self, stage: ExplorerStageSettings) -> StageEnd | None:
        """explorer_driven's sync: ask the trainer for weights and wait, at most `sync_timeout`, until the
        version it answers with is loaded (on timeout, go on with the version held)."""
        began = time.monotonic()
        log.info("explorer %s rank %d: asking the trainer for weights (holding version %d)", self.name, self.rank,
                 self.follower.version)
        self.progress.update(state="asking_for_weights", version=self.follower.version)
        request = self._ask()

        def answered() -> StageEnd | bool | None:
            view = read_trainer_meta(self.run)
            if view is not None and view.done:
                return StageEnd.TRAINER_DONE
            if view is not None and view.stage_index > stage.index:
                return StageEnd.SKIPPED  # the trainer left the stage: so does this explorer
            self.tick()
            answer = weight_requests.answer_to(self.run.root, self.name, self.rank, request)
            if answer is None:
                return None
            self.follow()
            return self.follower.version >= answer or None

        bells = [*self.follower.doorbells(), weight_requests.answers_doorbell(self.run.root)]
        outcome = self.waiter.wait(answered, bells, stage.sync_timeout, stop=lambda: self.stop.requested)
        self._asked_s = time.monotonic() - began
        if isinstance(outcome, StageEnd):
            return outcome
        if outcome is None:
            if self.stop.requested:
                return StageEnd.STOPPED
            log.warning("explorer %s rank %d: the trainer did not answer a request for weights within "
                        "synchronizer.sync_timeout=%.0f s; going on with version %d and asking again at the next "
                        "sync (check the trainer's log and `rfthpc status`)", self.name, self.rank,
                        stage.sync_timeout, self.follower.version)
        self.progress.update(state="exploring", version=self.follower.version)
        return None
