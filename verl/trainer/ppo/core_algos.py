"""Core PPO-family algorithms: advantage estimators, policy/value/entropy losses, KL penalties and controllers.

Pure tensor functions with verl's names and semantics; the trainer and the workers call them.

Advantage-estimator calling convention
--------------------------------------
Every estimator is registered with :func:`register_adv_est` and looked up with :func:`get_adv_estimator_fn`. The
trainer calls ``get_adv_estimator_fn(name)(**inputs)`` with keyword arguments only::

    fn(token_level_rewards,        # float [B, L]: per-token rewards (outcome reward on the last response token)
       response_mask,              # 0/1 [B, L]: tokens the policy generated (multi-turn: tool/observation tokens are 0)
       index=None,                 # np.ndarray(object) [B]: group id (prompt uid) of each row, for grouped estimators
       values=None,                # float [B, L]: critic values (GAE)
       reward_baselines=None,      # float [B]: greedy-rollout reward (ReMax)
       gamma=None, lam=None,       # floats; None -> read from ``config`` -> 1.0
       norm_adv_by_std_in_grpo=None,
       config=None,                # the ``algorithm`` config (dict, DictConfig or object), read with defaults
       **kwargs)                   # anything else (e.g. GiGPO's anchor_obs / traj_index / step_index) -> ignored
    -> (advantages [B, L], returns [B, L])       # both zero where response_mask is 0

Each estimator takes what it needs and ignores the rest (``**kwargs``), so estimators that need extra non-tensor inputs
(GiGPO, RLVCR) register with the same decorator and receive their inputs by name. Explicit arguments win over
``config``; missing ones fall back to ``config`` and then to upstream's defaults.

Group statistics (mean / unbiased std / size per ``index`` group) are computed once, by
:func:`compute_group_statistics`, and shared by GRPO, RLOO, REINFORCE++-baseline and the estimators registered
elsewhere; they are order-invariant (the rows may come in any order).
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Callable, Dict, Optional, Tuple, Union

import numpy as np
import torch

import verl.utils.torch_functional as verl_F


def _cfg_get(config: Any, key: str, default: Any = None) -> Any:
    """``config[key]`` for a dict/DictConfig, ``config.key`` for an object; ``default`` when missing or None."""
    if config is None:
        return default
    if hasattr(config, "get") and callable(config.get):
        value = config.get(key, default)
    else:
        value = getattr(config, key, default)
    return default if value is None else value


def _resolve(explicit: Any, config: Any, key: str, default: Any) -> Any:
    return explicit if explicit is not None else _cfg_get(config, key, default)


# -------------------- registries -------------------------------------------------------------------------------------
class AdvantageEstimator(str, Enum):
    """Names of the advantage estimators (``algorithm.adv_estimator``). ``GIGPO`` lives in
    :mod:`verl.trainer.ppo.gigpo` and ``RLVCR`` in :mod:`rlvcr.core_rlvcr`; both are registered at the end of this
    module."""

    GAE = "gae"
    GRPO = "grpo"
    GRPO_VECTORIZED = "grpo_vectorized"
    REINFORCE_PLUS_PLUS = "reinforce_plus_plus"
    REINFORCE_PLUS_PLUS_BASELINE = "reinforce_plus_plus_baseline"
    REMAX = "remax"
    RLOO = "rloo"
    RLOO_VECTORIZED = "rloo_vectorized"
    GIGPO = "gigpo"
    RLVCR = "rlvcr"


ADV_ESTIMATOR_REGISTRY: Dict[str, Callable] = {}
POLICY_LOSS_REGISTRY: Dict[str, Callable] = {}

_RESERVED_ELSEWHERE = {"rlvcr": "rlvcr.core_rlvcr (specs/rlvcr.md)"}


def _name_of(name_or_enum: Union[str, Enum]) -> str:
    return name_or_enum.value if isinstance(name_or_enum, Enum) else str(name_or_enum)


def _fn_key(fn: Callable) -> Tuple[str, str]:
    return getattr(fn, "__module__", ""), getattr(fn, "__qualname__", repr(fn))


def register_adv_est(name_or_enum: Union[str, AdvantageEstimator]) -> Callable[[Callable], Callable]:
    """Decorator registering an advantage estimator under ``name_or_enum`` (module docstring: calling convention).

    Re-registering the same function is a no-op (module reloads).

    Raises ValueError: the name is already registered to a different function.
    """

    def decorator(fn: Callable) -> Callable:
        name = _name_of(name_or_enum)
        existing = ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and _fn_key(existing) != _fn_key(fn):
            raise ValueError(f"advantage estimator {name!r} is already registered to {existing!r}")
        ADV_ESTIMATOR_REGISTRY[name] = fn
        return fn

    return decorator


def get_adv_estimator_fn(name_or_enum: Union[str, AdvantageEstimator]) -> Callable:
    """The estimator registered under ``name_or_enum``.

    Raises:
        ValueError: unknown name; the message lists the registered names (and, for a reserved name such as
        ``rlvcr``, the module that registers it).
    """
    name = _name_of(name_or_enum)
    if name not in ADV_ESTIMATOR_REGISTRY:
        where = _RESERVED_ELSEWHERE.get(name)
        hint = f"; {name!r} is registered when {where} is imported" if where else ""
        raise ValueError(f"unknown advantage estimator {name!r}; registered: {sorted(ADV_ESTIMATOR_REGISTRY)}{hint}")
    return ADV_ESTIMATOR_REGISTRY[name]


def register_policy_loss(name: str) -> Callable[[Callable], Callable]:
    """Decorator registering a policy loss ``fn(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
    config, rollout_is_weights) -> (loss, metrics)`` under ``name`` (``actor.policy_loss.loss_mode``)."""

    def decorator(fn: Callable) -> Callable:
        POLICY_LOSS_REGISTRY[name] = fn
        return fn

    return decorator


def get_policy_loss_fn(name: str) -> Callable:
    """The policy loss registered under ``name``.

    Raises ValueError: unknown name (the message lists the registered ones).
    """
    if name not in POLICY_LOSS_REGISTRY:
        raise ValueError(f"unknown policy loss {name!r}; registered: {sorted(POLICY_LOSS_REGISTRY)}")
    return POLICY_LOSS_REGISTRY[name]


# -------------------- group statistics (shared by every grouped estimator) -------------------------------------------
def _group_ids(index: Any, batch_size: int, device: torch.device) -> Tuple[torch.Tensor, int]:
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
    ids, n_groups = _group_ids(index, scores.shape[0], scores.device)
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
    scores: torch.Tensor, index: Any, epsilon: float = 1e-6, norm_by_std: bool = True, singleton_zero: bool = False,
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
    statistics (``../shared/specs/reward_api.md`` "Sandboxed execution": "the sample is excluded from its group's
    statistics").

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


# -------------------- advantage estimators ---------------------------------------------------------------------------
def _masked_reverse_discount(x: torch.Tensor, mask: torch.Tensor, discount: float) -> torch.Tensor:
    """``out[t] = x[t] + discount * out[t']`` over response tokens, ``t'`` the next position with mask 1 (0 past the
    end); masked positions are skipped (their ``x`` never enters) and get 0. ``[B, L]`` -> ``[B, L]``."""
    out = torch.zeros_like(x)
    carry = torch.zeros_like(x[:, 0])
    valid = mask.bool()
    for t in reversed(range(x.shape[1])):
        carry = torch.where(valid[:, t], x[:, t] + discount * carry, carry)
        out[:, t] = torch.where(valid[:, t], carry, torch.zeros_like(carry))
    return out


@register_adv_est(AdvantageEstimator.GAE)
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
    gamma: Optional[float] = None, lam: Optional[float] = None, config: Any = None, **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation, multi-turn aware (Schulman et al. 2016, "High-Dimensional Continuous Control
    Using GAE", eq. 16: ``A_t = sum_l (gamma lam)^l delta_{t+l}``, ``delta_t = r_t + gamma V_{t+1} - V_t``).

    Only response tokens are time steps: positions with ``response_mask == 0`` (tool output / observation tokens
    between turns, padding) are skipped: their rewards and values never enter and ``V_{t+1}`` is the value of the
    next *response* token, so the result equals GAE on the sequence with the masked tokens removed.

    Args: ``token_level_rewards``, ``values``: float ``[B, L]``; ``response_mask``: 0/1 ``[B, L]``; ``gamma``, ``lam``:
        None -> ``config.gamma`` / ``config.lam`` -> 1.0.
    Returns: ``advantages`` ``[B, L]`` whitened over the mask (:func:`masked_whiten`) and ``returns`` = un-whitened
        advantages + values (the critic's target); both 0 off the mask.
    Raises ValueError: ``values`` is None, or fewer than two response tokens in the batch (whitening).
    """
    if values is None:
        raise ValueError("GAE needs `values` from the critic")
    gamma = float(_resolve(gamma, config, "gamma", 1.0))
    lam = float(_resolve(lam, config, "lam", 1.0))
    with torch.no_grad():
        valid = response_mask.bool()
        next_values = torch.zeros_like(values)
        carry = torch.zeros_like(values[:, 0])
        for t in reversed(range(values.shape[1])):
            next_values[:, t] = carry
            carry = torch.where(valid[:, t], values[:, t], carry)
        deltas = token_level_rewards + gamma * next_values - values
        advantages = _masked_reverse_discount(deltas, response_mask, gamma * lam)
        mask_f = response_mask.to(values.dtype)
        returns = (advantages + values) * mask_f
        advantages = verl_F.masked_whiten(advantages, response_mask) * mask_f
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO)
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: Optional[bool] = None, config: Any = None, **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """GRPO outcome advantage: the response's total reward normalised within its prompt group.

    Source: Shao et al. 2024 (DeepSeekMath) §4.1.2: ``A_i = (R_i - mean(R)) / std(R)`` broadcast over the response;
    Liu et al. 2025 (Dr. GRPO, arXiv:2503.20783) drop the std (``norm_adv_by_std_in_grpo=False``).

    Args: ``token_level_rewards`` float ``[B, L]`` (``R_i`` = its sum over the response); ``response_mask`` ``[B, L]``;
        ``index`` ``[B]`` group ids (prompt uid); ``epsilon`` added to the std; ``norm_adv_by_std_in_grpo``: None ->
        ``config.norm_adv_by_std_in_grpo`` -> True.
    Returns: ``(advantages, advantages)`` ``[B, L]``, zero off the mask. std is unbiased (n-1). A singleton group uses
        mean 0 and std 1 (upstream verl: the raw score / (1 + eps)); a zero-variance group gets exactly 0.
    Raises ValueError: ``index`` missing or of the wrong length.
    """
    norm = bool(_resolve(norm_adv_by_std_in_grpo, config, "norm_adv_by_std_in_grpo", True))
    with torch.no_grad():
        scores = (token_level_rewards * response_mask).sum(dim=-1)
        adv = group_normalize(scores, index, epsilon=epsilon, norm_by_std=norm)
        advantages = adv.unsqueeze(-1) * response_mask.to(adv.dtype)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.RLOO)
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, epsilon: float = 1e-6,
    config: Any = None, **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """RLOO: each response's score minus the mean score of the *other* responses of its group.

    Source: Ahmadian et al. 2024, "Back to Basics: Revisiting REINFORCE Style Optimization ..." eq. 6 (Kool et al.
    2019): ``A_i = R_i - 1/(n-1) sum_{j != i} R_j = n/(n-1) (R_i - mean(R))``.
    Returns: ``(advantages, advantages)`` ``[B, L]``, zero off the mask. A singleton group has no baseline: its
        advantage is the raw score (upstream verl). ``epsilon`` is accepted for signature compatibility.
    Raises ValueError: ``index`` missing or of the wrong length.
    """
    with torch.no_grad():
        scores = (token_level_rewards * response_mask).sum(dim=-1)
        mean, _, count = compute_group_statistics(scores, index)
        n = count.to(scores.dtype)
        adv = torch.where(count > 1, (scores - mean) * n / (n - 1).clamp(min=1), scores)
        advantages = adv.unsqueeze(-1) * response_mask.to(adv.dtype)
    return advantages, advantages


