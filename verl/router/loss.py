"""Router rewards, GRPO advantages, the router loss and its metrics (spec "Lagrangian budget", "Router policy update
(GRPO)", "Metrics"). Pure tensor functions.

Per training step (after the RLLA reward and :func:`verl.router.cost.compute_costs`)::

    r_router = compute_router_rewards(task_scores, costs, lagrange.value)                       # [B]
    router_token_level_rewards = router_token_level_rewards(r_router, response_mask)             # [B, R]
    router_advantages = compute_router_advantages(router_token_level_rewards, response_mask, uid) # [B]
    loss, metrics = compute_router_loss(router_logits, router_action, router_advantages, target_actions, ...)
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from verl.router import IGNORE_TARGET, NUM_ROUTER_ACTIONS, RouterAction
from verl.router.head import last_valid_index
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, compute_policy_loss


def compute_router_rewards(task_scores: torch.Tensor, costs: torch.Tensor, lam: float) -> torch.Tensor:
    """Lagrangian router reward ``r_router = r_task − λ·cost`` (spec "Lagrangian budget"; seed §4.3).

    Args: ``task_scores`` float ``[B]`` (the RLLA score of each trajectory); ``costs`` float ``[B]``; ``lam`` ``λ``.
    Returns: float ``[B]`` in ``task_scores``' dtype.
    Raises: ValueError on a shape mismatch or ``lam < 0``.
    """
    if task_scores.shape != costs.shape or task_scores.dim() != 1:
        raise ValueError(
            f"compute_router_rewards: task_scores {tuple(task_scores.shape)} and costs "
            f"{tuple(costs.shape)} must both be [B]"
        )
    if lam < 0:
        raise ValueError(f"compute_router_rewards: lambda must be >= 0, got {lam}")
    return task_scores - float(lam) * costs.to(task_scores.dtype)


def router_token_level_rewards(r_router: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place each scalar router reward on its response's last valid token (spec: ``router_token_level_rewards``).

    Args: ``r_router`` float ``[B]``; ``response_mask`` 0/1 ``[B, R]``.
    Returns: float ``[B, R]``, zero everywhere except ``[b, last position where response_mask[b] is 1]``.
    Raises: ValueError on a shape mismatch or a response without any valid token.
    """
    if r_router.dim() != 1 or response_mask.dim() != 2 or response_mask.shape[0] != r_router.shape[0]:
        raise ValueError(
            f"router_token_level_rewards: r_router {tuple(r_router.shape)} must be [B] and "
            f"response_mask {tuple(response_mask.shape)} [B, R]"
        )
    out = torch.zeros(response_mask.shape, dtype=r_router.dtype, device=r_router.device)
    last = last_valid_index(response_mask)
    out[torch.arange(out.shape[0], device=out.device), last] = r_router
    return out


def compute_router_advantages(
    router_token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any,
    epsilon: float = 1e-6,
    norm_adv_by_std_in_grpo: bool = True,
) -> torch.Tensor:
    """Router GRPO advantage, one scalar per copy (spec "Router policy update (GRPO)").

    Calls :func:`verl.trainer.ppo.core_algos.compute_grpo_outcome_advantage` on the router's token-level rewards,
    grouped by ``index`` (the prompt ``uid``), and reads the (broadcast) value at each response's last valid token:
    ``A = (r − mean_g) / (std_g + eps)`` with the unbiased group std (singleton group: ``r / (1 + eps)``).

    Args: ``router_token_level_rewards`` float ``[B, R]``; ``response_mask`` 0/1 ``[B, R]``; ``index`` ``[B]`` group
        ids; ``epsilon``; ``norm_adv_by_std_in_grpo`` (False: Dr. GRPO, mean-centred only).
    Returns: float ``[B]``, detached.
    """
    advantages, _ = compute_grpo_outcome_advantage(
        token_level_rewards=router_token_level_rewards,
        response_mask=response_mask,
        index=index,
        epsilon=epsilon,
        norm_adv_by_std_in_grpo=norm_adv_by_std_in_grpo,
    )
    last = last_valid_index(response_mask)
    return advantages[torch.arange(advantages.shape[0], device=advantages.device), last]


