"""Rollout correction (verl/trainer/ppo/rollout_corr.py): the spec's worked example, every level by hand, null =
unchanged, and a masked token contributing nothing to the gradient."""

from __future__ import annotations

import math

import pytest
import torch

from verl.trainer.ppo.core_algos import get_policy_loss_fn
from verl.trainer.ppo.rollout_corr import check_correction_settings, compute_rollout_correction, correction_settings

OLP = torch.tensor([[-1.0, -1.0, -1.0]], dtype=torch.float64)
RLP = torch.tensor([[-1.2, -1.0, -0.3]], dtype=torch.float64)
MASK = torch.ones(1, 3)


def test_worked_example_tis_and_icepop():
    w, mask, metrics = compute_rollout_correction(OLP, RLP, MASK, rollout_is="token", rollout_is_threshold=2.0)
    torch.testing.assert_close(w, torch.tensor([[math.exp(0.2), 1.0, math.exp(-0.7)]], dtype=torch.float64))
    assert mask is MASK  # no rejection: the same tensor
    w, mask, metrics = compute_rollout_correction(
        OLP, RLP, MASK, rollout_rs="token", rollout_rs_threshold=5.0, rollout_rs_threshold_lower=0.5
    )
    assert w is None and mask.tolist() == [[1.0, 1.0, 0.0]]  # 0.49659 < 0.5
    assert metrics["rollout_corr/rs_masked_frac"] == pytest.approx(1 / 3)
    assert metrics["rollout_corr/kl"] == pytest.approx((-0.2 + 0.0 + 0.7) / 3)  # mean of rlp - olp
    assert metrics["rollout_corr/ppl_ratio"] == pytest.approx(math.exp(-0.5 / 3))
    assert metrics["rollout_corr/log_prob_diff_max"] == pytest.approx(0.7)  # max |olp - rlp| over the mask


