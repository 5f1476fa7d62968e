"""bf16 the standard way (issue 24): FSDP2's ``MixedPrecisionPolicy`` instead of autocast, on one rank as on many.

- The policy's config (``fsdp_config.mixed_precision``, verl's keys): defaults per device, errors that name the key.
- Exactness: the actor's log-probs, entropies and gathered gradients under the bf16 policy on 1 and 2 gloo ranks equal,
  bit for bit, a hand-built bf16 computation — the model's parameters cast to bf16 (buffers as loaded), the same
  forward, its bf16 gradients added in float32 — in the padded and shared-prompt layouts; through the fused head the
  log-probs and entropies are bit-equal and the gradients within float32 rounding. Master weights stay float32.
- The workers on one CPU rank with ``param_dtype=bf16``: rollout, old/ref log-probs (equal: the reference inherits
  the actor's policy), an update that moves the float32 master weights, a checkpoint round trip, the critic; and the
  SFT trainer's ``mixed_precision: bf16``.
Each distributed case runs in spawned processes (the test process never creates a process group).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).parent))  # the spawned ranks import this file's helpers

from verl.utils.mixed_precision import mixed_precision_policy  # noqa: E402

KEY = "actor_rollout_ref.actor.fsdp_config.mixed_precision"
# (layout overrides of the actor config, fused head)
CASES = {"padded": ({}, False), "shared": ({"use_shared_prompt": True}, False), "padded_fused": ({}, True)}


# ------------------------------------------------------------------------------------------------------------ config
def test_policy_defaults_per_device():
    assert mixed_precision_policy(None, "cpu", KEY) is None  # CPU stays float32
    assert mixed_precision_policy({"param_dtype": None, "reduce_dtype": "fp32"}, "cpu", KEY) is None
    cuda = mixed_precision_policy(None, "cuda", KEY)
    assert (cuda.param_dtype, cuda.reduce_dtype, cuda.cast_forward_inputs) == (torch.bfloat16, torch.float32, True)
    explicit = mixed_precision_policy({"param_dtype": "bf16"}, "cpu", KEY)
    assert (explicit.param_dtype, explicit.reduce_dtype) == (torch.bfloat16, torch.float32)
    assert mixed_precision_policy("bfloat16", "cpu", KEY).param_dtype == torch.bfloat16  # the SFT trainer's string
    assert mixed_precision_policy({"param_dtype": "fp32"}, "cuda", KEY) is None  # plain float32 on a GPU


def test_one_float32_gpu_rank_is_sharded_when_it_offloads(monkeypatch):
    """fsdp_config.param_offload on one float32 CUDA rank: FSDP2's offload policy is what moves the parameters, so
    the model is wrapped (a plain module would keep them on the GPU: the key would do nothing); without offload, or
    on CPU, the model stays plain."""
    from omegaconf import OmegaConf

    from verl.utils import model_utils

    calls = []
    monkeypatch.setattr(model_utils, "init_single_rank_group", lambda device: None)
    monkeypatch.setattr(model_utils, "apply_fsdp2", lambda model, device, cfg, policy: calls.append((device, policy)))
    fp32 = {"param_dtype": "fp32"}
    for device, offload in (("cuda", True), ("cuda", False), ("cpu", True)):
        cfg = OmegaConf.create({"param_offload": offload})
        model_utils.wrap_with_fsdp2(torch.nn.Linear(2, 2), device, 1, fp32, KEY, cfg)
    assert calls == [("cuda", None)]


@pytest.mark.parametrize(
    "value, match",
    [
        ({"param_dtype": "bf16", "keep_fp32": True}, r"mixed_precision: unknown key\(s\) \['keep_fp32'\]"),
        ({"param_dtype": "fp16"}, r"fp16 needs loss scaling"),
        ({"param_dtype": "bf16", "buffer_dtype": "bf16"}, r"mixed_precision\.buffer_dtype='bf16'"),
        ({"param_dtype": "half"}, r"mixed_precision\.param_dtype='half': expected one of"),
        ({"param_dtype": "fp32", "reduce_dtype": "bf16"}, r"float32 parameters reduce in float32"),
        (3, r"expected null, a dtype name or a mapping"),
    ],
)
def test_bad_policies_are_refused_with_the_key(value, match):
    with pytest.raises(ValueError, match=match):
        mixed_precision_policy(value, "cpu", KEY)


def test_the_reference_inherits_the_actors_policy(tiny_model_dir):
    from workers_testlib import trainer_config

    cfg = trainer_config(tiny_model_dir, **{f"{KEY}.param_dtype": "bf16"})
    assert cfg.actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype == "bf16"


# -------------------------------------------------------------------------------------------------------- exactness
def _forward_backward(model, layout, fused, micro, weights):
    """Log-probs and entropies [b, R] of the actor's forward, then backward of a weighted sum of both."""
    from tensordict import TensorDict

    from test_dp_actor_on_cpu import actor_config
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    overrides, _ = CASES[layout]
    actor = DataParallelPPOActor(actor_config(use_fused_kernels=fused, **overrides), model)
    entropy, log_probs = actor._forward_micro_batch(
        TensorDict(dict(micro.items()), batch_size=micro.batch_size), 0.7, calculate_entropy=True
    )
    assert log_probs.dtype == torch.float32 and entropy.dtype == torch.float32
    ((log_probs * weights + 0.1 * entropy) * micro["response_mask"]).sum().backward()
    return log_probs.detach(), entropy.detach()


