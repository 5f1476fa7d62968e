"""Guards around ``RayPPOTrainer.fit``: exit on signal with a checkpoint, the phase a worker failed in, fault injection.

- ``ExitRequest`` (``trainer.save_on_exit``): SIGTERM/SIGINT are recorded while a step runs; the trainer finishes the
  step, saves and exits with ``128 + signal`` (the POSIX shell convention for "killed by signal N").
- ``PhaseTracker``: every timed phase of a step (``gen``, ``reward``, ``old_log_prob``, …, ``save_checkpoint``) goes
  through it, so when a worker dies the trainer can raise ``WorkerFailure`` naming the worker, the phase and the
  step, together with the last valid checkpoint.
- ``StepHealth``: consecutive bad steps (non-finite loss inputs or gradients; a share of invalid reward samples above
  ``trainer.max_invalid_frac``) stop the run after ``trainer.max_consecutive_bad_steps`` with a checkpoint and a
  ``RunStopped`` error naming the cause — a run in which every sample is invalid does not run on to "success", nor
  does a launch shorter than that limit: one whose every sample was invalid fails after its last step.
- Fault injection for the kill tests, off unless ``VERL_TEST_FAULT`` is set: a comma-separated list of
  ``ACTION@PHASE:STEP`` items. When the trainer enters ``PHASE`` of step ``STEP`` it applies ``ACTION``:
  ``KILL`` (SIGKILL to itself: dies at once, no cleanup), ``TERM`` / ``INT`` (sends itself that signal, as an operator
  would), ``WORKER`` (kills the first actor worker process, as a crash or an OOM kill would), ``RAISE`` (raises
  ``InjectedFault``, as a bug or a bad row in that phase would), ``ENOSPC`` / ``EROFS`` (raise that ``OSError``, as a
  full or read-only disk does where a checkpoint file is written; meant for ``save_partial``). Besides the timed
  phases there are three points in the checkpoint code: ``save_partial`` (the workers' files are in the temporary
  directory, ``data.pt`` and the manifest are not), ``save_published`` (the checkpoint is in place, the step's metrics
  are not logged yet) and ``load_checkpoint`` (step = the step being resumed, or 0).
  Example: ``VERL_TEST_FAULT=KILL@save_partial:2`` dies in the middle of writing the step-2 checkpoint.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Callable, Iterator

from verl.trainer.ppo.metric_utils import marked_timer

logger = logging.getLogger(__name__)

FAULT_ENV = "VERL_TEST_FAULT"
FAULT_ACTIONS = ("KILL", "TERM", "INT", "WORKER", "RAISE", "ENOSPC", "EROFS")


class ExitRequest:
    """Records SIGTERM/SIGINT while a step runs (``trainer.save_on_exit``); a second signal interrupts at once.

    Handlers are installed only when ``enabled`` and on the main thread (Python delivers signals there only);
    ``restore`` puts the previous handlers back.
    """

    def __init__(self, enabled: bool) -> None:
        self.signum: int | None = None
        self._previous = {}
        if enabled and threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._previous[sig] = signal.signal(sig, self._handle)

    def _handle(self, signum, frame) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"second {signal.Signals(signum).name}: stopping without a checkpoint")
        self.signum = signum
        logger.warning(
            "received %s: finishing the current step, then saving a checkpoint and exiting", signal.Signals(signum).name
        )

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class InjectedFault(RuntimeError):
    """Raised by a ``RAISE@PHASE:STEP`` fault (tests of the error path)."""


class RunStopped(RuntimeError):
    """The run stopped itself on purpose (too many bad steps) after saving; nothing more to save on the way out."""


def non_finite_rows(batch) -> dict:
    """``{tensor name: [row indices]}`` of the loss inputs holding NaN/Inf on response tokens (empty if clean)."""
    import torch

    mask = batch.batch["response_mask"].bool()
    found = {}
    for key in (
        "token_level_scores",
        "token_level_rewards",
        "old_log_probs",
        "ref_log_prob",
        "values",
        "advantages",
        "returns",
    ):
        if key in batch.batch.keys():
            bad = (~torch.isfinite(batch.batch[key]) & mask).any(-1)
            if bool(bad.any()):
                found[key] = bad.nonzero().flatten().tolist()
    return found


def invalid_reward_problem(metrics: dict, max_invalid_frac: float, reward_name: str, errors: list[str]) -> str | None:
    """A sentence when the step's share of invalid reward samples (``reward/invalid_frac``) exceeds
    ``max_invalid_frac``, naming the reward and its first failure; None otherwise (also when nothing was scored)."""
    frac = metrics.get("reward/invalid_frac")
    if frac is None or frac <= max_invalid_frac:
        return None
    first = errors[0] if errors else "no reason recorded"
    return (
        f"{frac:.0%} of the samples could not be scored (trainer.max_invalid_frac={max_invalid_frac}) by reward "
        f"{reward_name}; first failure: {first}"
    )


def agent_action_problem(metrics: dict) -> str | None:
    """A sentence when, in agent mode, no step of the batch produced a valid action (``env/<name>/
    invalid_action_rate`` = 1): the rollout then trains on nothing but invalid-action penalties. None otherwise."""
    for key, value in metrics.items():
        if key.startswith("env/") and key.endswith("/invalid_action_rate") and value >= 1.0:
            return f"no step produced a valid action ({key}=1.0): check env.action_tag and the prompt format"
    return None


class WeightSyncError(RuntimeError):
    """The rollout generated with other weights than the actor's current ones (a weight sync that never happened)."""


