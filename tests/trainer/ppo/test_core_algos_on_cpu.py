"""Tests for verl.trainer.ppo.core_algos: estimators (hand cases + invariants), registries, losses, KL, controllers."""

import math
import statistics
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.trainer.ppo import core_algos as ca


def _uids(*labels):
    return np.array(labels, dtype=object)


def _outcome(scores, lengths, width):
    """Rewards [B, width] with score i on the last token of a response of length lengths[i]; its mask."""
    rewards = torch.zeros(len(scores), width)
    mask = torch.zeros(len(scores), width)
    for i, (s, n) in enumerate(zip(scores, lengths)):
        rewards[i, n - 1] = s
        mask[i, :n] = 1
    return rewards, mask


# =====================================================================================================================
# registry
# =====================================================================================================================
def test_registry_lookup_and_unknown_name():
    assert ca.get_adv_estimator_fn("gae") is ca.compute_gae_advantage_return
    assert ca.get_adv_estimator_fn(ca.AdvantageEstimator.GRPO) is ca.compute_grpo_outcome_advantage
    assert ca.get_adv_estimator_fn("rloo_vectorized") is ca.compute_rloo_outcome_advantage
    with pytest.raises(ValueError) as err:
        ca.get_adv_estimator_fn("no_such_estimator")
    for name in ("gae", "grpo", "rloo", "remax", "reinforce_plus_plus", "reinforce_plus_plus_baseline"):
        assert name in str(err.value)
    # reserved names exist in the enum but are registered by their own modules
    assert ca.AdvantageEstimator("gigpo") is ca.AdvantageEstimator.GIGPO
    assert ca.AdvantageEstimator("rlvcr") is ca.AdvantageEstimator.RLVCR


def test_custom_estimator_with_non_tensor_kwargs():
    name = "test_custom_anchor_estimator"

    def fn(token_level_rewards, response_mask, anchor_obs=None, traj_index=None, **kwargs):
        bonus = torch.tensor([float(len(a)) for a in anchor_obs]).unsqueeze(-1)
        return bonus * response_mask, token_level_rewards

    try:
        assert ca.register_adv_est(name)(fn) is fn
        assert ca.register_adv_est(name)(fn) is fn  # the same function again: no error
        with pytest.raises(ValueError):
            ca.register_adv_est(name)(lambda **kw: None)
        inputs = dict(
            token_level_rewards=torch.zeros(2, 3),
            response_mask=torch.ones(2, 3),
            index=_uids("u", "u"),
            values=None,
            reward_baselines=None,
            gamma=1.0,
            lam=1.0,
            config={},
            anchor_obs=_uids("ab", "abc"),
            traj_index=_uids("t0", "t1"),
        )
        adv, _ = ca.get_adv_estimator_fn(name)(**inputs)
        assert adv.tolist() == [[2.0] * 3, [3.0] * 3]
    finally:
        ca.ADV_ESTIMATOR_REGISTRY.pop(name, None)


def test_every_builtin_estimator_accepts_the_trainer_inputs():
    """The trainer calls fn(**inputs) with one dict for all estimators: each takes it and zeroes masked tokens."""
    torch.manual_seed(0)
    rewards, mask = _outcome([1.0, 0.0, 0.5, 2.0], [3, 2, 4, 1], 5)
    inputs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=_uids("a", "a", "b", "b"),
        values=torch.randn(4, 5),
        reward_baselines=torch.tensor([0.5, 0.5, 1.0, 1.0]),
        gamma=1.0,
        lam=0.95,
        norm_adv_by_std_in_grpo=True,
        config=OmegaConf.create({"gamma": 1.0, "lam": 0.95}),
        extra_field=_uids(1, 2, 3, 4),
    )
    for name in (
        "gae",
        "grpo",
        "grpo_vectorized",
        "rloo",
        "rloo_vectorized",
        "reinforce_plus_plus",
        "reinforce_plus_plus_baseline",
        "remax",
    ):
        adv, ret = ca.get_adv_estimator_fn(name)(**inputs)
        assert adv.shape == ret.shape == (4, 5), name
        assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0), name


