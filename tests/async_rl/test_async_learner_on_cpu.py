"""Async learner (verl/async_rl/learner.py): packed forward, PPO step with the core_algos loss, checkpoints."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.config_utils import default_section
from verl.async_rl.batcher import Batcher
from verl.async_rl.inference_server import PolicyEngine
from verl.async_rl.learner import Learner, packed_logprobs
from verl.async_rl.types import Group, Rollout, Turn

ACTOR = default_section(
    "actor_rollout_ref.actor",
    optim={"lr": 1e-2, "weight_decay": 0.0},
    clip_ratio=0.2,
    loss_agg_mode="token-mean",
    grad_clip=1.0,
    ppo_micro_batch_size_per_gpu=1,
    entropy_coeff=0.0,
)


def _group(engine, problem, prompt, advantages):
    rollouts = []
    for i, adv in enumerate(advantages):
        out = engine.generate(prompt, max_tokens=5, temperature=1.0, seed=i)["choices"][0]
        turns = (Turn("q", "user", prompt), Turn("a", "assistant", out["token_ids"], out["logprobs"]))
        rollouts.append(Rollout("e", problem, f"{problem}-{i}", turns, {"policy_version": 0}))
    return Group("e", problem, 0, tuple(rollouts), tuple(advantages))


def test_packed_step_matches_inference_and_follows_advantages(tiny_model_dir, tmp_path):
    engine = PolicyEngine(tiny_model_dir)
    learner = Learner(tiny_model_dir, ACTOR, temperature=1.0, checkpoint_dir=str(tmp_path / "ckpt"))
    groups = [_group(engine, "p0", [5, 6, 7], [1.0, -1.0]), _group(engine, "p1", [9, 10, 11, 12], [1.0, -1.0])]
    example, layout, _ = Batcher(64, {"e": 1.0}, 40).pack(groups)
    assert example.batch_size == 1 and len(layout) == 4  # four rollouts packed into one row

    with torch.no_grad():
        before, _ = packed_logprobs(learner.model, example)
        mask = example.loss_mask & (example.position_ids > 0)
        # logits only where needed: the same log-probs at the needed tokens, 0 elsewhere
        kept, kept_entropy = packed_logprobs(learner.model, example, needed=mask, calculate_entropy=True)
        _, full_entropy = packed_logprobs(learner.model, example, calculate_entropy=True)
    torch.testing.assert_close(kept[mask], before[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(kept_entropy[mask], full_entropy[mask], atol=1e-5, rtol=0)
    assert bool((kept[~mask] == 0).all()) and bool((before[~mask] != 0).any())
    stats = learner.step(example)
    assert learner.version == 1 and stats["learner/policy_version"] == 1.0
    # same weights, so the learner reproduces the server's log-probs of the packed segments
    assert stats["learner/logprob_abs_gap"] < 1e-4, stats
    assert {"actor/pg_loss", "actor/pg_clipfrac", "actor/ppo_kl", "actor/grad_norm", "actor/entropy"} <= set(stats)
    with torch.no_grad():
        after, _ = packed_logprobs(learner.model, example)
    change = (after - before)[mask]
    adv = example.advantages[mask]
    assert change[adv > 0].mean() > change[adv < 0].mean()

    # checkpoint round trip: a new learner resumes the version and the weights
    learner.save_checkpoint({"trainer": {"x": 1}})
    again = Learner(tiny_model_dir, ACTOR, checkpoint_dir=str(tmp_path / "ckpt"))
    assert again.resume() == 1
    for key, value in learner.weights().items():
        assert torch.equal(value, again.weights()[key])
    # the engine takes the learner's weights as version 1 and then serves the same log-probs
    assert engine.update_weights(learner.weights(), 1)
    with torch.no_grad():
        out = engine.generate([5, 6, 7], max_tokens=3, seed=0)
    assert out["policy_version"] == 1


def test_rollout_correction_decouples_the_ratio_and_weights_stale_tokens(tiny_model_dir):
    """With algorithm.rollout_correction the ratio is against the learner's own policy (so nothing is clipped in a
    single step) and the server's stale log-probs only enter the truncated IS weights: the gradient equals the plain
    learner's with the server's log-probs replaced by the learner's and the loss scaled by min(rho, C) per token."""
    engine = PolicyEngine(tiny_model_dir)
    groups = [_group(engine, "p0", [5, 6, 7], [1.0, -1.0]), _group(engine, "p1", [9, 10, 11, 12], [1.0, -1.0])]
    example, _, _ = Batcher(64, {"e": 1.0}, 40).pack(groups)
    stale = example.policy_logprobs.clone()
    stale[example.loss_mask] -= 0.3  # the server's policy was older: every token 0.3 nats less likely
    import dataclasses

    example = dataclasses.replace(example, policy_logprobs=stale)
    corrected = Learner(tiny_model_dir, ACTOR, rollout_correction={"rollout_is": "token", "rollout_is_threshold": 1.2})
    stats = corrected.step(example)
    assert stats["actor/pg_clipfrac"] == 0.0  # ratio 1 against the learner's own policy
    assert abs(stats["rollout_corr/kl"] + 0.3) < 1e-3  # rlp - olp = -0.3
    assert abs(stats["rollout_corr/is_weight_max"] - 1.2) < 1e-6  # rho = e^0.3 = 1.35, truncated at C = 1.2
    plain = Learner(tiny_model_dir, ACTOR)  # behaviour-policy PPO: ratio e^0.3 > 1.2 clips the positive-advantage half
    assert plain.step(example)["actor/pg_clipfrac"] > 0.3
    with pytest.raises(ValueError, match="rollout_rs_threshold"):
        Learner(tiny_model_dir, ACTOR, rollout_correction={"rollout_rs": "token"})


