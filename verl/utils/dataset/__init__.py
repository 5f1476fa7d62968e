"""Datasets for RL training (verl's ``verl.utils.dataset``): ``RLHFDataset`` + ``collate_fn``, and the RLLA data
helpers in :mod:`verl.utils.dataset.rlla_data` (schema, default splits, discovery)."""
from .rl_dataset import RLHFDataset, collate_fn

__all__ = ["RLHFDataset", "collate_fn"]
