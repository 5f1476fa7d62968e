"""The PPO trainer's data loaders and the run's horizon: the train loader over an epoch-seeded sampler (resumable
mid-epoch), the validation loader (the whole split in one batch), and the step counts the workers' learning-rate
schedules need before they build their optimizers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, Dataset

from verl.trainer.config_errors import ConfigError
from verl.utils.dataset.sampler import EpochSeededSampler

logger = logging.getLogger(__name__)


@dataclass
class RLDataloaders:
    """What :func:`build_rl_dataloaders` returns: the loaders, the train sampler (its state is checkpointed) and the
    run's length in optimizer steps."""

    sampler: EpochSeededSampler
    train: DataLoader
    val: DataLoader
    steps_per_epoch: int
    total_training_steps: int


def build_rl_dataloaders(config: DictConfig, train_dataset: Dataset, val_dataset: Dataset, collate_fn) -> RLDataloaders:
    """Loaders of ``data.train_batch_size`` prompts (the last incomplete batch dropped) and of the whole validation
    split; ``trainer.total_training_steps`` (when set) overrides ``steps_per_epoch * trainer.total_epochs``.

    Raises:
        ConfigError: the training set has fewer rows than ``data.train_batch_size``.
    """
    data = config.data
    batch_size = int(data.train_batch_size)
    if len(train_dataset) < batch_size:
        raise ConfigError(
            f"data.train_batch_size={batch_size} is larger than the training set "
            f"({len(train_dataset)} rows of {data.train_files} after filtering)"
        )
    sampler = EpochSeededSampler(
        len(train_dataset), seed=int(data.seed), shuffle=bool(data.shuffle), batch_size=batch_size
    )
    # Own generators: creating a loader iterator draws a base seed, which must not advance the global torch RNG
    # (restored exactly on resume; shared with the workers when they run in this process).
    train = DataLoader(
        train_dataset,
        batch_size=batch_size,
        sampler=sampler,
        drop_last=True,
        collate_fn=collate_fn,
        num_workers=int(data.dataloader_num_workers),
        generator=torch.Generator().manual_seed(int(data.seed)),
    )
    val = DataLoader(
        val_dataset,
        batch_size=len(val_dataset),
        shuffle=False,
        drop_last=False,
        collate_fn=collate_fn,
        generator=torch.Generator(),
    )
    steps_per_epoch = len(train_dataset) // batch_size
    total = steps_per_epoch * int(config.trainer.total_epochs)
    if config.trainer.total_training_steps is not None:
        total = int(config.trainer.total_training_steps)
    logger.info(
        "train: %d rows, %d steps/epoch, %d total steps; val: %d rows",
        len(train_dataset),
        steps_per_epoch,
        total,
        len(val_dataset),
    )
    return RLDataloaders(sampler, train, val, steps_per_epoch, total)


def pass_horizon_to_workers(config: DictConfig, total_training_steps: int) -> None:
    """Write into ``config`` (in place) what each worker reads when it builds its optimizer and seeds itself: the
    schedules' horizon (``<role>.optim.total_training_steps``), ``trainer.seed`` and ``trainer.deterministic`` (as
    ``<role>.seed`` / ``<role>.deterministic``, applied in each worker's process, the seed offset by its rank)."""
    OmegaConf.set_struct(config, False)
    config.actor_rollout_ref.actor.optim.total_training_steps = total_training_steps
    config.critic.optim.total_training_steps = total_training_steps
    for role in (config.actor_rollout_ref, config.critic):
        role.seed = config.trainer.seed
        role.deterministic = config.trainer.deterministic
    OmegaConf.set_struct(config, True)