# The implementations above are already vectorised; upstream's `*_vectorized` names resolve to them.
compute_grpo_vectorized_outcome_advantage = compute_grpo_outcome_advantage
compute_rloo_vectorized_outcome_advantage = compute_rloo_outcome_advantage
register_adv_est(AdvantageEstimator.GRPO_VECTORIZED)(compute_grpo_outcome_advantage)
register_adv_est(AdvantageEstimator.RLOO_VECTORIZED)(compute_rloo_outcome_advantage)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, gamma: Optional[float] = None,
    config: Any = None, **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns-to-go, whitened over all response tokens of the batch.

    Source: Hu 2025, "REINFORCE++" (arXiv:2501.03262) §3: ``G_t = sum_{s>=t} gamma^{s-t} r_s``, then global batch
    normalisation ``(G - mean) / std``. Masked tokens are skipped in the recursion (as in GAE); for single-turn data
    this is upstream's recursion exactly. ``gamma``: None -> ``config.gamma`` -> 1.0.
    Returns: ``advantages`` (whitened) and ``returns`` (``G_t``), ``[B, L]``, zero off the mask.
    Raises ValueError: fewer than two response tokens in the batch.
    """
    gamma = float(_resolve(gamma, config, "gamma", 1.0))
    with torch.no_grad():
        returns = _masked_reverse_discount(token_level_rewards, response_mask, gamma)
        advantages = verl_F.masked_whiten(returns, response_mask) * response_mask.to(returns.dtype)
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE)
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: Any = None, epsilon: float = 1e-6,
    config: Any = None, **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++-baseline: score minus its group mean, broadcast over the response, then whitened over the batch.

    Source: Hu 2025 (arXiv:2501.03262), the group-baseline variant (as upstream verl). A singleton group's mean is 0.

    Returns: ``(advantages, advantages)`` ``[B, L]``, zero off the mask.

    Raises ValueError: ``index`` missing; fewer than two response tokens in the batch.
    """
    with torch.no_grad():
        scores = (token_level_rewards * response_mask).sum(dim=-1)
        mean, _, count = compute_group_statistics(scores, index)
        centred = torch.where(count > 1, scores - mean, scores)
        mask_f = response_mask.to(scores.dtype)
        advantages = verl_F.masked_whiten(centred.unsqueeze(-1) * mask_f, response_mask) * mask_f
    return advantages, advantages