def _inputs(tokenizer):
    from workers_testlib import make_rlla_group_batch

    micro = make_rlla_group_batch(tokenizer, n=2, num_prompts=2).batch
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(5))
    return micro, weights


def _load(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)


def _policy_rank(rank, world, init_file, model_dir, out_dir, device="cpu"):
    import torch.distributed as dist
    from transformers import AutoTokenizer

    from verl.utils.mixed_precision import param_dtype_of
    from verl.utils.model_utils import apply_fsdp2

    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl" if device == "cuda" else "gloo", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    torch.set_num_threads(1)
    micro, weights = _inputs(AutoTokenizer.from_pretrained(model_dir))
    micro, weights = micro.to(device), weights.to(device)
    for layout, (_, fused) in CASES.items():
        model = _load(model_dir).to(device)
        apply_fsdp2(model, device, mp_policy=mixed_precision_policy({"param_dtype": "bf16"}, device, KEY))
        assert param_dtype_of(model) == torch.bfloat16
        log_probs, entropy = _forward_backward(model, layout, fused, micro, weights)
        master = {name: p.dtype for name, p in model.named_parameters()}
        grads = {name: p.grad.full_tensor().cpu() for name, p in model.named_parameters() if p.grad is not None}
        if rank == 0:
            torch.save(
                {"log_probs": log_probs.cpu(), "entropy": entropy.cpu(), "grads": grads, "master": master},
                Path(out_dir) / f"{layout}.pt",
            )
    dist.barrier()  # both ranks past their last collective before either tears gloo down (an early teardown
    dist.destroy_process_group()  # once aborted the other rank: "terminate called without an active exception")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("world, device", [(1, "cpu"), (2, "cpu"), (1, "cuda")])
