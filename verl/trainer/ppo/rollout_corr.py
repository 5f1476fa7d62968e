"""Rollout correction: importance weights and rejection masks for the gap between the policy that sampled the tokens
(the rollout engine, or an older policy version in the asynchronous mode) and the policy the loss's ratio is taken
against (``old_log_probs``, recomputed by the trainer).

Sources: Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You Off-Policy RL Training" (truncated
importance sampling, TIS); the masked / rejection variants (token-level: IcePop; sequence and geometric-mean masks).
With ``rho_it = exp(olp_it - rlp_it)`` (``olp`` the trainer's old log-prob, ``rlp`` the rollout's) and
``|y_i| = sum_t m_it``:

- ``rollout_is="token"``: ``w_it = min(rho_it, C)``; ``"sequence"``: ``w_i = min(exp(sum_t m_it (olp_it - rlp_it)),
  C)`` on every token of row i; ``C = rollout_is_threshold``. Detached; they multiply the per-token policy loss.
- ``rollout_rs="token"``: token t leaves the loss (mask 0) unless ``lo <= rho_it <= hi``; ``"sequence"``: row i leaves
  unless ``lo <= exp(sum_t m_it (olp_it - rlp_it)) <= hi``; ``"geometric"``: unless ``lo <= exp(sum_t m_it (olp_it -
  rlp_it) / |y_i|) <= hi``; ``hi = rollout_rs_threshold``, ``lo = rollout_rs_threshold_lower`` (default ``1 / hi``).
- Both together: weights on the tokens the mask keeps. Neither (the default): the mask is returned unchanged (the
  same tensor) and no weights, so training is bit-for-bit the uncorrected path.

Config: ``algorithm.rollout_correction.{rollout_is, rollout_is_threshold, rollout_rs, rollout_rs_threshold,
rollout_rs_threshold_lower}`` (verl's key names). Metrics, every step whenever rollout log-probs exist:
``rollout_corr/kl`` (masked mean of ``rlp - olp``), ``rollout_corr/ppl_ratio`` (``exp`` of the masked mean of
``olp - rlp``: the trainer's per-token perplexity over the rollout's, inverted), ``rollout_corr/is_weight_mean`` /
``is_weight_max`` (of the token ratios ``rho``, or of the weights when correcting), ``rollout_corr/rs_masked_frac``
(share of response tokens the mask removed).
"""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch

from verl.trainer.ppo.registry import cfg_get

IS_LEVELS = ("token", "sequence")
RS_LEVELS = ("token", "sequence", "geometric")
_LOG_CLAMP = 20.0  # exp overflow guard on log-ratios (as the PPO ratio)


def compute_rollout_correction(
    old_log_prob: torch.Tensor,
    rollout_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    rollout_is: Optional[str] = None,
    rollout_is_threshold: float = 2.0,
    rollout_rs: Optional[str] = None,
    rollout_rs_threshold: Optional[float] = None,
    rollout_rs_threshold_lower: Optional[float] = None,
) -> Tuple[Optional[torch.Tensor], torch.Tensor, dict]:
    """Weights, mask and metrics of the rollout correction (module docstring).

    Args:
        old_log_prob, rollout_log_prob: float ``[B, L]`` log-probs of the sampled tokens (trainer's / rollout's).
        response_mask: 0/1 ``[B, L]``.
        rollout_is: None, ``token`` or ``sequence``; ``rollout_is_threshold``: ``C`` (> 0).
        rollout_rs: None, ``token``, ``sequence`` or ``geometric``; ``rollout_rs_threshold``: ``hi`` (> 0, required
            with ``rollout_rs``); ``rollout_rs_threshold_lower``: ``lo`` (default ``1 / hi``).

    Returns:
        ``(rollout_is_weights [B, L] in old_log_prob's dtype, 0 off the kept mask; or None, modified_response_mask
        [B, L] in response_mask's dtype, metrics)``.

    Raises:
        ValueError: an unknown level, a non-positive threshold, or ``rollout_rs`` without ``rollout_rs_threshold``
            (the key is named).
    """
    check_correction_settings(
        rollout_is, rollout_is_threshold, rollout_rs, rollout_rs_threshold, rollout_rs_threshold_lower
    )
    mask = response_mask.to(old_log_prob.dtype)
    tokens = mask.sum()
    diff = (old_log_prob - rollout_log_prob).detach() * mask  # log rho, 0 off the mask
    token_rho = torch.exp(diff.clamp(-_LOG_CLAMP, _LOG_CLAMP))
    seq_sum = diff.sum(-1)
    keep = mask
    if rollout_rs is not None:
        hi = float(rollout_rs_threshold)
        lo = float(rollout_rs_threshold_lower) if rollout_rs_threshold_lower is not None else 1.0 / hi
        if rollout_rs == "token":
            ok = (token_rho >= lo) & (token_rho <= hi)
        else:
            stat = seq_sum if rollout_rs == "sequence" else seq_sum / mask.sum(-1).clamp(min=1.0)
            log_lo, log_hi = (math.log(lo) if lo > 0 else -math.inf), math.log(hi)
            ok = ((stat >= log_lo) & (stat <= log_hi)).unsqueeze(-1).expand_as(mask)
        keep = mask * ok.to(mask.dtype)
    weights = None
    if rollout_is is not None:
        if rollout_is == "token":
            weights = token_rho.clamp(max=float(rollout_is_threshold))
        else:
            seq_w = torch.exp(seq_sum.clamp(-_LOG_CLAMP, _LOG_CLAMP)).clamp(max=float(rollout_is_threshold))
            weights = seq_w.unsqueeze(-1).expand_as(mask).clone()
        weights = weights * keep
    shown = weights if weights is not None else token_rho
    on = keep.bool() if weights is not None else mask.bool()
    metrics = {
        "rollout_corr/kl": float((-diff).sum() / tokens.clamp(min=1)),
        # the trainer-vs-rollout log-prob mismatch on the response tokens (0 when the engines agree exactly)
        "rollout_corr/log_prob_diff_max": float(diff.abs().max()) if bool(mask.bool().any()) else 0.0,
        "rollout_corr/ppl_ratio": float(torch.exp(diff.sum() / tokens.clamp(min=1))),
        "rollout_corr/is_weight_mean": float(shown[on].mean()) if bool(on.any()) else 1.0,
        "rollout_corr/is_weight_max": float(shown[on].max()) if bool(on.any()) else 1.0,
        "rollout_corr/rs_masked_frac": float((mask - keep).sum() / tokens.clamp(min=1)),
    }
    modified = response_mask if keep is mask else keep.to(response_mask.dtype)
    return weights, modified, metrics