@register_adv_est(AdvantageEstimator.REMAX)
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor, reward_baselines: torch.Tensor = None, response_mask: torch.Tensor = None,
    config: Any = None, **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """ReMax: undiscounted returns-to-go minus the reward of the greedy response to the same prompt.

    Source: Li et al. 2023, "ReMax" (arXiv:2310.10505) Algorithm 1: ``A_t = sum_{s>=t} r_s - r(x, y_greedy)``.
    Args: ``token_level_rewards`` ``[B, L]``; ``reward_baselines`` float ``[B]`` greedy rewards; ``response_mask``.
    Returns: ``advantages`` and ``returns`` (returns-to-go) ``[B, L]``, both zero off the mask.
    Raises ValueError: ``reward_baselines`` or ``response_mask`` missing.
    """
    if reward_baselines is None or response_mask is None:
        raise ValueError("ReMax needs `reward_baselines` (greedy-rollout rewards, [B]) and `response_mask`")
    with torch.no_grad():
        returns = _masked_reverse_discount(token_level_rewards, response_mask, 1.0)
        advantages = returns - reward_baselines.to(returns.dtype).unsqueeze(-1) * response_mask.to(returns.dtype)
    return advantages, returns


def compute_rewards(
    token_level_scores: torch.Tensor, old_log_prob: torch.Tensor, ref_log_prob: torch.Tensor, kl_ratio: float,
) -> torch.Tensor:
    """KL-penalised reward ``r = score - kl_ratio * (log pi_old - log pi_ref)`` per token (all ``[B, L]``).

    Source: Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences" eq. 2; Ouyang et al. 2022 eq. 2.
    """
    return token_level_scores - kl_ratio * (old_log_prob - ref_log_prob)


