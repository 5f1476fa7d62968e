"""RLVCR advantage: thinking-level scores from action entropy under alternative thinks, plus the trajectory term
(``algorithm.adv_estimator=rlvcr``).

Documentation: ``docs/rlvcr.md`` (cited below as "docs §<section>"): fix history and action, vary the thinking
level, compare the entropy of the *original* action tokens, group advantage of the chosen level.
What this module builds, and what it deliberately does not (mistakes a public implementation of the method makes):

- the thinking advantage is additive, ``A = A_traj + w * A_think`` (docs §Final advantage), never a multiplicative
  confidence re-weighting of the trajectory advantage;
- the per-level inputs ``U_L`` must come from scoring the *same* original action token ids under every context c_L
  (docs §Rollout phase, step 3): this module only consumes them; alternatives are never trained on.

Pure tensor functions, no model calls. Batch fields the estimator reads (``rlvcr_batch_inputs`` collects them; the
rollout-side RLVCR phase writes them; the trainer's ``compute_advantage`` must pass them, as it does for GiGPO):

================================  ============================  ===========================================
batch field                       estimator argument            content
================================  ============================  ===========================================
``thinking_level`` (non-tensor)   ``chosen_level``              int [B]: parsed level 1..N, 0 = unparseable
``thinking_level_action_entropy`` ``action_entropy``            per row N floats: U_1..U_N (nats)
``thinking_level_think_cost``     ``think_cost``                per row N floats: C_1..C_N (think tokens)
``thinking_evaluated`` (opt.)     ``evaluated``                 bool [B]: alternatives scored for this step
``traj_uid`` (opt.)               ``traj_index``                trajectory id (multi-turn); absent: row = traj
``thinking_level_entropies``      ``thinking_level_entropies``  float [B, L_resp]: precomputed A_think
================================  ============================  ===========================================

With ``thinking_level`` present, A_think is computed here (:func:`compute_thinking_advantage`, settings from
``algorithm.rlvcr``); otherwise the precomputed ``thinking_level_entropies`` tensor (docs §Batch fields: A_think
broadcast over the response) is read. ``thinking_token_costs`` [B, L_resp] (C_l broadcast) is a logging field: the
estimator does not read it. :func:`thinking_batch_fields` builds both tensors.

The estimator registers itself under ``rlvcr`` (:mod:`verl.trainer.ppo.registry`; ``core_algos`` imports this module
so that every estimator is there); group statistics reuse :func:`verl.trainer.ppo.group_stats.group_normalize`
(unbiased std, order-invariant, a constant group gives exactly 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Dict, Optional, Sequence, Tuple

import numpy as np
import torch

from rlvcr.prompts import ParsedStep, check_action_tags, parse_level_response
from verl.trainer.ppo.group_stats import group_ids, group_normalize
from verl.trainer.ppo.registry import AdvantageEstimator, EstimatorPlugin, cfg_get, register_adv_est, resolve

__all__ = [
    "RLVCR_BATCH_FIELDS",
    "RLVCR_MODES",
    "RLVCRSettings",
    "check_rlvcr_settings",
    "compute_action_uncertainty",
    "compute_level_diversity",
    "compute_level_scores",
    "compute_rlvcr_metrics",
    "compute_rlvcr_outcome_advantage",
    "compute_thinking_advantage",
    "compute_trajectory_advantage",
    "parse_level_response",
    "parsed_levels",
    "rlvcr_active",
    "rlvcr_batch_inputs",
    "thinking_batch_fields",
]

RLVCR_MODES = ("mean_norm", "mean_std_norm")

# non_tensor_batch field -> estimator keyword argument (module docstring table)
RLVCR_BATCH_FIELDS = {
    "thinking_level": "chosen_level",
    "thinking_level_action_entropy": "action_entropy",
    "thinking_level_think_cost": "think_cost",
    "thinking_evaluated": "evaluated",
    "traj_uid": "traj_index",
}


def _typed(key: str, value: Any, kind: type) -> Any:
    """``value`` as ``kind`` (bool, int or float); raises ValueError naming ``algorithm.rlvcr.<key>`` for a value of
    another kind (a string, a fractional int, a number for a bool)."""
    if isinstance(value, np.generic):
        value = value.item()
    ok = (
        isinstance(value, bool)
        if kind is bool
        else isinstance(value, (int, float)) and not isinstance(value, bool) and (kind is float or value == int(value))
    )
    if not ok:
        raise ValueError(f"algorithm.rlvcr.{key} must be of type {kind.__name__}, got {value!r}")
    return kind(value)


# -------------------- settings ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RLVCRSettings:
    """``algorithm.rlvcr`` with its defaults (docs §Configuration; ``ppo_trainer.yaml`` documents each key)."""

    enable: bool = True
    step_advantage_w: float = 1.0
    thinking_diversity_w: float = 0.5
    mode: str = "mean_norm"
    thinking_cost_w: float = 0.1
    cost_max: float = 256.0
    num_levels: int = 4
    action_tags: Tuple[str, ...] = ("action",)
    alt_temperature: float = 0.7
    alt_top_p: float = 0.9
    alt_max_think_tokens: int = 256
    only_positive_episodes: bool = False
    epsilon: float = 1e-6

    @classmethod
    def from_config(cls, section: Any = None, **overrides: Any) -> "RLVCRSettings":
        """Settings read from an ``algorithm.rlvcr`` section (dict, DictConfig, object or None), missing or null keys
        at their defaults, then the non-None ``overrides``; validated (:meth:`check`)."""
        values = {f.name: cfg_get(section, f.name, f.default) for f in fields(cls)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        tags = values["action_tags"]
        values["action_tags"] = check_action_tags(tags if isinstance(tags, str) else list(tags))
        values["mode"] = str(values["mode"])
        for f in fields(cls):
            if f.name not in ("action_tags", "mode"):
                values[f.name] = _typed(f.name, values[f.name], type(f.default))
        return cls(**values).check()

    def check(self) -> "RLVCRSettings":
        """Raises ValueError naming the ``algorithm.rlvcr`` key: ``mode`` not in :data:`RLVCR_MODES`;
        ``cost_max``, ``epsilon``, ``alt_temperature`` not > 0; ``alt_top_p`` outside (0, 1]; ``num_levels`` < 2;
        ``alt_max_think_tokens`` < 1; a negative or non-finite weight. Returns ``self``."""
        if self.mode not in RLVCR_MODES:
            raise ValueError(f"algorithm.rlvcr.mode must be one of {RLVCR_MODES}, got {self.mode!r}")
        for key in ("cost_max", "epsilon", "alt_temperature"):
            if not getattr(self, key) > 0.0:
                raise ValueError(f"algorithm.rlvcr.{key} must be > 0, got {getattr(self, key)}")
        for key in ("step_advantage_w", "thinking_diversity_w", "thinking_cost_w"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value >= 0.0):
                raise ValueError(f"algorithm.rlvcr.{key} must be finite and >= 0, got {value}")
        if not 0.0 < self.alt_top_p <= 1.0:
            raise ValueError(f"algorithm.rlvcr.alt_top_p must be in (0, 1], got {self.alt_top_p}")
        if self.num_levels < 2:
            raise ValueError(f"algorithm.rlvcr.num_levels must be >= 2, got {self.num_levels}")
        if self.alt_max_think_tokens < 1:
            raise ValueError(f"algorithm.rlvcr.alt_max_think_tokens must be >= 1, got {self.alt_max_think_tokens}")
        return self


def check_rlvcr_settings(section: Any) -> RLVCRSettings:
    """Validate an ``algorithm.rlvcr`` section (used by ``verl.trainer.config_utils.validate_config``).
    Raises ValueError naming the key (see :meth:`RLVCRSettings.check`, ``prompts.check_action_tags``)."""
    return RLVCRSettings.from_config(section)


def rlvcr_active(algo_config: Any) -> bool:
    """True when the rollout must run the RLVCR phase: ``adv_estimator == "rlvcr"`` and ``rlvcr.enable``."""
    return cfg_get(algo_config, "adv_estimator") == "rlvcr" and bool(
        cfg_get(cfg_get(algo_config, "rlvcr"), "enable", True)
    )


# -------------------- per-step pieces --------------------------------------------------------------------------------
def parsed_levels(steps: Sequence[ParsedStep]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(chosen_level long [B], valid bool [B])`` of parsed steps; unparseable steps get level 0 and valid False."""
    level = torch.tensor([s.level if s.parseable else 0 for s in steps], dtype=torch.long)
    return level, level > 0