def check_weight_version(meta_info: dict) -> int | None:
    """The weight version the rollout generated with (``meta_info['rollout_weight_version']``, set by the worker: the
    actor's update count for the HF rollout, the version last synced into the vLLM engine), checked against the
    actor's (``actor_weight_version``). None when the worker reports none.

    Raises:
        WeightSyncError: the two differ (the message names both).
    """
    rollout, actor = meta_info.get("rollout_weight_version"), meta_info.get("actor_weight_version")
    if rollout is None:
        return None
    if actor is not None and int(rollout) != int(actor):
        raise WeightSyncError(
            f"the rollout generated with the weights of update {rollout}, but the actor is at update "
            f"{actor}: the weight sync to the rollout engine did not happen"
        )
    return int(rollout)


def warn_zero_variance(metrics: dict, threshold: float, step: int, actor_updated: bool = True) -> None:
    """Log a warning when the share of prompt groups whose rewards are all equal (``critic/zero_std_groups_frac``,
    no GRPO signal) reaches ``threshold`` (``trainer.warn_zero_std_frac``). Nothing is logged on a step whose actor
    is not updated (``actor_updated`` False: before ``trainer.critic_warmup``, e.g. the router trained alone on a
    frozen actor), where the actor's groups carry no signal anyway."""
    frac = metrics.get("critic/zero_std_groups_frac")
    if actor_updated and frac is not None and threshold < 1.0 and frac >= threshold:
        logger.warning(
            "step %d: %.0f%% of the prompt groups have zero reward variance (no learning signal from "
            "them); raise rollout.n, the temperature or the task difficulty's spread",
            step,
            100 * frac,
        )


class StepHealth:
    """Counts consecutive bad steps; the trainer saves and raises :class:`RunStopped` when :meth:`bad` says so.
    It also counts the steps whose every sample the reward could not score (:meth:`scored`), so that a launch shorter
    than ``limit`` in which nothing was ever scored fails too (:meth:`nothing_scored`).

    Args:
        limit: ``trainer.max_consecutive_bad_steps`` (>= 1).
    """

    def __init__(self, limit: int) -> None:
        if int(limit) < 1:
            raise ValueError(f"trainer.max_consecutive_bad_steps must be >= 1, got {limit}")
        self.limit, self.count = int(limit), 0
        self.steps, self.unscored_steps = 0, 0

    def scored(self, metrics: dict) -> None:
        """Record a finished step's ``reward/invalid_frac`` (a step without it, e.g. agent rewards from the
        environment, counts as scored)."""
        self.steps += 1
        self.unscored_steps += int(metrics.get("reward/invalid_frac", 0.0) >= 1.0)

    def nothing_scored(self) -> bool:
        """True when this launch ran steps and the reward scored none of their samples."""
        return self.steps > 0 and self.unscored_steps == self.steps

    def bad(self, step: int, what: str) -> bool:
        """Record a bad step (logged as an error); True when ``limit`` bad steps came in a row."""
        self.count += 1
        logger.error("step %d: %s (%d consecutive bad steps, limit %d)", step, what, self.count, self.limit)
        return self.count >= self.limit

    def good(self) -> None:
        self.count = 0


class WorkerFailure(RuntimeError):
    """A worker died or raised in a phase of a step; the message names the worker, the phase, the step and the
    checkpoint a new start resumes from.

    Attributes:
        phase: the innermost phase that was running (``update_actor``, ``save_checkpoint``, …).
        step: the global step.
        checkpoint: the newest valid checkpoint directory (str), or None.
    """

    def __init__(self, message: str, phase: str, step: int, checkpoint: str | None) -> None:
        super().__init__(message)
        self.phase, self.step, self.checkpoint = phase, step, checkpoint


def resume_hint(checkpoint_root: Path) -> tuple[Path | None, str]:
    """``(newest valid checkpoint or None, a sentence saying what the same command resumes from)``; sizes are
    checked, not hashes (this only names it; the resume verifies it fully)."""
    from verl.utils import checkpoint_manifest as cm

    last = cm.latest_valid_checkpoint(checkpoint_root, check_hashes=False)
    return last, (
        f"the newest valid checkpoint is {last}: run the same command again to resume from it"
        if last
        else "no valid checkpoint yet: a new start begins at step 1"
    )