# =====================================================================================================================
# group statistics
# =====================================================================================================================
def test_group_statistics_hand_case():
    scores = torch.tensor([1.0, 0.0, 2.0, 5.0, 0.1, 0.1, 0.1])
    mean, std, count = ca.compute_group_statistics(scores, _uids("a", "a", "a", "b", "c", "c", "c"))
    # a: mean 1, unbiased std sqrt((0 + 1 + 1) / 2) = 1; b singleton: std 0; c: constant 0.1 -> mean 0.1, std 0 exactly
    torch.testing.assert_close(mean, torch.tensor([1.0, 1.0, 1.0, 5.0, 0.1, 0.1, 0.1]))
    torch.testing.assert_close(std[:4], torch.tensor([1.0, 1.0, 1.0, 0.0]))
    assert torch.all(std[4:] == 0) and torch.all(mean[4:] == scores[4:])
    assert count.tolist() == [3, 3, 3, 1, 3, 3, 3]
    # GiGPO/RLVCR policy: singleton -> 0; zero-variance -> exactly 0
    norm = ca.group_normalize(scores, _uids("a", "a", "a", "b", "c", "c", "c"), singleton_zero=True)
    assert norm[3].item() == 0.0 and torch.all(norm[4:] == 0)


def test_group_statistics_errors():
    with pytest.raises(ValueError):
        ca.compute_group_statistics(torch.zeros(3), None)
    with pytest.raises(ValueError):
        ca.compute_group_statistics(torch.zeros(3), _uids("a", "b"))
    with pytest.raises(TypeError):
        ca.compute_group_statistics(torch.zeros(2), [["a"], ["b"]])
    # tuples (e.g. (uid, anchor) keys) and tensors are valid labels
    _, _, count = ca.compute_group_statistics(torch.zeros(3), [("u", 1), ("u", 1), ("u", 2)])
    assert count.tolist() == [2, 2, 1]
    _, _, count = ca.compute_group_statistics(torch.zeros(3), torch.tensor([7, 7, 8]))
    assert count.tolist() == [2, 2, 1]


# =====================================================================================================================
# GAE
# =====================================================================================================================
def test_gae_hand_case():
    r = torch.tensor([[0.0, 0.0, 1.0]])
    v = torch.tensor([[0.5, 0.4, 0.2]])
    m = torch.ones(1, 3)
    adv, ret = ca.compute_gae_advantage_return(r, v, m, gamma=0.9, lam=0.5)
    # deltas: d2 = 1 - 0.2 = 0.8; d1 = 0.9*0.2 - 0.4 = -0.22; d0 = 0.9*0.4 - 0.5 = -0.14
    # gamma*lam = 0.45: A2 = 0.8; A1 = -0.22 + 0.45*0.8 = 0.14; A0 = -0.14 + 0.45*0.14 = -0.077
    raw = [-0.077, 0.14, 0.8]
    torch.testing.assert_close(ret, torch.tensor([[-0.077 + 0.5, 0.14 + 0.4, 0.8 + 0.2]]))
    mu, sd = statistics.mean(raw), statistics.stdev(raw)
    torch.testing.assert_close(adv, torch.tensor([[(a - mu) / math.sqrt(sd**2 + 1e-8) for a in raw]]))
    # gamma/lam from the config when not given explicitly
    adv2, ret2 = ca.compute_gae_advantage_return(r, v, m, config={"gamma": 0.9, "lam": 0.5})
    torch.testing.assert_close(ret2, ret)
    with pytest.raises(ValueError):
        ca.compute_gae_advantage_return(r, None, m, 1.0, 1.0)


