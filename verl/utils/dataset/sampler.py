"""A seeded, resumable sampler for the train dataloader.

The order of epoch ``e`` is a permutation drawn from ``torch.Generator().manual_seed(seed + e)``: it depends only on
(seed, epoch), so a resumed run rebuilds exactly the order it was interrupted in and skips the batches it already
consumed (``state_dict`` / ``load_state_dict``). ToolRL's loader shuffled without a seed, which made resume impossible.
"""
from __future__ import annotations

import torch
from torch.utils.data import Sampler


class EpochSeededSampler(Sampler[int]):
    """Yields dataset indices for one epoch at a time.

    Args:
        num_samples: dataset length.
        seed: base seed (``data.seed``).
        shuffle: False yields 0..n-1 in order.
        batch_size: rows per batch, used to convert consumed batches into a skip count on resume.
    """

    def __init__(self, num_samples: int, seed: int = 1, shuffle: bool = True, batch_size: int = 1) -> None:
        if num_samples <= 0:
            raise ValueError("EpochSeededSampler needs a non-empty dataset")
        self.num_samples = num_samples
        self.seed = int(seed)
        self.shuffle = shuffle
        self.batch_size = batch_size
        self.epoch = 0
        self.skip_batches = 0

    def set_epoch(self, epoch: int) -> None:
        """Select the permutation of ``epoch``; a new epoch starts from its first batch."""
        if epoch != self.epoch:
            self.skip_batches = 0
        self.epoch = epoch

    def order(self, epoch: int) -> list[int]:
        """The full index order of ``epoch``."""
        if not self.shuffle:
            return list(range(self.num_samples))
        gen = torch.Generator().manual_seed(self.seed + epoch)
        return torch.randperm(self.num_samples, generator=gen).tolist()

    def __iter__(self):
        start = self.skip_batches * self.batch_size
        self.skip_batches = 0
        return iter(self.order(self.epoch)[start:])

    def __len__(self) -> int:
        return self.num_samples - self.skip_batches * self.batch_size

    def state_dict(self, batches_consumed_in_epoch: int) -> dict:
        """What to save in a checkpoint: the epoch and how many of its batches were consumed."""
        return {"seed": self.seed, "epoch": self.epoch, "batches_consumed": int(batches_consumed_in_epoch),
                "shuffle": self.shuffle, "num_samples": self.num_samples}

    def load_state_dict(self, state: dict) -> None:
        """Resume inside ``state['epoch']`` after ``state['batches_consumed']`` batches.

        Raises:
            ValueError: the dataset size or seed differs from the checkpoint's (the order would not match).
        """
        if state["num_samples"] != self.num_samples or state["seed"] != self.seed:
            raise ValueError(f"sampler state mismatch: checkpoint has num_samples={state['num_samples']} "
                             f"seed={state['seed']}, current run has {self.num_samples} / {self.seed}")
        self.epoch = int(state["epoch"])
        self.skip_batches = int(state["batches_consumed"])
