"""When an explorer takes new weights (`synchronizer.sync_style`), seen from the explorer.

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


def is_sync_point(batches: int, sync_interval: int, sync_offset: int) -> bool:
    """True after batch `batches` (1-based) is a sync point of an explorer (trainer_driven, explorer_driven)."""
    return batches > sync_offset and (batches - sync_offset) % sync_interval == 0