def test_bf16_policy_equals_a_hand_built_bf16_computation(world, device, tiny_model_dir, tokenizer, tmp_path):
    """On CUDA (the GPU suite's ``exactness`` step) the kernels' own run-to-run freedom (attention backward) allows
    no bit-equality: log-probs to bf16's resolution, gradients to 1% of their norm."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    mp.spawn(
        _policy_rank,
        args=(world, str(tmp_path / "init"), tiny_model_dir, str(tmp_path), device),
        nprocs=world,
        join=True,
    )
    micro, weights = _inputs(tokenizer)
    mask = micro["response_mask"].bool()
    exact = device == "cpu"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the ranks: the CPU's bf16 GEMMs may block (and sum) by thread
    for layout, (_, fused) in CASES.items():
        model = _load(tiny_model_dir).to(device)
        for param in model.parameters():  # what the policy computes with: bf16 parameters, buffers as loaded
            param.data = param.data.to(torch.bfloat16)
        try:
            log_probs, entropy = _forward_backward(model, layout, fused, micro.to(device), weights.to(device))
        finally:
            torch.set_num_threads(threads)
        sharded = torch.load(tmp_path / f"{layout}.pt")
        assert set(sharded["master"].values()) == {torch.float32}, layout  # master weights stay float32
        tol = dict(atol=0, rtol=0) if exact else dict(atol=2e-2, rtol=0)
        torch.testing.assert_close(sharded["log_probs"][mask], log_probs.cpu()[mask], **tol)
        torch.testing.assert_close(sharded["entropy"][mask], entropy.cpu()[mask], **tol)
        reference = {name: p.grad.float().cpu() for name, p in model.named_parameters() if p.grad is not None}
        assert sharded["grads"].keys() == reference.keys(), layout
        assert {g.dtype for g in sharded["grads"].values()} == {torch.float32}
        if exact and not fused:  # both ranks saw the same batch: the float32 mean is the bf16 gradient
            for name, grad in reference.items():
                torch.testing.assert_close(sharded["grads"][name], grad, atol=0, rtol=0, msg=f"{layout} {name}")
        elif exact:  # the fused head's float32 backward meets bf16 activations in another order: float32 rounding
            for name, grad in reference.items():
                error = (sharded["grads"][name] - grad).norm() / grad.norm().clamp(min=1e-12)
                assert error < 1e-4, (layout, name, float(error))  # (measured <= 2e-5; bf16's epsilon is 8e-3)
        else:  # CUDA: the whole gradient within 1% of its norm
            names = sorted(reference)
            got = torch.cat([sharded["grads"][n].flatten() for n in names])
            want = torch.cat([reference[n].flatten() for n in names])
            assert float((got - want).norm() / want.norm()) < 1e-2, layout


# ---------------------------------------------------------------------------------------------------------- workers
def _workers_rank(rank, model_dir, out_dir, lora):
    """One CPU rank, ``param_dtype=bf16``: no process group exists beforehand (the worker makes a one-rank one)."""
    from transformers import AutoTokenizer

    from test_fsdp_workers_on_cpu import one_step_batch
    from verl.utils.mixed_precision import param_dtype_of
    from verl.utils.model_utils import is_dtensor
    from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker
    from workers_testlib import make_batch, trainer_config

    torch.set_num_threads(1)
    torch.manual_seed(0)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    cfg = trainer_config(
        model_dir,
        **{
            f"{KEY}.param_dtype": "bf16",
            "critic.model.fsdp_config.mixed_precision.param_dtype": "bf16",
            "actor_rollout_ref.actor.use_kl_loss": True,
            "actor_rollout_ref.model.lora_rank": 4 if lora else 0,
        },
    )
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref")
    worker.init_model()
    result = {
        "actor_dtype": param_dtype_of(worker.actor_module),
        "ref_dtype": param_dtype_of(worker.ref_policy.actor_module),
        "rollout_dtype": worker.rollout.policy_dtype,
    }
    batch = one_step_batch(worker, tokenizer)
    result["ref_equals_old"] = torch.equal(batch.batch["ref_log_prob"], batch.batch["old_log_probs"])
    before = {k: v.full_tensor().clone() for k, v in worker.actor_module.state_dict().items()}
    metrics = worker.update_actor(batch).meta_info["metrics"]
    after = {k: v.full_tensor().clone() for k, v in worker.actor_module.state_dict().items()}
    result["kl_loss"] = metrics["actor/kl_loss"]
    result["master_float32"] = all(is_dtensor(p) and p.dtype == torch.float32 for p in worker.actor_module.parameters())
    result["moved"] = any(not torch.equal(before[k], after[k]) for k in before)
    path = str(Path(out_dir) / "actor")
    worker.save_checkpoint(path, global_step=1)
    worker.update_actor(batch)
    worker.load_checkpoint(path)
    result["restored"] = all(
        torch.equal(v.full_tensor(), after[k]) for k, v in worker.actor_module.state_dict().items()
    )
    critic = CriticWorker(cfg.critic)
    critic.init_model()
    data = make_batch(batch_size=4)
    result["critic_dtype"] = param_dtype_of(critic.critic_module)
    result["values_dtype"] = critic.compute_values(data).batch["values"].dtype
    result["critic_grad_norm"] = critic.update_critic(data).meta_info["metrics"]["critic/grad_norm"]
    torch.save(result, Path(out_dir) / "workers.pt")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_workers_train_under_the_bf16_policy_on_one_rank(lora, tiny_model_dir, tmp_path):
    """(LoRA: only the adapters move; the reference is the same module with its adapters disabled.)"""
    mp.spawn(_workers_rank, args=(tiny_model_dir, str(tmp_path), lora), nprocs=1, join=True)
    result = torch.load(tmp_path / "workers.pt")
    assert result["actor_dtype"] == result["ref_dtype"] == result["rollout_dtype"] == torch.bfloat16
    assert result["ref_equals_old"]  # the reference computes as the actor does: KL 0 before the first update
    assert result["kl_loss"] == pytest.approx(0.0, abs=1e-6)
    assert result["master_float32"] and result["moved"] and result["restored"]
    assert result["critic_dtype"] == torch.bfloat16 and result["values_dtype"] == torch.float32
    assert result["critic_grad_norm"] > 0


def test_hf_rollout_refuses_a_dtype_other_than_the_policys(tiny_model_dir):
    from verl.trainer.config_utils import default_section
    from verl.utils.mixed_precision import mark_param_dtype
    from verl.workers.rollout.hf_rollout import HFRollout

    model = _load(tiny_model_dir)
    mark_param_dtype(model, torch.bfloat16)  # as apply_fsdp2 does under a bf16 policy
    config = default_section("actor_rollout_ref.rollout", response_length=4, dtype="float32")
    with pytest.raises(ValueError, match=r"rollout\.dtype='float32'.*mixed_precision\.param_dtype"):
        HFRollout(model, config)
    assert (
        HFRollout(model, default_section("actor_rollout_ref.rollout", response_length=4, dtype="bfloat16")).policy_dtype
        == torch.bfloat16
    )


def test_the_config_is_checked_at_load():
    from verl.trainer.config_utils import ConfigError, default_config, validate_config

    config = default_config()
    config.trainer.device = "cpu"
    validate_config(config, check_files=False)  # the defaults: float32 on CPU
    config.critic.model.fsdp_config.mixed_precision.param_dtype = "fp16"
    with pytest.raises(ConfigError, match=r"critic\.model\.fsdp_config\.mixed_precision: fp16 needs loss scaling"):
        validate_config(config, check_files=False)
    config = default_config()
    config.trainer.device = "cpu"
    config.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype = "bf16"
    validate_config(config, check_files=False)  # bf16 on CPU when asked for; rollout.dtype is bfloat16 by default
    config.actor_rollout_ref.rollout.dtype = "float32"
    with pytest.raises(ConfigError, match=r"rollout\.dtype='float32', but the actor computes in torch\.bfloat16"):
        validate_config(config, check_files=False)
    config.actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype = "fp32"
    validate_config(config, check_files=False)  # plain float32: the rollout's own dtype (autocast) applies


def test_the_reference_follows_the_actor_or_is_named(caplog):
    from verl.trainer.config_utils import ConfigError, default_config, validate_config

    config = default_config()
    config.trainer.device = "cpu"
    config.actor_rollout_ref.ref.fsdp_config.mixed_precision.param_dtype = "bf16"
    with caplog.at_level("WARNING"):
        validate_config(config, check_files=False)
    assert "KL between them is not 0 before the first update" in caplog.text
    config.actor_rollout_ref.model.lora_rank = 4
    with pytest.raises(ConfigError, match=r"ref\.fsdp_config\.mixed_precision asks for torch\.bfloat16 but with LoRA"):
        validate_config(config, check_files=False)