def test_multi_turn_gae_skips_masked_tokens():
    torch.manual_seed(0)
    # row 0: turn [0, 1], observation [2, 3], turn [4], padding [5]; row 1: [0], obs [1], turn [2, 3], padding
    mask = torch.tensor([[1, 1, 0, 0, 1, 0], [1, 0, 1, 1, 0, 0]], dtype=torch.float32)
    rewards = torch.randn(2, 6)
    values = torch.randn(2, 6)
    adv, ret = ca.compute_gae_advantage_return(rewards, values, mask, gamma=0.9, lam=0.8)
    # changing rewards/values on masked tokens changes nothing
    noise_r = torch.where(mask.bool(), rewards, torch.randn(2, 6) * 100)
    noise_v = torch.where(mask.bool(), values, torch.randn(2, 6) * 100)
    adv_n, ret_n = ca.compute_gae_advantage_return(noise_r, noise_v, mask, gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv_n, adv)
    torch.testing.assert_close(ret_n, ret)
    assert torch.all(adv[mask == 0] == 0) and torch.all(ret[mask == 0] == 0)
    # equals GAE on the compacted sequences (the masked tokens deleted)
    keep = mask.bool()
    compact_r = torch.stack([rewards[i][keep[i]] for i in range(2)])
    compact_v = torch.stack([values[i][keep[i]] for i in range(2)])
    c_adv, c_ret = ca.compute_gae_advantage_return(compact_r, compact_v, torch.ones(2, 3), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv[keep], c_adv.flatten())
    torch.testing.assert_close(ret[keep], c_ret.flatten())


# =====================================================================================================================
# GRPO / RLOO / REINFORCE++ / ReMax
# =====================================================================================================================
def test_grpo_hand_case():
    # group a: scores [1, 0, 2] -> mean 1, unbiased std 1; b: singleton 5; c: constant [3, 3]
    rewards, mask = _outcome([1.0, 0.0, 2.0, 5.0, 3.0, 3.0], [2, 3, 1, 3, 2, 3], 3)
    index = _uids("a", "a", "a", "b", "c", "c")
    adv, ret = ca.compute_grpo_outcome_advantage(rewards, mask, index)
    eps = 1e-6
    expected = torch.tensor([0.0, -1.0 / (1 + eps), 1.0 / (1 + eps), 5.0 / (1 + eps), 0.0, 0.0])
    torch.testing.assert_close(adv, expected.unsqueeze(-1) * mask)  # broadcast over the response, 0 off the mask
    assert ret is adv
    assert torch.all(adv[4:] == 0)  # zero-variance group: exactly 0
    # Dr. GRPO (no std): a -> [0, -1, 1], singleton -> raw score 5
    adv_dr, _ = ca.compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=False)
    torch.testing.assert_close(adv_dr[:, 0], torch.tensor([0.0, -1.0, 1.0, 5.0, 0.0, 0.0]))
    # the flag is read from the config when not passed; an explicit value wins
    adv_cfg, _ = ca.compute_grpo_outcome_advantage(rewards, mask, index, config={"norm_adv_by_std_in_grpo": False})
    torch.testing.assert_close(adv_cfg, adv_dr)
    adv_ex, _ = ca.compute_grpo_outcome_advantage(
        rewards, mask, index, norm_adv_by_std_in_grpo=True, config={"norm_adv_by_std_in_grpo": False}
    )
    torch.testing.assert_close(adv_ex, adv)
    # two-sample group [0, 1]: mean 0.5, std sqrt(0.5) -> -/+ 0.5 / 0.70710678
    r2, m2 = _outcome([0.0, 1.0], [1, 1], 1)
    adv2, _ = ca.compute_grpo_outcome_advantage(r2, m2, _uids("x", "x"))
    torch.testing.assert_close(adv2[:, 0], torch.tensor([-0.5, 0.5]) / (math.sqrt(0.5) + eps))


def test_rloo_hand_case():
    rewards, mask = _outcome([1.0, 0.0, 2.0, 5.0], [1, 2, 2, 2], 2)
    adv, ret = ca.compute_rloo_outcome_advantage(rewards, mask, _uids("a", "a", "a", "b"))
    # leave-one-out baselines in a: (0+2)/2 = 1, (1+2)/2 = 1.5, (1+0)/2 = 0.5 -> [0, -1.5, 1.5]; singleton b: raw 5
    torch.testing.assert_close(adv, torch.tensor([[0.0, 0.0], [-1.5, -1.5], [1.5, 1.5], [5.0, 5.0]]))
    assert ret is adv