# -------------------- losses -----------------------------------------------------------------------------------------
def agg_loss(
    loss_mat: torch.Tensor, loss_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
    loss_scale_factor: Optional[float] = None, batch_num_tokens: Optional[float] = None,
    global_batch_size: Optional[float] = None, dp_size: int = 1,
) -> torch.Tensor:
    """Reduce a ``[B, L]`` per-token loss to a scalar (``n_b = sum_t mask[b, t]``; rows with ``n_b = 0`` never count).

    - ``token-mean``: ``sum(loss * mask) / sum(mask)``, every token weighs the same (DAPO, Yu et al. 2025 §3.3).
    - ``seq-mean-token-sum``: mean over sequences of ``sum_t loss * mask``.
    - ``seq-mean-token-mean``: mean over sequences of ``sum_t loss * mask / n_b`` (GRPO, Shao et al. 2024 eq. 3).
    - ``seq-mean-token-sum-norm``: ``seq-mean-token-sum / loss_scale_factor``, Dr. GRPO's constant normaliser (Liu et
      al. 2025 §3.1); ``loss_scale_factor`` defaults to ``L = loss_mask.shape[-1]`` (max response length), as upstream.

    Optional data-parallel / gradient-accumulation normalisers (upstream's): ``batch_num_tokens`` replaces the local
    token count of ``token-mean``, ``global_batch_size`` the local number of sequences; the result is multiplied by
    ``dp_size`` (the gradient all-reduce averages over ranks).
    Raises ValueError: unknown ``loss_agg_mode``.
    """
    mask = loss_mask.to(loss_mat.dtype)
    if loss_agg_mode == "token-mean":
        denom = mask.sum() if batch_num_tokens is None else torch.as_tensor(batch_num_tokens, dtype=mask.dtype)
        return verl_F.masked_sum(loss_mat, loss_mask) / denom.clamp(min=1e-8) * dp_size
    if loss_agg_mode not in ("seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"):
        raise ValueError(
            f"invalid loss_agg_mode {loss_agg_mode!r}: token-mean, seq-mean-token-sum, seq-mean-token-mean, "
            "seq-mean-token-sum-norm"
        )
    tokens = mask.sum(dim=-1)
    seq_losses = verl_F.masked_sum(loss_mat, loss_mask, axis=-1)
    if loss_agg_mode == "seq-mean-token-mean":
        seq_losses = seq_losses / tokens.clamp(min=1e-8)
    has_tokens = (tokens > 0).to(loss_mat.dtype)
    n_seq = has_tokens.sum().clamp(min=1e-8) if global_batch_size is None else global_batch_size
    loss = (seq_losses * has_tokens).sum() / n_seq * dp_size
    if loss_agg_mode == "seq-mean-token-sum-norm":
        loss = loss / (loss_scale_factor if loss_scale_factor is not None else loss_mask.shape[-1])
    return loss


