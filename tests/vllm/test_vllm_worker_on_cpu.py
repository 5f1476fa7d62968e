"""ActorRolloutRefWorker with ``rollout.name=vllm`` (single process, the real ppo_trainer.yaml): the engine starts
from dummy weights (``load_format=dummy_dtensor``), generates with the actor's weights, and follows a PPO update.
Runs only in the vLLM venv."""

from __future__ import annotations

import pytest

from vllm_testlib import LP_ATOL, require_vllm, rlla_prompts, workers_testlib

require_vllm()

import torch  # noqa: E402

from verl.workers.fsdp_workers import ActorRolloutRefWorker  # noqa: E402
from verl.workers.rollout.hf_rollout import HFRollout  # noqa: E402
from verl.workers.rollout.vllm_rollout import vLLMRollout  # noqa: E402

PROMPT_LENGTH, RESPONSE_LENGTH, N = 1024, 12, 2


@pytest.fixture(scope="module")
def worker(tiny_model_dir):
    cfg = workers_testlib().trainer_config(
        tiny_model_dir,
        **{
            "data.max_prompt_length": PROMPT_LENGTH,
            "data.max_response_length": RESPONSE_LENGTH,
            "actor_rollout_ref.rollout.name": "vllm",
            "actor_rollout_ref.rollout.n": N,
            "actor_rollout_ref.rollout.dtype": "float32",
            "actor_rollout_ref.rollout.calculate_log_probs": True,
            "actor_rollout_ref.actor.optim.lr": 1e-3,
        },
    )
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    return worker


def generate(worker, prompts):
    data = prompts.repeat(N, interleave=True)  # the trainer repeats before rollout (upstream order)
    data.meta_info.update({"do_sample": False, "recompute_log_prob": True})
    return worker.generate_sequences(data)


def assert_matches_hf_and_actor(worker, prompts, out):
    data = prompts.repeat(N, interleave=True)
    data.meta_info.update(
        {
            "do_sample": False,
            "eos_token_id": worker.tokenizer.eos_token_id,
            "pad_token_id": worker.tokenizer.pad_token_id,
        }
    )
    hf = HFRollout(worker.actor_module, worker.config.rollout, worker.tokenizer).generate_sequences(data)
    for key in ("responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        assert torch.equal(out.batch[key], hf.batch[key]), key
    mask = out.batch["response_mask"].bool()
    torch.testing.assert_close(
        out.batch["rollout_log_probs"][mask], out.batch["old_log_probs"][mask], atol=LP_ATOL, rtol=0
    )


def test_worker_generates_with_the_actor_weights_and_follows_updates(worker, shared_dir):
    assert isinstance(worker.rollout, vLLMRollout)
    prompts = rlla_prompts(shared_dir, worker.tokenizer, 2, PROMPT_LENGTH)
    first = generate(worker, prompts)  # dummy engine weights replaced by the actor's before generating
    assert_matches_hf_and_actor(worker, prompts, first)

    batch = first
    batch.batch["advantages"] = torch.randn(batch.batch["responses"].shape, generator=torch.Generator().manual_seed(0))
    worker.update_actor(batch)
    second = generate(worker, prompts)
    assert_matches_hf_and_actor(worker, prompts, second)
    mask = first.batch["response_mask"].bool() & second.batch["response_mask"].bool()
    assert (first.batch["old_log_probs"][mask] - second.batch["old_log_probs"][mask]).abs().max() > 100 * LP_ATOL


def test_a_lora_actor_syncs_its_merged_weights(tiny_model_dir, shared_dir):
    """actor_rollout_ref.model.lora_rank > 0: the engine receives the merged weights (W + alpha/r · B A under the
    plain model's names), generates exactly what the LoRA actor's HF generate gives, and follows an adapter update."""
    cfg = workers_testlib().trainer_config(
        tiny_model_dir,
        **{
            "data.max_prompt_length": PROMPT_LENGTH,
            "data.max_response_length": RESPONSE_LENGTH,
            "actor_rollout_ref.rollout.name": "vllm",
            "actor_rollout_ref.rollout.n": N,
            "actor_rollout_ref.rollout.dtype": "float32",
            "actor_rollout_ref.rollout.calculate_log_probs": True,
            "actor_rollout_ref.actor.optim.lr": 1e-2,
            "actor_rollout_ref.model.lora_rank": 4,
            "actor_rollout_ref.model.lora_alpha": 8,
        },
    )
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout")
    worker.init_model()
    with torch.no_grad():  # peft starts B at zero (the base model); a random B makes the adapters matter
        for name, p in worker.actor_module.named_parameters():
            if ".lora_B." in name:
                p.normal_(0.0, 0.05)
    prompts = rlla_prompts(shared_dir, worker.tokenizer, 2, PROMPT_LENGTH)
    first = generate(worker, prompts)
    assert_matches_hf_and_actor(worker, prompts, first)
    first.batch["advantages"] = torch.randn(first.batch["responses"].shape, generator=torch.Generator().manual_seed(0))
    worker.update_actor(first)
    second = generate(worker, prompts)
    assert_matches_hf_and_actor(worker, prompts, second)