def compute_action_uncertainty(token_entropy: torch.Tensor, action_mask: torch.Tensor) -> torch.Tensor:
    """U = mean over the scored action tokens of ``H_t = -sum_v p log p`` (docs §Rollout phase, step 3).

    Args: ``token_entropy`` float ``[K, T]`` (one row per (step, level) context); ``action_mask`` 0/1 ``[K, T]``:
        the original action tokens (forced ``<level>`` tag tokens and the context must be 0, same section).
    Returns: float ``[K]``; NaN for a row with no action token (such a step is unparseable; NaN makes
        :func:`compute_thinking_advantage` raise if it is used anyway).
    Raises ValueError: shapes differ.
    """
    if token_entropy.shape != action_mask.shape:
        raise ValueError(
            f"token_entropy {tuple(token_entropy.shape)} and action_mask {tuple(action_mask.shape)} "
            "must have the same shape"
        )
    import verl.utils.torch_functional as verl_F

    mean = verl_F.masked_mean(token_entropy, action_mask, axis=-1)
    return torch.where(action_mask.sum(dim=-1) > 0, mean, torch.full_like(mean, float("nan")))


def compute_level_scores(
    action_entropy: torch.Tensor, think_cost: torch.Tensor, thinking_cost_w: float = 0.1, cost_max: float = 256.0
) -> torch.Tensor:
    """``S_L = -U_L - kappa * C_L / cost_max`` (docs §Per-level scores). float ``[B, N]`` x2 -> float ``[B, N]``."""
    return -action_entropy - thinking_cost_w * think_cost / cost_max


