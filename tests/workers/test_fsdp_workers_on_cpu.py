"""ActorRolloutRefWorker and CriticWorker as plain single-process objects, configured from the real
ppo_trainer.yaml: batch-size normalisation, one PPO step's worker calls, checkpoint save → load round trips."""

from __future__ import annotations

import os

import pytest
import torch

from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.fsdp_workers import ActorRolloutRefWorker, CriticWorker
from workers_testlib import trainer_config


def prompts(tokenizer, n: int) -> DataProto:
    tokenizer.padding_side = "left"
    enc = tokenizer(["hi", "call the weather tool"], return_tensors="pt", padding="max_length", max_length=8)
    data = DataProto.from_dict(
        tensors={
            "input_ids": enc["input_ids"],
            "attention_mask": enc["attention_mask"],
            "position_ids": compute_position_id_with_mask(enc["attention_mask"]),
        }
    )
    return data.repeat(n, interleave=True)  # the trainer repeats before rollout (upstream order)


@pytest.fixture(scope="module")
def actor_worker(tiny_model_dir):
    cfg = trainer_config(
        tiny_model_dir,
        **{"actor_rollout_ref.model.use_remove_padding": True, "actor_rollout_ref.actor.use_kl_loss": True},
    )
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref")
    worker.init_model()
    return worker


def test_batch_sizes_are_normalised(tiny_model_dir, monkeypatch):
    cfg = trainer_config(
        tiny_model_dir,
        **{"actor_rollout_ref.actor.ppo_mini_batch_size": 4, "actor_rollout_ref.actor.ppo_micro_batch_size": 4},
    )
    monkeypatch.setenv("WORLD_SIZE", "2")
    worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    assert worker.config.actor.ppo_mini_batch_size == 4 * 2 // 2  # prompts × n / world size
    # data parallel only: its role's mesh, upstream's nd dispatch sees rank = data-parallel rank
    assert worker._mesh_dp_rank == {"actor": 0} and worker._mesh_collect == {"actor": True}
    both = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref")
    assert sorted(both._mesh_dp_rank) == ["actor", "ref", "rollout"]
    assert worker.config.actor.ppo_micro_batch_size_per_gpu == 2  # deprecated global key / world size
    assert cfg.actor_rollout_ref.actor.ppo_mini_batch_size == 4  # the caller's config is untouched
    monkeypatch.setenv("WORLD_SIZE", "3")
    with pytest.raises(ValueError, match=r"actor_rollout_ref\.actor\.ppo_mini_batch_size"):
        ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor")
    with pytest.raises(ValueError, match="role"):
        ActorRolloutRefWorker(cfg.actor_rollout_ref, role="critic")


def one_step_batch(worker, tokenizer, n: int = 2) -> DataProto:
    data = prompts(tokenizer, n)
    data.meta_info.update({"do_sample": True})
    batch = worker.generate_sequences(data)
    batch = batch.union(worker.compute_log_prob(batch))
    batch = batch.union(worker.compute_ref_log_prob(batch))
    gen = torch.Generator().manual_seed(0)
    batch.batch["advantages"] = torch.randn(batch.batch["responses"].shape, generator=gen)
    return batch


