"""End to end on CPU: ``main_ppo.run_ppo`` trains the tiny model on real RLLA rows through Ray worker groups.

Checks the loop's contract rather than that it merely runs: validation before training and at the last step, exactly
``total_training_steps`` updates (no ToolRL off-by-one), every phase timed, the upstream checkpoint layout at the last
step with the tracker file, and actor weights that really changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from conftest import e2e_overrides
from verl.trainer.config_utils import load_default_config

PHASES = ("gen", "reward", "old_log_prob", "adv", "update_actor", "step")


def _config(tmp_path, data_dir, extra):
    return load_default_config(e2e_overrides(tmp_path, data_dir) + extra)


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
        for key in (
            "critic/score/mean",
            "critic/format_score/mean",
            "actor/pg_loss",
            "actor/entropy",
            "actor/reward_kl_penalty",
            "response_length/mean",
            "critic/zero_std_groups_frac",
        ):
            assert key in record, key
        assert "response/tool_calls/mean" in record
        for phase in ("gen", "old_log_prob", "ref", "update_actor"):  # measured CPU peak; a real MFU is in (0, 1)
            assert 0.0 < record[f"perf/mfu_{phase}"] < 1.0 and record[f"perf/model_tflops_{phase}"] > 0, phase
    assert any("text" in r for r in records)  # sample generations logged at validation
    # step k generates with the weights of k - 1 updates (the actor's scheduler count, checked against the rollout's)
    assert [r["rollout/weight_version"] for r in metric_records[1:]] == [0.0, 1.0]

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


@pytest.mark.parametrize("single_process", [False, True])
def test_ppo_gae_with_critic_one_step(tmp_path, small_rlla, ray_session, single_process):
    """Actor and critic workers through Ray, or both inside this process (``trainer.single_process``)."""
    from verl.trainer.main_ppo import run_ppo

    config = _config(
        tmp_path,
        small_rlla,
        [
            "algorithm.adv_estimator=gae",
            "actor_rollout_ref.rollout.n=1",
            "trainer.total_training_steps=1",
            "trainer.val_before_train=False",
            "trainer.save_freq=-1",
            "trainer.test_freq=-1",
            f"trainer.single_process={single_process}",
        ],
    )
    trainer = run_ppo(config)
    assert (type(trainer.critic_wg).__name__ == "LocalWorkerGroup") == single_process
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
