"""End to end on CPU: ``main_ppo.run_ppo`` trains the tiny model on real RLLA rows through Ray worker groups.

Checks the loop's contract rather than that it merely runs: validation before training and at the last step, exactly
``total_training_steps`` updates (no ToolRL off-by-one), every phase timed, the upstream checkpoint layout at the last
step with the tracker file, and actor weights that really changed.
"""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from verl.trainer.config_utils import load_default_config

PHASES = ("gen", "reward", "old_log_prob", "adv", "update_actor", "step")


@pytest.fixture(scope="module")
def small_rlla(tmp_path_factory, tokenizer):
    """8 train and 4 validation RLLA rows with the shortest chat-templated prompts (keeps CPU steps short)."""
    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    data_dir = resolve_rlla_data_dir()
    out = tmp_path_factory.mktemp("rlla_small")
    for split, n in (("train", 8), ("test", 4)):
        df = pd.read_parquet(data_dir / f"{split}.parquet")
        lengths = df["prompt"].map(lambda m: len(tokenizer.apply_chat_template(list(m), tokenize=True)))
        df.loc[lengths.sort_values(kind="stable").index[:n]].to_parquet(out / f"{split}.parquet")
    return out


def _config(tmp_path, data_dir, extra):
    return load_default_config([
        f"data.train_files={data_dir}/train.parquet", f"data.val_files={data_dir}/test.parquet",
        "data.train_batch_size=2", "data.max_prompt_length=1024", "data.max_response_length=12",
        "data.filter_overlong_prompts=True",
        "actor_rollout_ref.model.path=tiny", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.micro_batch_size=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=0", "trainer.cpus_per_worker=0.5", "trainer.logger=[console]",
        "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.save_freq=2",
        f"trainer.default_local_dir={tmp_path}/ckpt", f"trainer.run_dir={tmp_path}/run",
        "trainer.project_name=test", "trainer.experiment_name=e2e", "trainer.log_val_generations=2",
    ] + extra)


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_grpo_two_steps_with_kl_in_reward(tmp_path, small_rlla, ray_session, tiny_model_dir):
    from verl.trainer.main_ppo import run_ppo

    config = _config(tmp_path, small_rlla, ["algorithm.adv_estimator=grpo", "algorithm.use_kl_in_reward=True"])
    run_ppo(config)
    records = _records(tmp_path / "run")
    metric_records = [r for r in records if "text" not in r]
    steps = [r["step"] for r in metric_records]
    assert steps == [0, 1, 2], steps  # val before training, then exactly total_training_steps steps
    assert "val/test_score/rlla" in metric_records[0] and "val/test_score/rlla" in metric_records[2]
    assert "val/test_score/rlla" not in metric_records[1]  # test_freq=2
    for record in metric_records[1:]:
        for phase in PHASES + ("ref",):
            assert f"timing_s/{phase}" in record, phase
        for key in ("critic/score/mean", "critic/format_score/mean", "actor/pg_loss", "actor/entropy",
                    "actor/reward_kl_penalty", "response_length/mean", "critic/zero_std_groups_frac"):
            assert key in record, key
    assert any("text" in r for r in records)  # sample generations logged at validation

    ckpt = tmp_path / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (ckpt / "global_step_2" / "actor").is_dir() and (ckpt / "global_step_2" / "data.pt").is_file()
    assert not (ckpt / "global_step_1").exists()
    hf_dirs = list((ckpt / "global_step_2" / "actor").rglob("config.json"))
    assert hf_dirs, "no HF export in the actor checkpoint"
    from transformers import AutoModelForCausalLM

    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(str(hf_dirs[0].parent)).state_dict()
    changed = [k for k in before if not torch.equal(before[k], after[k])]
    assert changed, "actor weights did not change after two updates"
    _assert_resources_released(ray_session)


def test_ppo_gae_with_critic_one_step(tmp_path, small_rlla, ray_session):
    from verl.trainer.main_ppo import run_ppo

    config = _config(tmp_path, small_rlla, ["algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.n=1",
                                            "trainer.total_training_steps=1", "trainer.val_before_train=False",
                                            "trainer.save_freq=-1", "trainer.test_freq=-1"])
    run_ppo(config)
    records = [r for r in _records(tmp_path / "run") if "text" not in r]
    assert [r["step"] for r in records] == [1]
    for key in ("timing_s/values", "timing_s/update_critic", "critic/vf_loss", "critic/values/mean"):
        assert key in records[0], key
    assert not (tmp_path / "ckpt").exists()
    _assert_resources_released(ray_session)


def _assert_resources_released(ray, timeout_s: float = 20.0) -> None:
    """run_ppo must hand its placement groups back, or later runs in the same Ray session starve."""
    import time

    total = ray.cluster_resources().get("CPU")
    deadline = time.monotonic() + timeout_s
    while ray.available_resources().get("CPU", 0.0) < total and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0.0) == total
