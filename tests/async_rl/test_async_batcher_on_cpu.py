"""Async-RL Batcher v0: deficit round-robin, blocking / fill spillover, packing into RlExample (specs/async_rl.md)."""

from __future__ import annotations

import pytest
import torch

from verl.async_rl.batcher import Batcher, BatchNotReady, segment_attention_mask
from verl.async_rl.replay_buffer import ReplayBuffer
from verl.async_rl.types import Group


def _groups(make_rollout, env, n_groups, tokens_per_group):
    """Ready groups (newest first) of two rollouts each, ``tokens_per_group`` tokens in all."""
    half = tokens_per_group // 2
    return [
        Group(
            env,
            f"{env}{i}",
            0,
            tuple(make_rollout(env=env, problem_id=f"{env}{i}", prompt=half - 2, gen=2) for _ in range(2)),
        )
        for i in range(n_groups)
    ]


def test_fractions_validated():
    with pytest.raises(ValueError, match="'b'"):
        Batcher(100, {"a": 0.6, "b": 0.5}, 10)
    with pytest.raises(ValueError, match="'a'"):
        Batcher(100, {"a": -0.1}, 10)
    with pytest.raises(ValueError, match="spillover"):
        Batcher(100, {"a": 0.5}, 10, spillover="steal")
    with pytest.raises(ValueError, match="order must be 'newest_first' or 'oldest_first', got 'random'"):
        Batcher(100, {"a": 0.5}, 10, order="random")
    Batcher(100, {"a": 0.7, "b": 0.3}, 10)  # sum exactly 1 is fine


def test_deficit_round_robin_hand_worked(make_rollout):
    ready = {"a": _groups(make_rollout, "a", 3, 200), "b": _groups(make_rollout, "b", 5, 100)}
    picks = Batcher(1000, {"a": 0.5, "b": 0.5}, 512).plan(ready)
    # deficits (a, b): (500, 500) tie -> a; (300, 500) -> b; (300, 400) -> b; (300, 300) tie -> a; (100, 300) -> b;
    # (100, 200) -> b; (100, 100): a's next group (200) exceeds its remaining share -> b; (100, 0): stop.
    assert [g.problem_id for g in picks] == ["a0", "b0", "b1", "a1", "b2", "b3", "b4"]
    used = {e: sum(g.num_tokens for g in picks if g.environment == e) for e in "ab"}
    assert used == {"a": 400, "b": 500} and sum(used.values()) <= 1000  # a met its share to group granularity


def test_order_decides_which_version_a_full_batch_leaves_behind(tmp_path, make_rollout):
    """Two groups of 10 tokens each at versions 0 and 1 and a budget that takes one: ``newest_first`` (v0) trains the
    version-1 group and leaves the version-0 one to go stale at the next version; ``oldest_first`` trains the
    version-0 group, and the version-1 group is still within ``max_age`` at the next batch."""

    def buffer(name):
        buf = ReplayBuffer("a", tmp_path / name, max_age=1, version=1)
        for version in (0, 0, 1, 1):
            buf.add(make_rollout(problem_id=f"p{version}", version=version))  # 5 tokens each
        return buf

    for order, taken, left in (("newest_first", 1, 0), ("oldest_first", 0, 1)):
        buf = buffer(order)
        batch = Batcher(10, {"a": 1.0}, 512, order=order).make_batch({"a": buf})
        assert [g.policy_version for g in batch.groups] == [taken]
        assert [g.policy_version for g in buf.ready_groups()] == [left]
        buf.set_version(2)  # the next learner version: version 0 is now older than max_age
        assert len(buf) == (0 if order == "newest_first" else 2)
    # an explicit newest_first argument overrides the batcher's order
    buf = buffer("override")
    batch = Batcher(10, {"a": 1.0}, 512, order="oldest_first").make_batch({"a": buf}, newest_first=True)
    assert [g.policy_version for g in batch.groups] == [1]


