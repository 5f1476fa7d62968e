"""Checkpoints of one FSDP2 worker: each rank's model shard, optimizer, scheduler and random state, an HF export, and
their rotation; the seeding of every random generator a worker uses. ``fsdp_workers`` builds one
:class:`Checkpointer` per trainable module (the actor's, the critic's).
"""

from __future__ import annotations

import logging
import os
import random
import shutil

import numpy as np
import torch

from verl.single_controller.base.worker import Worker
from verl.utils.lora import is_lora, trainable_state
from verl.utils.model_utils import full_state_dict, load_local_model_state, load_local_optimizer_state, to_local_state
from verl.workers.config import SAVE_CONTENTS, check_save_contents

logger = logging.getLogger(__name__)


def rank_file(local_path: str, kind: str, world_size: int, rank: int) -> str:
    """``{local_path}/{kind}_world_size_{world_size}_rank_{rank}.pt``: one rank's file of one kind (upstream's names)."""
    return os.path.join(local_path, f"{kind}_world_size_{world_size}_rank_{rank}.pt")


def _rng_state() -> dict:
    state = {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def seed_rngs(seed, rank: int) -> None:
    """Seed torch (CPU and CUDA), NumPy and Python's ``random`` with ``seed + rank`` when ``seed`` is set.

    torch seeds its default generator randomly at import, so without this two runs of the same command sample
    different rollouts; the trainer passes ``trainer.seed`` (as ``<role config>.seed``) so a run is reproducible and
    an uninterrupted run can be compared with a killed-and-resumed one (a resume then restores the saved states).
    """
    if seed is None:
        return
    value = int(seed) + int(rank)
    torch.manual_seed(value)
    np.random.seed(value % 2**32)
    random.seed(value)


def _set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["cpu"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def refuse_hdfs(hdfs_path: str | None) -> None:
    """Upstream's ``hdfs_path`` argument of the checkpoint methods: HDFS is not implemented
    (``trainer.default_hdfs_dir`` is refused at load), so a path is an error rather than a copy silently not made.

    Raises:
        ValueError: ``hdfs_path`` is set.
    """
    if hdfs_path:
        raise ValueError(
            f"hdfs_path={hdfs_path!r}: HDFS checkpoints are not implemented; pass None (the local path "
            "holds the checkpoint)"
        )


class Checkpointer:
    """Saves/loads one trainable module's per-rank shards, optimizer, scheduler + RNG, and an HF export."""

    def __init__(self, worker: Worker, module, optimizer, lr_scheduler, tokenizer, save_contents):
        self.worker = worker
        self.module, self.optimizer, self.lr_scheduler, self.tokenizer = module, optimizer, lr_scheduler, tokenizer
        contents = SAVE_CONTENTS if save_contents is None else list(save_contents)
        check_save_contents(contents)
        self.save_contents = set(contents)
        self.saved_paths: list[str] = []

    def save(self, local_path: str, global_step: int = 0, max_ckpt_to_keep: int | None = None) -> None:
        rank, world = self.worker.rank, self.worker.world_size
        os.makedirs(local_path, exist_ok=True)
        if "model" in self.save_contents:  # a LoRA model: its adapters (the frozen base comes from model.path)
            state = trainable_state(self.module, self.module.state_dict())
            torch.save(to_local_state(state), rank_file(local_path, "model", world, rank))
        if "optimizer" in self.save_contents and self.optimizer is not None:
            torch.save(to_local_state(self.optimizer.state_dict()), rank_file(local_path, "optim", world, rank))
        if "extra" in self.save_contents:
            extra = {
                "lr_scheduler": self.lr_scheduler.state_dict() if self.lr_scheduler is not None else None,
                "rng": _rng_state(),
                "global_step": int(global_step),
            }
            torch.save(extra, rank_file(local_path, "extra_state", world, rank))
        if "hf_model" in self.save_contents:
            state = full_state_dict(self.module)  # collective under FSDP2: every rank takes part
            if rank == 0:
                self._save_hf(os.path.join(local_path, "huggingface"), state)
        self._rotate(local_path, max_ckpt_to_keep)

    def _save_hf(self, hf_dir: str, state: dict) -> None:
        os.makedirs(hf_dir, exist_ok=True)
        # a LoRA model exports its merged weights (full_state_dict) as the plain model they belong to
        model = self.module.get_base_model() if is_lora(self.module) else self.module
        model.save_pretrained(hf_dir, state_dict=state, safe_serialization=True)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(hf_dir)

    def _rotate(self, local_path: str, max_ckpt_to_keep: int | None) -> None:
        path = os.path.abspath(local_path)
        if path in self.saved_paths:
            self.saved_paths.remove(path)
        self.saved_paths.append(path)
        if not max_ckpt_to_keep or max_ckpt_to_keep <= 0:
            return
        while len(self.saved_paths) > max_ckpt_to_keep:
            old = self.saved_paths.pop(0)
            if self.worker.rank == 0 and os.path.isdir(old):
                logger.info("removing old checkpoint %s (max_ckpt_to_keep=%d)", old, max_ckpt_to_keep)
                shutil.rmtree(old, ignore_errors=True)

    def load(self, local_path: str, del_local_after_load: bool = False) -> dict:
        """Restore what ``save`` wrote; returns the extra state (``global_step`` …) or ``{}``.

        Raises:
            FileNotFoundError: this rank's model file is missing (wrong path or another world size).
        """
        rank, world = self.worker.rank, self.worker.world_size
        model_file = rank_file(local_path, "model", world, rank)
        if not os.path.isfile(model_file):
            raise FileNotFoundError(f"checkpoint file {model_file} not found (saved with another world size?)")
        load_local_model_state(self.module, torch.load(model_file, map_location="cpu", weights_only=False))
        configured = [g.get("initial_lr", g["lr"]) for g in self.optimizer.param_groups] if self.optimizer else []
        optim_file = rank_file(local_path, "optim", world, rank)
        if self.optimizer is not None and os.path.isfile(optim_file):
            load_local_optimizer_state(self.optimizer, torch.load(optim_file, map_location="cpu", weights_only=False))
        elif self.optimizer is not None:
            logger.warning(
                "%s not found (a checkpoint saved without 'optimizer' in checkpoint.save_contents): the "
                "optimizer starts from a fresh state",
                optim_file,
            )
        extra_file = rank_file(local_path, "extra_state", world, rank)
        extra = {}
        if not os.path.isfile(extra_file):
            logger.warning(
                "%s not found (a checkpoint saved without 'extra' in checkpoint.save_contents): the "
                "learning-rate schedule and the random state start afresh",
                extra_file,
            )
        else:
            extra = torch.load(extra_file, map_location="cpu", weights_only=False)
            if self.lr_scheduler is not None and extra.get("lr_scheduler") is not None:
                self.lr_scheduler.load_state_dict(extra["lr_scheduler"])
                restored = list(self.lr_scheduler.base_lrs)
                if restored[: len(configured)] != configured[: len(restored)]:  # as upstream: the schedule continues
                    logger.warning(
                        "optim.lr from the config %s differs from the checkpoint's %s: the checkpoint's "
                        "learning-rate schedule continues (it is part of what resume restores)",
                        configured,
                        restored,
                    )
            _set_rng_state(extra["rng"])
        if del_local_after_load and rank == 0:
            shutil.rmtree(local_path, ignore_errors=True)
        return extra