def compute_level_diversity(
    chosen_level: torch.Tensor, valid: torch.Tensor, num_levels: int, epsilon: float = 1e-6
) -> torch.Tensor:
    """Diversity bonus ``D = -log(f_l + eps) + mean_rows log(f_{l_row} + eps)`` (docs §Diversity term).

    ``f_k`` = share of level k among the valid rows; the row mean is taken over valid rows and evaluated as
    ``sum_k f_k log(f_k + eps)`` (the same value, exact for a one-level batch, where D is exactly 0).
    Args: ``chosen_level`` int ``[B]`` (1..N on valid rows); ``valid`` bool ``[B]``.
    Returns: float64 ``[B]``: 0 on invalid rows; the mean over valid rows is 0 (up to rounding); all 0 when no
        row is valid.
    """
    valid = valid.bool()
    n_valid = int(valid.sum())
    out = torch.zeros(chosen_level.shape[0], dtype=torch.float64, device=chosen_level.device)
    if n_valid == 0:
        return out
    levels = chosen_level[valid].long()
    freq = torch.bincount(levels - 1, minlength=num_levels).to(torch.float64) / n_valid  # [N]
    log_f = torch.log(freq + epsilon)
    out[valid] = -log_f[levels - 1] + (freq * log_f).sum()
    return out


