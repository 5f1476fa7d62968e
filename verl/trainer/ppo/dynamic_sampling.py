"""DAPO's dynamic sampling (``algorithm.filter_groups.*``, verl's keys): train only on prompt groups whose rewards
differ.

Source: Yu et al. 2025, "DAPO: An Open-Source LLM Reinforcement Learning System at Scale" (arXiv 2503.14476), §3.2
"Dynamic Sampling": a group whose ``n`` responses all get the same reward has zero group-relative advantage, so it
adds no policy gradient and shrinks the effective batch; such groups are dropped and more prompts are generated until
the batch holds ``data.train_batch_size`` groups with non-zero variance.

Per step (:func:`collect_filtered`): the step's first generation batch is scored; while fewer than
``train_batch_size`` kept groups exist, the next batch of the epoch's data loader is generated and scored (it counts
as consumed, so a resume skips it), up to ``max_num_gen_batches`` generation batches (0: until the epoch's data run
out). The batch trained on is the first ``train_batch_size`` kept groups in generation order. When the bound or the
epoch ends first, the batch is filled with the most recent zero-variance groups (they add only the KL and entropy terms,
as without filtering) and a warning says how many. Metrics: ``filter_groups/num_gen_batches``,
``filter_groups/kept_group_frac`` (kept groups / generated groups) and ``filter_groups/filled_groups``.

A group's value per response is ``metric``: ``seq_reward`` or ``score`` (the sum of ``token_level_scores``, the reward
before any KL penalty; the default), ``format`` or ``correctness`` (the RLLA reward's components). Rows whose reward
is invalid (``reward_valid`` false) do not count towards a group's variance.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Optional

import numpy as np

from verl.protocol import DataProto
from verl.utils.prompt_batch import concat_prompt_batches

logger = logging.getLogger(__name__)

METRIC_TENSORS = {
    "seq_reward": "token_level_scores",
    "score": "token_level_scores",
    "format": "token_level_scores_format",
    "correctness": "token_level_scores_correctness",
}


def sequence_values(batch: DataProto, metric: Optional[str]) -> np.ndarray:
    """float64 ``[B]``: each response's ``metric`` (module docstring), the sum of its token-level tensor.

    Raises:
        ValueError: unknown ``metric``. KeyError: the batch lacks the tensor (the reward has not run).
    """
    name = METRIC_TENSORS.get(metric or "seq_reward")
    if name is None:
        raise ValueError(f"algorithm.filter_groups.metric={metric!r}: expected one of {sorted(METRIC_TENSORS)}")
    if name not in batch.batch.keys():
        raise KeyError(f"algorithm.filter_groups.metric={metric!r} needs batch[{name!r}] (a scored batch)")
    return batch.batch[name].sum(-1).double().cpu().numpy()


def varied_groups(uids: np.ndarray, values: np.ndarray, valid: Optional[np.ndarray] = None) -> list:
    """The group ids (in order of first appearance) whose valid rows' ``values`` are not all equal."""
    valid = np.ones(len(uids), dtype=bool) if valid is None else np.asarray(valid, dtype=bool)
    seen: dict = {}
    for uid, value, ok in zip(uids.tolist(), values.tolist(), valid.tolist()):
        group = seen.setdefault(uid, set())
        if ok:
            group.add(value)
    return [uid for uid, group in seen.items() if len(group) > 1]


def _rows_of(batch: DataProto, uids: list) -> DataProto:
    """The rows of ``batch`` whose ``uid`` is in ``uids``, groups in the order of ``uids`` (rows of a group in batch
    order), without the per-row ``global_token_num`` of its generation batch (recomputed for the training batch)."""
    column = batch.non_tensor_batch["uid"]
    order = [i for uid in uids for i in np.flatnonzero(column == uid)]
    rows = batch.select_idxs(np.asarray(order, dtype=np.int64))
    rows.meta_info.pop("global_token_num", None)
    return rows


def collect_filtered(
    ops: Any, batch: DataProto, n: int, metrics: dict, collect: Callable[[DataProto, int, dict], DataProto]
) -> DataProto:
    """The step's training batch under dynamic sampling (module docstring).

    Args:
        ops: the step's :class:`~verl.trainer.ppo.batch_source.StepOps` (``config``, ``tokenizer``, ``balance``,
            ``step``, and ``next_batch``: the epoch's next data-loader batch, counted as consumed, or None).
        batch: the step's first generation batch, already collected and scored by ``collect``.
        n: responses per prompt (``rollout.n``).
        metrics: the step's metrics (updated with ``filter_groups/*``; the reward metrics stay those of the first
            generation batch).
        collect: generates and scores one more generation batch from a batch of prompts
            (``batch_source.SingleTurnSource.collect_once``).

    Returns:
        ``train_batch_size`` groups of ``n`` rows.
    """
    cfg = ops.config.algorithm.filter_groups
    target = int(ops.config.data.train_batch_size)
    limit = int(cfg.max_num_gen_batches)
    tok = ops.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    kept: list[DataProto] = []
    dropped: list[DataProto] = []
    num_kept = generated = varied = gen_batches = 0
    while True:
        gen_batches += 1
        uids = batch.non_tensor_batch["uid"]
        good = varied_groups(uids, sequence_values(batch, cfg.metric), batch.non_tensor_batch.get("reward_valid"))
        good_set = set(good)
        bad = [u for u in dict.fromkeys(uids.tolist()) if u not in good_set]
        generated, varied = generated + len(good) + len(bad), varied + len(good)
        if good:
            kept.append(_rows_of(batch, good[: target - num_kept]))
            num_kept = min(target, num_kept + len(good))
        if bad:
            dropped.append(_rows_of(batch, bad))
        if num_kept >= target or (limit > 0 and gen_batches >= limit):
            break
        batch_dict = ops.next_batch()  # counted as consumed: a resume skips it, as a step's own batch
        if batch_dict is None:
            break
        batch = collect(DataProto.from_single_dict(batch_dict), n, {})
    filled = target - num_kept
    if filled:
        filler = concat_prompt_batches(dropped, pad)
        uids = list(dict.fromkeys(filler.non_tensor_batch["uid"].tolist()))[-filled:]  # the most recent ones
        kept.append(_rows_of(filler, uids))
        why = (
            f"after max_num_gen_batches={limit} generation batches"
            if limit > 0 and gen_batches >= limit
            else f"when the epoch's data ran out ({gen_batches} generation batches)"
        )
        logger.warning(
            "filter_groups: step %d: %d of %d groups with reward variance %s; %d zero-variance groups fill the batch",
            ops.step(),
            num_kept,
            target,
            why,
            filled,
        )
    out = concat_prompt_batches(kept, pad)  # generation batches differ in prompt width
    if ops.config.trainer.balance_batch:
        ops.balance(out, metrics)
    out.meta_info["global_token_num"] = out.batch["attention_mask"].sum(-1).tolist()
    metrics.update(
        {
            "filter_groups/num_gen_batches": float(gen_batches),
            "filter_groups/kept_group_frac": varied / max(generated, 1),
            "filter_groups/filled_groups": float(filled),
        }
    )
    return out