def test_reinforce_plus_plus_hand_case():
    r = torch.tensor([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = ca.compute_reinforce_plus_plus_outcome_advantage(r, m, gamma=0.5)
    # returns-to-go, gamma 0.5: row 0 [1 + 0.5*(0 + 0.5*2), 0 + 0.5*2, 2] = [1.5, 1, 2]; row 1 [0 + 0.5*3, 3, -]
    torch.testing.assert_close(ret, torch.tensor([[1.5, 1.0, 2.0], [1.5, 3.0, 0.0]]))
    # whitened over the 5 response tokens [1.5, 1, 2, 1.5, 3]: mean 1.8, unbiased var 2.3 / 4 = 0.575
    z = lambda g: (g - 1.8) / math.sqrt(0.575 + 1e-8)  # noqa: E731
    torch.testing.assert_close(adv, torch.tensor([[z(1.5), z(1.0), z(2.0)], [z(1.5), z(3.0), 0.0]]))
    # gamma from the config
    _, ret_cfg = ca.compute_reinforce_plus_plus_outcome_advantage(r, m, config=SimpleNamespace(gamma=0.5))
    torch.testing.assert_close(ret_cfg, ret)


def test_reinforce_plus_plus_baseline_hand_case():
    rewards, mask = _outcome([1.0, 3.0, 4.0], [2, 1, 3], 3)
    adv, ret = ca.compute_reinforce_plus_plus_baseline_outcome_advantage(rewards, mask, _uids("a", "a", "b"))
    # group a mean 2 -> [-1, 1]; singleton b: mean 0 -> 4. Broadcast tokens: [-1, -1], [1], [4, 4, 4]
    tokens = [-1.0, -1.0, 1.0, 4.0, 4.0, 4.0]
    mu, sd = statistics.mean(tokens), statistics.stdev(tokens)
    z = lambda x: (x - mu) / math.sqrt(sd**2 + 1e-8)  # noqa: E731
    expected = torch.tensor([[z(-1), z(-1), 0.0], [z(1), 0.0, 0.0], [z(4), z(4), z(4)]])
    torch.testing.assert_close(adv, expected)
    assert ret is adv


def test_remax_hand_case():
    r = torch.tensor([[0.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    m = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    adv, ret = ca.compute_remax_outcome_advantage(r, torch.tensor([0.4, 1.0]), m)
    # returns-to-go [1, 1, 1] and [2, 2, -]; minus the greedy baselines 0.4 and 1.0
    torch.testing.assert_close(ret, torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 0.0]]))
    torch.testing.assert_close(adv, torch.tensor([[0.6, 0.6, 0.6], [1.0, 1.0, 0.0]]))
    with pytest.raises(ValueError):
        ca.compute_remax_outcome_advantage(token_level_rewards=r, response_mask=m)


@pytest.mark.parametrize(
    "fn",
    [
        ca.compute_grpo_outcome_advantage,
        ca.compute_rloo_outcome_advantage,
        ca.compute_reinforce_plus_plus_baseline_outcome_advantage,
    ],
)
def test_grouped_estimators_invariant_to_row_order(fn):
    torch.manual_seed(0)
    scores = torch.randint(0, 4, (12,)).float() * 0.5 + torch.rand(12) * (torch.arange(12) % 3 == 0)
    rewards, mask = _outcome(scores.tolist(), torch.randint(1, 6, (12,)).tolist(), 6)
    index = _uids(*[f"p{i % 4}" for i in range(12)][:11], "solo")
    adv, _ = fn(token_level_rewards=rewards, response_mask=mask, index=index)
    perm = torch.randperm(12)
    adv_p, _ = fn(token_level_rewards=rewards[perm], response_mask=mask[perm], index=index[perm.numpy()])
    torch.testing.assert_close(adv_p, adv[perm], atol=1e-6, rtol=1e-6)


# =====================================================================================================================
# losses
# =====================================================================================================================
def test_agg_loss_modes():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])  # the last row is empty and must not count
    # token-mean (1+2+4)/3; seq-mean-token-sum (3+4)/2; seq-mean-token-mean (1.5+4)/2; -norm: 3.5 / L(=3)
    assert ca.agg_loss(loss, mask, "token-mean").item() == pytest.approx(7 / 3)
    assert ca.agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(3.5)
    assert ca.agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(2.75)
    assert ca.agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(3.5 / 3)
    assert ca.agg_loss(loss, mask, "seq-mean-token-sum-norm", loss_scale_factor=7).item() == pytest.approx(0.5)
    # global normalisers: 7 / 14 tokens x dp 2; (3+4) / 7 sequences
    assert ca.agg_loss(loss, mask, "token-mean", batch_num_tokens=14, dp_size=2).item() == pytest.approx(1.0)
    assert ca.agg_loss(loss, mask, "seq-mean-token-sum", global_batch_size=7).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        ca.agg_loss(loss, mask, "token-sum")


