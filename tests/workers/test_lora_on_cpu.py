"""LoRA RL (actor_rollout_ref.model.lora_rank > 0; verl/utils/lora.py) on the tiny model: only the adapters train; a
step of the actor equals a hand-built peft step; the reference policy is the base model with no second copy; the
merged weights (vLLM sync, HF export) compute the LoRA model's function; checkpoints hold the adapters and resume
bitwise."""

from __future__ import annotations

import copy
import os

import pytest
import torch
from peft import LoraConfig, get_peft_model

from verl.trainer.config_utils import default_section
from verl.utils.lora import is_lora, lora_scaling, merged_state_dict
from verl.utils.model_utils import full_state_dict, load_causal_lm
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from test_dp_actor_on_cpu import actor_config
from test_fsdp_workers_on_cpu import one_step_batch
from workers_testlib import make_batch, trainer_config

RANK, ALPHA = 4, 8.0


def lora_model(path: str, seed: int = 0) -> torch.nn.Module:
    """The tiny model with LoRA adapters whose B is random (peft starts B at zero, which would hide the adapter)."""
    torch.manual_seed(seed)
    model = load_causal_lm(default_section("actor_rollout_ref.model", path=path, lora_rank=RANK, lora_alpha=ALPHA))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if ".lora_B." in name:
                p.normal_(0.0, 0.05)
    return model


def response_log_probs(model, batch) -> torch.Tensor:
    b = batch.batch
    logits = model(
        input_ids=b["input_ids"], attention_mask=b["attention_mask"], position_ids=b["position_ids"]
    ).logits.float()
    r = b["responses"].shape[1]
    return torch.log_softmax(logits[:, -r - 1 : -1], -1).gather(-1, b["responses"].unsqueeze(-1)).squeeze(-1)


def test_only_the_adapters_train_and_step_zero_is_the_base_model(tiny_model_dir):
    base = load_causal_lm(default_section("actor_rollout_ref.model", path=tiny_model_dir))
    torch.manual_seed(0)
    model = load_causal_lm(
        default_section("actor_rollout_ref.model", path=tiny_model_dir, lora_rank=RANK, lora_alpha=ALPHA)
    )
    assert is_lora(model) and lora_scaling(model) == ALPHA / RANK
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable)
    assert not any("lm_head" in n or "embed" in n for n in trainable)  # all-linear: not the output head
    batch = make_batch()
    torch.testing.assert_close(response_log_probs(model, batch), response_log_probs(base, batch), rtol=0, atol=0)


def test_merged_state_dict_is_the_plain_model_computing_the_lora_function(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = lora_model(tiny_model_dir)
    merged = full_state_dict(model)
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert set(merged) == set(plain.state_dict())  # the plain model's names: what vLLM and save_pretrained load
    plain.load_state_dict(merged)
    batch = make_batch()
    torch.testing.assert_close(response_log_probs(plain, batch), response_log_probs(model, batch), rtol=0, atol=1e-5)
    # hand-checked on one layer: W + (alpha / r) B A
    key = "model.layers.0.self_attn.q_proj"
    state = model.state_dict()
    src = f"base_model.model.{key}"
    expected = state[f"{src}.base_layer.weight"] + (ALPHA / RANK) * (
        state[f"{src}.lora_B.default.weight"] @ state[f"{src}.lora_A.default.weight"]
    )
    torch.testing.assert_close(merged_state_dict(state, ALPHA / RANK)[f"{key}.weight"], expected, rtol=0, atol=0)


def test_a_lora_actor_step_equals_a_hand_built_peft_step(tiny_model_dir):
    """update_policy on a LoRA module == PPO-clip (token-mean, ε 0.2, dual clip 3), gradient clipping at 1 and one
    SGD step on the adapters of a peft model built here by hand from the same weights. (SGD, not Adam, whose first
    step is ~lr·sign(g) and turns float noise on near-zero gradients into full-size differences.)"""
    from transformers import AutoModelForCausalLM

    model = lora_model(tiny_model_dir)
    hand = get_peft_model(
        AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32),
        LoraConfig(r=RANK, lora_alpha=ALPHA, target_modules="all-linear", lora_dropout=0.0),
    )
    hand.load_state_dict(model.state_dict())
    batch = make_batch()
    lr = 1.0

    params = [p for p in model.parameters() if p.requires_grad]
    actor = DataParallelPPOActor(actor_config(), model, torch.optim.SGD(params, lr=lr))
    batch.meta_info["temperature"] = 1.0
    actor.update_policy(copy.deepcopy(batch))

    hand_params = [p for n, p in hand.named_parameters() if p.requires_grad]
    optimizer = torch.optim.SGD(hand_params, lr=lr)
    b, mask = batch.batch, batch.batch["response_mask"].float()
    ratio = torch.exp(response_log_probs(hand, batch) - b["old_log_probs"])
    adv = b["advantages"]
    loss = torch.maximum(-adv * ratio, -adv * ratio.clamp(0.8, 1.2))
    loss = torch.where(adv < 0, torch.minimum(loss, -adv * 3.0), loss)
    ((loss * mask).sum() / mask.sum()).backward()
    torch.nn.utils.clip_grad_norm_(hand_params, 1.0)
    optimizer.step()

    after, by_hand, before = model.state_dict(), hand.state_dict(), lora_model(tiny_model_dir).state_dict()
    for name, value in after.items():
        torch.testing.assert_close(value, by_hand[name], rtol=0, atol=1e-6, msg=name)
    moved = {name for name, value in after.items() if not torch.equal(value, before[name])}
    assert moved and all(".lora_" in name for name in moved)  # the adapters moved, the base did not