def check_correction_settings(
    rollout_is: Optional[str] = None,
    rollout_is_threshold: float = 2.0,
    rollout_rs: Optional[str] = None,
    rollout_rs_threshold: Optional[float] = None,
    rollout_rs_threshold_lower: Optional[float] = None,
) -> None:
    """Raise ValueError naming the ``algorithm.rollout_correction`` key that is wrong (unknown level, non-positive
    threshold, ``rollout_rs`` without ``rollout_rs_threshold``, a lower threshold outside ``[0, hi)``: at ``hi`` or
    above it rejects every token, below 0 it means 0); also called at config load."""
    if rollout_is is not None and rollout_is not in IS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_is={rollout_is!r}: expected null or one of {IS_LEVELS}")
    if rollout_rs is not None and rollout_rs not in RS_LEVELS:
        raise ValueError(f"algorithm.rollout_correction.rollout_rs={rollout_rs!r}: expected null or one of {RS_LEVELS}")
    if rollout_is is not None and not float(rollout_is_threshold) > 0:
        raise ValueError(f"algorithm.rollout_correction.rollout_is_threshold={rollout_is_threshold}: must be > 0")
    if rollout_rs is not None and (rollout_rs_threshold is None or not float(rollout_rs_threshold) > 0):
        raise ValueError(
            f"algorithm.rollout_correction.rollout_rs_threshold={rollout_rs_threshold}: rollout_rs="
            f"{rollout_rs} needs an upper threshold > 0"
        )
    if (
        rollout_rs is not None
        and rollout_rs_threshold_lower is not None
        and not (0 <= float(rollout_rs_threshold_lower) < float(rollout_rs_threshold))
    ):
        raise ValueError(
            f"algorithm.rollout_correction.rollout_rs_threshold_lower={rollout_rs_threshold_lower}: "
            f"expected 0 <= lower < rollout_rs_threshold ({rollout_rs_threshold}); at or above it no "
            "token is kept"
        )


def correction_settings(config: Any) -> dict:
    """The keyword arguments of :func:`compute_rollout_correction` from ``algorithm.rollout_correction`` (absent
    section or keys: the defaults, i.e. no correction)."""
    section = cfg_get(config, "rollout_correction")
    return {
        "rollout_is": cfg_get(section, "rollout_is"),
        "rollout_is_threshold": float(cfg_get(section, "rollout_is_threshold", 2.0)),
        "rollout_rs": cfg_get(section, "rollout_rs"),
        "rollout_rs_threshold": cfg_get(section, "rollout_rs_threshold"),
        "rollout_rs_threshold_lower": cfg_get(section, "rollout_rs_threshold_lower"),
    }


def apply_rollout_correction(batch: Any, algorithm_config: Any) -> dict:
    """In the trainer, after the old log-probs: when the rollout reported its log-probs (``rollout_log_probs``), put
    the correction's weights (``rollout_is_weights``, float32) and mask (``response_mask``) into ``batch`` in place
    and return the ``rollout_corr/*`` metrics; ``{}`` when there are none.

    Raises:
        ValueError: bad ``algorithm.rollout_correction`` settings (see :func:`compute_rollout_correction`).
    """
    if "rollout_log_probs" not in batch.batch.keys():
        return {}
    weights, mask, metrics = compute_rollout_correction(
        batch.batch["old_log_probs"],
        batch.batch["rollout_log_probs"],
        batch.batch["response_mask"],
        **correction_settings(algorithm_config),
    )
    if weights is not None:
        batch.batch["rollout_is_weights"] = weights.to(torch.float32)
    batch.batch["response_mask"] = mask
    return metrics