_LOG_RATIOS = [1.5, 0.5, 1.1, 5.0, 0.7]
_ADVS = [1.0, -1.0, 1.0, -1.0, -1.0]


def _pg_inputs():
    old = torch.zeros(1, 5)
    new = torch.log(torch.tensor([_LOG_RATIOS])).requires_grad_()
    return old, new, torch.tensor([_ADVS]), torch.ones(1, 5)


def test_policy_loss_vanilla_hand_case():
    old, new, adv, mask = _pg_inputs()
    # eps 0.2, c 3. token: ratio, A -> max(-rA, -clip(r)A) [then min(., -cA) for A < 0]
    # t0 1.5, +1 -> max(-1.5, -1.2) = -1.2 (clipped) | t1 0.5, -1 -> max(0.5, 0.8) = 0.8 (clipped)
    # t2 1.1, +1 -> -1.1 | t3 5.0, -1 -> max(5, 1.2) = 5 -> dual clip min(5, 3) = 3 | t4 0.7, -1 -> 0.8 (clipped)
    loss, metrics = ca.compute_policy_loss_vanilla(old, new, adv, mask, "token-mean", config={"clip_ratio": 0.2})
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 1.1 + 3.0 + 0.8) / 5)
    assert set(metrics) == {"actor/pg_clipfrac", "actor/ppo_kl", "actor/pg_clipfrac_lower"}
    assert metrics["actor/pg_clipfrac"] == pytest.approx(3 / 5)
    assert metrics["actor/pg_clipfrac_lower"] == pytest.approx(1 / 5)
    assert metrics["actor/ppo_kl"] == pytest.approx(-sum(math.log(r) for r in _LOG_RATIOS) / 5, abs=1e-6)
    # only the unclipped token t2 carries a gradient: d(-A r)/d log r / 5 = -1.1 / 5
    (grad,) = torch.autograd.grad(loss, new)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.0, -0.22, 0.0, 0.0]]))