def make_lora_worker(model_dir: str, seed: int) -> ActorRolloutRefWorker:
    """An actor/rollout/ref worker with LoRA adapters (rank RANK, alpha ALPHA) initialised from ``seed``."""
    cfg = trainer_config(
        model_dir,
        **{
            "actor_rollout_ref.model.lora_rank": RANK,
            "actor_rollout_ref.model.lora_alpha": ALPHA,
            "actor_rollout_ref.actor.use_kl_loss": True,
        },
    )
    torch.manual_seed(seed)
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref")
    worker.init_model()
    return worker


@pytest.fixture(scope="module")
def lora_worker(tiny_model_dir):
    return make_lora_worker(tiny_model_dir, seed=0)


def test_the_reference_is_the_base_model_without_a_second_copy(lora_worker, tokenizer, tiny_model_dir):
    assert lora_worker.ref_policy.actor_module is lora_worker.actor_module
    batch = one_step_batch(lora_worker, tokenizer)
    lora_worker.update_actor(batch)  # the adapters move away from the base
    base = DataParallelPPOActor(
        actor_config(), load_causal_lm(default_section("actor_rollout_ref.model", path=tiny_model_dir))
    )
    ref = lora_worker.compute_ref_log_prob(batch).batch["ref_log_prob"]
    data = copy.deepcopy(batch)
    data.meta_info.update(temperature=1.0, micro_batch_size=3, use_dynamic_bsz=False, max_token_len=None)
    torch.testing.assert_close(ref, base.compute_log_prob(data)[0], rtol=0, atol=1e-6)
    actor = lora_worker.compute_log_prob(batch).batch["old_log_probs"]
    assert (actor - ref).abs().max() > 1e-4  # the trained adapters are on outside the reference pass


def test_checkpoint_holds_the_adapters_and_resumes_bitwise(lora_worker, tokenizer, tmp_path, tiny_model_dir):
    from transformers import AutoModelForCausalLM

    lora_worker.save_checkpoint(str(tmp_path / "step"), global_step=1)
    saved = torch.load(tmp_path / "step" / "model_world_size_1_rank_0.pt", weights_only=False)
    assert saved and all(".lora_A." in k or ".lora_B." in k for k in saved)
    # the HF export is the merged plain model
    export = AutoModelForCausalLM.from_pretrained(tmp_path / "step" / "huggingface", dtype=torch.float32)
    batch = make_batch()
    torch.testing.assert_close(
        response_log_probs(export, batch), response_log_probs(lora_worker.actor_module, batch), rtol=0, atol=1e-5
    )
    # resume: a fresh worker (other random adapters) loads the checkpoint, then both take the same step
    resumed = make_lora_worker(tiny_model_dir, seed=123)
    resumed.load_checkpoint(str(tmp_path / "step"))
    for (name, a), b in zip(lora_worker.actor_module.state_dict().items(), resumed.actor_module.state_dict().values()):
        assert torch.equal(a, b), name
    step = one_step_batch(lora_worker, tokenizer)
    lora_worker.update_actor(copy.deepcopy(step))
    resumed.update_actor(copy.deepcopy(step))
    for (name, a), b in zip(lora_worker.actor_module.state_dict().items(), resumed.actor_module.state_dict().values()):
        assert torch.equal(a, b), name
    assert os.path.isfile(tmp_path / "step" / "optim_world_size_1_rank_0.pt")


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["actor_rollout_ref.model.lora_rank=-1"], "lora_rank=-1"),
        (["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.lora_alpha=0"], "lora_alpha=0"),
        (["actor_rollout_ref.model.lora_rank=4", "actor_rollout_ref.model.target_modules=[]"], "target_modules"),
    ],
)
def test_lora_settings_are_checked_at_load(overrides, match):
    from verl.trainer.config_utils import ConfigError, load_default_config, normalize_config, validate_config

    with pytest.raises(ConfigError, match=match):
        validate_config(normalize_config(load_default_config(overrides)), check_files=False)


def test_only_linear_targets_are_accepted(tiny_model_dir):
    """An embedding target would be merged and checkpointed wrongly: refused when the adapters are attached."""
    with pytest.raises(ValueError, match=r"target_modules: .*embed_tokens is a Embedding; LoRA RL supports nn.Linear"):
        load_causal_lm(
            default_section(
                "actor_rollout_ref.model",
                path=tiny_model_dir,
                lora_rank=RANK,
                lora_alpha=ALPHA,
                target_modules=["embed_tokens", "q_proj"],
            )
        )


def test_lora_settings_are_resume_keys():
    from verl.utils.checkpoint_manifest import config_differences

    saved = {"actor_rollout_ref.model.lora_alpha": 16}
    assert config_differences(saved, {"actor_rollout_ref.model.lora_alpha": 32}) == [
        "actor_rollout_ref.model.lora_alpha: checkpoint 16 -> now 32"
    ]
    assert config_differences({}, {"actor_rollout_ref.model.lora_alpha": 32}) == []  # an older checkpoint's manifest
