"""DAPO's overlong reward shaping and truncation masking.

Source: Yu et al. 2025, "DAPO" (arXiv 2503.14476), §3.4 "Overlong Reward Shaping". With ``L`` the response length
(its tokens under ``response_mask``), ``L_max`` = ``data.max_response_length`` and ``L_c`` =
``reward_model.overlong_buffer.len``, the soft overlong punishment added to the reward is (eq. 13)::

    R_length(L) = 0                                        if L <= L_max - L_c
                = -((L - (L_max - L_c)) / L_c) * factor    if L_max - L_c < L <= L_max

(``factor`` = ``reward_model.overlong_buffer.penalty_factor``, 1 in the paper): a linear penalty over the last
``L_c`` tokens before the limit. It goes on the response's last token of ``token_level_scores`` (so every estimator
sees it as part of the outcome reward) and into ``token_level_scores_length`` when that component exists.

Overlong filtering (the paper's first remedy, ``actor_rollout_ref.actor.mask_truncated``): a response that reached the
length limit without ending (its mask is full and its last token is not an EOS id) is left out of the loss: its
``response_mask`` becomes 0 (after the reward and before the advantage, so it still counts in its group's reward
statistics but contributes no gradient). Metrics: ``response/overlong_penalty/mean``, ``response/truncated_frac``.
"""

from __future__ import annotations

from typing import Any, Iterable

import torch

from verl.trainer.ppo.registry import cfg_get


def overlong_penalty(lengths: torch.Tensor, max_length: int, buffer_len: int, factor: float) -> torch.Tensor:
    """float32 ``[B]``: the soft overlong punishment of each response length (module docstring, eq. 13).

    Raises:
        ValueError: ``buffer_len`` not in ``[1, max_length]``.
    """
    if not 1 <= int(buffer_len) <= int(max_length):
        raise ValueError(
            f"reward_model.overlong_buffer.len={buffer_len}: expected 1..data.max_response_length ({max_length})"
        )
    start = int(max_length) - int(buffer_len)
    excess = (lengths.to(torch.float32) - start).clamp(min=0.0, max=float(buffer_len))
    return -excess / float(buffer_len) * float(factor)


def truncated_rows(responses: torch.Tensor, response_mask: torch.Tensor, eos_ids: Iterable[int]) -> torch.Tensor:
    """bool ``[B]``: responses whose mask covers every column and whose last token is not an EOS id."""
    full = response_mask.sum(-1) == response_mask.shape[-1]
    last = responses[:, -1]
    ended = torch.zeros_like(full)
    for eos in eos_ids:
        ended |= last == int(eos)
    return full & ~ended


def apply_overlong_shaping(
    batch: Any,
    config: Any,
    eos_token_id: Any,
    max_length: int | None = None,
    truncated: torch.Tensor | None = None,
) -> dict:
    """In the trainer, after the reward: add the overlong penalty (``reward_model.overlong_buffer.enable``) and mask
    truncated responses (``actor_rollout_ref.actor.mask_truncated``) in ``batch`` in place; return the metrics
    (``{}`` when neither is on).

    ``max_length`` is ``L_max`` (None: the response width, which a synchronous rollout pads to
    ``data.max_response_length``); ``truncated`` bool ``[B]`` says which responses hit the limit without ending (None:
    :func:`truncated_rows`). The asynchronous learner passes both: its rows are as wide as their longest response, and
    its rollouts say themselves whether a completion stopped at the length limit.
    """
    buffer = cfg_get(cfg_get(config, "reward_model"), "overlong_buffer")
    mask_truncated = bool(cfg_get(cfg_get(cfg_get(config, "actor_rollout_ref"), "actor"), "mask_truncated", False))
    metrics: dict = {}
    response_mask = batch.batch["response_mask"]
    if buffer is not None and cfg_get(buffer, "enable", False):
        lengths = response_mask.sum(-1)
        penalty = overlong_penalty(
            lengths,
            response_mask.shape[-1] if max_length is None else int(max_length),
            int(cfg_get(buffer, "len", 0)),
            float(cfg_get(buffer, "penalty_factor", 1.0)),
        )
        last = (lengths - 1).clamp(min=0).long()
        rows = torch.arange(len(lengths))
        for key in ("token_level_scores", "token_level_scores_length"):
            if key in batch.batch.keys():
                batch.batch[key][rows, last] += penalty.to(batch.batch[key].dtype)
        metrics["response/overlong_penalty/mean"] = float(penalty.mean())
    if mask_truncated:
        eos = eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
        cut = truncated_rows(batch.batch["responses"], response_mask, eos) if truncated is None else truncated.bool()
        batch.batch["response_mask"] = response_mask * (~cut).unsqueeze(-1).to(response_mask.dtype)
        metrics["response/truncated_frac"] = float(cut.float().mean())
    return metrics