def test_policy_loss_variants_and_config_forms():
    old, new, adv, mask = _pg_inputs()
    base = (-1.2 + 0.8 - 1.1 + 3.0 + 0.8) / 5
    for cfg in (
        None,
        {"clip_ratio": 0.2},
        OmegaConf.create({"clip_ratio": 0.2, "clip_ratio_low": None}),
        SimpleNamespace(clip_ratio=0.2, clip_ratio_c=3.0),
    ):
        loss, _ = ca.compute_policy_loss_vanilla(old, new, adv, mask, config=cfg)
        assert loss.item() == pytest.approx(base)
    # clip_ratio_high 0.28 (DAPO clip-higher): t0 -> max(-1.5, -1.28) = -1.28
    loss, _ = ca.compute_policy_loss_vanilla(old, new, adv, mask, config={"clip_ratio": 0.2, "clip_ratio_high": 0.28})
    assert loss.item() == pytest.approx((-1.28 + 0.8 - 1.1 + 3.0 + 0.8) / 5)
    # dual-clip bound c = 10: t3 keeps 5
    loss, m = ca.compute_policy_loss_vanilla(old, new, adv, mask, config={"clip_ratio_c": 10.0})
    assert loss.item() == pytest.approx((-1.2 + 0.8 - 1.1 + 5.0 + 0.8) / 5) and m["actor/pg_clipfrac_lower"] == 0
    # masking out t3: mean of [-1.2, 0.8, -1.1, 0.8]; fractions over 4 tokens
    mask3 = torch.tensor([[1.0, 1.0, 1.0, 0.0, 1.0]])
    loss, m = ca.compute_policy_loss_vanilla(old, new, adv, mask3)
    assert loss.item() == pytest.approx(-0.7 / 4)
    assert m["actor/pg_clipfrac"] == pytest.approx(3 / 4) and m["actor/pg_clipfrac_lower"] == 0
    # importance weights scale the per-token loss
    loss, _ = ca.compute_policy_loss_vanilla(old, new, adv, mask, rollout_is_weights=torch.full((1, 5), 2.0))
    assert loss.item() == pytest.approx(2 * base)
    with pytest.raises(ValueError):
        ca.compute_policy_loss_vanilla(old, new, adv, mask, config={"clip_ratio_c": 1.0})
    # deprecated 4-value form
    pg_loss, clipfrac, ppo_kl, clipfrac_lower = ca.compute_policy_loss(old, new, adv, mask, cliprange=0.2)
    assert pg_loss.item() == pytest.approx(base)
    assert clipfrac.item() == pytest.approx(0.6) and clipfrac_lower.item() == pytest.approx(0.2)
    with pytest.raises(ValueError):
        ca.compute_policy_loss(old, new, adv, mask)
    # registry
    assert ca.get_policy_loss_fn("vanilla") is ca.compute_policy_loss_vanilla
    with pytest.raises(ValueError, match="vanilla"):
        ca.get_policy_loss_fn("nope")


def test_value_loss_clipping():
    vpreds = torch.tensor([[1.0, 2.0, 0.0]])
    values = torch.tensor([[0.5, 0.5, 0.5]])
    returns = torch.tensor([[2.0, 1.0, 1.0]])
    # clip to [0.3, 0.7]: t0 max((1-2)^2, (0.7-2)^2) = 1.69 (clipped larger); t1 max(1, 0.09) = 1; t2 max(1, 0.49) = 1
    loss, clipfrac = ca.compute_value_loss(vpreds, returns, values, torch.ones(1, 3), cliprange_value=0.2)
    assert loss.item() == pytest.approx(0.5 * (1.69 + 1 + 1) / 3)
    assert clipfrac.item() == pytest.approx(1 / 3)
    loss, clipfrac = ca.compute_value_loss(vpreds, returns, values, torch.tensor([[0, 1, 1]]), 0.2)
    assert loss.item() == pytest.approx(0.5) and clipfrac.item() == 0.0


def test_entropy_loss():
    logits = torch.zeros(2, 3, 4)  # uniform over 4 -> ln 4 per token
    logits[1, 2] = torch.tensor([0.0, math.log(3.0), -1e4, -1e4])  # p = [1/4, 3/4]
    h2 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    mask = torch.tensor([[1, 1, 0], [0, 0, 1]])
    assert ca.compute_entropy_loss(logits, mask).item() == pytest.approx((2 * math.log(4) + h2) / 3, abs=1e-6)
    assert ca.compute_entropy_loss(logits, mask, "seq-mean-token-mean").item() == pytest.approx(
        (math.log(4) + h2) / 2, abs=1e-6
    )


# =====================================================================================================================
# KL
# =====================================================================================================================
def test_kl_penalty_hand_cases():
    lp = torch.log(torch.tensor([0.5, 0.25]))
    ref = torch.log(torch.tensor([0.25, 0.5]))
    d = math.log(2.0)  # logprob - ref = [+ln2, -ln2]
    expected = {
        "kl": [d, -d],
        "abs": [d, d],
        "mse": [0.5 * d * d] * 2,
        # k3 = exp(-d) + d - 1: [0.5 + ln2 - 1, 2 - ln2 - 1]
        "low_var_kl": [0.5 + d - 1, 2 - d - 1],
    }
    aliases = {"kl": "k1", "mse": "k2", "low_var_kl": "k3"}
    for name, vals in expected.items():
        torch.testing.assert_close(ca.kl_penalty(lp, ref, name), torch.tensor(vals))
        if name in aliases:
            torch.testing.assert_close(ca.kl_penalty(lp, ref, aliases[name]), torch.tensor(vals))
    # k3 clamps: -d clamped to 20, result to 10
    assert ca.kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "k3").item() == 10.0
    with pytest.raises(ValueError):
        ca.kl_penalty(lp, ref, "full")


