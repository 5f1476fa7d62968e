"""FLOP counter (verl/utils/flops_counter.py) against a hand count for one layer and against torch's own counter."""

import pytest
import torch

from verl.utils.flops_counter import (
    forward_flops,
    gpu_bf16_peak_flops,
    layer_forward_flops,
    mfu,
    shared_prompt_forward_flops,
    train_flops,
)

# one small Llama/Qwen2-shaped layer: h=64, 4 query heads of 16, 2 kv heads, MLP width 160, vocab 100
CFG = dict(
    num_hidden_layers=1,
    hidden_size=64,
    num_attention_heads=4,
    num_key_value_heads=2,
    intermediate_size=160,
    vocab_size=100,
)


def test_one_layer_hand_count():
    s = 10
    q = 2 * s * 64 * 64  # 81_920
    kv = 2 * (2 * s * 64 * 32)  # k and v: 2 heads x 16 = 32 wide -> 81_920
    o = 2 * s * 64 * 64  # 81_920
    mlp = 3 * 2 * s * 64 * 160  # 614_400
    attn = 2 * 2 * 64 * 55  # causal triangle of 10 tokens has 55 (query, key) pairs -> 14_080
    assert layer_forward_flops(CFG, s) == q + kv + o + mlp + attn == 874_240
    head = 2 * 64 * 100 * 3  # logits at 3 positions
    assert forward_flops(CFG, [s], logit_positions=3) == 874_240 + head
    assert train_flops(CFG, [s], 3) == 3 * (874_240 + head)


def test_packing_does_not_change_the_count():
    # two sequences are not one sequence of the summed length: attention is quadratic per sequence
    assert forward_flops(CFG, [4, 6], 0) == layer_forward_flops(CFG, 4) + layer_forward_flops(CFG, 6)
    assert forward_flops(CFG, [4, 6], 0) < forward_flops(CFG, [10], 0)


def test_shared_prompt_count_by_hand():
    """A 6-token prompt shared by responses of 3 and 4 tokens: linear work of 13 tokens; attention pairs = the prompt's
    triangle (21) + each response's tokens x 6 prompt keys + its own triangle (18 + 6, 24 + 10) = 79."""
    linear = layer_forward_flops(CFG, 13) - 2 * 2 * 64 * (13 * 14 // 2)  # projections + MLP of 13 tokens
    expected = linear + 2 * 2 * 64 * 79 + 2 * 64 * 100 * 7
    assert shared_prompt_forward_flops(CFG, [(6, [3, 4])], logit_positions=7) == expected
    # one member: the unshared count; two members: less than the two unshared sequences (the prompt once)
    assert shared_prompt_forward_flops(CFG, [(6, [3])], 3) == forward_flops(CFG, [9], 3)
    assert shared_prompt_forward_flops(CFG, [(6, [3, 4])], 7) < forward_flops(CFG, [9, 10], 7)


def test_matches_torch_flop_counter_on_a_real_layer():
    """torch's FlopCounterMode counts the same matrix products. With eager attention it sees q.k^T and p.v as plain
    matrix products over the full s x s square (the causal mask is applied after), so the square replaces our
    triangle in the comparison."""
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(**CFG, max_position_embeddings=64, tie_word_embeddings=False, attn_implementation="eager")
    model = LlamaForCausalLM(config).eval()
    s = 12
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=torch.randint(0, 100, (1, s)), use_cache=False)
    ours = forward_flops(config, [s], logit_positions=s)
    triangle, square = 2 * 2 * 64 * (s * (s + 1) // 2), 2 * 2 * 64 * s * s
    assert counter.get_total_flops() == ours - triangle + square


def test_peak_lookup_and_mfu():
    assert gpu_bf16_peak_flops("NVIDIA H100 80GB HBM3") == pytest.approx(989.4e12)
    assert gpu_bf16_peak_flops("NVIDIA H200") == pytest.approx(989.4e12)
    with pytest.raises(KeyError, match="no bf16 peak known"):
        gpu_bf16_peak_flops("Some GPU")
    assert mfu(989.4e12, 2.0, 989.4e12) == pytest.approx(0.5)
    with pytest.raises(ValueError):
        mfu(1.0, 0.0, 1.0)
    with pytest.raises(KeyError, match="vocab_size"):
        forward_flops({"hidden_size": 8}, [1], 0)
