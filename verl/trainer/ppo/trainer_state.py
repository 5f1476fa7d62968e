"""The trainer's counters and resume record in one object (:class:`TrainerState`).

``RayPPOTrainer.state`` holds it; ``checkpointing.load_checkpoint`` returns it (a fresh one, or the saved counters of
the checkpoint it resumed from) and ``checkpointing.save_checkpoint`` writes its counters into ``data.pt``. The
trainer's ``global_steps``, ``epoch``, ``batches_consumed`` and ``run_id`` (upstream verl's names, which user code
reads) are views of it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field


@dataclass
class TrainerState:
    """What a run counts and what it resumed from.

    Saved in a checkpoint (``data.pt``: ``global_step``, ``epoch``, ``sampler.batches_consumed``; the manifest's
    ``run_id``): ``global_steps`` (the step being trained, 1-based; 0 before the first), ``epoch`` (0-based),
    ``batches_consumed`` (data-loader batches of the current epoch already used, including those dynamic sampling
    drew), ``run_id`` (the run whose checkpoints this one may rotate away; a resume keeps the checkpoint's).

    This process's only: ``resumed_from`` (the ``global_step_N`` folder resumed from, or None), ``resume_record``
    (that step's metrics record, which the tracker logs if the kill came between the save and the log),
    ``completed_step`` (the last step whose updates finished; None before the loop), ``saved_step`` (the last step
    this process saved), ``step_record`` (``(step, metrics)`` of the step just finished, saved with its checkpoint),
    ``step_start`` (the driver state at the current step's start: RNGs, KL controller, router; what a save after an
    error in that step stores).
    """

    global_steps: int = 0
    epoch: int = 0
    batches_consumed: int = 0
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    resumed_from: str | None = None
    resume_record: dict | None = None
    completed_step: int | None = None
    saved_step: int | None = None
    step_record: tuple[int, dict] | None = None
    step_start: dict | None = None