def _as_1d(values: Any, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    if isinstance(values, np.ndarray) and values.dtype == object:
        values = values.tolist()
    if isinstance(values, (list, tuple)):
        values = [0 if v is None else v for v in values]  # None: no level parsed (0 = unparseable)
    return torch.as_tensor(values, device=device).to(dtype).reshape(-1)


def compute_thinking_advantage(
    action_entropy: Any,
    think_cost: Any,
    chosen_level: Any,
    valid: Any,
    thinking_cost_w: float = 0.1,
    cost_max: float = 256.0,
    mode: str = "mean_norm",
    thinking_diversity_w: float = 0.5,
    epsilon: float = 1e-6,
    evaluated: Any = None,
) -> torch.Tensor:
    """Thinking advantage of each step's chosen level (docs §Per-level scores, §Thinking advantage, §Diversity term).

    ``S = compute_level_scores(U, C)``; ``mean_norm``: ``A = S_l - mean_L S_L``; ``mean_std_norm``:
    ``A = (S_l - mean_L S_L) / (std_L S_L + epsilon)`` (unbiased std over the N levels; equal scores give exactly 0);
    then ``A += thinking_diversity_w * D`` (:func:`compute_level_diversity`).

    Args:
        action_entropy: float ``[B, N]``, U_L per level (column L-1). think_cost: float ``[B, N]``, C_L >= 0.
        chosen_level: int ``[B]``, 1-based. valid: bool ``[B]``: False (unparseable) -> A = 0 and the row is left
            out of the level frequencies.
        evaluated: bool ``[B]`` or None (all): False -> the alternatives were not scored for this row
            (``only_positive_episodes``): its score part is 0 but it keeps its diversity term and counts in the
            frequencies. U, C of rows not valid-and-evaluated are ignored (NaN allowed).
    Returns: ``[B]`` on ``action_entropy``'s device, its dtype when floating, else float32 (computed in float64).
    Raises ValueError: shapes disagree; ``mode`` unknown; ``cost_max`` or ``epsilon`` not > 0; a valid row's level
        outside ``1..N``; a used row with non-finite U/C or negative C.
    """
    if mode not in RLVCR_MODES:
        raise ValueError(f"RLVCR mode must be one of {RLVCR_MODES}, got {mode!r}")
    if not (cost_max > 0.0 and epsilon > 0.0):
        raise ValueError(f"cost_max and epsilon must be > 0, got {cost_max}, {epsilon}")
    u_in = torch.as_tensor(action_entropy)
    device = u_in.device
    out_dtype = u_in.dtype if u_in.dtype.is_floating_point else torch.float32
    u = u_in.to(torch.float64)
    c = torch.as_tensor(think_cost, device=device).to(torch.float64)
    if u.dim() != 2 or c.shape != u.shape:
        raise ValueError(f"action_entropy and think_cost must both be [B, N], got {tuple(u.shape)}, {tuple(c.shape)}")
    batch, num_levels = u.shape
    level = _as_1d(chosen_level, torch.long, device)
    ok = _as_1d(valid, torch.bool, device)
    used = ok.clone() if evaluated is None else ok & _as_1d(evaluated, torch.bool, device)
    if level.shape[0] != batch or ok.shape[0] != batch or used.shape[0] != batch:
        raise ValueError(f"chosen_level, valid and evaluated need {batch} entries (one per row of action_entropy)")
    bad = ok & ((level < 1) | (level > num_levels))
    if bad.any():
        raise ValueError(
            f"valid rows need chosen_level in 1..{num_levels}; row {int(bad.nonzero()[0])} has "
            f"{int(level[bad][0])} (mark it invalid: spec 'Response format', unparseable)"
        )
    u, c = torch.where(used[:, None], u, 0.0), torch.where(used[:, None], c, 0.0)
    if not (torch.isfinite(u).all() and torch.isfinite(c).all()) or (c < 0).any():
        raise ValueError("action_entropy / think_cost must be finite (and costs >= 0) on valid, evaluated rows")
    adv = torch.zeros(batch, dtype=torch.float64, device=device)
    if used.any():
        rows = used.nonzero().squeeze(-1)
        scores = compute_level_scores(u[rows], c[rows], thinking_cost_w, cost_max)  # [R, N]
        group = torch.arange(rows.shape[0], device=device).repeat_interleave(num_levels)
        normed = group_normalize(
            scores.reshape(-1), group, epsilon=epsilon, norm_by_std=mode == "mean_std_norm", singleton_zero=True
        )
        adv[rows] = normed.view(-1, num_levels).gather(1, (level[rows] - 1).unsqueeze(-1)).squeeze(-1)
    if thinking_diversity_w:
        adv = adv + thinking_diversity_w * compute_level_diversity(level, ok, num_levels, epsilon)
    return torch.where(ok, adv, torch.zeros_like(adv)).to(out_dtype)


# -------------------- trajectory term --------------------------------------------------------------------------------
def compute_trajectory_advantage(
    row_returns: torch.Tensor, index: Any, traj_index: Any = None, epsilon: float = 1e-6, norm_by_std: bool = True
) -> torch.Tensor:
    """A_traj of each row (docs §Final advantage; GiGPO's episode term, ``docs/gigpo.md``, section "Episode-level
    advantage A_E").

    ``R(tau)`` = sum of ``row_returns`` over the trajectory's rows; per ``index`` group, each trajectory counted
    once: ``(R - mean R) / (std R + epsilon)`` (unbiased std; ``R - mean R`` when ``norm_by_std`` is False); a
    one-trajectory group gets 0. ``traj_index=None``: every row is its own trajectory (single-turn GRPO).
    Args: ``row_returns`` float ``[B]``; ``index`` ``[B]`` uid labels; ``traj_index`` ``[B]`` labels or None.
    Returns: float64 ``[B]`` on CPU.
    Raises ValueError: wrong lengths, or a trajectory whose rows carry different ``index`` values.
    """
    cpu = torch.device("cpu")
    returns = row_returns.detach().to(cpu, torch.float64).reshape(-1)
    batch = returns.shape[0]
    norm = dict(epsilon=epsilon, norm_by_std=norm_by_std, singleton_zero=True)
    if traj_index is None:
        return group_normalize(returns, index, **norm)
    uid, _ = group_ids(index, batch, cpu)
    traj, n_traj = group_ids(traj_index, batch, cpu)
    traj_return = torch.zeros(n_traj, dtype=torch.float64).index_add_(0, traj, returns)
    traj_uid = torch.zeros(n_traj, dtype=torch.long).scatter_(0, traj, uid)
    mixed = traj_uid[traj] != uid
    if mixed.any():
        raise ValueError(
            f"RLVCR: trajectory {list(traj_index)[int(mixed.nonzero()[0])]!r} has rows in more than one uid group"
        )
    return group_normalize(traj_return, traj_uid, **norm)[traj]


# -------------------- metrics, batch plumbing ------------------------------------------------------------------------
def compute_rlvcr_metrics(
    thinking_adv: torch.Tensor,
    chosen_level: Optional[torch.Tensor] = None,
    valid: Optional[torch.Tensor] = None,
    action_entropy: Optional[torch.Tensor] = None,
    think_cost: Optional[torch.Tensor] = None,
    evaluated: Optional[torch.Tensor] = None,
    num_levels: int = 4,
) -> Dict[str, float]:
    """The ``rlvcr/*`` metrics of docs §Metrics (``rlvcr/timing_s`` is the rollout phase's).

    ``thinking_adv_mean`` / ``thinking_adv_abs_mean``: over all rows. With ``chosen_level`` and ``valid``:
    ``unparseable_frac`` (over all rows) and ``level_frac_k`` (share among valid rows; 0 when none). With
    ``action_entropy`` / ``think_cost`` ``[B, N]``: ``action_entropy_level_k`` / ``think_tokens_level_k``, means
    over valid, evaluated rows (left out when there is none); with ``think_cost``, also
    ``chosen_think_tokens_level_k``: the mean think length of the responses that chose level k (their own think,
    column k-1 of their row; left out when no valid, evaluated row chose k). ``think_tokens_level_k`` mixes these with
    the sampled alternative thinks of the rows that chose another level.
    """
    adv = thinking_adv.detach().to(torch.float64)
    out = {
        "rlvcr/thinking_adv_mean": adv.mean().item() if adv.numel() else 0.0,
        "rlvcr/thinking_adv_abs_mean": adv.abs().mean().item() if adv.numel() else 0.0,
    }
    if chosen_level is None or valid is None:
        return out
    ok = valid.bool()
    out["rlvcr/unparseable_frac"] = 1.0 - ok.double().mean().item() if ok.numel() else 0.0
    counts = torch.bincount(chosen_level[ok].long() - 1, minlength=num_levels).double()
    for k in range(num_levels):
        out[f"rlvcr/level_frac_{k + 1}"] = (counts[k] / max(int(ok.sum()), 1)).item()
    used = ok if evaluated is None else ok & evaluated.bool()
    if used.any():
        for name, matrix in (("action_entropy_level", action_entropy), ("think_tokens_level", think_cost)):
            if matrix is not None:
                means = matrix[used].to(torch.float64).mean(dim=0)
                out.update({f"rlvcr/{name}_{k + 1}": means[k].item() for k in range(num_levels)})
        if think_cost is not None:
            levels = chosen_level[used].long()
            own = think_cost[used].to(torch.float64).gather(1, (levels - 1).unsqueeze(1)).squeeze(1)
            for k in range(1, num_levels + 1):
                if bool((levels == k).any()):
                    out[f"rlvcr/chosen_think_tokens_level_{k}"] = own[levels == k].mean().item()
    return out


def _level_matrix(values: Any, name: str, rows_used: torch.Tensor, num_levels: int) -> torch.Tensor:
    """float64 ``[B, N]`` from a 2-D array/tensor or a per-row sequence (object array / list); only rows in
    ``rows_used`` must hold N numbers (others: 0). Raises ValueError naming ``name``."""
    batch = rows_used.shape[0]
    if isinstance(values, torch.Tensor) or (isinstance(values, np.ndarray) and values.dtype != object):
        matrix = torch.as_tensor(values).to("cpu", torch.float64)
        if matrix.shape != (batch, num_levels):
            raise ValueError(f"RLVCR `{name}` must be [{batch}, {num_levels}], got {tuple(matrix.shape)}")
        return matrix
    items = list(values)
    if len(items) != batch:
        raise ValueError(f"RLVCR `{name}` has {len(items)} entries for a batch of {batch} rows")
    matrix = torch.zeros(batch, num_levels, dtype=torch.float64)
    for i in rows_used.nonzero().squeeze(-1).tolist():
        row = np.asarray(items[i], dtype=np.float64).reshape(-1)
        if row.shape[0] != num_levels:
            raise ValueError(f"RLVCR `{name}` row {i} has {row.shape[0]} values, expected num_levels={num_levels}")
        matrix[i] = torch.from_numpy(row)
    return matrix


def compute_rlvcr_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    traj_index: Any = None,
    chosen_level: Any = None,
    action_entropy: Any = None,
    think_cost: Any = None,
    evaluated: Any = None,
    thinking_level_entropies: Optional[torch.Tensor] = None,
    norm_adv_by_std_in_grpo: Optional[bool] = None,
    step_advantage_w: Optional[float] = None,
    thinking_diversity_w: Optional[float] = None,
    mode: Optional[str] = None,
    thinking_cost_w: Optional[float] = None,
    cost_max: Optional[float] = None,
    epsilon: Optional[float] = None,
    config: Any = None,
    metrics: Optional[Dict[str, float]] = None,
    row_outputs: Optional[Dict[str, torch.Tensor]] = None,
    **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """RLVCR advantage ``A(step) = A_traj + step_advantage_w * A_think``, broadcast over the step's response tokens
    (docs §Final advantage).

    Args:
        token_level_rewards: float ``[B, L]``; a row's return is its sum over ``response_mask`` (0/1 ``[B, L]``).
        index: ``[B]`` uid labels. traj_index: ``[B]`` ``traj_uid`` labels (multi-turn rows = steps) or None.
        chosen_level, action_entropy, think_cost, evaluated: see :func:`compute_thinking_advantage`; valid =
            ``chosen_level`` in ``1..num_levels`` (0 marks an unparseable step). ``action_entropy`` / ``think_cost``:
            ``[B, N]`` arrays/tensors or per-row sequences (rows not used may hold anything).
        thinking_level_entropies: float ``[B, L]`` precomputed A_think (read when ``chosen_level`` is None: its mean
            over the row's response mask, 0 for an empty mask).
        norm_adv_by_std_in_grpo: divide A_traj by the group std (None -> config -> True).
        step_advantage_w ... epsilon: None -> ``config.rlvcr.<key>`` -> :class:`RLVCRSettings` defaults.
        config: the ``algorithm`` section. metrics: optional dict updated with the ``rlvcr/*`` metrics.
        row_outputs: optional dict receiving float64 ``[B]`` ``thinking_adv`` (A_think) and ``think_cost`` (C of the
            chosen level, 0 where none) for :func:`thinking_batch_fields` (docs §Batch fields).
        kwargs: the registry's other inputs (``gamma``, ``values``, ...), ignored.
    ``rlvcr.enable`` false: A_think = 0 (trajectory term only) and no RLVCR field is needed.
    Returns: ``(advantages, returns)``, the same ``[B, L]`` tensor, 0 off the mask, ``token_level_rewards``' dtype
        and device (computed in float64).
    Raises ValueError: ``index`` missing; RLVCR enabled but neither ``chosen_level`` (with ``action_entropy`` and
        ``think_cost``) nor ``thinking_level_entropies`` given; bad settings or inputs (see the functions above).
    """
    settings = RLVCRSettings.from_config(
        cfg_get(config, "rlvcr"),
        step_advantage_w=step_advantage_w,
        thinking_diversity_w=thinking_diversity_w,
        mode=mode,
        thinking_cost_w=thinking_cost_w,
        cost_max=cost_max,
        epsilon=epsilon,
    )
    if index is None:
        raise ValueError("RLVCR needs `index` (non_tensor_batch['uid'])")
    mask = response_mask.to(torch.float64)
    batch = mask.shape[0]
    with torch.no_grad():
        row_returns = (token_level_rewards.detach().to(torch.float64) * mask).sum(dim=-1)
        traj_adv = compute_trajectory_advantage(
            row_returns,
            index,
            traj_index,
            settings.epsilon,
            bool(resolve(norm_adv_by_std_in_grpo, config, "norm_adv_by_std_in_grpo", True)),
        )
        found: Dict[str, float] = {}
        chosen_cost = torch.zeros(batch, dtype=torch.float64)
        if not settings.enable:
            think_adv = torch.zeros(batch, dtype=torch.float64)
        elif chosen_level is not None:
            if action_entropy is None or think_cost is None:
                raise ValueError(
                    "RLVCR: thinking_level is given but thinking_level_action_entropy / "
                    "thinking_level_think_cost are missing (see rlvcr.core_rlvcr.RLVCR_BATCH_FIELDS)"
                )
            n = settings.num_levels
            level = _as_1d(chosen_level, torch.long, torch.device("cpu"))
            ok = (level >= 1) & (level <= n)
            done = ok if evaluated is None else ok & _as_1d(evaluated, torch.bool, torch.device("cpu"))
            u = _level_matrix(action_entropy, "action_entropy", done, n)
            c = _level_matrix(think_cost, "think_cost", done, n)
            think_adv = compute_thinking_advantage(
                u,
                c,
                level,
                ok,
                settings.thinking_cost_w,
                settings.cost_max,
                settings.mode,
                settings.thinking_diversity_w,
                settings.epsilon,
                evaluated=done,
            )
            found = compute_rlvcr_metrics(think_adv, level, ok, u, c, done, n)
            chosen_cost = torch.where(
                done,
                c.gather(1, (level.clamp(1, n) - 1).unsqueeze(1)).squeeze(1).double(),
                torch.zeros(batch, dtype=torch.float64),
            )
        elif thinking_level_entropies is not None:
            think_adv = (thinking_level_entropies.detach().to("cpu", torch.float64) * mask.cpu()).sum(
                -1
            ) / mask.cpu().sum(-1).clamp(min=1.0)
            found = compute_rlvcr_metrics(think_adv)
        else:
            raise ValueError(
                "RLVCR (algorithm.rlvcr.enable=true) needs the rollout's thinking fields: "
                "non_tensor_batch thinking_level + thinking_level_action_entropy + "
                "thinking_level_think_cost, or batch thinking_level_entropies (rlvcr_batch_inputs)"
            )
        scores = traj_adv + settings.step_advantage_w * think_adv.to(torch.float64)
        out_dtype = token_level_rewards.dtype
        advantages = scores.to(mask.device).unsqueeze(-1) * mask
        advantages = advantages.to(token_level_rewards.device, out_dtype)
    if metrics is not None:
        metrics.update(found)
    if row_outputs is not None:
        row_outputs.update(thinking_adv=think_adv.to(torch.float64), think_cost=chosen_cost)
    return advantages, advantages


def rlvcr_batch_inputs(non_tensor_batch: Dict[str, Any], batch: Any = None) -> Dict[str, Any]:
    """The estimator's keyword arguments found in a batch (:data:`RLVCR_BATCH_FIELDS` of ``non_tensor_batch``, and
    ``thinking_level_entropies`` of the tensor ``batch`` when present); absent fields are left out."""
    inputs = {arg: non_tensor_batch[field] for field, arg in RLVCR_BATCH_FIELDS.items() if field in non_tensor_batch}
    if batch is not None and "thinking_level_entropies" in batch.keys():
        inputs["thinking_level_entropies"] = batch["thinking_level_entropies"]
    return inputs


def thinking_batch_fields(
    thinking_adv: torch.Tensor, chosen_cost: torch.Tensor, response_mask: torch.Tensor, rows: Any = None
) -> Dict[str, torch.Tensor]:
    """Docs §Batch fields: ``thinking_level_entropies`` (A_think) and ``thinking_token_costs`` (C_l), both float
    ``[B, L_resp]``, each row's value broadcast over its response mask (0 elsewhere). Inputs ``[b]``, ``[b]``,
    0/1 ``[B, L_resp]``; ``rows`` (bool ``[B]``, e.g. ``reward_valid``) places the ``b`` values on those rows (the
    others get 0); None: ``b == B``. Output dtype float32."""
    if rows is not None:
        keep = torch.as_tensor(np.asarray(rows, dtype=bool).reshape(-1))
        full_adv, full_cost = torch.zeros(keep.shape[0]), torch.zeros(keep.shape[0])
        full_adv[keep], full_cost[keep] = thinking_adv.float().cpu(), chosen_cost.float().cpu()
        thinking_adv, chosen_cost = full_adv, full_cost
    mask = response_mask.to(torch.float32)
    return {
        "thinking_level_entropies": thinking_adv.to(mask.device, torch.float32).unsqueeze(-1) * mask,
        "thinking_token_costs": chosen_cost.to(mask.device, torch.float32).unsqueeze(-1) * mask,
    }


def _batch_inputs(data: Any, metrics: Optional[Dict[str, float]]) -> Dict[str, Any]:
    """The registry's ``batch_inputs``: the RLVCR phase's per-level fields, the metrics dict and a ``row_outputs``
    dict the estimator fills (for :func:`_batch_outputs`)."""
    return {**rlvcr_batch_inputs(data.non_tensor_batch, data.batch), "metrics": metrics, "row_outputs": {}}


def _batch_outputs(data: Any, inputs: Dict[str, Any], valid: Any) -> None:
    """The registry's ``batch_outputs``: docs §Batch fields ``thinking_level_entropies`` / ``thinking_token_costs``."""
    out = inputs.get("row_outputs")
    if out:
        data.batch.update(
            thinking_batch_fields(out["thinking_adv"], out["think_cost"], data.batch["response_mask"], rows=valid)
        )


def _check_config(algorithm_config: Any) -> None:
    """The registry's ``check_config``: ``algorithm.rlvcr`` (:func:`check_rlvcr_settings`)."""
    check_rlvcr_settings(cfg_get(algorithm_config, "rlvcr"))


register_adv_est(
    AdvantageEstimator.RLVCR,
    EstimatorPlugin(
        batch_inputs=_batch_inputs,
        batch_outputs=_batch_outputs,
        check_config=_check_config,
        grouped=True,
        step_level=True,
    ),
)(compute_rlvcr_outcome_advantage)
