"""Shared-prompt packing (``verl/utils/shared_prompt.py``): the layout and mask by hand, then shared == unshared for
log-probs, entropies, gradients and a whole update on real RLLA prompts with uneven lengths, n in {1, 4}.

Tolerances (float32 on CPU; sharing changes only the summation order inside attention and the matmuls): measured
log-prob differences ~1e-6 absolute (|log-prob| ~ 11), entropy ~1e-5 (entropy ~ 10.8), so 1e-5 / 5e-5 absolute;
gradients 1e-5 relative Frobenius error per parameter tensor, as for remove-padding in ``test_dp_actor_on_cpu.py``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from verl.utils.seqlen_balancing import split_micro_batches
from verl.utils.shared_prompt import attention_mask_for, build_shared_prompt_batch, group_rows_by_prompt
from verl.workers.actor.dp_actor import DataParallelPPOActor

from test_dp_actor_on_cpu import actor_config, assert_gradients_equal_padded
from workers_testlib import EOS, make_rlla_group_batch

LP_ATOL = 1e-5
ENTROPY_ATOL = 5e-5


def _hand_batch():
    """Two groups: prompt A (3 tokens) with responses of 2 and 1 tokens, prompt B (2 tokens, 1 left pad) with 2."""
    prompts = torch.tensor([[11, 12, 13], [11, 12, 13], [EOS, 21, 22]])
    prompt_mask = torch.tensor([[1, 1, 1], [1, 1, 1], [0, 1, 1]])
    responses = torch.tensor([[31, 32], [41, EOS], [51, 52]])
    response_mask = torch.tensor([[1, 1], [1, 0], [1, 1]])
    attention_mask = torch.cat([prompt_mask, response_mask], 1)
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return torch.cat([prompts, responses], 1), attention_mask, position_ids


def test_layout_and_mask_by_hand():
    input_ids, attention_mask, position_ids = _hand_batch()
    shared = build_shared_prompt_batch(input_ids, attention_mask, position_ids, response_length=2)
    # one row per group, prompts ending at column 3 (the longest prompt), responses from there:
    # row 0: [A A A | r0 r0 | r1]      row 1: [pad | B B | r2 r2 | pad]
    assert shared.groups == [[0, 1], [2]]
    pad = int(input_ids[0, 0])
    assert shared.input_ids.tolist() == [[11, 12, 13, 31, 32, 41], [pad, 21, 22, 51, 52, pad]]
    assert shared.position_ids.tolist() == [[0, 1, 2, 3, 4, 3], [0, 0, 1, 2, 3, 0]]
    visible = [
        {0: [0], 1: [0, 1], 2: [0, 1, 2], 3: [0, 1, 2, 3], 4: [0, 1, 2, 3, 4], 5: [0, 1, 2, 5]},
        {0: [0], 1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [1, 2, 3, 4], 5: [5]},
    ]  # padding sees only itself
    for row, keys_of in enumerate(visible):
        expected = torch.zeros(6, 6, dtype=torch.bool)
        for query, keys in keys_of.items():
            expected[query, keys] = True
        assert torch.equal(shared.attention_mask[row, 0], expected), row  # row 1's response never sees row 0's
    # logits kept at columns 2 (each prompt's last token: predicts r0[0], r1[0], r2[0]) and 3 (r0[0] -> r0[1],
    # r2[0] -> r2[1]); the kept logits are [row, column] flattened: row 0 -> 0, 1; row 1 -> 2, 3
    assert shared.keep.tolist() == [2, 3]
    assert shared.in_response.tolist() == [[True, True], [True, False], [True, True]]
    assert shared.target_index.tolist() == [0, 1, 0, 2, 3]  # r0[0], r0[1], r1[0], r2[0], r2[1]


def test_bad_layouts_raise_clear_errors(causal_lm):
    input_ids, attention_mask, position_ids = _hand_batch()
    holed = attention_mask.clone()
    holed[2, 3] = 0  # row 2: response token 0 padding, token 1 valid
    with pytest.raises(ValueError, match="row 2's response tokens are not contiguous"):
        build_shared_prompt_batch(input_ids, holed, position_ids, response_length=2)
    no_prompt = attention_mask.clone()
    no_prompt[1, :3] = 0
    with pytest.raises(ValueError, match="row 1 has no valid prompt token"):
        build_shared_prompt_batch(input_ids, no_prompt, position_ids, response_length=2)
    model = copy.deepcopy(causal_lm)
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="use_shared_prompt needs attention"):
        attention_mask_for(model, torch.ones(1, 1, 2, 2, dtype=torch.bool))


@pytest.mark.parametrize("n", [1, 4])
@pytest.mark.parametrize("dynamic", [False, True])
def test_shared_log_probs_equal_padded_on_rlla(causal_lm, tokenizer, n, dynamic):
    data = make_rlla_group_batch(tokenizer, n)
    data.meta_info.update(temperature=0.7, micro_batch_size=4, use_dynamic_bsz=dynamic, max_token_len=2400)
    reference, ref_entropy = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(data, True)
    shared, entropy = DataParallelPPOActor(actor_config(use_shared_prompt=True), causal_lm).compute_log_prob(data, True)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(shared[mask], reference[mask], atol=LP_ATOL, rtol=0)
    torch.testing.assert_close(entropy[mask], ref_entropy[mask], atol=ENTROPY_ATOL, rtol=0)
    assert (shared[~mask] == 0).all()


def test_dynamic_micro_batches_keep_groups_whole_and_count_shared_tokens(tokenizer):
    data = make_rlla_group_batch(tokenizer, n=4)
    tensors = data.batch
    prompt_length = tensors["input_ids"].shape[1] - tensors["responses"].shape[1]
    groups = group_rows_by_prompt(tensors["input_ids"], tensors["attention_mask"], prompt_length)
    assert groups == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    prompt_tokens = tensors["attention_mask"][:, :prompt_length].sum(-1)
    response_tokens = tensors["attention_mask"][:, prompt_length:].sum(-1)
    group_cost = [int(prompt_tokens[g[0]] + response_tokens[g].sum()) for g in groups]
    budget = max(group_cost) + 10  # one group per micro-batch in the shared layout (rows alone would need ~4x)
    micro_batches, restore = split_micro_batches(tensors, None, True, budget, shared_prompt_length=prompt_length)
    assert len(micro_batches) == 3
    held = [sorted(set(mb["input_ids"][:, :prompt_length].sum(-1).tolist())) for mb in micro_batches]
    assert all(len(sums) == 1 for sums in held)  # each micro-batch holds one prompt
    assert torch.equal(torch.cat([mb["input_ids"] for mb in micro_batches])[restore], tensors["input_ids"])
    with pytest.raises(ValueError, match="prompt group of"):
        split_micro_batches(tensors, None, True, max(group_cost) - 1, shared_prompt_length=prompt_length)


def test_shared_gradients_equal_padded_on_rlla(causal_lm, tokenizer):
    micro = make_rlla_group_batch(tokenizer, n=4, num_prompts=2).batch
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(5))
    assert_gradients_equal_padded(causal_lm, micro, weights, use_shared_prompt=True)


def assert_update_equals_padded(causal_lm, data, **overrides):
    """One ``update_policy`` (SGD, entropy bonus 0.01, 2 micro-batches of 4) with ``overrides`` against the padded
    path: same pg_loss / entropy / grad_norm metrics and the same weights afterwards; the weights did change."""
    results = []
    for variant in ({}, overrides):
        model = copy.deepcopy(causal_lm)
        cfg = actor_config(ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4, entropy_coeff=0.01, **variant)
        metrics = DataParallelPPOActor(cfg, model, torch.optim.SGD(model.parameters(), lr=1e-2)).update_policy(data)
        results.append((model, metrics))
    (padded, padded_metrics), (other, other_metrics) = results
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm"):
        assert other_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-5, abs=1e-6), key
    for (name, p), q in zip(padded.named_parameters(), other.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-5, msg=name)
    assert any(not torch.equal(p, q) for p, q in zip(padded.parameters(), causal_lm.parameters()))


def test_shared_update_equals_padded_update(causal_lm, tokenizer):
    data = make_rlla_group_batch(tokenizer, n=4, num_prompts=2)
    data.meta_info["temperature"] = 0.7
    assert_update_equals_padded(
        causal_lm, data, use_shared_prompt=True, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=4000
    )


def test_cpu_sdpa_gets_one_additive_mask_with_the_boolean_masks_scores(causal_lm, tokenizer):
    data = make_rlla_group_batch(tokenizer, 4, num_prompts=2)
    b = data.batch
    shared = build_shared_prompt_batch(b["input_ids"], b["attention_mask"], b["position_ids"], b["responses"].shape[1])
    assert causal_lm.config._attn_implementation == "sdpa"
    mask = attention_mask_for(causal_lm, shared.attention_mask)
    assert mask.dtype == torch.float32 and mask.shape == shared.attention_mask.shape
    assert torch.equal(mask == 0, shared.attention_mask) and torch.isneginf(mask[~shared.attention_mask]).all()
    with torch.no_grad():
        additive = causal_lm(input_ids=shared.input_ids, position_ids=shared.position_ids, attention_mask=mask).logits
        boolean = causal_lm(
            input_ids=shared.input_ids, position_ids=shared.position_ids, attention_mask=shared.attention_mask
        ).logits
    torch.testing.assert_close(additive, boolean, atol=1e-6, rtol=0)
