"""FlexAttention (``model.override_config.attn_implementation=flex_attention``): the packed and shared-prompt layouts
through transformers' ``flex_attention`` with block masks equal the padded ``sdpa`` path on real RLLA batches —
log-probs, entropies, gradients and a whole update — and the block mask built from the shared layout equals its dense
mask. Tolerances are those of the sdpa packing tests (``test_dp_actor_on_cpu.py``, ``test_shared_prompt_on_cpu.py``):
float32, only the summation order inside attention differs.
"""

from __future__ import annotations

import copy

import pytest
import torch
from omegaconf import OmegaConf

from verl.utils.shared_prompt import attention_mask_for, block_mask_from_dense, build_shared_prompt_batch
from verl.workers.actor.dp_actor import DataParallelPPOActor

from test_dp_actor_on_cpu import actor_config
from test_shared_prompt_on_cpu import ENTROPY_ATOL, LP_ATOL
from workers_testlib import make_rlla_group_batch

LAYOUTS = [dict(use_remove_padding=True), dict(use_shared_prompt=True)]


@pytest.fixture(autouse=True)
def fresh_compile_cache():
    """transformers compiles ``flex_attention``; on CPU, torch 2.13's C++ template fails to build some dynamic-shape
    recompilations (an undeclared ``cur_kvSplitSize`` in the generated code), so each test starts from a clean cache
    and its shapes compile statically (FlexAttention is the CUDA path; the CPU default stays sdpa)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.fixture(scope="module")
def flex_lm(causal_lm):
    model = copy.deepcopy(causal_lm)
    model.set_attn_implementation("flex_attention")
    assert model.config._attn_implementation == "flex_attention"
    return model


def test_block_mask_equals_the_dense_mask(causal_lm, tokenizer):
    from torch.nn.attention.flex_attention import flex_attention

    b = make_rlla_group_batch(tokenizer, 4, num_prompts=2).batch
    shared = build_shared_prompt_batch(b["input_ids"], b["attention_mask"], b["position_ids"], b["responses"].shape[1])
    allowed = shared.attention_mask  # [G, 1, T, T]
    block_mask = block_mask_from_dense(allowed)
    model = copy.deepcopy(causal_lm)
    model.set_attn_implementation("flex_attention")
    assert attention_mask_for(model, allowed) is not None and type(attention_mask_for(model, allowed)) is type(
        block_mask
    )
    groups, _, length, _ = allowed.shape
    assert block_mask.shape == (groups, 1, length, length)
    # the block mask's own dense form is the layout's mask
    assert torch.equal(
        block_mask.to_dense()
        .bool()
        .repeat_interleave(block_mask.BLOCK_SIZE[0], 2)
        .repeat_interleave(block_mask.BLOCK_SIZE[1], 3)[..., :length, :length]
        | ~allowed,
        torch.ones_like(allowed),
    )  # every allowed entry lies in a block the kernel visits
    q, k, v = (torch.randn(groups, 2, length, 16, generator=torch.Generator().manual_seed(i)) for i in range(3))
    flex = flex_attention(q, k, v, block_mask=block_mask)
    dense = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(flex, dense, atol=1e-5, rtol=0)


@pytest.mark.parametrize("layout", LAYOUTS, ids=["packed", "shared"])
@pytest.mark.parametrize("n", [1, 4])
def test_flex_log_probs_equal_padded_sdpa_on_rlla(causal_lm, flex_lm, tokenizer, layout, n):
    data = make_rlla_group_batch(tokenizer, n)
    data.meta_info.update(temperature=0.7, micro_batch_size=4, use_dynamic_bsz=False)
    reference, ref_entropy = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(data, True)
    flex, entropy = DataParallelPPOActor(actor_config(**layout), flex_lm).compute_log_prob(data, True)
    mask = data.batch["response_mask"].bool()
    torch.testing.assert_close(flex[mask], reference[mask], atol=LP_ATOL, rtol=0)
    torch.testing.assert_close(entropy[mask], ref_entropy[mask], atol=ENTROPY_ATOL, rtol=0)
    assert (flex[~mask] == 0).all()


# torch has no FlexAttention backward on CPU ("FlexAttention does not support backward on CPU", compiled or not):
# the gradient and update tests run on CUDA (the GPU suite runs this file), the forward tests everywhere
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention has no backward pass on CPU")


@needs_cuda
@pytest.mark.parametrize("layout", LAYOUTS, ids=["packed", "shared"])
def test_flex_gradients_equal_padded_sdpa(causal_lm, flex_lm, tokenizer, layout):
    causal_lm, flex_lm = causal_lm.cuda(), flex_lm.cuda()
    micro = make_rlla_group_batch(tokenizer, n=4, num_prompts=2).batch.cuda()
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(5)).cuda()
    # the padded reference runs on the sdpa model; the variant on the flex copy with the same weights
    padded = _grads(causal_lm, micro, weights, {})
    other = _grads(flex_lm, micro, weights, layout)
    for name in padded:
        error = (other[name] - padded[name]).norm() / padded[name].norm().clamp(min=1e-12)
        assert error < 1e-5, (name, float(error))


def _grads(model, micro, weights, layout):
    from tensordict import TensorDict

    model.zero_grad(set_to_none=True)
    actor = DataParallelPPOActor(actor_config(**layout), model)
    _, log_probs = actor._forward_micro_batch(TensorDict(dict(micro.items()), batch_size=micro.batch_size), 0.7)
    (log_probs * weights * micro["response_mask"]).sum().backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    assert grads
    return grads


@needs_cuda
@pytest.mark.parametrize("layout", LAYOUTS, ids=["packed", "shared"])
def test_flex_update_equals_padded_sdpa_update(causal_lm, tokenizer, layout):
    data = make_rlla_group_batch(tokenizer, n=4, num_prompts=2).to("cuda")
    data.meta_info["temperature"] = 0.7
    results = []
    for implementation, variant in (("sdpa", {}), ("flex_attention", layout)):
        model = copy.deepcopy(causal_lm).cuda()
        model.set_attn_implementation(implementation)
        cfg = actor_config(ppo_mini_batch_size=8, ppo_micro_batch_size_per_gpu=4, entropy_coeff=0.01, **variant)
        results.append(
            (model, DataParallelPPOActor(cfg, model, torch.optim.SGD(model.parameters(), lr=1e-2)).update_policy(data))
        )
    (padded, padded_metrics), (flex, flex_metrics) = results
    for key in ("actor/pg_loss", "actor/entropy", "actor/grad_norm"):
        assert flex_metrics[key] == pytest.approx(padded_metrics[key], rel=1e-5, abs=1e-6), key
    for (name, p), q in zip(padded.named_parameters(), flex.parameters()):
        torch.testing.assert_close(q, p, atol=1e-6, rtol=1e-5, msg=name)


def test_attn_implementation_is_read_from_override_config(tiny_model_dir):
    from verl.trainer.config_utils import ConfigError, default_config, validate_config
    from verl.utils.model_utils import load_causal_lm

    model_cfg = OmegaConf.create(
        dict(
            path=tiny_model_dir,
            override_config={"attn_implementation": "flex_attention"},
            enable_gradient_checkpointing=False,
            trust_remote_code=False,
            external_lib=None,
            lora_rank=0,
            lora_alpha=16,
            target_modules="all-linear",
        )
    )
    assert load_causal_lm(model_cfg).config._attn_implementation == "flex_attention"
    config = default_config()
    config.actor_rollout_ref.model.override_config = {"attn_implementation": "flash_attn"}
    with pytest.raises(ConfigError, match="actor_rollout_ref.model.override_config.attn_implementation='flash_attn'"):
        validate_config(config, check_files=False)
    config.actor_rollout_ref.model.override_config = {"attn_implementation": "flash_attention_2"}
    config.actor_rollout_ref.model.use_shared_prompt = True
    with pytest.raises(ConfigError, match="use_shared_prompt=true needs attention that takes an arbitrary mask"):
        validate_config(config, check_files=False)
    config.actor_rollout_ref.model.override_config = {"attn_implementation": "flex_attention"}
    config.trainer.device = "cpu"
    with pytest.raises(ConfigError, match="attn_implementation=flex_attention needs a CUDA device"):
        validate_config(config, check_files=False)


def test_a_flex_model_decodes_with_sdpa(causal_lm, flex_lm, tokenizer):
    """The HF rollout switches a FlexAttention model to sdpa for generate (and back): the same greedy tokens as the
    sdpa model, and the model is flex again afterwards."""
    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask
    from verl.workers.rollout.hf_rollout import HFRollout

    from test_hf_rollout_on_cpu import rollout_config

    tokenizer.padding_side = "left"
    enc = tokenizer(["hello", "a longer prompt than the first"], return_tensors="pt", padding=True)
    tensors = dict(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        position_ids=compute_position_id_with_mask(enc["attention_mask"]),
    )
    out = [
        HFRollout(model, rollout_config(), tokenizer)
        .generate_sequences(
            DataProto.from_dict(tensors={k: v.clone() for k, v in tensors.items()}, meta_info={"do_sample": False})
        )
        .batch["responses"]
        for model in (causal_lm, flex_lm)
    ]
    assert torch.equal(out[0], out[1])
    assert flex_lm.config._attn_implementation == "flex_attention"


def test_training_with_flex_on_cpu_is_refused(tiny_model_dir):
    from verl.workers.fsdp_workers import _ModelWorkerMixin
    from verl.utils.model_utils import load_causal_lm

    model_cfg = OmegaConf.create(
        dict(
            path=tiny_model_dir,
            override_config={"attn_implementation": "flex_attention"},
            enable_gradient_checkpointing=False,
            trust_remote_code=False,
            external_lib=None,
            lora_rank=0,
            lora_alpha=16,
            target_modules="all-linear",
        )
    )
    worker = _ModelWorkerMixin()
    worker.device, worker.world_size = "cpu", 1
    with pytest.raises(ValueError, match="flex_attention trains only on CUDA"):
        worker._place(load_causal_lm(model_cfg), None, "actor_rollout_ref.actor.fsdp_config")
    assert (
        worker._place(load_causal_lm(model_cfg, trainable=False), None, "actor_rollout_ref.ref.fsdp_config") is not None
    )  # a frozen reference may
