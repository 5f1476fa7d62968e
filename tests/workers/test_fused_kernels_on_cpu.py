"""``model.use_fused_kernels`` in the actor (``verl/utils/fused_linear_logprob.py``): log-probs, entropies, gradients
and a whole update equal the materialised-logits path on real RLLA prompts, with each layout (padded, remove-padding,
shared-prompt); heads it cannot stand in for are refused with a reason. Tolerances as ``test_shared_prompt_on_cpu``."""

from __future__ import annotations

import copy

import pytest
import torch

from verl.utils.fused_linear_logprob import fused_head_problem
from verl.workers.actor.dp_actor import DataParallelPPOActor

from test_dp_actor_on_cpu import actor_config, assert_gradients_equal_padded
from test_shared_prompt_on_cpu import ENTROPY_ATOL, LP_ATOL, assert_update_equals_padded
from workers_testlib import make_rlla_group_batch

LAYOUTS = {"padded": {}, "remove_padding": {"use_remove_padding": True}, "shared": {"use_shared_prompt": True}}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_fused_log_probs_and_entropy_equal_logits_path(causal_lm, tokenizer, layout):
    data = make_rlla_group_batch(tokenizer, n=4)
    data.meta_info.update(temperature=0.7, micro_batch_size=4, use_dynamic_bsz=False, max_token_len=2400)
    reference, ref_entropy = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(data, True)
    actor = DataParallelPPOActor(actor_config(use_fused_kernels=True, **LAYOUTS[layout]), causal_lm)
    assert actor.use_fused_kernels
    fused, entropy = actor.compute_log_prob(data, True)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(fused[mask], reference[mask], atol=LP_ATOL, rtol=0)
    torch.testing.assert_close(entropy[mask], ref_entropy[mask], atol=ENTROPY_ATOL, rtol=0)


@pytest.mark.parametrize("layout", ["padded", "shared"])
def test_fused_gradients_equal_padded(causal_lm, tokenizer, layout):
    micro = make_rlla_group_batch(tokenizer, n=4, num_prompts=2).batch
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(7))
    assert_gradients_equal_padded(causal_lm, micro, weights, use_fused_kernels=True, **LAYOUTS[layout])


def test_fused_update_equals_padded_update(causal_lm, tokenizer):
    """Entropy bonus on, so the entropy's gradient through the fused head is exercised too (tied embeddings: the
    head's gradient lands on the embedding)."""
    data = make_rlla_group_batch(tokenizer, n=4, num_prompts=2)
    data.meta_info["temperature"] = 0.7
    assert_update_equals_padded(causal_lm, data, use_fused_kernels=True, use_shared_prompt=True)


def test_unsupported_heads_fall_back_with_a_reason(causal_lm, caplog):
    assert fused_head_problem(causal_lm) is None
    with_bias = copy.deepcopy(causal_lm)
    head = with_bias.get_output_embeddings()
    head.bias = torch.nn.Parameter(torch.zeros(head.out_features))
    assert fused_head_problem(with_bias) == "the LM head has a bias"
    capped = copy.deepcopy(causal_lm)
    capped.config.final_logit_softcapping = 30.0
    assert "final_logit_softcapping=30.0" in fused_head_problem(capped)
    with caplog.at_level("WARNING"):
        actor = DataParallelPPOActor(actor_config(use_fused_kernels=True), with_bias)
    assert not actor.use_fused_kernels and "use_fused_kernels ignored: the LM head has a bias" in caplog.text


def test_a_head_that_is_not_linear_in_the_last_hidden_state_is_refused(causal_lm, tokenizer):
    """A model whose logits are scaled under a config key the static check does not know: the first fused forward
    compares the model's own logits with the linear head and refuses."""
    scaled = copy.deepcopy(causal_lm)
    head = scaled.get_output_embeddings()
    head.register_forward_hook(lambda module, args, out: out * 0.5)
    assert fused_head_problem(scaled) is None
    data = make_rlla_group_batch(tokenizer, n=1, num_prompts=2)
    data.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=2400)
    with pytest.raises(ValueError, match="use_fused_kernels=false"):
        DataParallelPPOActor(actor_config(use_fused_kernels=True), scaled).compute_log_prob(data, False)
