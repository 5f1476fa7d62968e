"""DataParallelPPOCritic on the tiny model: value positions and masking, remove-padding equivalence, and that
updates regress the values onto the returns."""

from __future__ import annotations

import pytest
import torch

from verl.trainer.config_utils import default_section
from verl.utils.model_utils import load_value_model
from verl.workers.critic.dp_critic import DataParallelPPOCritic
from workers_testlib import make_batch
import itertools


def critic_config(**overrides):
    base = dict(
        ppo_mini_batch_size=6,
        ppo_micro_batch_size_per_gpu=3,
        use_dynamic_bsz=False,
        ppo_max_token_len_per_gpu=24,
        ppo_epochs=1,
        shuffle=False,
        grad_clip=1.0,
        cliprange_value=0.5,
        loss_agg_mode="token-mean",
        use_remove_padding=False,
    )
    base.update(overrides)
    return default_section("critic", **base)


@pytest.fixture(scope="module")
def value_model(tiny_model_dir):
    torch.manual_seed(0)  # the scalar head is freshly initialised from the global RNG
    return load_value_model(default_section("critic.model", path=tiny_model_dir))


def with_meta(data, **meta):
    data.meta_info.update({"micro_batch_size": 4, "use_dynamic_bsz": False, "max_token_len": 24, **meta})
    return data


def test_values_read_at_the_predicting_positions_and_masked(value_model):
    data = with_meta(make_batch())
    critic = DataParallelPPOCritic(critic_config(), value_model, torch.optim.AdamW(value_model.parameters()))
    values = critic.compute_values(data)
    tensors = data.batch
    mask = tensors["response_mask"]
    assert values.shape == mask.shape
    assert torch.all(values[mask == 0] == 0)  # response_mask, not ToolRL's shifted attention mask
    with torch.no_grad():
        full = value_model(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
        ).logits[..., 0]
    response_length = mask.shape[1]
    expected = full[:, -response_length - 1 : -1] * mask
    torch.testing.assert_close(values, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", [{"use_remove_padding": True}, {"use_dynamic_bsz": True}])
def test_values_equal_across_batching_modes(value_model, variant):
    optimizer = torch.optim.AdamW(value_model.parameters())
    reference = DataParallelPPOCritic(critic_config(), value_model, optimizer).compute_values(with_meta(make_batch()))
    critic = DataParallelPPOCritic(
        critic_config(use_remove_padding=variant.get("use_remove_padding", False)), value_model, optimizer
    )
    got = critic.compute_values(with_meta(make_batch(), use_dynamic_bsz=variant.get("use_dynamic_bsz", False)))
    torch.testing.assert_close(got, reference, atol=1e-5, rtol=0)


def test_update_reduces_the_value_loss_on_a_fixed_batch(tiny_model_dir):
    torch.manual_seed(0)
    module = load_value_model(default_section("critic.model", path=tiny_model_dir))
    optimizer = torch.optim.AdamW(module.parameters(), lr=2e-4, weight_decay=0.0)
    critic = DataParallelPPOCritic(critic_config(use_remove_padding=True, cliprange_value=100.0), module, optimizer)

    def fixed_batch():
        data = make_batch()
        data.batch["returns"].fill_(1.0)  # a learnable target
        return data

    losses = []
    for _ in range(5):
        metrics = critic.update_critic(fixed_batch())
        losses.append(metrics["critic/vf_loss"])
    assert all(later < earlier for earlier, later in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.5 * losses[0], losses
    for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/grad_norm", "critic/lr"):
        assert key in metrics
    assert metrics["critic/vf_clipfrac"] == 0.0  # cliprange 100: never clipped
