"""On-policy distillation's teacher served beside the explorer (`explorer.teacher_model`): each sampled
response is scored by the teacher as it is made, so the trainer loads no teacher.

The teacher is one of the explorer's auxiliary models (its own engines on the explorer's GPUs, or a
shared server array on GPUs of its own, `placement: shared`), as Trinity-RFT's distillation workflows ask
theirs. It reads the prompt and the response as one prompt and returns the log-probability of each of its
tokens (vLLM's prompt logprobs); those of the response's tokens are the experience's `teacher_logprobs`,
stored with it. They are of the teacher's own distribution (temperature 1) whatever the sampling
temperature; a teacher loaded in the trainer (`model.teacher_model_path`) scores at the sample's
temperature, as it scores the student.
"""

from __future__ import annotations

from collections.abc import Sequence

from rfthpc.engines.sampling import SamplingArgs
from rfthpc.workflows.base import Experience, RolloutEngine

SCORING = SamplingArgs(temperature=1.0, max_tokens=1, prompt_logprobs=True)
"""A scoring request: the prompt's log-probabilities, one token generated (and dropped) as engines must."""


def score_with_teacher(teacher: RolloutEngine, experiences: Sequence[Experience]) -> None:
    """Set each experience's `teacher_logprobs`: the teacher's log-probability of each response token given
    the prompt and the response tokens before it (one engine call for all of them)."""
    if not experiences:
        return
    scored = teacher.generate([[*e.prompt_token_ids, *e.response_token_ids] for e in experiences], 1, SCORING)
    for e, (completion,) in zip(experiences, scored, strict=True):
        scores = completion.prompt_logprobs
        if scores is None:
            raise RuntimeError("the teacher's engine returned no prompt log-probabilities")
        # scores[j] is the log-probability of token j + 1: the response's tokens start after the prompt's.
        e.teacher_logprobs = list(scores[len(e.prompt_token_ids) - 1:])