def _clipped_pg_losses(
    old_log_prob, log_prob, advantages, response_mask, clip_low: float, clip_high: float, clip_ratio_c: float,
):
    """Per-token dual-clip PPO loss and statistics: ``(pg_losses [B, L], pg_clipfrac, ppo_kl, pg_clipfrac_lower)``."""
    if clip_ratio_c <= 1.0:
        raise ValueError(f"clip_ratio_c (dual-clip lower bound) must be > 1.0, got {clip_ratio_c}")
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)  # overflow guard, as upstream
    ratio = torch.exp(log_ratio)
    ppo_kl = verl_F.masked_mean(-log_ratio, response_mask)
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    loss_ppo = torch.maximum(loss_unclipped, loss_clipped)
    pg_clipfrac = verl_F.masked_mean((loss_clipped > loss_unclipped).to(log_prob.dtype), response_mask)
    loss_dual = -advantages * clip_ratio_c
    negative = advantages < 0
    pg_clipfrac_lower = verl_F.masked_mean(((loss_ppo > loss_dual) & negative).to(log_prob.dtype), response_mask)
    pg_losses = torch.where(negative, torch.minimum(loss_ppo, loss_dual), loss_ppo)
    return pg_losses, pg_clipfrac, ppo_kl, pg_clipfrac_lower


