"""Trainer checkpoints: the atomic save and the validated resume of :class:`RayPPOTrainer`.

Layout (upstream's): ``{trainer.default_local_dir}/global_step_N/{actor,critic}/``, ``data.pt`` (driver state:
sampler position, step, epoch, RNG states, KL controller, router), ``config.yaml`` and ``manifest.json`` (written
last; see :mod:`verl.utils.checkpoint_manifest`), plus ``latest_checkpointed_iteration.txt``.
"""

from __future__ import annotations

import copy
import logging
import random
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from verl import __version__
from verl.utils import checkpoint_manifest as cm
from verl.trainer.ppo.run_guard import resume_hint
from verl.trainer.ppo.trainer_state import TrainerState
from verl.utils.checkpoint_manifest import CheckpointError
from verl.utils.checkpoint_space import check_free_space, estimate_bytes, raise_if_disk_fault

logger = logging.getLogger(__name__)


def driver_state(trainer) -> dict:
    """A copy of the driver's state that a step changes: RNG states (torch, numpy, python), the KL controller and
    the router (λ, its running averages). Taken at the start of every step so that a save after an error in that
    step stores the state the step began from (:func:`save_after_error`)."""
    state = {"rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}}
    if trainer.kl_ctrl_in_reward is not None:
        state["kl_ctrl"] = copy.deepcopy(trainer.kl_ctrl_in_reward.state_dict())
    if trainer.router is not None:
        state["router"] = copy.deepcopy(trainer.router.state_dict())
    return state


def _set_rngs(rng: dict) -> None:
    """Restore this process's torch, numpy and (when saved) Python RNG states from a :func:`driver_state` ``rng``."""
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    if "python" in rng:
        random.setstate(rng["python"])


def save_checkpoint(trainer, driver: dict | None = None) -> None:
    """Atomic checkpoint: workers and driver state are written into a temporary directory, the manifest (sizes
    and SHA-256 of every file) last, then the directory is renamed to ``global_step_N`` and the tracker file
    updated (upstream layout: ``actor/``, ``critic/``, ``data.pt``; ``data.pt`` also holds the step's metrics
    record, which ``Tracking`` restores when a kill lands between this save and the log). Rotation keeps the newest
    ``max_actor_ckpt_to_keep`` valid checkpoints of this run (``TrainerState.run_id``) and never deletes the newest valid
    one nor another run's.

    Disk faults (``verl.utils.checkpoint_space``): the free space is checked against the estimate of the checkpoint's
    size first; a write that fails on a full or read-only disk removes its partial folder and raises one
    ``CheckpointError`` saying so, the previous checkpoints kept.

    Args:
        driver: the :func:`driver_state` to store; None stores the current one.

    Raises:
        CheckpointError: too little free space, or the disk filled up / refused the write during the save.
    """
    run = trainer.state
    root = Path(trainer.config.trainer.default_local_dir)
    root.mkdir(parents=True, exist_ok=True)
    previous = cm.latest_valid_checkpoint(root, check_hashes=False)
    needed = estimate_bytes(previous, trainer.config.actor_rollout_ref.model.path)
    if previous is not None:  # the newest checkpoint's size; before the first save it is not known (module doc)
        check_free_space(root, needed, run.global_steps)  # before any byte is written
    tmp = cm.new_temp_dir(root, run.global_steps)
    try:
        step_dir = _write_and_publish(trainer, tmp, root, driver)
    except Exception as exc:
        raise_if_disk_fault(exc, tmp, root, needed, run.global_steps, previous)
        raise
    trainer.phases.fault_point("save_published", run.global_steps)  # kill tests: published, metrics not logged
    keep = [
        k for k in (trainer.config.trainer.max_actor_ckpt_to_keep, trainer.config.trainer.max_critic_ckpt_to_keep) if k
    ]
    for removed in cm.rotate_checkpoints(root, min(keep) if keep else None, run_id=run.run_id):
        logger.info("removed old checkpoint %s", removed)
    run.saved_step = run.global_steps
    logger.info("saved checkpoint %s", step_dir)


def _write_and_publish(trainer, tmp: Path, root: Path, driver: dict | None) -> Path:
    """The workers' and the driver's files into ``tmp``, the manifest last, then the rename to ``global_step_N``."""
    run = trainer.state
    trainer.actor_rollout_wg.save_checkpoint(str(tmp / "actor"), global_step=run.global_steps)
    if trainer.use_critic:
        trainer.critic_wg.save_checkpoint(str(tmp / "critic"), global_step=run.global_steps)
    trainer.phases.fault_point("save_partial", run.global_steps)  # kill tests: die with the save half written
    state = {
        "sampler": trainer.train_sampler.state_dict(run.batches_consumed),
        "global_step": run.global_steps,
        "epoch": run.epoch,
        **(driver or driver_state(trainer)),
    }
    step, metrics = run.step_record or (None, None)
    if step == run.global_steps:  # the step's metrics, for a kill between this save and their log
        state["metrics"] = {**metrics, **{f"timing_s/{k}": v for k, v in trainer._timing.items()}}
    torch.save(state, tmp / "data.pt")
    config = OmegaConf.to_container(trainer.config, resolve=True)
    (tmp / "config.yaml").write_text(OmegaConf.to_yaml(trainer.config, resolve=True))
    cm.write_manifest(
        tmp,
        step=run.global_steps,
        epoch=run.epoch,
        config=config,
        world_size=trainer.n_workers,
        version=__version__,
        run_id=run.run_id,
    )
    return cm.publish_checkpoint(tmp, root, run.global_steps, run_id=run.run_id)


def _refuse_if_only_invalid(root: Path) -> None:
    """``resume_mode=auto`` found no valid checkpoint: a fresh start is right only when there is none at all. When
    ``global_step_*`` folders exist and every one fails verification, starting from step 0 would later overwrite
    them (their weights may be intact), so stop and say what is wrong with each.

    Raises:
        CheckpointError: listing every rejected checkpoint and why, and how to start fresh on purpose.
    """
    reasons = []
    for step_dir in cm.step_dirs(root):
        try:
            cm.verify_checkpoint(step_dir)
        except cm.CheckpointError as err:
            reasons.append(f"{step_dir.name}: {err}")
    if reasons:
        raise cm.CheckpointError(
            f"no valid checkpoint to resume from in {root}, but {len(reasons)} damaged one(s):"
            "\n  " + "\n  ".join(reasons) + "\nRepair or move them, or start fresh on purpose "
            "with trainer.resume_mode=disable (saves then replace these folders) or a new "
            "trainer.default_local_dir."
        )


def _check_manifest_against_files(step_dir: Path, manifest: dict, state: dict) -> None:
    """The manifest's own fields must describe the files beside it: ``config_sha256`` and ``resume_keys`` the saved
    ``config.yaml``, ``step`` and ``epoch`` the driver state in ``data.pt`` (an edited manifest could otherwise make
    a resume skip or replay steps, or pass the config check on values the run never had).

    Raises:
        CheckpointError: naming the checkpoint, the field and both values.
    """
    config_file = step_dir / "config.yaml"
    if config_file.is_file():
        saved = OmegaConf.to_container(OmegaConf.load(config_file), resolve=True)
        if manifest.get("config_sha256") != cm.config_sha256(saved):
            raise CheckpointError(f"{step_dir}: manifest.json's config_sha256 does not match config.yaml")
        flat = cm.flatten(saved)
        edited = [k for k, v in (manifest.get("resume_keys") or {}).items() if flat.get(k) != v]
        if edited:
            raise CheckpointError(
                f"{step_dir}: manifest.json's resume_keys differ from config.yaml on {', '.join(edited)}"
            )
    for field, value in (("step", state.get("global_step")), ("epoch", state.get("epoch"))):
        if manifest.get(field) != value:
            raise CheckpointError(
                f"{step_dir}: manifest.json says {field} {manifest.get(field)!r}, data.pt holds {value!r}"
            )


def _warn_if_tracker_disagrees(root: Path, step_dir: Path) -> None:
    """Upstream's ``latest_checkpointed_iteration.txt`` should name the checkpoint resume picks; say so when not
    (deleted, edited, or left behind by a save that was killed after the rename)."""
    tracker = root / cm.TRACKER
    try:
        text = tracker.read_text().strip()
    except OSError:
        logger.warning("%s is missing: resuming from %s, the newest valid checkpoint", tracker, step_dir.name)
        return
    if text != step_dir.name[len(cm.STEP_PREFIX) :]:
        logger.warning(
            "%s says %r but the newest valid checkpoint is %s: resuming from %s",
            tracker,
            text,
            step_dir.name,
            step_dir.name,
        )


MODEL_KEY = "actor_rollout_ref.model.path"


def _saved_model_path(step_dir: Path) -> object | None:
    """The model path recorded in ``step_dir``'s manifest; None when it records none (older checkpoints)."""
    saved = cm.verify_checkpoint(step_dir, check_hashes=False).get("resume_keys")
    return saved.get(MODEL_KEY) if isinstance(saved, dict) else None


def refuse_other_model(config) -> None:
    """Refuse, before any data or model work (an SFT preset build takes minutes), a run whose resume
    :func:`load_checkpoint` would refuse because the checkpoint was trained from another
    ``actor_rollout_ref.model.path``; it reads the same keys (``trainer.resume_mode``, ``resume_from_path``,
    ``default_local_dir``, ``resume_allow_changes``). The model path is compared as
    :func:`verl.utils.model_presets.resolve_model_path` resolves it (what a checkpoint records); a value that resolves
    to nothing or to a folder without a readable ``config.json``, and a checkpoint that records no model path, are
    left to the later checks. The newest checkpoint is found by sizes and a conflict confirmed on the one that also
    verifies by SHA-256, as ``load_checkpoint`` chooses.

    Raises:
        CheckpointError: the checkpoint's model differs (both named, and what to do).
    """
    from verl.utils.model_presets import PRESETS, ModelPathError, check_model_dir, resolve_model_path

    cfg = config.trainer
    if cfg.resume_mode not in ("auto", "resume_path") or MODEL_KEY in list(cfg.resume_allow_changes or []):
        return
    model = str(config.actor_rollout_ref.model.path)
    resolved = resolve_model_path(model)
    if resolved is None:
        return  # prepare_model refuses it by name
    if isinstance(resolved, Path) and model not in PRESETS:
        try:
            check_model_dir(resolved)
        except ModelPathError:
            return  # prepare_model refuses the folder, and says why
    wanted = str(resolved)
    if cfg.resume_mode == "resume_path":
        step_dir = Path(str(cfg.resume_from_path or ""))
        try:
            saved = _saved_model_path(step_dir)
        except (CheckpointError, OSError):
            return  # load_checkpoint says what is wrong with it
    else:
        step_dir = cm.latest_valid_checkpoint(Path(cfg.default_local_dir), check_hashes=False)
        if step_dir is None or _saved_model_path(step_dir) in (None, wanted):
            return
        step_dir = cm.latest_valid_checkpoint(Path(cfg.default_local_dir))  # the one load_checkpoint resumes from
        saved = None if step_dir is None else _saved_model_path(step_dir)
    if saved in (None, wanted):
        return
    raise CheckpointError(
        f"{step_dir} was trained from {MODEL_KEY}={saved!r}, and this run's model "
        f"{config.actor_rollout_ref.model.path!r} is {wanted!r}: resuming from it would be refused. "
        f"Give the run a checkpoint folder of its own (another EXPERIMENT_NAME / "
        f"trainer.experiment_name), or use the checkpoint's model."
    )


def load_checkpoint(trainer) -> TrainerState:
    """Resume from the newest valid checkpoint (``resume_mode=auto``) or ``resume_from_path``: the workers, the
    sampler, the KL controller and the router are restored in place, and the run's counters returned.

    Returns:
        A fresh :class:`TrainerState` (new ``run_id``) when there is nothing to resume; otherwise the checkpoint's
        step, epoch, batches consumed and ``run_id``, with ``resumed_from`` and ``resume_record`` set.

    A checkpoint is valid only with a manifest whose files all match and whose own fields agree with them
    (:func:`_check_manifest_against_files`); its config must agree with the current one on
    ``checkpoint_manifest.RESUME_KEYS`` unless listed in ``trainer.resume_allow_changes``.

    Raises:
        CheckpointError: ``resume_path`` names an invalid checkpoint, the configs differ (keys listed), the manifest
            disagrees with its files, or ``resume_mode=auto`` finds checkpoints but none valid (each named with its
            problem).
    """
    cfg = trainer.config.trainer
    mode = cfg.resume_mode
    fresh = TrainerState()
    if mode == "disable":
        return fresh
    root = Path(cfg.default_local_dir)
    if mode == "resume_path":
        if not cfg.resume_from_path or cm.STEP_PREFIX not in str(cfg.resume_from_path):
            raise ValueError("trainer.resume_mode=resume_path needs trainer.resume_from_path=.../global_step_N")
        step_dir = Path(cfg.resume_from_path)
        cm.verify_checkpoint(step_dir)
    elif mode == "auto":
        step_dir = cm.latest_valid_checkpoint(root)
        if step_dir is None:
            _refuse_if_only_invalid(root)
            return fresh
        _warn_if_tracker_disagrees(root, step_dir)
    else:
        raise ValueError(f"trainer.resume_mode must be auto, disable or resume_path, got {mode!r}")
    manifest = cm.verify_checkpoint(step_dir, check_hashes=False)
    current = cm.flatten(OmegaConf.to_container(trainer.config, resolve=True))
    diffs = cm.config_differences(manifest["resume_keys"], current, list(cfg.resume_allow_changes or []))
    if diffs:
        raise cm.CheckpointError(
            f"cannot resume from {step_dir}: the config differs on\n  "
            + "\n  ".join(diffs)
            + "\nRestore these values, start a new trainer.default_local_dir, or list keys "
            "that are safe to change in trainer.resume_allow_changes."
        )
    state = torch.load(step_dir / "data.pt", weights_only=False)
    _check_manifest_against_files(step_dir, manifest, state)
    # the driver's RNGs first, then the critic's, the actor's last: with trainer.single_process they all share this
    # process's RNGs, and the actor's saved state (the sampling stream) must win, also for a checkpoint of a Ray run
    _set_rngs(state["rng"])
    if trainer.use_critic:
        trainer.critic_wg.load_checkpoint(str(step_dir / "critic"))
    trainer.actor_rollout_wg.load_checkpoint(str(step_dir / "actor"))
    trainer.train_sampler.load_state_dict(state["sampler"])
    if "kl_ctrl" in state and trainer.kl_ctrl_in_reward is not None:
        trainer.kl_ctrl_in_reward.load_state_dict(state["kl_ctrl"])
    if trainer.router is not None:
        if "router" not in state:
            raise cm.CheckpointError(f"router.enable=true but checkpoint {step_dir} has no router state")
        trainer.router.load_state_dict(state["router"])
    run = TrainerState(
        global_steps=int(state["global_step"]),
        epoch=int(state["epoch"]),
        batches_consumed=int(state["sampler"]["batches_consumed"]),
        run_id=manifest.get("run_id") or fresh.run_id,
        resumed_from=str(step_dir),
        resume_record=state.get("metrics"),
    )
    logger.info("resumed from %s (global step %d, epoch %d)", step_dir, run.global_steps, run.epoch)
    return run


def save_after_error(trainer) -> str:
    """On an error inside the training loop, save the last completed step like a SIGTERM stop does
    (``trainer.save_on_exit``), and return a sentence for the error: what was saved, or why not, and how to resume.

    Saved only when it is the state of a whole step: not when the error came during a step's updates
    (``trainer.updating``: the weights are partly updated), not when no step completed, not when that step is
    already saved. A failure in a step's generation, reward, log-prob or advantage phase leaves the workers at the
    last completed step; the driver state of that step's start (``TrainerState.step_start``: RNGs, KL controller,
    router λ) is stored, so with ``trainer.single_process`` (one shared RNG) the resume equals an uninterrupted run.
    A save that itself fails (e.g. the worker is dead) is reported, never raised over the original error.
    """
    cfg = trainer.config.trainer
    run = trainer.state
    root = Path(cfg.default_local_dir)
    step = run.completed_step

    def newest() -> str:
        return resume_hint(root)[1]

    if step is None:
        return f"the error came before training started; {newest()}"
    if not cfg.save_on_exit:
        return f"nothing saved (trainer.save_on_exit=false); {newest()}"
    if trainer.updating:
        return (
            f"the error came during the updates of step {step + 1}, so the weights are partly updated and no "
            f"checkpoint was written; {newest()}"
        )
    if step == 0 or run.saved_step == step:
        return newest()
    failed_mid_step = run.global_steps > step
    driver = run.step_start if failed_mid_step else None
    if driver is not None:  # the workers save their RNGs too: in one process, they must save the step's start
        _set_rngs(driver["rng"])
    failed_at = run.global_steps
    run.global_steps = step
    try:
        save_checkpoint(trainer, driver=driver)
    except Exception as err:  # noqa: BLE001 - reported with the original error, which is the one to raise
        logger.error("could not save step %d after the error: %s", step, err)
        return f"saving step {step} after the error failed too ({err}); {newest()}"
    finally:
        run.global_steps = failed_at
    return f"step {step}, the last completed one, is saved: run the same command to resume from it"