def _group_ids(index: Any) -> tuple[torch.Tensor, int]:
    """Dense group ids of the rows (``uid`` → ``0..G−1``) as int64 ``[B]``, and ``G``."""
    _, group = np.unique(np.asarray(index), return_inverse=True)
    group = torch.as_tensor(group.reshape(-1), dtype=torch.long)
    return group, int(group.max()) + 1 if len(group) else 0


def group_route_means(
    values: torch.Tensor, actions: torch.Tensor, index: Any, valid: Optional[torch.Tensor] = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per group (prompt ``uid``) and route, the mean of ``values`` over the group's copies that took that route,
    broadcast back to every row of the group.

    Args: ``values`` float ``[B]``; ``actions`` int64 ``[B]`` (0..2); ``index`` ``[B]`` group ids; ``valid`` bool
        ``[B]`` or None (rows left out of the means; default: all rows count).
    Returns: ``(means float [B, 3], present bool [B, 3])``; ``means[i, a]`` is the mean over the valid rows of row
        ``i``'s group that took route ``a`` (0 where ``present[i, a]`` is false: no such row).
    Raises: ValueError on mismatched lengths.
    """
    batch = values.shape[0]
    index = np.asarray(index)
    if values.dim() != 1 or actions.shape != (batch,) or len(index) != batch:
        raise ValueError(
            f"group_route_means: values {tuple(values.shape)}, actions {tuple(actions.shape)} and index "
            f"({len(index)}) must all be [B]"
        )
    keep = torch.ones(batch, dtype=torch.bool) if valid is None else valid.bool().cpu()
    group, num_groups = _group_ids(index)
    cell = group * NUM_ROUTER_ACTIONS + actions.long().cpu()
    sums = torch.zeros(num_groups * NUM_ROUTER_ACTIONS, dtype=torch.float64)
    counts = torch.zeros_like(sums)
    sums.index_add_(0, cell[keep], values.detach().double().cpu()[keep])
    counts.index_add_(0, cell[keep], torch.ones(int(keep.sum()), dtype=torch.float64))
    means = (sums / counts.clamp_min(1)).reshape(num_groups, NUM_ROUTER_ACTIONS)
    present = (counts > 0).reshape(num_groups, NUM_ROUTER_ACTIONS)
    return means[group].to(values.dtype).to(values.device), present[group].to(values.device)


def _group_std(values: torch.Tensor, index: Any, valid: Optional[torch.Tensor]) -> torch.Tensor:
    """Unbiased std of ``values`` over each row's group (valid rows only), float64 ``[B]``; 0 for fewer than 2."""
    keep = (torch.ones(values.shape[0], dtype=torch.bool) if valid is None else valid.bool().cpu()).double()
    group, num_groups = _group_ids(index)
    x = values.detach().double().cpu() * keep
    count = torch.zeros(num_groups, dtype=torch.float64).index_add_(0, group, keep)
    total = torch.zeros_like(count).index_add_(0, group, x)
    mean = total / count.clamp_min(1)
    sq = torch.zeros_like(count).index_add_(0, group, ((x - mean[group]) ** 2) * keep)
    std = torch.where(count > 1, (sq / (count - 1).clamp_min(1)).sqrt(), torch.zeros_like(count))
    return std[group]


ROUTE_ADV_NORMS = ("batch", "group", "none")
ROUTE_PG_MODES = ("exact", "natural")


def compute_route_advantages(
    r_router: torch.Tensor,
    actions: torch.Tensor,
    index: Any,
    valid: Optional[torch.Tensor] = None,
    epsilon: float = 1e-6,
    norm: str = "batch",
) -> torch.Tensor:
    """Advantages of every route, for ``router.route_sampling=stratified`` (``docs/router.md``, "Stratified
    routes"). Per group ``g`` with each route observed at least once::

        A_g(a) = (R̄_g(a) − mean_b R̄_g(b)) / (s + eps)

    where ``R̄_g(a)`` is the mean ``r_router`` of the group's copies routed to ``a``. Subtracting the mean over routes
    leaves the gradient of ``Σ_a π(a)·A_g(a)`` unchanged (``Σ_a ∇π(a) = 0``): it is the exact gradient of the group's
    expected router reward under the policy, the "all actions" policy gradient (Sutton et al. 2000; Asadi et al.
    2017, arXiv 1709.00503, eq. 2), so every route's value reaches the head, including routes the policy rarely
    samples. The scale ``s`` (``router.route_adv_norm``):

    - ``batch`` (default): the unbiased std of ``r_router`` over the batch's scored copies — one scale for every
      prompt, so the head follows the Lagrangian ``E[r_task − λ·cost]`` itself: a prompt where the tools win by 4
      points weighs four times one where they win by 1;
    - ``group``: GRPO's per-group std (Shao et al. 2024, arXiv 2402.03300) — every prompt's route differences are
      rescaled to unit size, which weighs a 0.1-point preference like a 4-point one and so optimises another
      objective than the budgeted one;
    - ``none``: no division.

    Args: ``r_router`` float ``[B]``; ``actions`` int64 ``[B]``; ``index`` ``[B]`` group ids; ``valid`` bool ``[B]``
        or None (unscored rows stay out of the means and the std); ``epsilon``; ``norm``.
    Returns: float ``[B, 3]`` (detached), the row's group's ``A_g``; all 0 for a group missing a route.
    Raises: ValueError on mismatched lengths or an unknown ``norm``.
    """
    if norm not in ROUTE_ADV_NORMS:
        raise ValueError(f"compute_route_advantages: norm must be one of {ROUTE_ADV_NORMS}, got {norm!r}")
    means, present = group_route_means(r_router, actions, index, valid)
    complete = present.all(dim=-1, keepdim=True)
    adv = means - means.mean(dim=-1, keepdim=True)
    keep = torch.ones(r_router.shape[0], dtype=torch.bool) if valid is None else valid.bool().cpu()
    if norm == "group":
        adv = adv / (_group_std(r_router, index, valid).to(adv.dtype).to(adv.device).unsqueeze(-1) + epsilon)
    elif norm == "batch" and int(keep.sum()) > 1:
        adv = adv / (float(r_router.detach().double().cpu()[keep].std(unbiased=True)) + epsilon)
    return torch.where(complete, adv, torch.zeros_like(adv)).detach()


def policy_expected_value(
    values: torch.Tensor, actions: torch.Tensor, index: Any, probs: torch.Tensor, valid: Optional[torch.Tensor] = None
) -> float:
    """Mean over groups of ``Σ_a π_g(a)·V̄_g(a)``: what a quantity (tool cost, task reward) averages under the
    router's policy ``π`` when the copies were routed otherwise (``router.route_sampling=stratified``). ``V̄_g(a)`` is
    the group's mean over copies routed to ``a`` (:func:`group_route_means`).

    Args: ``values`` float ``[B]``; ``actions`` int64 ``[B]``; ``index`` ``[B]`` group ids; ``probs`` float ``[B, 3]``
        (``softmax(router_logits)`` at routing time, equal on a group's rows); ``valid`` bool ``[B]`` or None.
    Returns: a float (NaN when no group has every route).
    Raises: ValueError on mismatched lengths.
    """
    means, present = group_route_means(values, actions, index, valid)
    complete = present.all(dim=-1)
    if not bool(complete.any()):
        return float("nan")
    per_row = (probs.to(means.dtype) * means).sum(-1)
    # each group counts once: weight each row by 1 / (its group's row count)
    group, num_groups = _group_ids(index)
    counts = torch.bincount(group, minlength=num_groups).double()
    weight = 1.0 / counts[group]
    weight = weight * complete.cpu().double()
    return float((per_row.double().cpu() * weight).sum() / weight.sum())


def compute_router_loss(
    router_logits: torch.Tensor,
    actions: torch.Tensor,
    advantages: torch.Tensor,
    target_actions: Optional[torch.Tensor] = None,
    entropy_coeff: float = 0.0,
    sup_coeff: float = 0.05,
    old_log_probs: Optional[torch.Tensor] = None,
    clip_ratio: float = 0.2,
    route_advantages: Optional[torch.Tensor] = None,
    route_pg: str = "exact",
) -> tuple[torch.Tensor, dict[str, float]]:
    """Router policy loss (spec "Router policy update (GRPO)")::

        L = pg_loss − entropy_coeff · mean H(π) + sup_coeff · CE(router_logits, target) on labelled rows

    ``log π(a)`` is recomputed from ``router_logits`` so gradients flow. With ``old_log_probs=None`` (default)
    ``pg_loss = −mean(log π(a)·A)``, the spec's loss. Passing the sampled ``router_log_prob`` as ``old_log_probs``
    uses instead the PPO clipped surrogate of :func:`verl.trainer.ppo.core_algos.compute_policy_loss` on a
    one-"token" sequence per copy (same gradient while the ratio is 1; clipped on repeated updates of one batch).
    With ``route_advantages`` (``router.route_sampling=stratified``, :func:`compute_route_advantages`) the policy
    term is the expectation over routes, ``pg_loss = −mean_i Σ_a π_i(a)·A_i(a)``, and ``actions`` / ``advantages``
    do not enter it. Its gradient on the logits, ``π(a)·(A(a) − Σ_b π(b)A(b))``, vanishes as the policy saturates, so
    a head that has gone near-deterministic on one route hardly moves when λ turns the other way.
    ``route_pg="natural"`` uses instead ``pg_loss = −mean_i Σ_a A_i(a)·z_i(a)`` (``z`` the logits; ``Σ_a A(a) = 0``
    makes it shift-invariant), whose gradient on each logit is ``−A(a)`` whatever ``π``: the natural policy gradient
    step of a tabular softmax policy, ``z ← z + η·A`` (Kakade 2001; Agarwal et al. 2021, arXiv 1908.00261, §5.3,
    bandit case), back-propagated through the head.

    Args:
        router_logits: float ``[B, 3]`` (differentiable).
        actions: int64 ``[B]`` sampled routes.
        advantages: float ``[B]`` (:func:`compute_router_advantages`).
        target_actions: int64 ``[B]`` weak labels, ``-1`` for MIXED / unknown (:func:`verl.router.target_action_ids`);
            None: no supervised term.
        entropy_coeff, sup_coeff: ``router.entropy_coeff``, ``router.sup_coeff`` (0 disables).
        old_log_probs: float ``[B]`` or None; clip_ratio: PPO clip range.
        route_advantages: float ``[B, 3]`` or None (every route's advantage; not with ``old_log_probs``).
        route_pg: ``exact`` | ``natural`` (with ``route_advantages``; ``router.route_pg``).

    Returns:
        ``(loss scalar, metrics)`` with ``router/pg_loss``, ``router/entropy``, ``router/sup_loss`` (0 without
        labelled rows), ``router/acc_vs_weak_label`` (argmax vs label on labelled rows; absent when there are none),
        ``router/labelled_frac`` (with targets), ``router/pg_clipfrac`` and ``router/ppo_kl`` (with old_log_probs).

    Raises:
        ValueError: shapes disagree, an action is outside 0..2, a target outside -1..2, or both
            ``route_advantages`` and ``old_log_probs`` are given.
    """
    batch = router_logits.shape[0]
    if router_logits.shape != (batch, NUM_ROUTER_ACTIONS) or actions.shape != (batch,) or advantages.shape != (batch,):
        raise ValueError(
            f"compute_router_loss: router_logits {tuple(router_logits.shape)} must be [B, 3], actions "
            f"{tuple(actions.shape)} and advantages {tuple(advantages.shape)} [B]"
        )
    if bool(((actions < 0) | (actions >= NUM_ROUTER_ACTIONS)).any()):
        raise ValueError(f"compute_router_loss: actions must lie in 0..2, got {actions.tolist()}")
    log_probs_all = F.log_softmax(router_logits.float(), dim=-1)
    log_prob = log_probs_all.gather(-1, actions.long().unsqueeze(-1))  # [B, 1]
    adv = advantages.float().reshape(batch, 1)
    metrics: dict[str, float] = {}
    if route_advantages is not None:
        if route_advantages.shape != (batch, NUM_ROUTER_ACTIONS) or old_log_probs is not None:
            raise ValueError(
                f"compute_router_loss: route_advantages {tuple(route_advantages.shape)} must be [B, 3] "
                "and cannot be combined with old_log_probs"
            )
        if route_pg not in ROUTE_PG_MODES:
            raise ValueError(f"compute_router_loss: route_pg must be one of {ROUTE_PG_MODES}, got {route_pg!r}")
        weights = log_probs_all.exp() if route_pg == "exact" else router_logits.float()
        pg_loss = -(weights * route_advantages.float().detach()).sum(-1).mean()
    elif old_log_probs is None:
        pg_loss = -(log_prob * adv).mean()
    else:
        old = old_log_probs.float().reshape(batch, 1)
        pg_loss, clipfrac, ppo_kl, _ = compute_policy_loss(
            old, log_prob, adv, torch.ones_like(log_prob), cliprange=clip_ratio, loss_agg_mode="token-mean"
        )
        metrics.update({"router/pg_clipfrac": clipfrac.item(), "router/ppo_kl": ppo_kl.item()})
    entropy = -(log_probs_all.exp() * log_probs_all).sum(-1).mean()
    loss = pg_loss - entropy_coeff * entropy
    metrics.update({"router/pg_loss": pg_loss.item(), "router/entropy": entropy.item(), "router/sup_loss": 0.0})
    if target_actions is not None:
        if target_actions.shape != (batch,):
            raise ValueError(f"compute_router_loss: target_actions {tuple(target_actions.shape)} must be [B]")
        if bool(((target_actions < IGNORE_TARGET) | (target_actions >= NUM_ROUTER_ACTIONS)).any()):
            raise ValueError(f"compute_router_loss: target_actions must lie in -1..2, got {target_actions.tolist()}")
        labelled = target_actions != IGNORE_TARGET
        metrics["router/labelled_frac"] = labelled.float().mean().item()
        if bool(labelled.any()):
            sup_loss = F.nll_loss(log_probs_all[labelled], target_actions[labelled].long())
            metrics["router/sup_loss"] = sup_loss.item()
            predicted = router_logits.detach().argmax(-1)
            correct = predicted[labelled] == target_actions[labelled]
            metrics["router/acc_vs_weak_label"] = correct.float().mean().item()
            if sup_coeff:
                loss = loss + sup_coeff * sup_loss
    return loss, metrics


def router_batch_metrics(
    actions: torch.Tensor,
    costs: torch.Tensor,
    task_scores: torch.Tensor,
    router_rewards: torch.Tensor,
    used_any_tool: torch.Tensor,
) -> dict[str, float]:
    """Per-step router metrics from the batch arrays (spec "Metrics").

    Args: ``actions`` int64 ``[B]``; ``costs``, ``task_scores``, ``router_rewards`` float ``[B]``; ``used_any_tool``
        0/1 ``[B]``.
    Returns: ``router/frac_{answer,search,calculate}``, ``router/mean_cost``, ``router/mean_task_reward``,
        ``router/mean_router_reward`` and ``router/tool_use_rate_when_answer`` (share of ANSWER-routed copies that
        still used a tool; absent when no copy was routed to ANSWER).
    Raises: ValueError on an empty batch or mismatched lengths.
    """
    batch = actions.shape[0]
    if batch == 0 or any(t.shape != (batch,) for t in (costs, task_scores, router_rewards, used_any_tool)):
        raise ValueError("router_batch_metrics: all inputs must be non-empty [B] tensors of the same length")
    metrics = {f"router/frac_{a.name.lower()}": (actions == a).float().mean().item() for a in RouterAction}
    metrics.update(
        {
            "router/mean_cost": costs.float().mean().item(),
            "router/mean_task_reward": task_scores.float().mean().item(),
            "router/mean_router_reward": router_rewards.float().mean().item(),
        }
    )
    answer = actions == RouterAction.ANSWER
    if bool(answer.any()):
        metrics["router/tool_use_rate_when_answer"] = used_any_tool[answer].float().mean().item()
    return metrics