@register_policy_loss("vanilla")
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean", config: Any = None, rollout_is_weights: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """PPO clipped surrogate with asymmetric clipping and dual clip.

    Source: Schulman et al. 2017 (PPO) eq. 7: ``L = -min(r A, clip(r, 1-eps_low, 1+eps_high) A)``,
    ``r = exp(log_prob - old_log_prob)``; Ye et al. 2020 ("Mastering Complex Control in MOBA Games") eq. 5, dual clip:
    for ``A < 0`` the loss is also capped at ``-c A``; Yu et al. 2025 (DAPO) for ``eps_high``.

    Args: ``old_log_prob``, ``log_prob``, ``advantages`` float ``[B, L]``; ``response_mask`` 0/1 ``[B, L]``;
        ``loss_agg_mode`` (:func:`agg_loss`); ``config`` actor config (dict/DictConfig/object): ``clip_ratio`` (0.2),
        ``clip_ratio_low`` / ``clip_ratio_high`` (default ``clip_ratio``), ``clip_ratio_c`` (3.0);
        ``rollout_is_weights`` optional ``[B, L]`` importance weights multiplying the per-token loss.
    Returns: ``(pg_loss, metrics)``; metrics are floats under upstream's keys: ``actor/pg_clipfrac`` (fraction of
        tokens where the clipped term is active), ``actor/ppo_kl`` (masked mean of ``old - new`` log-prob),
        ``actor/pg_clipfrac_lower`` (fraction where the dual clip is active).
    Raises ValueError: ``clip_ratio_c <= 1``; unknown ``loss_agg_mode``.
    """
    clip_ratio = float(_cfg_get(config, "clip_ratio", 0.2))
    clip_low = float(_cfg_get(config, "clip_ratio_low", clip_ratio))
    clip_high = float(_cfg_get(config, "clip_ratio_high", clip_ratio))
    clip_c = float(_cfg_get(config, "clip_ratio_c", 3.0))
    pg_losses, clipfrac, ppo_kl, clipfrac_lower = _clipped_pg_losses(
        old_log_prob, log_prob, advantages, response_mask, clip_low, clip_high, clip_c
    )
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    metrics = {
        "actor/pg_clipfrac": clipfrac.detach().item(),
        "actor/ppo_kl": ppo_kl.detach().item(),
        "actor/pg_clipfrac_lower": clipfrac_lower.detach().item(),
    }
    return pg_loss, metrics


def compute_policy_loss(
    old_log_prob: torch.Tensor, log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor,
    cliprange: Optional[float] = None, cliprange_low: Optional[float] = None, cliprange_high: Optional[float] = None,
    clip_ratio_c: float = 3.0, loss_agg_mode: str = "token-mean",
):
    """Deprecated form of :func:`compute_policy_loss_vanilla` (same formula, explicit clip ranges).

    Returns: ``(pg_loss, pg_clipfrac, ppo_kl, pg_clipfrac_lower)``, scalar tensors.
    Raises ValueError: no clip bound (``cliprange`` and the low/high one None) or ``clip_ratio_c <= 1``.
    """
    low = cliprange_low if cliprange_low is not None else cliprange
    high = cliprange_high if cliprange_high is not None else cliprange
    if low is None or high is None:
        raise ValueError("compute_policy_loss needs `cliprange` (or both cliprange_low and cliprange_high)")
    pg_losses, clipfrac, ppo_kl, clipfrac_lower = _clipped_pg_losses(
        old_log_prob, log_prob, advantages, response_mask, float(low), float(high), float(clip_ratio_c)
    )
    return agg_loss(pg_losses, response_mask, loss_agg_mode), clipfrac, ppo_kl, clipfrac_lower


def compute_entropy_loss(
    logits: torch.Tensor, response_mask: torch.Tensor, loss_agg_mode: str = "token-mean",
) -> torch.Tensor:
    """Aggregated policy entropy over response tokens (the actor subtracts ``entropy_coeff`` x this).

    Args: ``logits`` float ``[B, L, V]``; ``response_mask`` ``[B, L]``. Returns: scalar :func:`agg_loss` of the
    per-token entropy (:func:`verl.utils.torch_functional.entropy_from_logits`, chunked over tokens).
    """
    return agg_loss(verl_F.entropy_from_logits(logits), response_mask, loss_agg_mode)


def compute_value_loss(
    vpreds: torch.Tensor, returns: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
    cliprange_value: float, loss_agg_mode: str = "token-mean",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Clipped value loss ``0.5 * agg(max((V - R)^2, (clip(V, V_old - c, V_old + c) - R)^2))``.

    Source: the PPO2 value clipping of Dhariwal et al. 2017 (OpenAI Baselines), as in verl/TRL.
    Args: ``vpreds`` new values, ``returns`` targets, ``values`` rollout-time values, ``response_mask``: ``[B, L]``;
        ``cliprange_value``: ``c``.
    Returns: ``(vf_loss, vf_clipfrac)``, clipfrac = masked fraction of tokens where the clipped error is larger.
    """
    vpred_clipped = verl_F.clip_by_value(vpreds, values - cliprange_value, values + cliprange_value)
    err_unclipped = (vpreds - returns) ** 2
    err_clipped = (vpred_clipped - returns) ** 2
    vf_loss = 0.5 * agg_loss(torch.maximum(err_unclipped, err_clipped), response_mask, loss_agg_mode)
    vf_clipfrac = verl_F.masked_mean((err_clipped > err_unclipped).to(vpreds.dtype), response_mask)
    return vf_loss, vf_clipfrac


