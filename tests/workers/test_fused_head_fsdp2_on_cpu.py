"""The fused LM head under FSDP2 (issue 24): with the model sharded over two gloo ranks, ``model.use_fused_kernels``
log-probs, entropies and gradients (gathered from the shards) equal the unsharded model's materialised-logits path, in
the padded and the shared-prompt layouts, with the tiny model's tied head and with an untied one. The head runs inside
the model's forward (``fused_linear_logprob.head_computes_logprobs``), where FSDP2 has gathered its weight, so no
``[tokens, vocab]`` logits exist on any rank. Both ranks see the same micro-batch, so FSDP2's mean over ranks is the single-rank gradient.
Tolerances: float32, as ``test_fused_kernels_on_cpu.py`` (the shards change only the summation order).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).parent))  # the spawned ranks import this file's helpers

LAYOUTS = {"padded": {}, "shared": {"use_shared_prompt": True}}
# (layout, tied head): the tiny model ties its head to the embeddings; an untied head is a separate sharded weight
CASES = [("padded", True), ("shared", True), ("padded", False)]


def _load(model_dir, tied):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)  # an untied head is initialised afresh: the same weights on every rank and in the reference
    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, tie_word_embeddings=tied)


def _loss(log_probs, entropy, mask, weights):
    return ((log_probs * weights + 0.1 * entropy) * mask).sum()


def _run_actor(model, layout, micro, weights, fused):
    from tensordict import TensorDict

    from test_dp_actor_on_cpu import actor_config
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    actor = DataParallelPPOActor(actor_config(use_fused_kernels=fused, **LAYOUTS[layout]), model)
    assert actor.use_fused_kernels == fused
    entropy, log_probs = actor._forward_micro_batch(
        TensorDict(dict(micro.items()), batch_size=micro.batch_size), 0.7, calculate_entropy=True
    )
    _loss(log_probs, entropy, micro["response_mask"], weights).backward()
    return log_probs.detach(), entropy.detach()


def _rank(rank, world, init_file, model_dir, out_dir):
    import torch.distributed as dist
    from transformers import AutoTokenizer

    from verl.utils.model_utils import apply_fsdp2
    from workers_testlib import make_rlla_group_batch

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    micro = make_rlla_group_batch(tokenizer, n=2, num_prompts=2).batch
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(5))
    for layout, tied in CASES:
        model = _load(model_dir, tied)
        apply_fsdp2(model, "cpu")
        assert type(model.get_output_embeddings().weight).__name__ == "DTensor"
        log_probs, entropy = _run_actor(model, layout, micro, weights, fused=True)
        grads = {name: p.grad.full_tensor() for name, p in model.named_parameters() if p.grad is not None}
        if rank == 0:
            torch.save(
                {"log_probs": log_probs, "entropy": entropy, "grads": grads}, Path(out_dir) / f"{layout}_{tied}.pt"
            )
    dist.barrier()  # both ranks past their last collective before either tears gloo down (an early teardown
    dist.destroy_process_group()  # once aborted the other rank: "terminate called without an active exception")


@pytest.mark.timeout(600)
def test_fused_head_under_fsdp2_equals_the_unsharded_logits_path(tiny_model_dir, tokenizer, tmp_path):
    from workers_testlib import make_rlla_group_batch

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(_rank, args=(2, str(tmp_path / "init"), tiny_model_dir, str(tmp_path)), nprocs=2, join=True)
    micro = make_rlla_group_batch(tokenizer, n=2, num_prompts=2).batch
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(5))
    mask = micro["response_mask"].bool()
    for layout, tied in CASES:
        model = _load(tiny_model_dir, tied)
        log_probs, entropy = _run_actor(model, "padded", micro, weights, fused=False)  # the reference path
        sharded = torch.load(tmp_path / f"{layout}_{tied}.pt")
        torch.testing.assert_close(sharded["log_probs"][mask], log_probs[mask], atol=1e-5, rtol=0)
        torch.testing.assert_close(sharded["entropy"][mask], entropy[mask], atol=5e-5, rtol=0)
        reference = {name: p.grad for name, p in model.named_parameters() if p.grad is not None}
        assert sharded["grads"].keys() == reference.keys() and ("lm_head.weight" in reference) != tied
        for name, grad in reference.items():
            error = (sharded["grads"][name] - grad).norm() / grad.norm().clamp(min=1e-12)
            assert error < 1e-5, (layout, name, float(error))
