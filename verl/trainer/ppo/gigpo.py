"""GiGPO: Group-in-Group Policy Optimization advantage (``algorithm.adv_estimator=gigpo``).

Documentation: ``docs/gigpo.md`` (the behaviour built and tested here, with a worked example). Source: Feng et
al. 2025, "Group-in-Group Policy Optimization for LLM Agent Training" (arXiv:2505.10978), §"Episode relative
advantages" (trajectory returns normalised within the task group), §"Step relative advantages" (anchor-state groups
over discounted step returns) and the combined advantage ``A = A_E + omega * A_S``.

Data unit: one row = one agent step (one LLM response) of one trajectory. Estimator argument <- trainer batch field:

- ``index`` <- ``non_tensor_batch["uid"]``: task group id, shared by the ``n`` rollouts of one task (same env seed).
- ``traj_index`` <- ``non_tensor_batch["traj_uid"]``: trajectory id, unique across the batch.
- ``step_index`` <- ``non_tensor_batch["step_index"]``: 0-based position of the step in its trajectory.
- ``anchor_obs`` <- ``non_tensor_batch["anchor_obs"]``: raw env observation before the step (canonicalised).
- ``is_action_valid`` <- ``non_tensor_batch["is_action_valid"]`` (optional bool): False -> invalid-action penalty.
- ``step_rewards`` <- ``non_tensor_batch["step_reward"]`` (optional float r_t); without it, r_t is the row's sum of
  ``batch["token_level_rewards"]`` over its response mask.
- ``response_mask`` <- ``batch["response_mask"]`` (0/1 ``[B, L]``).

:func:`gigpo_batch_inputs` turns a ``non_tensor_batch`` into these keyword arguments (the multi-turn rollout
produces the fields). The registry calls :func:`compute_gigpo_outcome_advantage` with the trainer's usual keyword
arguments (``token_level_rewards``, ``config``, ...) plus these; missing fields raise a ``ValueError`` naming them.
``ray_trainer.compute_advantage`` adds ``gigpo_batch_inputs(data.non_tensor_batch)`` and, for the ``gigpo/*``
metrics, a ``metrics`` dict.

Group statistics reuse :func:`verl.trainer.ppo.group_stats.group_normalize` (unbiased std, order-invariant, a
singleton or constant group gives exactly 0) and its masked reverse discount. The estimator registers itself under
``gigpo`` (:mod:`verl.trainer.ppo.registry`); ``core_algos`` imports this module so that every estimator is there.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

import numpy as np
import torch

from verl.trainer.ppo.group_stats import group_ids, group_normalize, masked_reverse_discount
from verl.trainer.ppo.registry import AdvantageEstimator, EstimatorPlugin, cfg_get, register_adv_est, resolve

__all__ = [
    "GIGPO_BATCH_FIELDS",
    "GIGPO_MODES",
    "GiGPOComponents",
    "anchor_similarity_ratio",
    "canonicalize_anchor",
    "check_gigpo_settings",
    "compute_gigpo_components",
    "compute_gigpo_outcome_advantage",
    "gigpo_batch_inputs",
]

GIGPO_MODES = ("mean_std_norm", "mean_norm")

# non_tensor_batch field -> estimator keyword argument (module docstring table)
GIGPO_BATCH_FIELDS = {
    "traj_uid": "traj_index",
    "step_index": "step_index",
    "anchor_obs": "anchor_obs",
    "is_action_valid": "is_action_valid",
    "step_reward": "step_rewards",
}

_NAN = float("nan")  # one NaN object: equal NaN anchors hash and compare equal through identity


# -------------------- anchors ----------------------------------------------------------------------------------------
def canonicalize_anchor(obs: Any) -> Any:
    """A hashable, order-independent key for an anchor observation (``docs/gigpo.md``, section "Anchor
    canonicalisation and similarity").

    Rules: ``str``/``int``/``float``/``bool`` as is (Python equality, so ``1 == 1.0 == True``; every NaN maps to one
    NaN object so equal NaN observations group together); numpy scalars -> Python scalars; ``np.ndarray`` ->
    ``(shape, flat tuple of canonical items)`` (dtype ignored: ``[1, 2]`` int and float are one anchor);
    ``list``/``tuple`` -> tuple of canonical items; ``dict`` -> tuple of ``(key, canonical value)`` sorted by key
    (keys of mixed, unorderable types are sorted by ``(type name, repr)``).

    Raises TypeError: any other type (``None``, ``set``, ``bytes``, objects ...), naming the type.
    """
    if isinstance(obs, np.generic):
        obs = obs.item()
    if isinstance(obs, float) and math.isnan(obs):
        return _NAN
    if isinstance(obs, (str, int, float, bool)):
        return obs
    if isinstance(obs, np.ndarray):
        return tuple(obs.shape), tuple(canonicalize_anchor(x) for x in obs.ravel().tolist())
    if isinstance(obs, (list, tuple)):
        return tuple(canonicalize_anchor(x) for x in obs)
    if isinstance(obs, dict):
        items = [(canonicalize_anchor(k), canonicalize_anchor(v)) for k, v in obs.items()]
        try:
            return tuple(sorted(items, key=lambda kv: kv[0]))
        except TypeError:
            return tuple(sorted(items, key=lambda kv: (type(kv[0]).__name__, repr(kv[0]))))
    raise TypeError(
        f"GiGPO anchor_obs of type {type(obs).__name__} cannot be canonicalised: use str, int, float, bool, numpy "
        "scalars/arrays, lists/tuples or dicts of these"
    )


def anchor_similarity_ratio(a: str, b: str) -> float:
    """Similarity of two string anchors: ``difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()``
    = ``2 M / (len(a) + len(b))``, ``M`` the characters in the matching blocks (1.0 for two empty strings)."""
    return difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()


def _merge_similar_strings(keys: List[Tuple[int, Any]], threshold: float) -> List[Tuple[int, Any]]:
    """Replace string anchors by a cluster representative (``algorithm.gigpo.anchor_similarity`` < 1;
    ``docs/gigpo.md``, section "Anchor canonicalisation and similarity").

    Per task group, the distinct string anchors are visited in sorted order; each joins the first cluster whose
    representative (its first, i.e. smallest, member) has :func:`anchor_similarity_ratio` >= ``threshold``, else it
    starts a new cluster. Sorting makes the result independent of row order. Non-string anchors stay exact.
    """
    reps: Dict[int, List[str]] = {}
    mapping: Dict[Tuple[int, str], str] = {}
    for group, anchor in sorted({(g, a) for g, a in keys if isinstance(a, str)}):
        cluster = reps.setdefault(group, [])
        rep = next((r for r in cluster if anchor_similarity_ratio(r, anchor) >= threshold), None)
        if rep is None:
            cluster.append(anchor)
            rep = anchor
        mapping[(group, anchor)] = rep
    return [(g, mapping[(g, a)]) if isinstance(a, str) else (g, a) for g, a in keys]


# -------------------- estimator --------------------------------------------------------------------------------------
def check_gigpo_settings(mode: str, epsilon: float, invalid_action_penalty: float, anchor_similarity: float) -> None:
    """Validate the ``algorithm.gigpo`` settings (also used by ``verl.trainer.config_utils.validate_config``).

    Raises ValueError naming the key: ``mode`` not in :data:`GIGPO_MODES`; ``epsilon <= 0`` (a constant group would
    give 0/0); ``invalid_action_penalty < 0``; ``anchor_similarity`` outside ``(0, 1]``.
    """
    if mode not in GIGPO_MODES:
        raise ValueError(f"algorithm.gigpo.mode must be one of {GIGPO_MODES}, got {mode!r}")
    if not epsilon > 0.0:
        raise ValueError(f"algorithm.gigpo.epsilon must be > 0, got {epsilon}")
    if not invalid_action_penalty >= 0.0:
        raise ValueError(f"algorithm.gigpo.invalid_action_penalty must be >= 0, got {invalid_action_penalty}")
    if not 0.0 < anchor_similarity <= 1.0:
        raise ValueError(f"algorithm.gigpo.anchor_similarity must be in (0, 1], got {anchor_similarity}")


# -------------------- estimator --------------------------------------------------------------------------------------
class GiGPOComponents(NamedTuple):
    """Per-row parts of the GiGPO advantage, all float64 ``[B]`` on CPU unless noted."""

    episode_advantage: torch.Tensor  # A_E of the row's trajectory
    step_advantage: torch.Tensor  # A_S of the row's anchor group
    step_return: torch.Tensor  # G_t (discounted, penalised step rewards)
    episode_return: torch.Tensor  # R(tau) of the row's trajectory (undiscounted sum)
    step_group: torch.Tensor  # long [B]: id of the row's (uid, anchor) step group
    metrics: Dict[str, float]


def _as_list(values: Any, name: str, batch_size: int) -> list:
    if values is None:
        raise ValueError(f"GiGPO needs `{name}` (one entry per row)")
    items = values.tolist() if isinstance(values, (torch.Tensor, np.ndarray)) else list(values)
    if len(items) != batch_size:
        raise ValueError(f"GiGPO `{name}` has {len(items)} entries for a batch of {batch_size} rows")
    return items


def compute_gigpo_components(
    step_rewards: Any,
    anchor_obs: Any,
    index: Any,
    traj_index: Any,
    step_index: Any,
    gamma: float = 1.0,
    mode: str = "mean_std_norm",
    epsilon: float = 1e-6,
    is_action_valid: Any = None,
    invalid_action_penalty: float = 0.0,
    anchor_similarity: float = 1.0,
) -> GiGPOComponents:
    """Episode-level and step-level GiGPO advantages of every row (``docs/gigpo.md``, sections "Invalid-action
    penalty", "Episode-level advantage A_E", "Step-level advantage A_S").

    1. ``r_t <- r_t - invalid_action_penalty`` where ``is_action_valid`` is False.
    2. ``R(tau) = sum_t r_t``; per ``index`` group, each trajectory once: ``A_E = (R - mean R) / (std R + epsilon)``
       (``mean_std_norm``, unbiased std) or ``R - mean R`` (``mean_norm``); a one-trajectory group gets 0.
    3. ``G_t = r_t + gamma * G_{t+1}`` over the trajectory's rows ordered by ``step_index`` (0 after its last row;
       a gap in ``step_index`` is not an error: the recursion runs over the rows present).
    4. Step groups: rows of one ``index`` with equal canonical anchors (:func:`canonicalize_anchor`), across
       trajectories and time; ``A_S`` = ``G_t`` normalised in its group as in 2; a singleton or constant group gets 0.

    Args: ``step_rewards`` float ``[B]`` (tensor/array/list); ``anchor_obs``, ``index``, ``traj_index`` ``[B]``
        (numpy object arrays or lists); ``step_index`` int ``[B]``; ``is_action_valid`` bool ``[B]`` or None;
        ``anchor_similarity`` in ``(0, 1]`` (1 = exact; below 1 string anchors merge, :func:`_merge_similar_strings`).
    Returns: :class:`GiGPOComponents` (float64 on CPU) with the metrics ``gigpo/num_step_groups``,
        ``gigpo/mean_step_group_size``, ``gigpo/frac_rows_in_singleton_step_groups``, ``gigpo/episode_adv_abs_mean``,
        ``gigpo/step_adv_abs_mean``, ``gigpo/singleton_episode_groups`` (row means; ``num_*``/``singleton_*`` counts).
    Raises ValueError: a setting rejected by :func:`check_gigpo_settings`; an empty batch; an input of the wrong
        length; a trajectory with two rows of one ``step_index``; a trajectory whose rows carry different ``index``
        values. TypeError: an anchor that cannot be canonicalised, or unhashable ids.
    """
    check_gigpo_settings(mode, epsilon, invalid_action_penalty, anchor_similarity)
    rewards = torch.as_tensor(step_rewards).detach().to("cpu", torch.float64).reshape(-1)
    batch = rewards.shape[0]
    if batch == 0:
        raise ValueError("GiGPO got an empty batch (no step rows)")
    anchors = [canonicalize_anchor(a) for a in _as_list(anchor_obs, "anchor_obs", batch)]
    steps = np.asarray(_as_list(step_index, "step_index", batch), dtype=np.int64)
    if is_action_valid is not None:
        valid = torch.as_tensor(np.asarray(_as_list(is_action_valid, "is_action_valid", batch), dtype=bool))
        rewards = rewards - invalid_action_penalty * (~valid).to(torch.float64)
    cpu = torch.device("cpu")
    uid, _ = group_ids(_as_list(index, "index", batch), batch, cpu)
    traj, n_traj = group_ids(_as_list(traj_index, "traj_index", batch), batch, cpu)
    traj_np, uid_np = traj.numpy(), uid.numpy()

    # trajectories -> rows of a [T, S] matrix in step order (a row's column = its rank inside its trajectory)
    order = np.lexsort((steps, traj_np))
    t_sorted, s_sorted = traj_np[order], steps[order]
    repeated = (t_sorted[1:] == t_sorted[:-1]) & (s_sorted[1:] == s_sorted[:-1])
    if repeated.any():
        i = order[1:][repeated][0]
        raise ValueError(f"GiGPO: trajectory {traj_index[i]!r} has two rows with step_index {steps[i]}")
    traj_uid = np.empty(n_traj, dtype=np.int64)
    traj_uid[traj_np] = uid_np
    if (traj_uid[traj_np] != uid_np).any():
        i = int(np.flatnonzero(traj_uid[traj_np] != uid_np)[0])
        raise ValueError(f"GiGPO: trajectory {traj_index[i]!r} has rows in more than one uid group")
    first = np.searchsorted(t_sorted, np.arange(n_traj))
    column = np.empty(batch, dtype=np.int64)
    column[order] = np.arange(batch) - first[t_sorted]
    width = int(column.max()) + 1
    matrix = torch.zeros(n_traj, width, dtype=torch.float64)
    filled = torch.zeros(n_traj, width, dtype=torch.float64)
    cell = (traj, torch.from_numpy(column))
    matrix[cell] = rewards
    filled[cell] = 1.0
    step_return = masked_reverse_discount(matrix, filled, float(gamma))[cell]

    norm = dict(epsilon=epsilon, norm_by_std=mode == "mean_std_norm", singleton_zero=True)
    episode_return = matrix.sum(dim=1)  # [T]
    episode_adv = group_normalize(episode_return, traj_uid, **norm)

    keys = list(zip(uid_np.tolist(), anchors))
    if anchor_similarity < 1.0:
        keys = _merge_similar_strings(keys, anchor_similarity)
    step_group, n_groups = group_ids(keys, batch, cpu)
    step_adv = group_normalize(step_return, step_group, **norm)

    row_episode_adv = episode_adv[traj]
    group_size = torch.bincount(step_group, minlength=n_groups)
    metrics = {
        "gigpo/num_step_groups": float(n_groups),
        "gigpo/mean_step_group_size": batch / n_groups,
        "gigpo/frac_rows_in_singleton_step_groups": (group_size[step_group] == 1).double().mean().item(),
        "gigpo/episode_adv_abs_mean": row_episode_adv.abs().mean().item(),
        "gigpo/step_adv_abs_mean": step_adv.abs().mean().item(),
        "gigpo/singleton_episode_groups": float((np.bincount(traj_uid) == 1).sum()),
    }
    return GiGPOComponents(row_episode_adv, step_adv, step_return, episode_return[traj], step_group, metrics)


def compute_gigpo_outcome_advantage(
    step_rewards: Any = None,
    response_mask: Optional[torch.Tensor] = None,
    anchor_obs: Any = None,
    index: Any = None,
    traj_index: Any = None,
    step_index: Any = None,
    gamma: Optional[float] = None,
    step_advantage_w: Optional[float] = None,
    mode: Optional[str] = None,
    epsilon: Optional[float] = None,
    is_action_valid: Any = None,
    invalid_action_penalty: Optional[float] = None,
    anchor_similarity: Optional[float] = None,
    token_level_rewards: Optional[torch.Tensor] = None,
    config: Any = None,
    metrics: Optional[Dict[str, float]] = None,
    **kwargs,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """GiGPO advantage ``A(row) = A_E + omega * A_S`` broadcast over the row's response tokens and masked
    (``docs/gigpo.md``, section "Combination and modes"; Feng et al. 2025, combined advantage); the parts are
    :func:`compute_gigpo_components`'s.

    Args:
        step_rewards: float ``[B]`` r_t of each step; None -> ``(token_level_rewards * response_mask).sum(-1)``.
        response_mask: 0/1 ``[B, L]``.
        anchor_obs, index, traj_index: ``[B]`` numpy object arrays (or lists): anchor, ``uid``, ``traj_uid``.
        step_index: int ``[B]`` (array or tensor). Rows may come in any order.
        gamma, step_advantage_w (omega), mode, epsilon, invalid_action_penalty, anchor_similarity: None -> the
            ``config`` (the ``algorithm`` section: ``gamma``, ``gigpo.<key>``) -> the function defaults
            1.0, 1.0, ``mean_std_norm``, 1e-6, 0.0, 1.0 (the trainer's yaml sets the penalty to 0.1).
        is_action_valid: bool ``[B]`` or None (all valid).
        metrics: optional dict updated in place with the ``gigpo/*`` metrics.
        kwargs: the registry's other inputs (``values``, ``lam``, ...), ignored.
    Returns: ``(advantages, returns)``, the same tensor ``[B, L]`` (as verl's outcome estimators), 0 off the mask,
        on ``response_mask``'s device, with the dtype of ``token_level_rewards`` when given, else of ``step_rewards``
        (float32 when that is not floating); computed in float64.
    Raises ValueError: a required input is missing (the message names the batch fields), or see
        :func:`compute_gigpo_components`. TypeError: an anchor that cannot be canonicalised.
    """
    missing = [
        name
        for name, value in (
            ("response_mask", response_mask),
            ("anchor_obs", anchor_obs),
            ("index (uid)", index),
            ("traj_index (traj_uid)", traj_index),
            ("step_index", step_index),
        )
        if value is None
    ]
    if step_rewards is None and token_level_rewards is None:
        missing.append("step_rewards or token_level_rewards")
    if missing:
        raise ValueError(
            f"GiGPO needs {', '.join(missing)}: one row per agent step with non_tensor_batch fields "
            "uid, traj_uid, step_index, anchor_obs (see verl.trainer.ppo.gigpo.gigpo_batch_inputs)"
        )
    gigpo_cfg = cfg_get(config, "gigpo")
    if step_rewards is None:
        step_rewards = (token_level_rewards * response_mask.to(token_level_rewards.dtype)).sum(dim=-1)
    out_dtype = torch.as_tensor(step_rewards).dtype if token_level_rewards is None else token_level_rewards.dtype
    out_dtype = out_dtype if out_dtype.is_floating_point else torch.float32
    omega = float(resolve(step_advantage_w, gigpo_cfg, "step_advantage_w", 1.0))
    with torch.no_grad():
        parts = compute_gigpo_components(
            step_rewards,
            anchor_obs,
            index,
            traj_index,
            step_index,
            gamma=float(resolve(gamma, config, "gamma", 1.0)),
            mode=str(resolve(mode, gigpo_cfg, "mode", "mean_std_norm")),
            epsilon=float(resolve(epsilon, gigpo_cfg, "epsilon", 1e-6)),
            is_action_valid=is_action_valid,
            invalid_action_penalty=float(resolve(invalid_action_penalty, gigpo_cfg, "invalid_action_penalty", 0.0)),
            anchor_similarity=float(resolve(anchor_similarity, gigpo_cfg, "anchor_similarity", 1.0)),
        )
        scores = (parts.episode_advantage + omega * parts.step_advantage).to(response_mask.device, out_dtype)
        advantages = scores.unsqueeze(-1) * response_mask.to(out_dtype)
    if metrics is not None:
        metrics.update(parts.metrics)
    return advantages, advantages


def gigpo_batch_inputs(non_tensor_batch: Dict[str, Any]) -> Dict[str, Any]:
    """The GiGPO keyword arguments found in a ``non_tensor_batch`` (:data:`GIGPO_BATCH_FIELDS`; absent fields are
    left out, so the estimator's error names them). ``uid`` -> ``index`` is passed by the trainer already."""
    return {arg: non_tensor_batch[field] for field, arg in GIGPO_BATCH_FIELDS.items() if field in non_tensor_batch}


def _batch_inputs(data: Any, metrics: Optional[Dict[str, float]]) -> Dict[str, Any]:
    """The registry's ``batch_inputs``: the per-step fields of the multi-turn rows, and the metrics dict."""
    inputs = gigpo_batch_inputs(data.non_tensor_batch)
    if metrics is not None:  # gigpo/* step-group statistics
        inputs["metrics"] = metrics
    return inputs


def _check_config(algorithm_config: Any) -> None:
    """The registry's ``check_config``: ``algorithm.gigpo`` (:func:`check_gigpo_settings`)."""
    gigpo = cfg_get(algorithm_config, "gigpo")
    check_gigpo_settings(
        str(cfg_get(gigpo, "mode", "mean_std_norm")),
        float(cfg_get(gigpo, "epsilon", 1e-6)),
        float(cfg_get(gigpo, "invalid_action_penalty", 0.0)),
        float(cfg_get(gigpo, "anchor_similarity", 1.0)),
    )


register_adv_est(
    AdvantageEstimator.GIGPO,
    EstimatorPlugin(batch_inputs=_batch_inputs, check_config=_check_config, grouped=True, step_level=True),
)(compute_gigpo_outcome_advantage)