# -------------------- KL ---------------------------------------------------------------------------------------------
_KL_ALIASES = {"kl": "k1", "k1": "k1", "abs": "abs", "mse": "k2", "k2": "k2", "low_var_kl": "k3", "k3": "k3"}


def kl_penalty_forward(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate between the policy and the reference from sampled-token log-probs (no ``+`` handling).

    Source: Schulman 2020, "Approximating KL Divergence" (k1, k2, k3); with ``d = logprob - ref_logprob``:
    ``kl``/``k1``: ``d``; ``abs``: ``|d|``; ``mse``/``k2``: ``d^2 / 2``; ``low_var_kl``/``k3``:
    ``exp(-d) + d - 1`` with ``-d`` clamped to ±20 and the result to ±10 (upstream's guards).

    Raises ValueError: unknown estimator (``full`` is not supported: it needs full distributions).
    """
    kind = _KL_ALIASES.get(kl_penalty)
    if kind is None:
        raise ValueError(f"unknown kl_penalty {kl_penalty!r}: kl|k1, abs, mse|k2, low_var_kl|k3 (optionally + '+')")
    diff = logprob - ref_logprob
    if kind == "k1":
        return diff
    if kind == "abs":
        return diff.abs()
    if kind == "k2":
        return 0.5 * diff.square()
    neg = torch.clamp(-diff, min=-20.0, max=20.0)
    return torch.clamp(torch.exp(neg) - neg - 1.0, min=-10.0, max=10.0)


def kl_penalty(logprob: torch.Tensor, ref_logprob: torch.Tensor, kl_penalty: str) -> torch.Tensor:
    """Per-token KL estimate (see :func:`kl_penalty_forward`), ``[B, L]`` in, ``[B, L]`` out (unmasked).

    A ``+`` suffix (``k3+``, ``low_var_kl+``, ``k1+``...) makes it straight-through: the value of the named estimator
    with the gradient of k2 (``d^2 / 2``), whose expectation is the gradient of the true KL (upstream verl's trick).
    Raises ValueError: unknown estimator.
    """
    straight_through = kl_penalty.endswith("+")
    base = kl_penalty[:-1] if straight_through else kl_penalty
    value = kl_penalty_forward(logprob, ref_logprob, base)
    if not straight_through or _KL_ALIASES[base] == "k2":
        return value
    k2 = 0.5 * (logprob - ref_logprob).square()
    return k2 - k2.detach() + value.detach()


class FixedKLController:
    """Constant KL coefficient ``value`` (Ziegler et al. 2019, fixed beta)."""

    def __init__(self, kl_coef: float):
        self.value = float(kl_coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """No-op."""

    def state_dict(self) -> Dict[str, float]:
        """``{"value": beta}`` for checkpoints."""
        return {"value": self.value}

    def load_state_dict(self, state: Dict[str, float]) -> None:
        """Restore ``value`` from :meth:`state_dict`."""
        self.value = float(state["value"])


class AdaptiveKLController:
    """Adaptive KL coefficient (Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences" §2.2).

    ``update(kl, n)``: ``value *= 1 + clip(kl / target_kl - 1, -0.2, 0.2) * n / horizon``.

    Raises ValueError: ``horizon <= 0`` or ``target_kl <= 0``.
    """

    def __init__(self, init_kl_coef: float, target_kl: float, horizon: int):
        if horizon <= 0:
            raise ValueError(f"adaptive KL controller needs horizon > 0, got {horizon}")
        if target_kl <= 0:
            raise ValueError(f"adaptive KL controller needs target_kl > 0, got {target_kl}")
        self.value = float(init_kl_coef)
        self.target = float(target_kl)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Move ``value`` towards keeping ``current_kl`` at ``target_kl``; ``n_steps`` samples since the last update."""
        error = float(np.clip(float(current_kl) / self.target - 1.0, -0.2, 0.2))
        self.value *= 1.0 + error * n_steps / self.horizon

    def state_dict(self) -> Dict[str, float]:
        """``{"value", "target", "horizon"}`` for checkpoints."""
        return {"value": self.value, "target": self.target, "horizon": self.horizon}

    def load_state_dict(self, state: Dict[str, float]) -> None:
        """Restore from :meth:`state_dict` (``target``/``horizon`` optional)."""
        self.value = float(state["value"])
        self.target = float(state.get("target", self.target))
        self.horizon = int(state.get("horizon", self.horizon))


def get_kl_controller(kl_ctrl: Any) -> Union[FixedKLController, AdaptiveKLController]:
    """Build the controller of ``algorithm.kl_ctrl``: ``type`` (fixed), ``kl_coef`` (0.001), ``horizon`` (10000),
    ``target_kl`` (0.1).

    Raises ValueError: unknown ``type``; invalid adaptive settings.
    """
    kind = _cfg_get(kl_ctrl, "type", "fixed")
    coef = float(_cfg_get(kl_ctrl, "kl_coef", 0.001))
    if kind == "fixed":
        return FixedKLController(kl_coef=coef)
    if kind == "adaptive":
        return AdaptiveKLController(
            init_kl_coef=coef,
            target_kl=float(_cfg_get(kl_ctrl, "target_kl", 0.1)),
            horizon=int(_cfg_get(kl_ctrl, "horizon", 10000)),
        )
    raise ValueError(f"unknown kl_ctrl.type {kind!r}: fixed or adaptive")


_token_kl = kl_penalty  # apply_kl_penalty's argument shadows the function's name


def apply_kl_penalty(data, kl_ctrl, kl_penalty: str = "kl"):
    """``token_level_rewards = token_level_scores − β·KL(old ‖ ref)`` per response token of the ``DataProto``
    ``data``, then update ``kl_ctrl``; returns ``(data, metrics)`` (also importable from ``ray_trainer``, upstream's
    home of this function).

    Source: Ziegler et al. 2019 (reward with a per-token KL penalty; adaptive β); verl's ``apply_kl_penalty``.
    The controller is updated with the batch mean of the per-sequence mean KL and the batch size.
    """
    response_mask = data.batch["response_mask"]
    kld = _token_kl(data.batch["old_log_probs"], data.batch["ref_log_prob"], kl_penalty) * response_mask
    beta = kl_ctrl.value
    data.batch["token_level_rewards"] = data.batch["token_level_scores"] - beta * kld
    current_kl = verl_F.masked_mean(kld, response_mask, axis=-1).mean().item()
    kl_ctrl.update(current_kl=current_kl, n_steps=len(data))
    return data, {"actor/reward_kl_penalty": current_kl, "actor/reward_kl_penalty_coeff": beta}


# -------------------- GiGPO (verl/trainer/ppo/gigpo.py, specs/gigpo.md) ----------------------------------------------
# Imported last: gigpo.py uses the helpers above at call time.
from verl.trainer.ppo.gigpo import compute_gigpo_outcome_advantage  # noqa: E402

register_adv_est(AdvantageEstimator.GIGPO)(compute_gigpo_outcome_advantage)

# -------------------- RLVCR (rlvcr/core_rlvcr.py, specs/rlvcr.md) ----------------------------------------------------
from rlvcr.core_rlvcr import compute_rlvcr_outcome_advantage  # noqa: E402

register_adv_est(AdvantageEstimator.RLVCR)(compute_rlvcr_outcome_advantage)