def test_max_groups_sizes_a_batch_in_groups(make_rollout):
    """``max_groups``: per-env group quotas by largest remainder, the token shares still a ceiling, short = dry below
    the quota (hand-worked on the groups of ``test_deficit_round_robin_hand_worked``)."""

    def ready(n_a, n_b, a_tokens=200, b_tokens=100):
        return {"a": _groups(make_rollout, "a", n_a, a_tokens), "b": _groups(make_rollout, "b", n_b, b_tokens)}

    half = {"a": 0.5, "b": 0.5}
    assert Batcher(1000, {"a": 0.7, "b": 0.3}, 512, max_groups=16).group_quotas() == {"a": 11, "b": 5}
    assert Batcher(1000, half, 512, max_groups=3).group_quotas() == {"a": 2, "b": 1}  # tie: env order
    assert Batcher(1000, {"a": 0.5}, 512, max_groups=3).group_quotas() == {"a": 2}  # round(1.5) groups in all
    assert Batcher(1000, half, 512).group_quotas() is None
    # quotas 2 / 2: deficits (500, 500) -> a0; (300, 500) -> b0; (300, 400) -> b1, b at its quota; a1, a at its quota
    picks = Batcher(1000, half, 512, max_groups=4).plan(ready(3, 5))
    assert [g.problem_id for g in picks] == ["a0", "b0", "b1", "a1"]
    # quotas 2 / 1: b at its quota after one group, so its 200-token shortfall does not block the batch
    picks = Batcher(1000, half, 512, max_groups=3).plan(ready(3, 2))
    assert [g.problem_id for g in picks] == ["a0", "b0", "a1"]
    with pytest.raises(BatchNotReady, match="b needs 300"):  # without the limit b (two groups, 200 tokens) is short
        Batcher(1000, half, 512).plan(ready(3, 2))
    # b dry below its quota: block waits ...
    with pytest.raises(BatchNotReady, match="b has 1 of its 2 groups") as info:
        Batcher(10_000, half, 512, max_groups=4).plan(ready(5, 1))
    assert info.value.short == {"b": 4900}
    # ... and fill gives b's unused quota to a, up to max_groups in all
    picks = Batcher(10_000, half, 512, max_groups=4, spillover="fill").plan(ready(5, 1))
    assert [g.problem_id for g in picks] == ["a0", "b0", "a1", "a2"]
    # the fractions set the mix although the budget would hold every group of either env
    picks = Batcher(16 * 4 * 1056, {"a": 0.7, "b": 0.3}, 2048, max_groups=16).plan(ready(20, 20, 1600, 1600))
    assert sum(g.environment == "a" for g in picks) == 11 and sum(g.environment == "b" for g in picks) == 5
    # the budget stays the ceiling: three 200-token groups under a 500-token budget give two, limit or not
    picks = Batcher(500, {"a": 1.0}, 512, max_groups=3, spillover="fill").plan(ready(3, 0))
    assert [g.problem_id for g in picks] == ["a0", "a1"]
    with pytest.raises(ValueError, match="max_groups must be >= 1 or None, got 0"):
        Batcher(100, {"a": 1.0}, 10, max_groups=0)


def test_block_when_an_env_is_short_and_fill(tmp_path, make_rollout):
    def buffers():
        out = {e: ReplayBuffer(e, tmp_path / e, min_group_size=2) for e in "ab"}
        for group in _groups(make_rollout, "a", 5, 200) + _groups(make_rollout, "b", 2, 100):
            out[group.environment].add_many(group.rollouts)
        return out

    bufs = buffers()
    log_before = bufs["b"].log_path.read_bytes()
    with pytest.raises(BatchNotReady) as info:
        Batcher(1000, {"a": 0.5, "b": 0.5}, 512).make_batch(bufs)
    assert info.value.short == {"b": 300} and "b needs 300" in str(info.value)
    assert (len(bufs["a"]), len(bufs["b"])) == (10, 4)  # nothing consumed
    assert bufs["b"].log_path.read_bytes() == log_before

    batch = Batcher(1000, {"a": 0.5, "b": 0.5}, 512, spillover="fill").make_batch(bufs)
    m = batch.metrics
    # b gives all it has (200); a fills its share (400 of 500 at 200 per group), then the rest of the budget (+400)
    assert (m["batches/a/tokens_used"], m["batches/b/tokens_used"]) == (800, 200)
    assert m["batches/a/rollouts_used"] == 8 and m["batches/a/frac_used"] == 0.8
    assert batch.example.num_tokens == 1000 <= 1000
    assert m["replays/b/frac_used_in_batch"] == 1.0 and m["replays/a/rollouts_in_buffer"] == 2
    with pytest.raises(BatchNotReady):  # b is empty now and blocks again
        Batcher(1000, {"a": 0.5, "b": 0.5}, 512).make_batch(bufs)


def test_fill_gives_unassigned_fraction_to_others(make_rollout):
    ready = {"a": _groups(make_rollout, "a", 4, 100)}
    assert len(Batcher(400, {"a": 0.5}, 512).plan(ready)) == 2  # block: only the 0.5 share is used
    assert len(Batcher(400, {"a": 0.5}, 512, spillover="fill").plan(ready)) == 4