def test_kl_penalty_straight_through():
    lp = torch.log(torch.tensor([0.5, 0.25])).requires_grad_()
    ref = torch.log(torch.tensor([0.25, 0.5]))
    d = torch.tensor([math.log(2.0), -math.log(2.0)])
    for name in ("k3+", "low_var_kl+", "k1+", "kl+", "abs+"):
        base = name[:-1]
        value = ca.kl_penalty(lp, ref, name)
        torch.testing.assert_close(value, ca.kl_penalty(lp, ref, base))  # value of the named estimator
        (grad,) = torch.autograd.grad(value.sum(), lp)
        torch.testing.assert_close(grad, d)  # gradient of k2 = d
    # without '+', k3's own gradient: 1 - exp(-d) = [0.5, -1]
    (grad,) = torch.autograd.grad(ca.kl_penalty(lp, ref, "k3").sum(), lp)
    torch.testing.assert_close(grad, torch.tensor([0.5, -1.0]))
    torch.testing.assert_close(ca.kl_penalty(lp, ref, "k2+"), ca.kl_penalty(lp, ref, "k2"))


def test_compute_rewards():
    out = ca.compute_rewards(
        torch.tensor([0.0, 0.0, 1.0]), torch.tensor([-1.0, -1.0, -1.0]), torch.tensor([-1.5, -1.0, -0.5]), 0.1
    )
    # kl = old - ref = [0.5, 0, -0.5]; reward = score - 0.1 kl
    torch.testing.assert_close(out, torch.tensor([-0.05, 0.0, 1.05]))


def test_kl_controllers():
    ctrl = ca.AdaptiveKLController(init_kl_coef=0.1, target_kl=0.1, horizon=100)
    ctrl.update(current_kl=0.15, n_steps=10)  # error clip(0.5) = 0.2 -> x(1 + 0.2*10/100) = 0.102
    assert ctrl.value == pytest.approx(0.102)
    ctrl.update(current_kl=0.11, n_steps=10)  # error 0.1 -> x1.01
    assert ctrl.value == pytest.approx(0.10302)
    ctrl.update(current_kl=0.0, n_steps=50)  # error clip(-1) = -0.2 -> x0.9
    assert ctrl.value == pytest.approx(0.10302 * 0.9)
    restored = ca.AdaptiveKLController(1.0, 1.0, 1)
    restored.load_state_dict(ctrl.state_dict())
    assert (restored.value, restored.target, restored.horizon) == (ctrl.value, 0.1, 100)
    fixed = ca.FixedKLController(0.01)
    fixed.update(5.0, 100)
    assert fixed.value == 0.01 and fixed.state_dict() == {"value": 0.01}

    cfg = OmegaConf.create({"type": "adaptive", "kl_coef": 0.2, "horizon": 500, "target_kl": 0.05})
    c = ca.get_kl_controller(cfg)
    assert isinstance(c, ca.AdaptiveKLController) and (c.value, c.target, c.horizon) == (0.2, 0.05, 500)
    c = ca.get_kl_controller({"type": "adaptive"})  # defaults kl_coef 0.001, target 0.1, horizon 10000
    assert (c.value, c.target, c.horizon) == (0.001, 0.1, 10000)
    assert isinstance(ca.get_kl_controller({"type": "fixed", "kl_coef": 0.3}), ca.FixedKLController)
    with pytest.raises(ValueError):
        ca.get_kl_controller({"type": "pid"})
    with pytest.raises(ValueError):
        ca.get_kl_controller({"type": "adaptive", "horizon": 0})