def worker_failure(exc: Exception, phase: str | None, step: int, checkpoint_root: Path) -> WorkerFailure:
    """``WorkerFailure`` for a worker group's error: ``step S, phase 'P': <the group's message naming the worker
    group, rank and method>`` and the newest valid checkpoint under ``checkpoint_root`` (sizes checked, not hashes:
    this only names it; the resume verifies it fully)."""
    phase = phase or "unknown"
    last, resume = resume_hint(checkpoint_root)
    message = f"step {step}, phase {phase!r}: {exc}\n{resume}"
    logger.error("worker failure: %s", message)
    return WorkerFailure(message, phase=phase, step=step, checkpoint=str(last) if last else None)


def parse_faults(spec: str | None) -> list[tuple[str, str, int]]:
    """``[(action, phase, step)]`` from a ``VERL_TEST_FAULT`` value (empty when unset).

    Raises:
        ValueError: an item is not ``ACTION@PHASE:STEP`` with a known action and an integer step (names the variable).
    """
    faults = []
    for item in filter(None, (part.strip() for part in (spec or "").split(","))):
        action, _, where = item.partition("@")
        phase, _, step = where.rpartition(":")
        if action not in FAULT_ACTIONS or not phase or not step.isdigit():
            raise ValueError(
                f"{FAULT_ENV}={spec!r}: item {item!r} is not ACTION@PHASE:STEP with ACTION one of "
                f"{', '.join(FAULT_ACTIONS)} and an integer STEP"
            )
        faults.append((action, phase, int(step)))
    return faults


class PhaseTracker:
    """Times the phases of a step (``marked_timer``), remembers the one an exception left, and fires injected faults.

    Without a TTY on stderr, a phase other than ``step`` (which the per-step heartbeat of
    ``verl.utils.tracking.StepProgress`` reports) that lasts ``heartbeat_s`` seconds or more is logged when it ends —
    ``[heartbeat] step N: gen 215.6 s`` — so a step of several minutes on CPU shows where it is.

    Args:
        kill_worker: called for a ``WORKER`` fault; kills a worker process (the trainer passes one that kills its
            first actor worker).
        heartbeat_s: the shortest phase logged (seconds); None: decide from stderr (30 s without a TTY, else never —
            a tqdm bar is on screen).
    """

    def __init__(self, kill_worker: Callable[[], None] | None = None, heartbeat_s: float | None = None) -> None:
        self.kill_worker = kill_worker
        self.heartbeat_s = heartbeat_s if heartbeat_s is not None else (None if sys.stderr.isatty() else 30.0)
        self.faults = parse_faults(os.environ.get(FAULT_ENV))
        self.stack: list[str] = []
        self.failed_phase: str | None = None

    def fault_point(self, name: str, step: int) -> None:
        """Apply the injected fault registered for ``name`` at ``step``, if any (no-op without ``VERL_TEST_FAULT``)."""
        for action, phase, at_step in self.faults:
            if phase != name or at_step != step:
                continue
            logger.warning("%s: %s at phase %s of step %d", FAULT_ENV, action, name, step)
            if action == "KILL":
                os.kill(os.getpid(), signal.SIGKILL)
            elif action in ("TERM", "INT"):
                os.kill(os.getpid(), getattr(signal, "SIG" + action))
            elif action == "RAISE":
                raise InjectedFault(f"{FAULT_ENV}: RAISE at phase {name} of step {step}")
            elif action in ("ENOSPC", "EROFS"):
                code = getattr(errno, action)
                raise OSError(code, f"{os.strerror(code)} ({FAULT_ENV}: {action} at phase {name} of step {step})")
            elif self.kill_worker is None:
                raise RuntimeError(f"{FAULT_ENV}: WORKER fault at {name}:{step} but this trainer has no worker to kill")
            else:
                self.kill_worker()

    @contextlib.contextmanager
    def phase(self, name: str, timing: dict, step: int) -> Iterator[None]:
        """``with tracker.phase("gen", timing, step):`` times the block into ``timing[name]``; an exception leaving
        it records ``name`` in ``failed_phase`` (the innermost phase wins)."""
        if not self.stack:
            self.failed_phase = None
        self.stack.append(name)
        before = timing.get(name, 0.0)
        try:
            self.fault_point(name, step)
            with marked_timer(name, timing):
                yield
            seconds = timing[name] - before
            if name != "step" and self.heartbeat_s is not None and seconds >= self.heartbeat_s:
                logger.info("[heartbeat] step %d: %s %.1f s", step, name, seconds)
        except BaseException:
            if self.failed_phase is None:
                self.failed_phase = name
            raise
        finally:
            self.stack.pop()


def kill_ray_worker(handle, timeout_s: float = 30.0) -> None:
    """Kill a Ray actor's process (``ray.kill``: no restart, running tasks fail) and wait until Ray reports it dead,
    so the next call fails deterministically with ``ActorDiedError``."""
    import time

    import ray

    ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            ray.get(handle.__ray_ready__.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    raise TimeoutError(f"Ray actor {handle} still alive {timeout_s:.0f} s after ray.kill")