def test_one_ppo_step_through_the_worker(actor_worker, tokenizer):
    torch.manual_seed(0)
    batch = one_step_batch(actor_worker, tokenizer)
    # same weights: the reference log-probs equal the actor's, and the entropy is reported
    torch.testing.assert_close(batch.batch["ref_log_prob"], batch.batch["old_log_probs"], atol=0, rtol=0)
    before = [p.detach().clone() for p in actor_worker.actor_module.parameters()]
    out = actor_worker.update_actor(batch)
    metrics = out.meta_info["metrics"]
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/lr", "perf/actor_tokens_per_s"):
        assert key in metrics, key
    # the step's per-phase peak RSS (GiB) arrives with the update; a phase that did not run since is not reported
    for phase in ("gen", "old_log_prob", "ref", "update_actor"):
        assert 0.1 < metrics[f"perf/peak_rss_gb/{phase}"] < 64, phase
    again = actor_worker.update_actor(batch).meta_info["metrics"]
    assert [k for k in again if k.startswith("perf/peak_rss_gb/")] == ["perf/peak_rss_gb/update_actor"]
    assert metrics["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # policy == reference before the step
    assert any(not torch.equal(a, b) for a, b in zip(before, actor_worker.actor_module.parameters()))
    # the ref is a frozen separate copy: unchanged by the update
    assert all(not p.requires_grad for p in actor_worker.ref_policy.actor_module.parameters())
    after_ref = actor_worker.compute_ref_log_prob(batch).batch["ref_log_prob"]
    torch.testing.assert_close(after_ref, batch.batch["ref_log_prob"], atol=0, rtol=0)


def test_actor_checkpoint_round_trip(actor_worker, tokenizer, tmp_path):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(1)
    batch = one_step_batch(actor_worker, tokenizer)
    actor_worker.update_actor(batch)
    path = str(tmp_path / "global_step_1" / "actor")
    actor_worker.save_checkpoint(path, global_step=1)
    for kind in ("model", "optim", "extra_state"):
        assert os.path.isfile(os.path.join(path, f"{kind}_world_size_1_rank_0.pt")), kind
    saved = {k: v.clone() for k, v in actor_worker.actor_module.state_dict().items()}
    saved_lr = actor_worker.actor_optimizer.param_groups[0]["lr"]

    # the HF export loads as a plain model with identical weights
    exported = AutoModelForCausalLM.from_pretrained(os.path.join(path, "huggingface"), dtype=torch.float32)
    for name, tensor in exported.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    assert os.path.isfile(os.path.join(path, "huggingface", "tokenizer_config.json"))

    # continue training (weights, optimizer moments, scheduler and RNG all move), then restore
    actor_worker.update_actor(batch)
    first_continuation = {k: v.clone() for k, v in actor_worker.actor_module.state_dict().items()}
    extra = actor_worker.load_checkpoint(path)
    assert extra["global_step"] == 1
    for name, tensor in actor_worker.actor_module.state_dict().items():
        assert torch.equal(tensor, saved[name]), name
    assert actor_worker.actor_optimizer.param_groups[0]["lr"] == saved_lr
    # the same update after restoring reproduces the same weights: optimizer state was restored exactly
    actor_worker.update_actor(batch)
    for name, tensor in actor_worker.actor_module.state_dict().items():
        assert torch.equal(tensor, first_continuation[name]), name


def test_save_contents_is_what_a_checkpoint_holds(actor_worker, tmp_path, caplog):
    """checkpoint.save_contents=[model] writes the weights only (an empty list is not "everything"), and resuming from
    it says that the optimizer and the schedule start afresh; an entry no checkpointer writes is refused."""
    from verl.workers.fsdp_checkpoint import Checkpointer as _Checkpointer

    parts = (
        actor_worker,
        actor_worker.actor_module,
        actor_worker.actor_optimizer,
        actor_worker.actor_lr_scheduler,
        None,
    )
    path = str(tmp_path / "model_only")
    _Checkpointer(*parts, ["model"]).save(path, global_step=2)
    assert sorted(os.listdir(path)) == ["model_world_size_1_rank_0.pt"]
    with caplog.at_level("WARNING"):
        assert _Checkpointer(*parts, ["model"]).load(path) == {}
    assert "optimizer starts from a fresh state" in caplog.text and "schedule and the random state" in caplog.text
    empty = str(tmp_path / "nothing")
    _Checkpointer(*parts, []).save(empty)
    assert os.listdir(empty) == []
    with pytest.raises(ValueError, match=r"unknown \['optim'\]"):
        _Checkpointer(*parts, ["model", "optim"])
    for method in (actor_worker.save_checkpoint, actor_worker.load_checkpoint):  # never a copy silently not made
        with pytest.raises(ValueError, match="hdfs_path='hdfs://x': HDFS checkpoints are not implemented"):
            method(path, hdfs_path="hdfs://x")


def test_critic_worker_values_update_and_checkpoint(tiny_model_dir, tmp_path):
    torch.manual_seed(0)
    cfg = trainer_config(tiny_model_dir, **{"critic.model.use_remove_padding": True})
    worker = CriticWorker(cfg.critic)
    assert worker.config.ppo_mini_batch_size == 4  # 2 prompts × rollout.n 2
    assert worker._query_dispatch_info("critic") == 0 and worker._query_collect_info("critic")
    worker.init_model()
    from workers_testlib import make_batch

    data = make_batch(batch_size=4)
    values = worker.compute_values(data).batch["values"]
    assert values.shape == data.batch["response_mask"].shape
    assert torch.all(values[data.batch["response_mask"] == 0] == 0)
    metrics = worker.update_critic(data).meta_info["metrics"]
    assert metrics["critic/grad_norm"] > 0
    path = str(tmp_path / "critic")
    worker.save_checkpoint(path, global_step=3)
    saved = {k: v.clone() for k, v in worker.critic_module.state_dict().items()}
    worker.update_critic(data)
    worker.load_checkpoint(path)
    for name, tensor in worker.critic_module.state_dict().items():
        assert torch.equal(tensor, saved[name]), name


def test_shared_prompt_switch_changes_no_result(tiny_model_dir, tokenizer):
    """``model.use_shared_prompt`` reaches the actor (shared layout) and the rollout (shared prefill); the trainer's
    n-fold repeated prompts give the same samples and log-probs as without it."""
    results = []
    for shared in (False, True):
        cfg = trainer_config(tiny_model_dir, **{"actor_rollout_ref.model.use_shared_prompt": shared})
        worker = ActorRolloutRefWorker(cfg.actor_rollout_ref, role="actor_rollout_ref")
        worker.init_model()
        assert worker.actor.use_shared_prompt is shared and worker.ref_policy.use_shared_prompt is shared
        assert worker.rollout.config.shared_prefill is shared
        torch.manual_seed(0)
        results.append(one_step_batch(worker, tokenizer, n=3).batch)
    plain, shared = results
    assert torch.equal(plain["responses"], shared["responses"])
    mask = plain["response_mask"].bool()
    for key in ("old_log_probs", "ref_log_prob"):
        torch.testing.assert_close(shared[key][mask], plain[key][mask], atol=1e-5, rtol=0)
