"""ToolRL's call forms of core_algos (``eos_mask=``, the old name of ``response_mask``) run unchanged, give what the
upstream keyword gives, and warn; both keywords at once is an error."""

import warnings

import numpy as np
import pytest
import torch

from verl.trainer.ppo import core_algos

B, L = 4, 3
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 1]], dtype=torch.float32)
REWARDS = torch.zeros(B, L)
REWARDS[0, 1], REWARDS[1, 2], REWARDS[2, 0], REWARDS[3, 2] = 1.0, 0.0, 2.0, 1.0
INDEX = np.array(["a", "a", "b", "b"], dtype=object)


def _both(fn, **kwargs):
    """(result with eos_mask=, result with response_mask=), asserting the first warns."""
    with pytest.warns(DeprecationWarning, match="response_mask"):
        old = fn(eos_mask=MASK, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new = fn(response_mask=MASK, **kwargs)
    return old, new


def _equal(a, b):
    if isinstance(a, tuple):
        assert len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
        return True
    assert torch.equal(torch.as_tensor(a), torch.as_tensor(b))
    return True


def test_grpo_in_toolrls_form_equals_the_upstream_form_and_the_hand_worked_value():
    old, new = _both(core_algos.compute_grpo_outcome_advantage, token_level_rewards=REWARDS, index=INDEX)
    _equal(old, new)
    # group a: scores 1, 0 -> mean 0.5, unbiased std 0.7071 -> +-0.7071; group b: 2, 1 -> +-0.7071
    s = 0.5 / (0.5**0.5 + 1e-6)
    assert torch.allclose(old[0][:, 0], torch.tensor([s, -s, s, -s]), atol=1e-5)
    assert bool((old[0][MASK == 0] == 0).all())  # zero off the response mask


@pytest.mark.parametrize(
    "name, kwargs",
    [
        ("compute_gae_advantage_return", {"values": torch.rand(B, L), "gamma": 0.9, "lam": 0.8}),
        ("compute_rloo_outcome_advantage", {"index": INDEX}),
        ("compute_reinforce_plus_plus_outcome_advantage", {"gamma": 1.0}),
        ("compute_reinforce_plus_plus_baseline_outcome_advantage", {"index": INDEX}),
        ("compute_remax_outcome_advantage", {"reward_baselines": torch.tensor([0.5, 0.0, 1.0, 0.5])}),
    ],
)
def test_every_estimator_takes_eos_mask(name, kwargs):
    old, new = _both(getattr(core_algos, name), token_level_rewards=REWARDS, **kwargs)
    _equal(old, new)


def test_the_losses_take_eos_mask_as_toolrls_actor_and_critic_call_them():
    torch.manual_seed(0)
    old_lp, lp, adv = torch.randn(B, L), torch.randn(B, L), torch.randn(B, L)
    old, new = _both(core_algos.compute_policy_loss, old_log_prob=old_lp, log_prob=lp, advantages=adv, cliprange=0.2)
    _equal(old, new)
    logits = torch.randn(B, L, 7)
    old, new = _both(core_algos.compute_entropy_loss, logits=logits)
    _equal(old, new)
    vpreds, values, returns = torch.randn(B, L), torch.randn(B, L), torch.randn(B, L)
    old, new = _both(core_algos.compute_value_loss, vpreds=vpreds, values=values, returns=returns, cliprange_value=0.5)
    _equal(old, new)


def test_the_registry_holds_the_aliased_estimator():
    fn = core_algos.get_adv_estimator_fn("grpo")
    with pytest.warns(DeprecationWarning):
        adv, _ = fn(token_level_rewards=REWARDS, eos_mask=MASK, index=INDEX)
    assert adv.shape == (B, L)


def test_both_names_at_once_is_an_error():
    with pytest.raises(TypeError, match="response_mask and its old name eos_mask"):
        core_algos.compute_grpo_outcome_advantage(
            token_level_rewards=REWARDS, response_mask=MASK, eos_mask=MASK, index=INDEX
        )
