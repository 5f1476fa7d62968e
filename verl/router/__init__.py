"""Budgeted tool router (design, formulas and config keys: ``docs/router.md``).

A 3-way policy on the actor LM picks, per prompt copy, whether the model should answer directly or use the search-like
or the calculate-like tools; the prompt is rewritten for that route, the generated answer is charged a tool cost, and
the router is trained with GRPO on ``r_router = r_task - lambda * cost`` while ``lambda`` tracks a cost budget.

Modules (each usable on its own; the trainer and the actor worker wire them together):

- :mod:`verl.router.head` — ``RouterHead``, pooling, action sampling, prompt hidden states from an HF causal LM.
- :mod:`verl.router.families` — the ``**Available Tools**`` block parser, the tool-family heuristic, the sidecar file.
- :mod:`verl.router.rewrite` — route-conditioned prompt rewrite and re-tokenisation.
- :mod:`verl.router.cost` — tool usage of a response and its cost.
- :mod:`verl.router.lagrangian` — the dual variable ``lambda`` and its checkpointable state.
- :mod:`verl.router.loss` — router rewards, GRPO advantages, the router loss and the logged metrics.
- :mod:`verl.router.preprocess` — offline weak labels (``train_router.parquet`` / ``test_router.parquet``).

This file only defines the shared vocabularies (routes, tool families, weak labels) so that importing it is cheap.
Section names cited as spec "…" in this package are the sections of ``docs/router.md``.
"""

from __future__ import annotations

from enum import Enum, IntEnum
from typing import Any, Iterable

import numpy as np
import torch


class RouterAction(IntEnum):
    """The router's action space (spec "Action space"): one route per prompt copy."""

    ANSWER = 0
    SEARCH = 1
    CALCULATE = 2


NUM_ROUTER_ACTIONS = len(RouterAction)
ROUTE_NAMES: tuple[str, ...] = tuple(a.name for a in RouterAction)  # ("ANSWER", "SEARCH", "CALCULATE")


class ToolFamily(str, Enum):
    """Family of one tool (spec "Tool families"). ``OTHER`` tools are mapped to a route by ``other_as``."""

    SEARCH = "SEARCH"
    CALCULATE = "CALCULATE"
    OTHER = "OTHER"


# Weak labels (spec "Weak labels"): a route name, or MIXED when the ground truth does not fit a single route.
MIXED_LABEL = "MIXED"
WEAK_LABELS: tuple[str, ...] = ROUTE_NAMES + (MIXED_LABEL,)
IGNORE_TARGET = -1  # target action id of MIXED / unlabelled rows (excluded from the supervised term)


def parse_other_as(value: Any) -> RouterAction | None:
    """Normalise the ``other_as`` option (which route ``OTHER``-family tools count for).

    Accepts a :class:`RouterAction` (``SEARCH`` / ``CALCULATE``), its name in any case, or ``None`` / ``"none"``
    (OTHER tools then belong to neither family).

    Raises:
        ValueError: any other value (``ANSWER`` included: a tool cannot be answer-like).
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null", "")):
        return None
    if isinstance(value, str):
        key = value.strip().upper()
        if key in ("SEARCH", "CALCULATE"):
            return RouterAction[key]
    elif isinstance(value, (int, np.integer)) and int(value) in (RouterAction.SEARCH, RouterAction.CALCULATE):
        return RouterAction(int(value))
    raise ValueError(f"other_as must be SEARCH, CALCULATE or none, got {value!r}")


def target_action_ids(labels: Iterable[Any]) -> torch.Tensor:
    """Weak labels -> target action ids for the supervised term of the router loss.

    Args:
        labels: one label per row: a route name (``"ANSWER"``, ``"SEARCH"``, ``"CALCULATE"``), ``"MIXED"``, ``None``
            or NaN (unlabelled), or an int already in ``{-1, 0, 1, 2}`` (e.g. the ``router_target_action`` column
            gathered into ``non_tensor_batch``).

    Returns:
        LongTensor ``[B]``: the :class:`RouterAction` value, or ``IGNORE_TARGET`` (-1) for MIXED / unlabelled rows.

    Raises:
        ValueError: a label that is none of the above (the row position and value are named).
    """
    out = []
    for i, label in enumerate(labels):
        if label is None or (isinstance(label, float) and np.isnan(label)):
            out.append(IGNORE_TARGET)
        elif isinstance(label, str) and label.strip().upper() in ROUTE_NAMES:
            out.append(int(RouterAction[label.strip().upper()]))
        elif isinstance(label, str) and label.strip().upper() == MIXED_LABEL:
            out.append(IGNORE_TARGET)
        elif isinstance(label, (int, np.integer)) and not isinstance(label, bool) and -1 <= int(label) <= 2:
            out.append(int(label))
        else:
            raise ValueError(
                f"router_target_action row {i}: expected one of {WEAK_LABELS}, None or -1..2, got {label!r}"
            )
    return torch.tensor(out, dtype=torch.long)


__all__ = [
    "IGNORE_TARGET",
    "MIXED_LABEL",
    "NUM_ROUTER_ACTIONS",
    "ROUTE_NAMES",
    "WEAK_LABELS",
    "RouterAction",
    "ToolFamily",
    "parse_other_as",
    "target_action_ids",
]