def _check_packing(batch, max_seq_len):
    ex = batch.example
    by_uid = {r.rollout_uid: r for g in batch.groups for r in g.rollouts}
    assert ex.input_ids.shape[1] == max_seq_len
    seen = set()
    for row, seg, uid in batch.layout:
        rollout = by_uid[uid]
        where = ex.segment_ids[row] == seg
        idx = where.nonzero().flatten()
        assert idx.numel() == rollout.num_tokens and (idx.diff() == 1).all()  # one contiguous segment per rollout
        assert ex.input_ids[row, idx].tolist() == [t for turn in rollout for t in turn.tokens]
        assert ex.position_ids[row, idx].tolist() == list(range(rollout.num_tokens))
        gen = [turn.is_generated for turn in rollout for _ in turn.tokens]
        assert ex.loss_mask[row, idx].tolist() == gen
        last = max(i for i, g in enumerate(gen) if g)  # the reward sits on the last generated token
        expected = torch.tensor([rollout.reward if i == last else 0.0 for i in range(len(gen))], dtype=torch.float32)
        assert torch.equal(ex.scores[row, idx], expected)
        logp = [
            lp if turn.is_generated else 0.0 for turn in rollout for lp in (turn.logprobs or [0.0] * len(turn.tokens))
        ]
        assert torch.allclose(ex.policy_logprobs[row, idx], torch.tensor(logp))
        seen.add(uid)
    assert seen == set(by_uid) - set(batch.overlong)
    pad = ex.segment_ids == 0
    assert not ex.loss_mask[pad].any() and (ex.input_ids[pad] == 0).all() and (ex.scores[pad] == 0).all()
    assert (ex.scores[~ex.loss_mask] == 0).all()
    # one segment never holds two rollouts' tokens (token ids are 1000 * rollout number + k)
    for row in range(ex.batch_size):
        for seg in ex.segment_ids[row].unique().tolist():
            if seg:
                assert len(set((ex.input_ids[row][ex.segment_ids[row] == seg] // 1000).tolist())) == 1
    mask = segment_attention_mask(ex.segment_ids)
    cross = ex.segment_ids[:, :, None] != ex.segment_ids[:, None, :]
    assert not (mask & cross).any()  # attention never crosses segments
    real = ex.segment_ids > 0
    causal = torch.ones(max_seq_len, max_seq_len, dtype=torch.bool).tril()
    assert torch.equal(mask & real[:, :, None], (~cross) & causal & real[:, :, None])


def test_packing_segments_masks_and_scores(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, min_group_size=2)
    sizes = [(3, 2, 0), (6, 3, 4), (2, 5, 0), (10, 4, 3), (1, 1, 0), (4, 4, 4)]
    for i, (prompt, gen, tool) in enumerate(sizes):
        buf.add(make_rollout(problem_id=f"p{i // 2}", prompt=prompt, gen=gen, tool=tool, reward=float(i % 2)))
    batcher = Batcher(10_000, {"a": 1.0}, 24, spillover="fill", pad_rows_to_multiple=2)  # fill: no block when dry
    batch = batcher.make_batch({"a": buf})
    assert len(batch.groups) == 3 and batch.overlong == []
    assert batch.example.batch_size % 2 == 0
    assert [r.reward for g in batch.groups for r in g.rollouts] == [0.0, 1.0] * 3
    segments = batch.segment_groups()  # one group uid per problem, in layout order
    assert len(segments) == 6 and len({uid for _, _, uid in segments}) == 3
    _check_packing(batch, 24)
    total = sum(r.num_tokens for g in batch.groups for r in g.rollouts)
    assert batch.example.num_tokens == total and batch.metrics["batches/tokens"] == total
    assert batch.metrics["batches/num_rows"] == batch.example.batch_size


def test_overlong_rollout_is_rejected_not_truncated(tmp_path, make_rollout):
    buf = ReplayBuffer("a", tmp_path, min_group_size=2)
    long = make_rollout(problem_id="p", prompt=20, gen=10, reward=1.0)  # 30 tokens > max_seq_len 16
    short = make_rollout(problem_id="p", prompt=4, gen=2, reward=0.0)
    buf.add_many([long, short])
    batch = Batcher(100, {"a": 1.0}, 16, spillover="fill").make_batch({"a": buf})
    assert batch.overlong == [long.rollout_uid] and batch.metrics["batches/a/rollouts_overlong"] == 1
    assert batch.metrics["batches/a/rollouts_used"] == 1 and batch.metrics["batches/a/tokens_used"] == 6
    assert len(buf) == 0  # consumed, not offered again
    _check_packing(batch, 16)


def test_segment_attention_mask_hand_case():
    seg = torch.tensor([[1, 1, 2, 0]], dtype=torch.int32)
    expected = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]], dtype=torch.bool)
    assert torch.equal(segment_attention_mask(seg)[0], expected)
    expected[3, 3] = False
    assert torch.equal(segment_attention_mask(seg, pad_self=False)[0], expected)
