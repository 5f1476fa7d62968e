"""Batcher v0 of the asynchronous mode: picks groups from the per-env replay buffers by token deficit and packs their
rollouts into an :class:`~verl.async_rl.types.RlExample`.

Design: ``docs/async.md``, sections "Batcher" and "Metrics" (v0: inputs ``total_token_budget``, ``env_fractions``,
``max_seq_len``; round-robin over envs by token deficit; newest groups first, or oldest first with ``order``; block
when an env cannot meet its share; optionally at most ``max_groups`` groups a batch). Rules pinned here:

* Token counts are real (unpadded) rollout tokens, prompt and generated. Env ``e``'s share is
  ``env_fractions[e] * total_token_budget`` and is a cap: a group is taken for ``e`` only if it fits ``e``'s
  remaining share, so the shares alone never exceed the budget.
* Deficit round-robin (:meth:`Batcher.plan`): repeatedly, among the envs with a positive deficit (share - used) and a
  ready group that fits it, the env with the largest deficit (ties: ``env_fractions`` order) takes its first fitting
  group in hand-out order: newest version first (v0 default) or, with ``order='oldest_first'``, oldest first (first
  fit: a group too large for the remaining share is passed over for a smaller one further down the order).
* An env is *short* when its deficit is still positive and it has no ready group left (its buffer ran dry); an env
  whose remaining groups are just too large for its remaining share has met its share (group granularity).
  ``spillover='block'`` (v0 default) raises :class:`BatchNotReady` naming the short envs and consumes nothing.
  ``spillover='fill'`` then hands the unused budget (short envs' shortfall and the unassigned ``1 - sum(fractions)``)
  to the envs that still have groups, by the same deficit rule, within ``total_token_budget``; only an empty batch
  raises.
* ``max_groups`` (None: no limit) sizes a batch in groups, with the token budget as the ceiling: env ``e`` may take
  at most ``quota[e]`` groups, the largest-remainder apportionment of ``max_groups * env_fractions[e]`` (a fraction
  too small for a whole group can get none), and an env that reached its quota has met its share, whatever tokens
  it leaves unused. Short then means dry below the quota (with tokens left in the share). With ``spillover='block'``
  a batch has exactly ``sum(quota)`` groups (``max_groups`` when the fractions sum to 1) unless the token shares run
  out first: a synchronous step's shape (``data.train_batch_size`` prompts) instead of a size set by the token budget
  alone, whose last group often does not fit. ``spillover='fill'`` hands the unused quota and budget to the envs that
  still have groups, up to ``max_groups`` groups in all; like without the limit it makes a batch of whatever is
  ready, so a batch can have fewer groups. A group counts as one whatever it packs (one whose rollouts are all
  overlong takes a slot and trains nothing).
* Packing (:meth:`Batcher.pack`): whole rollouts, first-fit decreasing into rows of ``max_seq_len`` positions; one
  rollout per segment. A rollout longer than ``max_seq_len`` is *rejected*: not packed (its tail, which the reward
  judged, would be cut), counted in ``batches/{env}/rollouts_overlong``, and consumed (not offered again); the
  learner's estimator compares the group's packed rollouts only. Planning counts only packable tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from verl.async_rl.replay_buffer import ReplayBuffer
from verl.async_rl.types import Group, Rollout, RlExample

__all__ = ["Batch", "BatchNotReady", "Batcher", "segment_attention_mask"]


class BatchNotReady(RuntimeError):
    """No batch can be made yet; ``short`` maps each short env to the tokens missing from its share (ceil)."""

    def __init__(self, short: Mapping[str, int], message: str = ""):
        self.short = dict(short)
        detail = ", ".join(f"{env} needs {n} more tokens" for env, n in self.short.items())
        super().__init__(message or f"batch not ready: {detail}")


@dataclass
class Batch:
    """A made batch.

    Fields: ``example`` (the packed :class:`RlExample`); ``groups`` (the handed-out groups, in pick order);
    ``picks`` (``(env, problem_id, policy_version, packable tokens)`` per group, in pick order);
    ``layout`` (``(row, segment_id, rollout_uid)`` per packed rollout); ``overlong`` (uids not packed);
    ``metrics`` (``batches/...`` and the buffers' ``replays/...``).
    """

    example: RlExample
    groups: List[Group]
    picks: List[Tuple[str, str, int, int]]
    layout: List[Tuple[int, int, str]]
    overlong: List[str]
    metrics: Dict[str, float] = field(default_factory=dict)

    def segment_groups(self) -> List[Tuple[int, int, str]]:
        """``(row, segment_id, group uid)`` per packed rollout, in group order (the groups in pick order, each group's
        rollouts in arrival order: a synchronous step's row order, prompt by prompt). The group uid is what the
        learner's estimator compares a rollout within, ``{env}/{problem_id}/v{policy_version}#{pick}`` (unique in the
        batch)."""
        where = {uid: (row, seg) for row, seg, uid in self.layout}
        return [
            (*where[r.rollout_uid], f"{g.environment}/{g.problem_id}/v{g.policy_version}#{i}")
            for i, g in enumerate(self.groups)
            for r in g.rollouts
            if r.rollout_uid in where
        ]

    def segment_valid(self) -> List[bool]:
        """``Rollout.reward_valid`` per packed rollout, aligned with :meth:`segment_groups`."""
        packed = {uid for _row, _seg, uid in self.layout}
        return [r.reward_valid for g in self.groups for r in g.rollouts if r.rollout_uid in packed]

    def segment_truncated(self) -> List[bool]:
        """``Rollout.truncated`` per packed rollout, aligned with :meth:`segment_groups`."""
        packed = {uid for _row, _seg, uid in self.layout}
        return [r.truncated for g in self.groups for r in g.rollouts if r.rollout_uid in packed]


def segment_attention_mask(segment_ids: torch.Tensor, pad_self: bool = True) -> torch.Tensor:
    """Block-diagonal causal mask of packed rows: ``mask[b, i, j]`` is True iff position ``i`` may attend to ``j``,
    i.e. ``j <= i`` and both are in the same non-padding segment.

    Args: ``segment_ids`` int ``[B, L]`` (0 = padding); ``pad_self``: padding positions attend to themselves only
        (True, default: keeps every softmax row non-empty so padded positions give no NaN), or to nothing (False).
    Returns: bool ``[B, L, L]``; never True between two different segment ids.
    Raises ValueError: ``segment_ids`` is not 2-D.
    """
    if segment_ids.dim() != 2:
        raise ValueError(f"segment_ids must be [batch, position], got shape {tuple(segment_ids.shape)}")
    length = segment_ids.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
    same = segment_ids[:, :, None] == segment_ids[:, None, :]
    real = (segment_ids > 0)[:, :, None]
    mask = same & causal & real
    if pad_self:
        eye = torch.eye(length, dtype=torch.bool, device=segment_ids.device)
        mask |= eye & (segment_ids == 0)[:, :, None]
    return mask


class Batcher:
    """Deficit round-robin batcher over per-env replay buffers (module docstring: rules).

    Args:
        total_token_budget: tokens per batch (> 0).
        env_fractions: ``{env: fraction}``, each finite and >= 0, summing to <= 1; the order breaks deficit ties.
        max_seq_len: positions per packed row (> 0); also the longest rollout accepted.
        spillover: ``"block"`` (v0) or ``"fill"``.
        order: ``"newest_first"`` (v0: the freshest groups first; older ones wait and may go stale) or
            ``"oldest_first"`` (first in, first out: the groups nearest to ``max_age`` are used before they are
            evicted, so less generation is thrown away at the price of staler batches).
        pad_rows_to_multiple: pad the row count with empty rows to a multiple of this (e.g. the data-parallel size).
        max_groups: groups per batch (>= 1), split over the envs by ``env_fractions`` (module docstring). None: the
            token budget and the shares alone decide.

    Raises ValueError: empty ``env_fractions``; a negative / non-finite fraction, or a sum above 1 (the message
    names the key at which the running sum passes 1); non-positive budget / max_seq_len / multiple; unknown spillover
    or order; ``max_groups`` < 1.
    """

    def __init__(
        self,
        total_token_budget: int,
        env_fractions: Mapping[str, float],
        max_seq_len: int,
        spillover: str = "block",
        pad_rows_to_multiple: int = 1,
        order: str = "newest_first",
        max_groups: Optional[int] = None,
    ):
        if int(total_token_budget) <= 0 or int(max_seq_len) <= 0 or int(pad_rows_to_multiple) <= 0:
            raise ValueError(
                f"total_token_budget ({total_token_budget}), max_seq_len ({max_seq_len}) and pad_rows_to_multiple "
                f"({pad_rows_to_multiple}) must be > 0"
            )
        if spillover not in ("block", "fill"):
            raise ValueError(f"spillover must be 'block' or 'fill', got {spillover!r}")
        if order not in ("newest_first", "oldest_first"):
            raise ValueError(f"order must be 'newest_first' or 'oldest_first', got {order!r}")
        if max_groups is not None and int(max_groups) < 1:
            raise ValueError(f"max_groups must be >= 1 or None, got {max_groups}")
        if not env_fractions:
            raise ValueError("env_fractions is empty")
        running = 0.0
        for env, frac in env_fractions.items():
            frac = float(frac)
            if not math.isfinite(frac) or frac < 0:
                raise ValueError(f"env_fractions[{env!r}] = {frac} must be a finite number >= 0")
            running += frac
            if running > 1.0 + 1e-9:
                raise ValueError(
                    f"env_fractions must sum to <= 1: adding {env!r} ({frac}) brings the sum to {running:g} "
                    f"({dict(env_fractions)})"
                )
        self.total_token_budget = int(total_token_budget)
        self.env_fractions = {str(k): float(v) for k, v in env_fractions.items()}
        self.max_seq_len = int(max_seq_len)
        self.spillover = spillover
        self.order = order
        self.pad_rows_to_multiple = int(pad_rows_to_multiple)
        self.max_groups = None if max_groups is None else int(max_groups)
        self._quotas = self.group_quotas()  # fixed by the settings above: computed once, read by every plan()

    # ------------------------------------------------------------------------------------------------ planning
    def group_quotas(self) -> Optional[Dict[str, int]]:
        """Groups per env under ``max_groups`` (None without it): ``floor(max_groups * fraction)`` each, then one
        more to the envs with the largest remainders (ties: ``env_fractions`` order) until the quotas sum to
        ``round(max_groups * sum(fractions))`` (Hamilton's largest-remainder method)."""
        if self.max_groups is None:
            return None
        raw = {e: f * self.max_groups for e, f in self.env_fractions.items()}
        quota = {e: math.floor(r + 1e-9) for e, r in raw.items()}
        spare = round(sum(raw.values())) - sum(quota.values())
        for env in sorted(raw, key=lambda e: -(raw[e] - quota[e]))[: max(spare, 0)]:
            quota[env] += 1
        return quota

    def group_tokens(self, group: Group) -> int:
        """Packable tokens of ``group`` (its rollouts no longer than ``max_seq_len``)."""
        return sum(r.num_tokens for r in group.rollouts if r.num_tokens <= self.max_seq_len)

    def plan(self, ready: Mapping[str, Sequence[Group]]) -> List[Group]:
        """Choose groups (pure; consumes nothing).

        Args: ``ready``: ``{env: ready groups in hand-out order (the batcher's ``order``)}``; a missing env has
            none.
        Returns: the chosen groups in pick order.
        Raises BatchNotReady: ``spillover='block'`` and an env is short, or nothing could be chosen.
        """
        budget = self.total_token_budget
        target = {e: f * budget for e, f in self.env_fractions.items()}
        used = {e: 0 for e in self.env_fractions}
        left = {e: list(ready.get(e, ())) for e in self.env_fractions}
        size = {id(g): self.group_tokens(g) for groups in left.values() for g in groups}
        picks: List[Group] = []
        quota = self._quotas
        taken = {e: 0 for e in self.env_fractions}

        def first_fit(env: str, cap: float) -> int:
            for i, group in enumerate(left[env]):
                if size[id(group)] <= cap:
                    return i
            return -1

        def run(cap_of) -> None:
            while self.max_groups is None or len(picks) < self.max_groups:
                best, best_deficit, best_index = None, None, -1
                for env in self.env_fractions:  # dict order breaks ties (strict >)
                    cap = cap_of(env)
                    if cap is None:
                        continue
                    index = first_fit(env, cap)
                    deficit = target[env] - used[env]
                    if index >= 0 and (best is None or deficit > best_deficit):
                        best, best_deficit, best_index = env, deficit, index
                if best is None:
                    return
                group = left[best].pop(best_index)
                used[best] += size[id(group)]
                taken[best] += 1
                picks.append(group)

        total_left = lambda: budget - sum(used.values())  # noqa: E731
        below_quota = lambda env: quota is None or taken[env] < quota[env]  # noqa: E731
        # Phase 1: each env within its own share (share > used: positive deficit) and its group quota.
        run(
            lambda env: (
                min(target[env] - used[env], total_left()) if target[env] - used[env] > 0 and below_quota(env) else None
            )
        )
        short = {
            e: math.ceil(target[e] - used[e])
            for e in self.env_fractions
            if target[e] - used[e] > 0 and not left[e] and below_quota(e)
        }
        if short and self.spillover == "block":
            if quota is None:
                raise BatchNotReady(short)
            raise BatchNotReady(
                short, "batch not ready: " + ", ".join(f"{e} has {taken[e]} of its {quota[e]} groups" for e in short)
            )
        if self.spillover == "fill":  # Phase 2: the rest of the budget to whoever still has groups.
            run(lambda env: total_left())
        if not picks:
            raise BatchNotReady(short or {e: math.ceil(t) for e, t in target.items()}, "batch not ready: no group fits")
        return picks

    # ------------------------------------------------------------------------------------------------- packing
    def pack(self, groups: Sequence[Group]) -> Tuple[RlExample, List[Tuple[int, int, str]], List[Rollout]]:
        """Pack the groups' rollouts into an :class:`RlExample` of ``[B, max_seq_len]`` (module docstring).

        Per token: ``input_ids`` from the turns; ``loss_mask`` True on generated (assistant) turns; ``scores`` the
        rollout's reward on its last generated token, 0 elsewhere; ``policy_logprobs`` the generated turns' log-probs,
        0 elsewhere; ``segment_ids`` 1..k per row, 0 padding; ``position_ids`` from 0 per segment.
        Returns: ``(example, layout [(row, segment_id, rollout_uid)], overlong rollouts)``.
        Raises ValueError: a generated turn without log-probs.
        """
        items: List[Tuple[Rollout, float]] = []
        overlong: List[Rollout] = []
        for group in groups:
            for rollout in group.rollouts:
                if rollout.num_tokens > self.max_seq_len:
                    overlong.append(rollout)
                else:
                    items.append((rollout, rollout.reward))
        # First-fit decreasing (stable for equal lengths).
        order = sorted(range(len(items)), key=lambda i: -items[i][0].num_tokens)
        rows: List[List[int]] = []
        free: List[int] = []
        for i in order:
            n = items[i][0].num_tokens
            for r, space in enumerate(free):
                if n <= space:
                    rows[r].append(i)
                    free[r] -= n
                    break
            else:
                rows.append([i])
                free.append(self.max_seq_len - n)
        n_rows = -(-len(rows) // self.pad_rows_to_multiple) * self.pad_rows_to_multiple
        shape = (n_rows, self.max_seq_len)
        input_ids = torch.zeros(shape, dtype=torch.int32)
        loss_mask = torch.zeros(shape, dtype=torch.bool)
        segment_ids = torch.zeros(shape, dtype=torch.int32)
        position_ids = torch.zeros(shape, dtype=torch.int32)
        scores = torch.zeros(shape, dtype=torch.float32)
        logprobs = torch.zeros(shape, dtype=torch.float32)
        layout: List[Tuple[int, int, str]] = []
        for r, members in enumerate(rows):
            start = 0
            for seg, i in enumerate(members, 1):
                rollout, reward = items[i]
                last = -1  # the last generated position of the segment
                layout.append((r, seg, rollout.rollout_uid))
                pos = start
                for t, turn in enumerate(rollout.turns):
                    n = len(turn.tokens)
                    if n == 0:
                        continue
                    sl = slice(pos, pos + n)
                    input_ids[r, sl] = torch.tensor(turn.tokens, dtype=torch.int32)
                    if turn.is_generated:
                        if turn.logprobs is None:
                            raise ValueError(f"rollout {rollout.rollout_uid!r} turn {t} is generated, has no logprobs")
                        loss_mask[r, sl] = True
                        logprobs[r, sl] = torch.tensor(turn.logprobs, dtype=torch.float32)
                        last = pos + n - 1
                    pos += n
                if last >= 0:
                    scores[r, last] = reward
                segment_ids[r, start:pos] = seg
                position_ids[r, start:pos] = torch.arange(pos - start, dtype=torch.int32)
                start = pos
        example = RlExample(input_ids, loss_mask, segment_ids, position_ids, scores, logprobs)
        return example, layout, overlong

    # ------------------------------------------------------------------------------------------------ the batch
    def make_batch(self, buffers: Mapping[str, ReplayBuffer], newest_first: Optional[bool] = None) -> Batch:
        """Plan over the buffers' ready groups, hand the chosen groups out (the consumption logged by each buffer),
        pack them, and collect metrics.

        Args: ``buffers``: ``{env: ReplayBuffer}`` covering every env of ``env_fractions``; ``newest_first``: the
            hand-out order (None: the batcher's ``order``).
        Returns: :class:`Batch`. Metrics: ``batches/{env}/rollouts_used``, ``tokens_used`` (packed tokens),
            ``frac_used`` (``tokens_used / total_token_budget``), ``rollouts_overlong``; ``batches/num_rows``,
            ``batches/tokens``, ``batches/frac_padding``; and each buffer's :meth:`ReplayBuffer.metrics`.
        Raises BatchNotReady: see :meth:`plan` (nothing is consumed). KeyError: an env has no buffer, or a planned
        group left its buffer before it was handed out (only possible with concurrent callers; groups already handed
        out by other buffers in this call stay consumed).
        """
        missing = [e for e in self.env_fractions if e not in buffers]
        if missing:
            raise KeyError(f"no replay buffer for env(s) {missing}")
        if newest_first is None:
            newest_first = self.order == "newest_first"
        ready = {e: buffers[e].ready_groups(newest_first) for e in self.env_fractions}
        picks = self.plan(ready)
        handed: Dict[int, Group] = {}
        for env in self.env_fractions:
            positions = [i for i, g in enumerate(picks) if g.environment == env]
            if positions:
                for i, group in zip(positions, buffers[env].consume([picks[i] for i in positions])):
                    handed[i] = group
        groups = [handed[i] for i in range(len(picks))]
        example, layout, overlong = self.pack(groups)
        metrics: Dict[str, float] = {}
        overlong_uids = {r.rollout_uid for r in overlong}
        for env in self.env_fractions:
            packed = [
                r for g in groups if g.environment == env for r in g.rollouts if r.rollout_uid not in overlong_uids
            ]
            tokens = sum(r.num_tokens for r in packed)
            metrics[f"batches/{env}/rollouts_used"] = float(len(packed))
            metrics[f"batches/{env}/tokens_used"] = float(tokens)
            metrics[f"batches/{env}/frac_used"] = tokens / self.total_token_budget
            metrics[f"batches/{env}/rollouts_overlong"] = float(sum(r.environment == env for r in overlong))
            metrics.update(buffers[env].metrics(reset=True))
        cells = example.batch_size * example.seq_len
        metrics["batches/num_rows"] = float(example.batch_size)
        metrics["batches/tokens"] = float(example.num_tokens)
        metrics["batches/frac_padding"] = 1.0 - example.num_tokens / cells if cells else 0.0
        picks_info = [(g.environment, g.problem_id, g.policy_version, self.group_tokens(g)) for g in groups]
        return Batch(example, groups, picks_info, layout, [r.rollout_uid for r in overlong], metrics)