@pytest.mark.parametrize(
    "layout",
    [
        {},
        {"use_shared_prompt": True},
        {"use_remove_padding": True},
        {"use_shared_prompt": True, "use_fused_kernels": True},
    ],
    ids=["padded", "shared", "packed", "shared_fused"],
)
def test_single_turn_segments_go_through_the_sync_actor_forward(tiny_model_dir, layout):
    """Single-turn segments (prompt, then the generated tokens) are unpacked into verl's actor rows and go through
    DataParallelPPOActor's forward with the model's layout switches: the same log-probs and entropies at the same
    packed positions as the block-diagonal packed forward, and the same step (metrics and weights)."""
    from verl.async_rl.learner import scatter_response_values, single_turn_rows

    engine = PolicyEngine(tiny_model_dir)
    groups = [_group(engine, "p0", [5, 6, 7], [1.0, -1.0]), _group(engine, "p1", [9, 10, 11, 12], [1.0, -1.0])]
    example, _, _ = Batcher(64, {"e": 1.0}, 40).pack(groups)
    rows, where = single_turn_rows(example)
    assert len(where) == 4 and rows["input_ids"].shape[0] == 4  # one row per rollout
    assert sorted(rows["input_ids"][:, :4].tolist()) == [[0, 5, 6, 7]] * 2 + [[9, 10, 11, 12]] * 2  # left-padded
    mask = example.loss_mask & (example.position_ids > 0)
    learner = Learner(tiny_model_dir, ACTOR, layout=layout)
    with torch.no_grad():
        packed, packed_entropy = packed_logprobs(learner.model, example, calculate_entropy=True, needed=mask)
        lp, ent = learner._log_probs(example, mask)
    torch.testing.assert_close(lp[mask], packed[mask], atol=1e-5, rtol=0)
    torch.testing.assert_close(ent[mask], packed_entropy[mask], atol=5e-5, rtol=0)
    assert bool((lp[~mask] == 0).all())
    reference = Learner(tiny_model_dir, ACTOR)
    reference._log_probs = lambda part, needed: packed_logprobs(
        reference.model, part, reference.temperature, calculate_entropy=True, needed=needed
    )
    ours, theirs = learner.step(example), reference.step(example)
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm", "learner/logprob_abs_gap"):
        assert ours[key] == pytest.approx(theirs[key], rel=1e-4, abs=1e-6), key
    # the step's gradients (left on the parameters; AdamW's first step, ~lr * sign(g), would magnify float noise in
    # near-zero entries, so the weights themselves are not compared)
    grads = dict(reference.model.named_parameters())
    for name, p in learner.model.named_parameters():
        if p.grad is not None:
            error = (p.grad - grads[name].grad).norm() / grads[name].grad.norm().clamp(min=1e-12)
            assert error < 1e-4, (name, float(error))
    # a segment with a loss token before its last prompt token (multi-turn) keeps the packed forward
    import dataclasses

    holed = example.loss_mask.clone()
    holed[0, 1] = True
    assert single_turn_rows(dataclasses.replace(example, loss_mask=holed)) is None
    values = torch.arange(1.0, 5.0).unsqueeze(1).expand(4, 3)
    placed = scatter_response_values(values, [(0, 1, 2), (0, 5, 3), (1, 0, 1), (1, 2, 3)], (2, 8))
    assert placed.tolist() == [[0, 1, 1, 0, 0, 2, 2, 2], [3, 0, 4, 4, 4, 0, 0, 0]]
