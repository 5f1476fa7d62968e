"""GSPO and CISPO (core_algos' policy-loss registry): the worked example of the spec, values and gradients against a
float64 hand computation on random batches with uneven masks for every loss_agg_mode, and GSPO = PPO-clip when every
token of a sequence has the sequence's ratio."""

from __future__ import annotations

import math

import pytest
import torch

from verl.trainer.ppo.core_algos import get_policy_loss_fn

MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
CLIP = {"clip_ratio": 0.2, "clip_ratio_low": 0.2, "clip_ratio_high": 0.2}


def _worked():
    lp = torch.tensor([[-0.9, -1.1, -1.0]], dtype=torch.float64, requires_grad=True)
    return lp, torch.full((1, 3), -1.0, dtype=torch.float64), torch.ones(1, 3, dtype=torch.float64), torch.ones(1, 3)


def test_worked_example_gspo():
    lp, olp, adv, mask = _worked()
    loss, metrics = get_policy_loss_fn("gspo")(olp, lp, adv, mask, "token-mean", CLIP)
    loss.backward()
    assert loss.item() == pytest.approx(-1.0)  # log s = 0 -> s = 1
    torch.testing.assert_close(lp.grad, torch.full((1, 3), -1 / 3, dtype=torch.float64))
    assert metrics["actor/pg_clipfrac"] == 0.0 and metrics["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-12)


def test_worked_example_cispo():
    lp, olp, adv, mask = _worked()
    loss, metrics = get_policy_loss_fn("cispo")(olp, lp, adv, mask, "token-mean", CLIP)
    loss.backward()
    r = torch.tensor([math.exp(0.1), math.exp(-0.1), 1.0], dtype=torch.float64)
    assert loss.item() == pytest.approx(0.99666, abs=1e-5)
    torch.testing.assert_close(lp.grad, (-r / 3).unsqueeze(0))
    assert metrics["actor/pg_clipfrac"] == 0.0


def _random_batch(seed):
    g = torch.Generator().manual_seed(seed)
    B, L = 5, 7
    lengths = [7, 3, 1, 5, 0]  # uneven, one empty row
    mask = torch.zeros(B, L)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    olp = -torch.rand(B, L, generator=g, dtype=torch.float64) * 3
    lp = (olp + torch.randn(B, L, generator=g, dtype=torch.float64) * 0.3).requires_grad_(True)
    adv = torch.randn(B, 1, generator=g, dtype=torch.float64).expand(B, L).clone()
    return olp, lp, adv, mask


def _weights(mask, mode):
    """d loss / d l_it of each loss_agg_mode (rows without tokens never count)."""
    mask = mask.double()
    tokens = mask.sum(-1, keepdim=True)
    n_seq = (tokens > 0).sum()
    if mode == "token-mean":
        return mask / mask.sum()
    if mode == "seq-mean-token-mean":
        return mask / tokens.clamp(min=1) / n_seq
    if mode == "seq-mean-token-sum":
        return mask / n_seq
    return mask / n_seq / mask.shape[-1]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gspo_matches_a_float64_hand_computation(mode, seed):
    olp, lp, adv, mask = _random_batch(seed)
    cfg = {"clip_ratio": 0.2, "clip_ratio_low": 0.05, "clip_ratio_high": 0.08}  # some sequences clipped
    loss, metrics = get_policy_loss_fn("gspo")(olp, lp, adv, mask, mode, cfg)
    loss.backward()
    B, L = mask.shape
    w = _weights(mask, mode)
    expected_loss, expected_grad, clipped, count = 0.0, torch.zeros(B, L, dtype=torch.float64), 0, 0
    for i in range(B):
        n = int(mask[i].sum())
        if n == 0:
            continue
        s = math.exp(min(sum(float(lp[i, t].detach() - olp[i, t]) for t in range(n)) / n, 10.0))
        for t in range(n):
            a = float(adv[i, t])
            unclipped, clip = -a * s, -a * min(max(s, 1 - 0.05), 1 + 0.08)
            expected_loss += float(w[i, t]) * max(unclipped, clip)
            active = clip > unclipped
            clipped, count = clipped + active, count + 1
            expected_grad[i, t] = 0.0 if active else float(w[i, t]) * -a * s  # d s_it / d lp_it = s
    assert loss.item() == pytest.approx(expected_loss, rel=1e-10, abs=1e-12)
    torch.testing.assert_close(lp.grad, expected_grad, rtol=1e-9, atol=1e-12)
    assert metrics["actor/pg_clipfrac"] == pytest.approx(clipped / count)
    assert 0 < clipped < count  # the batch exercises both branches


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_cispo_matches_a_float64_hand_computation(mode, seed):
    olp, lp, adv, mask = _random_batch(seed)
    cfg = {"clip_ratio": 0.2, "clip_ratio_low": 0.1, "clip_ratio_high": 0.1}
    loss, metrics = get_policy_loss_fn("cispo")(olp, lp, adv, mask, mode, cfg)
    loss.backward()
    w = _weights(mask, mode)
    r = torch.exp(lp.detach() - olp)
    r_hat = r.clamp(0.9, 1.1)
    expected_loss = float((w * -r_hat * adv * lp.detach()).sum())
    assert loss.item() == pytest.approx(expected_loss, rel=1e-10, abs=1e-12)
    torch.testing.assert_close(lp.grad, w * -r_hat * adv, rtol=1e-9, atol=1e-12)  # never zeroed by the clip
    on = mask.bool()
    assert metrics["actor/pg_clipfrac"] == pytest.approx(float((r_hat != r)[on].double().mean()))
    assert 0 < metrics["actor/pg_clipfrac"] < 1


@pytest.mark.parametrize("mode", MODES)
def test_gspo_with_equal_ratios_per_sequence_is_ppo_clip(mode):
    """Every token of row i at ratio exp(d_i): GSPO's sequence ratio is exp(d_i) too, so the losses and gradients
    equal PPO-clip's at the same clip range (the dual clip set out of reach)."""
    g = torch.Generator().manual_seed(3)
    B, L = 4, 6
    mask = torch.ones(B, L)
    mask[1, 4:] = 0
    olp = -torch.rand(B, L, generator=g, dtype=torch.float64)
    d = torch.tensor([[0.3], [-0.25], [0.01], [-0.02]], dtype=torch.float64)
    adv = torch.tensor([[1.0], [-0.5], [2.0], [-1.5]], dtype=torch.float64).expand(B, L).clone()
    cfg = {"clip_ratio": 0.2, "clip_ratio_c": 1e9}
    grads = []
    for name in ("gspo", "vanilla"):
        lp = (olp + d).requires_grad_(True)
        loss, metrics = get_policy_loss_fn(name)(olp, lp, adv, mask, mode, cfg)
        loss.backward()
        grads.append((loss.detach(), lp.grad, metrics["actor/pg_clipfrac"]))
    torch.testing.assert_close(grads[0][0], grads[1][0])
    torch.testing.assert_close(grads[0][1], grads[1][1])
    assert grads[0][2] == pytest.approx(grads[1][2]) and grads[0][2] > 0  # rows 0 and 1 are clipped


def test_rollout_is_weights_multiply_the_token_losses():
    lp, olp, adv, mask = _worked()
    weights = torch.tensor([[2.0, 1.0, 0.0]], dtype=torch.float64)
    for name in ("gspo", "cispo"):
        plain, _ = get_policy_loss_fn(name)(olp, lp, adv, mask, "seq-mean-token-sum", CLIP)
        weighted, _ = get_policy_loss_fn(name)(
            olp, lp, adv, mask, "seq-mean-token-sum", CLIP, rollout_is_weights=weights
        )
        if name == "gspo":  # every token's loss is -1
            assert plain.item() == pytest.approx(-3.0) and weighted.item() == pytest.approx(-3.0)
        else:
            per_token = [math.exp(0.1) * -0.9, math.exp(-0.1) * -1.1, -1.0]
            assert weighted.item() == pytest.approx(-(2 * per_token[0] + per_token[1]))