def test_sequence_and_geometric_levels_by_hand():
    olp = torch.tensor([[-1.0, -1.0, -1.0], [-0.5, -0.5, 0.0]], dtype=torch.float64)
    rlp = torch.tensor([[-1.5, -1.5, -9.0], [-0.4, -0.4, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # row 0's third token is padding (its rlp is ignored)
    # log rho sums: row 0 = 1.0 (2 tokens), row 1 = -0.2 (3 tokens)
    w, _, _ = compute_rollout_correction(olp, rlp, mask, rollout_is="sequence", rollout_is_threshold=2.0)
    torch.testing.assert_close(w, torch.tensor([[2.0, 2.0, 0.0], [math.exp(-0.2)] * 3], dtype=torch.float64))
    _, keep, _ = compute_rollout_correction(olp, rlp, mask, rollout_rs="sequence", rollout_rs_threshold=2.0)
    assert keep.tolist() == [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]  # e^1 > 2
    _, keep, _ = compute_rollout_correction(olp, rlp, mask, rollout_rs="geometric", rollout_rs_threshold=2.0)
    assert keep.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]  # e^0.5 <= 2
    # combined: weights only where the mask keeps the token
    w, keep, metrics = compute_rollout_correction(
        olp, rlp, mask, rollout_is="token", rollout_is_threshold=1.5, rollout_rs="sequence", rollout_rs_threshold=2.0
    )
    torch.testing.assert_close(w[0], torch.zeros(3, dtype=torch.float64))
    torch.testing.assert_close(w[1], torch.tensor([math.exp(-0.1), math.exp(-0.1), 1.0], dtype=torch.float64))
    assert metrics["rollout_corr/rs_masked_frac"] == pytest.approx(2 / 5)


def test_null_changes_nothing_and_errors_name_the_key():
    w, mask, metrics = compute_rollout_correction(OLP, RLP, MASK, **correction_settings({}))
    assert w is None and mask is MASK and "rollout_corr/kl" in metrics
    with pytest.raises(ValueError, match="rollout_correction.rollout_is='tok'"):
        compute_rollout_correction(OLP, RLP, MASK, rollout_is="tok")
    with pytest.raises(ValueError, match="rollout_rs_threshold=None"):
        compute_rollout_correction(OLP, RLP, MASK, rollout_rs="token")
    with pytest.raises(ValueError, match="rollout_rs_threshold_lower=5.0: expected 0 <= lower < rollout_rs_thres"):
        compute_rollout_correction(
            OLP, RLP, MASK, rollout_rs="token", rollout_rs_threshold=2.0, rollout_rs_threshold_lower=5.0
        )  # would reject every token
    check_correction_settings(rollout_rs="sequence", rollout_rs_threshold=2.0, rollout_rs_threshold_lower=0.0)


def test_a_rejected_token_contributes_nothing_to_the_gradient():
    lp = torch.tensor([[-0.9, -1.1, -1.0]], dtype=torch.float64, requires_grad=True)
    w, keep, _ = compute_rollout_correction(
        OLP,
        RLP,
        MASK,
        rollout_is="token",
        rollout_is_threshold=2.0,
        rollout_rs="token",
        rollout_rs_threshold=5.0,
        rollout_rs_threshold_lower=0.5,
    )
    adv = torch.ones(1, 3, dtype=torch.float64)
    loss, _ = get_policy_loss_fn("vanilla")(OLP, lp, adv, keep, "token-mean", {"clip_ratio": 0.2}, rollout_is_weights=w)
    loss.backward()
    assert lp.grad[0, 2] == 0.0 and lp.grad[0, 0] != 0.0 and lp.grad[0, 1] != 0.0
    # token 0: ratio e^0.1 inside the clip range, weight e^0.2, over 2 kept tokens
    assert lp.grad[0, 0].item() == pytest.approx(-math.exp(0.2) * math.exp(0.1) / 2)


def test_apply_rollout_correction_on_a_batch():
    from omegaconf import OmegaConf

    from verl.protocol import DataProto
    from verl.trainer.ppo.rollout_corr import apply_rollout_correction

    def batch(with_rollout=True):
        tensors = {"old_log_probs": OLP.float(), "response_mask": MASK.clone()}
        if with_rollout:
            tensors["rollout_log_probs"] = RLP.float()
        return DataProto.from_dict(tensors)

    plain = batch(with_rollout=False)
    assert apply_rollout_correction(plain, OmegaConf.create({})) == {}  # no rollout log-probs: nothing at all
    data = batch()
    metrics = apply_rollout_correction(data, OmegaConf.create({}))  # metrics only, no correction
    assert "rollout_is_weights" not in data.batch.keys() and data.batch["response_mask"].tolist() == [[1.0] * 3]
    assert metrics["rollout_corr/kl"] == pytest.approx(0.5 / 3, rel=1e-6)
    data = batch()
    cfg = OmegaConf.create(
        {
            "rollout_correction": {
                "rollout_is": "token",
                "rollout_rs": "token",
                "rollout_rs_threshold": 5.0,
                "rollout_rs_threshold_lower": 0.5,
            }
        }
    )
    apply_rollout_correction(data, cfg)
    assert data.batch["response_mask"].tolist() == [[1.0, 1.0, 0.0]]
    torch.testing.assert_close(data.batch["rollout_is_weights"], torch.tensor([[math.exp(0.2), 1.0, 0.0]]))


def test_trainer_reports_the_hf_rollouts_mismatch_and_corrects(tmp_path, small_rlla):
    """Two GRPO steps with the HF rollout reporting its log-probs: the rollout_corr metrics appear every step and,
    the rollout being the actor's own module, the mismatch is numerics only (float32 on CPU)."""
    import json

    from conftest import e2e_overrides
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo

    config = load_default_config(
        e2e_overrides(tmp_path, small_rlla)
        + [
            "algorithm.adv_estimator=grpo",
            "trainer.single_process=true",
            "trainer.test_freq=-1",
            "trainer.logger=[console,jsonl]",
            "actor_rollout_ref.rollout.calculate_log_probs=true",
            "algorithm.rollout_correction.rollout_is=token",
            "algorithm.rollout_correction.rollout_rs=token",
            "algorithm.rollout_correction.rollout_rs_threshold=2.0",
        ]
    )
    run_ppo(config)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "rollout_corr/kl" in r]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert abs(r["rollout_corr/kl"]) < 1e-4 and r["rollout_corr/is_weight_max"] < 1.01
        assert r["rollout_corr/rs_masked_frac"] == 0.0
