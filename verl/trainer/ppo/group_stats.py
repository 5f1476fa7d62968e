"""Group statistics shared by every grouped advantage estimator (GRPO, RLOO, REINFORCE++-baseline, GiGPO, RLVCR).

Mean / unbiased std / size per group (:func:`compute_group_statistics`), the group-relative score
(:func:`group_normalize`), group labels to ids (:func:`group_ids`), the masked discounted reverse sum
(:func:`masked_reverse_discount`) and the valid-rows wrapper (:func:`compute_advantage_on_valid_rows`). Pure tensor
functions: order-invariant, float64 inside, nothing imported above ``verl.utils``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import numpy as np
import torch

__all__ = [
    "compute_advantage_on_valid_rows",
    "compute_group_statistics",
    "group_ids",
    "group_normalize",
    "masked_reverse_discount",
]


def group_ids(index: Any, batch_size: int, device: torch.device) -> Tuple[torch.Tensor, int]:
    """Map group labels (any hashable values) to ``0..G-1``; returns ``(ids LongTensor[B], G)``."""
    if index is None:
        raise ValueError("this estimator needs `index` (one group id per row, e.g. the prompt uid)")
    labels = index.tolist() if isinstance(index, (torch.Tensor, np.ndarray)) else list(index)
    if len(labels) != batch_size:
        raise ValueError(f"index has {len(labels)} entries for a batch of {batch_size} rows")
    mapping: Dict[Any, int] = {}
    try:
        ids = [mapping.setdefault(label, len(mapping)) for label in labels]
    except TypeError as exc:
        raise TypeError(f"group ids must be hashable (got {type(labels[0]).__name__}): {exc}") from None
    return torch.tensor(ids, dtype=torch.long, device=device), len(mapping)


def compute_group_statistics(scores: torch.Tensor, index: Any) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row statistics of the row's ``index`` group: mean, unbiased (n-1) std and size.

    Args: ``scores`` float ``[B]``; ``index`` ``[B]`` hashable group labels (numpy object array of uids, list, tensor).
    Returns: ``(mean [B], std [B], count [B])`` (``count`` long). A singleton group has ``std = 0`` (callers choose
        their singleton policy). Computed in float64 after shifting by the group minimum, so a constant group has
        exactly ``mean = score`` and ``std = 0``, and the result does not depend on row order.
    Raises ValueError: ``index`` missing or of the wrong length. TypeError: unhashable labels.
    """
    ids, n_groups = group_ids(index, scores.shape[0], scores.device)
    s = scores.detach().to(torch.float64)
    count = torch.bincount(ids, minlength=n_groups)
    ref = torch.full((n_groups,), float("inf"), dtype=torch.float64, device=s.device)
    ref = ref.scatter_reduce(0, ids, s, reduce="amin")
    group_sum = torch.zeros(n_groups, dtype=torch.float64, device=s.device).index_add_(0, ids, s - ref[ids])
    mean = ref + group_sum / count
    dev = s - mean[ids]
    sq = torch.zeros(n_groups, dtype=torch.float64, device=s.device).index_add_(0, ids, dev * dev)
    var = torch.where(count > 1, sq / (count - 1).clamp(min=1), torch.zeros_like(sq))
    return mean[ids].to(scores.dtype), var.sqrt()[ids].to(scores.dtype), count[ids]


def group_normalize(
    scores: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
    singleton_zero: bool = False,
) -> torch.Tensor:
    """Group-relative score ``(s - mean_g) / (std_g + epsilon)`` (``s - mean_g`` when ``norm_by_std`` is False).

    Source: Shao et al. 2024 (DeepSeekMath, GRPO) §4.1.2 outcome supervision; Liu et al. 2025 (Dr. GRPO) drop the std.
    Args: ``scores`` float ``[B]``; ``index`` ``[B]`` group labels; ``singleton_zero``: a group of one row gets 0
        (GiGPO / RLVCR); otherwise upstream verl's GRPO rule, mean 0 and std 1 (``s / (1 + epsilon)``).
    Returns: float ``[B]``; a group whose scores are all equal gets exactly 0.
    """
    mean, std, count = compute_group_statistics(scores, index)
    single = count == 1
    mean = torch.where(single, torch.zeros_like(mean), mean)
    std = torch.where(single, torch.ones_like(std), std)
    adv = (scores - mean) / (std + epsilon) if norm_by_std else scores - mean
    return torch.where(single, torch.zeros_like(adv), adv) if singleton_zero else adv


def compute_advantage_on_valid_rows(fn: Callable, valid: Any, **inputs: Any) -> Tuple[torch.Tensor, torch.Tensor]:
    """Run the estimator ``fn`` on the rows whose reward is valid only, so invalid samples never enter any group's
    statistics (docs/reward_api.md, "Quick start": invalid samples are left out of their group's statistics).

    Args: ``fn`` a registered estimator; ``valid`` bool ``[B]`` (e.g. ``non_tensor_batch["reward_valid"]``);
        ``inputs`` the estimator's keyword arguments: every tensor / array / list whose first dimension is ``B`` is
        cut to the valid rows, everything else is passed unchanged.
    Returns: ``(advantages, returns)`` ``[B, L]``: the estimator's values on valid rows; on invalid rows advantage 0
        and return = ``values`` when given (no value loss), else 0. All rows valid: exactly ``fn(**inputs)``.
    Raises ValueError: ``valid`` does not have one entry per row.
    """
    mask = inputs["response_mask"]
    batch_size = mask.shape[0]
    keep_np = np.asarray(valid, dtype=bool).reshape(-1)
    if keep_np.shape[0] != batch_size:
        raise ValueError(f"reward_valid has {keep_np.shape[0]} entries for a batch of {batch_size} rows")
    if keep_np.all():
        return fn(**inputs)
    keep = torch.as_tensor(np.flatnonzero(keep_np), dtype=torch.long, device=mask.device)
    values = inputs.get("values")
    advantages = torch.zeros(mask.shape, dtype=inputs["token_level_rewards"].dtype, device=mask.device)
    returns = advantages.clone() if values is None else values * mask.to(values.dtype)
    if keep.numel():
        subset = {}
        for key, value in inputs.items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == batch_size:
                value = value[keep.to(value.device)]
            elif isinstance(value, np.ndarray) and value.ndim and value.shape[0] == batch_size:
                value = value[keep_np]
            elif isinstance(value, (list, tuple)) and len(value) == batch_size:
                value = [value[i] for i in np.flatnonzero(keep_np)]
            subset[key] = value
        sub_adv, sub_ret = fn(**subset)
        advantages[keep] = sub_adv.to(advantages.dtype)
        returns[keep] = sub_ret.to(returns.dtype)
    return advantages, returns


def masked_reverse_discount(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """``out[t] = x[t] + discount * out[t']`` over response tokens, ``t'`` the next position with mask 1 (0 past the
    end); masked positions are skipped (their ``x`` never enters) and get 0. ``[B, L]`` -> ``[B, L]``."""
    out = torch.zeros_like(x)
    carry = torch.zeros_like(x[:, 0])
    valid = mask.bool()
    for t in reversed(range(x.shape[1])):
        carry = torch.where(valid[:, t], x[:, t] + discount * carry, carry)
        out[:, t] = torch.where(valid[:, t], carry, torch.zeros_like(carry))
    return out
