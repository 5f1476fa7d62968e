"""Core PPO-family algorithms: advantage estimators, policy/value/entropy losses; the KL penalties and controllers
(``verl/trainer/ppo/kl.py``) are importable from here too, as upstream's module has them.

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

from typing import Any, Dict, Optional, Tuple

import torch

import verl.utils.torch_functional as verl_F
from verl.trainer.ppo.group_stats import (  # noqa: F401 - public names of core_algos (upstream's module)
    compute_advantage_on_valid_rows,
    compute_group_statistics,
    group_ids,
    group_normalize,
    masked_reverse_discount,
)
from verl.trainer.ppo.kl import (  # noqa: F401 - public names of core_algos (upstream's module)
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    get_kl_controller,
    kl_penalty,
    kl_penalty_forward,
)
from verl.trainer.ppo.registry import (  # noqa: F401 - public names of core_algos (upstream's module)
    ADV_ESTIMATOR_REGISTRY,
    POLICY_LOSS_REGISTRY,
    AdvantageEstimator,
    EstimatorPlugin,
    accepts_eos_mask,
    cfg_get,
    get_adv_estimator_fn,
    get_estimator_plugin,
    get_policy_loss_fn,
    policy_loss_mode,
    register_adv_est,
    register_policy_loss,
    resolve,
)


# -------------------- advantage estimators ---------------------------------------------------------------------------
GROUPED = EstimatorPlugin(grouped=True)  # advantages relative within the prompt group (index)


@register_adv_est(AdvantageEstimator.GAE, EstimatorPlugin(needs_values=True))
@accepts_eos_mask
def compute_gae_advantage_return(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: Optional[float] = None,
    lam: Optional[float] = None,
    config: Any = None,
    **kwargs,
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
    gamma = float(resolve(gamma, config, "gamma", 1.0))
    lam = float(resolve(lam, config, "lam", 1.0))
    with torch.no_grad():
        valid = response_mask.bool()
        next_values = torch.zeros_like(values)
        carry = torch.zeros_like(values[:, 0])
        for t in reversed(range(values.shape[1])):
            next_values[:, t] = carry
            carry = torch.where(valid[:, t], values[:, t], carry)
        deltas = token_level_rewards + gamma * next_values - values
        advantages = masked_reverse_discount(deltas, response_mask, gamma * lam)
        mask_f = response_mask.to(values.dtype)
        returns = (advantages + values) * mask_f
        advantages = verl_F.masked_whiten(advantages, response_mask) * mask_f
    return advantages, returns


@register_adv_est(AdvantageEstimator.GRPO, GROUPED)
@accepts_eos_mask
def compute_grpo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: Optional[bool] = None,
    config: Any = None,
    **kwargs,
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
    norm = bool(resolve(norm_adv_by_std_in_grpo, config, "norm_adv_by_std_in_grpo", True))
    with torch.no_grad():
        scores = (token_level_rewards * response_mask).sum(dim=-1)
        adv = group_normalize(scores, index, epsilon=epsilon, norm_by_std=norm)
        advantages = adv.unsqueeze(-1) * response_mask.to(adv.dtype)
    return advantages, advantages


@register_adv_est(AdvantageEstimator.RLOO, GROUPED)
@accepts_eos_mask
def compute_rloo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs,
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
register_adv_est(AdvantageEstimator.GRPO_VECTORIZED, GROUPED)(compute_grpo_outcome_advantage)
register_adv_est(AdvantageEstimator.RLOO_VECTORIZED, GROUPED)(compute_rloo_outcome_advantage)


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS)
@accepts_eos_mask
def compute_reinforce_plus_plus_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: Optional[float] = None,
    config: Any = None,
    **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """REINFORCE++: discounted returns-to-go, whitened over all response tokens of the batch.

    Source: Hu 2025, "REINFORCE++" (arXiv:2501.03262) §3: ``G_t = sum_{s>=t} gamma^{s-t} r_s``, then global batch
    normalisation ``(G - mean) / std``. Masked tokens are skipped in the recursion (as in GAE); for single-turn data
    this is upstream's recursion exactly. ``gamma``: None -> ``config.gamma`` -> 1.0.
    Returns: ``advantages`` (whitened) and ``returns`` (``G_t``), ``[B, L]``, zero off the mask.
    Raises ValueError: fewer than two response tokens in the batch.
    """
    gamma = float(resolve(gamma, config, "gamma", 1.0))
    with torch.no_grad():
        returns = masked_reverse_discount(token_level_rewards, response_mask, gamma)
        advantages = verl_F.masked_whiten(returns, response_mask) * response_mask.to(returns.dtype)
    return advantages, returns


@register_adv_est(AdvantageEstimator.REINFORCE_PLUS_PLUS_BASELINE, GROUPED)
@accepts_eos_mask
def compute_reinforce_plus_plus_baseline_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    epsilon: float = 1e-6,
    config: Any = None,
    **kwargs,
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


@register_adv_est(AdvantageEstimator.REMAX, EstimatorPlugin(needs_greedy_baseline=True))
@accepts_eos_mask
def compute_remax_outcome_advantage(
    token_level_rewards: torch.Tensor,
    reward_baselines: torch.Tensor = None,
    response_mask: torch.Tensor = None,
    config: Any = None,
    **kwargs,
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
        returns = masked_reverse_discount(token_level_rewards, response_mask, 1.0)
        advantages = returns - reward_baselines.to(returns.dtype).unsqueeze(-1) * response_mask.to(returns.dtype)
    return advantages, returns


def compute_rewards(
    token_level_scores: torch.Tensor,
    old_log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    kl_ratio: float,
) -> torch.Tensor:
    """KL-penalised reward ``r = score - kl_ratio * (log pi_old - log pi_ref)`` per token (all ``[B, L]``).

    Source: Ziegler et al. 2019, "Fine-Tuning Language Models from Human Preferences" eq. 2; Ouyang et al. 2022 eq. 2.
    """
    return token_level_scores - kl_ratio * (old_log_prob - ref_log_prob)


# -------------------- losses -----------------------------------------------------------------------------------------
def agg_loss(
    loss_mat: torch.Tensor,
    loss_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    loss_scale_factor: Optional[float] = None,
    batch_num_tokens: Optional[float] = None,
    global_batch_size: Optional[float] = None,
    dp_size: int = 1,
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


def _clip_range(config: Any) -> Tuple[float, float]:
    """``(clip_ratio_low, clip_ratio_high)`` of an actor config; each defaults to ``clip_ratio`` (0.2)."""
    clip_ratio = float(cfg_get(config, "clip_ratio", 0.2))
    return float(cfg_get(config, "clip_ratio_low", clip_ratio)), float(cfg_get(config, "clip_ratio_high", clip_ratio))


def _clipped_pg_losses(
    old_log_prob,
    log_prob,
    advantages,
    response_mask,
    clip_low: float,
    clip_high: float,
    clip_ratio_c: float,
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
@accepts_eos_mask
def compute_policy_loss_vanilla(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
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
    clip_low, clip_high = _clip_range(config)
    clip_c = float(cfg_get(config, "clip_ratio_c", 3.0))
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


@register_policy_loss("gspo")
@accepts_eos_mask
def compute_policy_loss_gspo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "seq-mean-token-mean",
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """GSPO, the GSPO-token form: one importance ratio per sequence, clipped per sequence.

    Source: Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071), eqs. 5-7 and §4.3::

        log s_i = sum_t m_it (lp_it - olp_it) / |y_i|                (clamped to <= 10 before exp)
        s_it    = exp(lp_it - sg(lp_it) + sg(log s_i))               (value s_i, gradient s_i * grad lp_it)
        l_it    = max(-A_it s_it, -A_it clip(s_it, 1 - eps_low, 1 + eps_high))

    aggregated with ``loss_agg_mode`` (the paper's ``seq-mean-token-mean``). With every token of a sequence at the same
    ratio it is PPO-clip at the same clip range.

    Args: as :func:`compute_policy_loss_vanilla` (``clip_ratio_c`` is not used).
    Returns: ``(pg_loss, metrics)``: ``actor/pg_clipfrac`` (masked share of tokens whose clipped term is active),
        ``actor/ppo_kl`` (masked mean of ``olp - lp``).
    Raises ValueError: unknown ``loss_agg_mode``.
    """
    clip_low, clip_high = _clip_range(config)
    mask = response_mask.to(log_prob.dtype)
    log_ratio = log_prob - old_log_prob
    seq_log_ratio = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    seq_log_ratio = torch.clamp(seq_log_ratio.detach(), max=10.0)
    ratio = torch.exp(log_prob - log_prob.detach() + seq_log_ratio.unsqueeze(-1))
    loss_unclipped = -advantages * ratio
    loss_clipped = -advantages * torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = torch.maximum(loss_unclipped, loss_clipped)
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    metrics = {
        "actor/pg_clipfrac": verl_F.masked_mean(
            (loss_clipped > loss_unclipped).to(log_prob.dtype), response_mask
        ).item(),
        "actor/ppo_kl": verl_F.masked_mean(-log_ratio.detach(), response_mask).item(),
    }
    return pg_loss, metrics


@register_policy_loss("cispo")
@accepts_eos_mask
def compute_policy_loss_cispo(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, Dict[str, float]]:
    """CISPO: the clipped importance weight multiplies the log-probability, with its gradient stopped, so no token's
    gradient is ever zeroed by the clip (unlike PPO-clip).

    Source: MiniMax 2025, "MiniMax-M1" (arXiv 2506.13585), eqs. 4-5::

        r_it = exp(clamp(lp_it - olp_it, -20, 20)),   r^_it = clip(r_it, 1 - eps_low, 1 + eps_high)
        l_it = -sg(r^_it) * A_it * lp_it              (d l_it / d lp_it = -r^_it A_it)

    aggregated with ``loss_agg_mode`` (the paper's ``token-mean``). The paper sets no lower bound on the weight
    (``clip_ratio_low`` >= 1) and tunes ``clip_ratio_high``.

    Args: as :func:`compute_policy_loss_vanilla` (``clip_ratio_c`` is not used).
    Returns: ``(pg_loss, metrics)``: ``actor/pg_clipfrac`` (masked share of tokens whose weight was clipped),
        ``actor/ppo_kl`` (masked mean of ``olp - lp``).
    Raises ValueError: unknown ``loss_agg_mode``.
    """
    clip_low, clip_high = _clip_range(config)
    log_ratio = torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0)
    ratio = torch.exp(log_ratio).detach()
    clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
    pg_losses = -clipped * advantages * log_prob
    if rollout_is_weights is not None:
        pg_losses = pg_losses * rollout_is_weights
    pg_loss = agg_loss(pg_losses, response_mask, loss_agg_mode)
    metrics = {
        "actor/pg_clipfrac": verl_F.masked_mean((clipped != ratio).to(log_prob.dtype), response_mask).item(),
        "actor/ppo_kl": verl_F.masked_mean(-log_ratio.detach(), response_mask).item(),
    }
    return pg_loss, metrics


@accepts_eos_mask
def compute_policy_loss(
    old_log_prob: torch.Tensor,
    log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange: Optional[float] = None,
    cliprange_low: Optional[float] = None,
    cliprange_high: Optional[float] = None,
    clip_ratio_c: float = 3.0,
    loss_agg_mode: str = "token-mean",
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


@accepts_eos_mask
def compute_entropy_loss(
    logits: torch.Tensor,
    response_mask: torch.Tensor,
    loss_agg_mode: str = "token-mean",
) -> torch.Tensor:
    """Aggregated policy entropy over response tokens (the actor subtracts ``entropy_coeff`` x this).

    Args: ``logits`` float ``[B, L, V]``; ``response_mask`` ``[B, L]``. Returns: scalar :func:`agg_loss` of the
    per-token entropy (:func:`verl.utils.torch_functional.entropy_from_logits`, chunked over tokens).
    """
    return agg_loss(verl_F.entropy_from_logits(logits), response_mask, loss_agg_mode)


@accepts_eos_mask
def compute_value_loss(
    vpreds: torch.Tensor,
    returns: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    cliprange_value: float,
    loss_agg_mode: str = "token-mean",
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


# -------------------- plug-in estimators: GiGPO and RLVCR register themselves on import ---------------------------------
from rlvcr.core_rlvcr import compute_rlvcr_outcome_advantage  # noqa: E402,F401 - registers "rlvcr"
from verl.trainer.ppo.gigpo import compute_gigpo_outcome_advantage  # noqa: E402,F401 - registers "gigpo"
