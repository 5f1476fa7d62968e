"""Trainer checkpoints: the atomic save and the validated resume of :class:`RayPPOTrainer` (issue 6).

Layout (upstream's): ``{trainer.default_local_dir}/global_step_N/{actor,critic}/``, ``data.pt`` (driver state:
sampler position, step, epoch, RNG states, KL controller, router), ``config.yaml`` and ``manifest.json`` (written
last; see :mod:`verl.utils.checkpoint_manifest`), plus ``latest_checkpointed_iteration.txt``.
"""
from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from verl import __version__
from verl.utils import checkpoint_manifest as cm

logger = logging.getLogger(__name__)


def save_checkpoint(trainer) -> None:
    """Atomic checkpoint: workers and driver state are written into a temporary directory, the manifest (sizes
    and SHA-256 of every file) last, then the directory is renamed to ``global_step_N`` and the tracker file
    updated (upstream layout: ``actor/``, ``critic/``, ``data.pt``). Rotation keeps the newest
    ``max_actor_ckpt_to_keep`` valid checkpoints and never deletes the newest valid one."""
    root = Path(trainer.config.trainer.default_local_dir)
    tmp = cm.new_temp_dir(root, trainer.global_steps)
    trainer.actor_rollout_wg.save_checkpoint(str(tmp / "actor"), global_step=trainer.global_steps)
    if trainer.use_critic:
        trainer.critic_wg.save_checkpoint(str(tmp / "critic"), global_step=trainer.global_steps)
    trainer.phases.fault_point("save_partial", trainer.global_steps)  # kill tests: die with the save half written
    state = {"sampler": trainer.train_sampler.state_dict(trainer.batches_consumed), "global_step": trainer.global_steps,
             "epoch": trainer.epoch, "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                                          "python": random.getstate()}}
    if trainer.kl_ctrl_in_reward is not None:
        state["kl_ctrl"] = trainer.kl_ctrl_in_reward.state_dict()
    if trainer.router is not None:
        state["router"] = trainer.router.state_dict()
    torch.save(state, tmp / "data.pt")
    config = OmegaConf.to_container(trainer.config, resolve=True)
    (tmp / "config.yaml").write_text(OmegaConf.to_yaml(trainer.config, resolve=True))
    cm.write_manifest(tmp, step=trainer.global_steps, epoch=trainer.epoch, config=config, world_size=trainer.n_workers,
                      version=__version__)
    step_dir = cm.publish_checkpoint(tmp, root, trainer.global_steps)
    keep = [k for k in (trainer.config.trainer.max_actor_ckpt_to_keep, trainer.config.trainer.max_critic_ckpt_to_keep)
            if k]
    for removed in cm.rotate_checkpoints(root, min(keep) if keep else None):
        logger.info("removed old checkpoint %s", removed)
    logger.info("saved checkpoint %s", step_dir)


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
        raise cm.CheckpointError(f"no valid checkpoint to resume from in {root}, but {len(reasons)} damaged one(s):"
                                 "\n  " + "\n  ".join(reasons) + "\nRepair or move them, or start fresh on purpose "
                                 "with trainer.resume_mode=disable (saves then replace these folders) or a new "
                                 "trainer.default_local_dir.")


def load_checkpoint(trainer) -> None:
    """Resume from the newest valid checkpoint (``resume_mode=auto``) or ``resume_from_path``.

    A checkpoint is valid only with a manifest whose files all match; its config must agree with the current one
    on ``checkpoint_manifest.RESUME_KEYS`` unless listed in ``trainer.resume_allow_changes``.

    Raises:
        CheckpointError: ``resume_path`` names an invalid checkpoint, the configs differ (keys listed), or
            ``resume_mode=auto`` finds checkpoints but none valid (each named with its problem).
    """
    cfg = trainer.config.trainer
    mode = cfg.get("resume_mode", "auto")
    if mode == "disable":
        return
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
            return
    else:
        raise ValueError(f"trainer.resume_mode must be auto, disable or resume_path, got {mode!r}")
    manifest = cm.verify_checkpoint(step_dir, check_hashes=False)
    current = cm.flatten(OmegaConf.to_container(trainer.config, resolve=True))
    diffs = cm.config_differences(manifest["resume_keys"], current, list(cfg.get("resume_allow_changes") or []))
    if diffs:
        raise cm.CheckpointError(f"cannot resume from {step_dir}: the config differs on\n  " + "\n  ".join(diffs)
                                 + "\nRestore these values, start a new trainer.default_local_dir, or list keys "
                                   "that are safe to change in trainer.resume_allow_changes.")
    state = torch.load(step_dir / "data.pt", weights_only=False)
    # the driver's RNGs first, then the critic's, the actor's last: with trainer.single_process they all share this
    # process's RNGs, and the actor's saved state (the sampling stream) must win, also for a checkpoint of a Ray run
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    if "python" in state["rng"]:
        random.setstate(state["rng"]["python"])
    if trainer.use_critic:
        trainer.critic_wg.load_checkpoint(str(step_dir / "critic"))
    trainer.actor_rollout_wg.load_checkpoint(str(step_dir / "actor"))
    trainer.global_steps = int(state["global_step"])
    trainer.epoch = int(state["epoch"])
    trainer.train_sampler.load_state_dict(state["sampler"])
    trainer.batches_consumed = int(state["sampler"]["batches_consumed"])
    if "kl_ctrl" in state and trainer.kl_ctrl_in_reward is not None:
        trainer.kl_ctrl_in_reward.load_state_dict(state["kl_ctrl"])
    if trainer.router is not None:
        if "router" not in state:
            raise cm.CheckpointError(f"router.enable=true but checkpoint {step_dir} has no router state")
        trainer.router.load_state_dict(state["router"])
    logger.info("resumed from %s (global step %d, epoch %d)", step_dir, trainer.global_steps, trainer.epoch)
