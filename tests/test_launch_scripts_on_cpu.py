"""Every launch script runs for one step with the tiny model (issue 21): a key renamed in the config, or a variable
renamed in a script, breaks this test instead of a user's run. ``run_router_training.sh`` has its own longer test
(``tests/router/test_router_main_job_on_cpu.py``: SIGTERM, resume, plots).

Each script gets CPU-sized variables (the tiny preset, 2 prompts × 2 samples, 8 response tokens, 1 step) and its
outputs in a temporary folder; passing means exit status 0 and a ``metrics.jsonl`` holding step 1."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO_ROOT

TIMEOUT_S = 600


def _env(tmp_path: Path, data_dir: Path) -> dict:
    env = dict(os.environ)
    env.update(
        PYTHON=sys.executable,
        N_GPUS="0",
        BASE_MODEL="tiny",
        DATA_DIR=str(data_dir),
        TRAIN_BATCH_SIZE="2",
        PPO_MINI_BATCH_SIZE="2",
        MICRO_BATCH_PER_GPU="2",
        ROLLOUT_N="2",
        MAX_PROMPT_LENGTH="1024",
        MAX_RESPONSE_LENGTH="8",
        TOTAL_STEPS="1",
        SAVE_FREQ="-1",
        TEST_FREQ="-1",
        RUN_DIR=str(tmp_path / "run"),
        EXPERIMENT_NAME="smoke",
        PYTHONUNBUFFERED="1",
        RAY_AUTH_MODE="disabled",
    )
    return env


def _steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [r["step"] for r in map(json.loads, path.read_text().splitlines()) if "text" not in r]


def _run(args: list[str], env: dict) -> subprocess.CompletedProcess:
    out = subprocess.run(["bash", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert out.returncode == 0, (args, out.stdout[-3000:], out.stderr[-3000:])
    return out


COMMON = ["trainer.val_before_train=False"]  # the CPU defaults run the worker in the trainer's process


@pytest.mark.parametrize("script", ["train_grpo.sh", "train_ppo.sh"])
def test_toolrl_scripts_train_one_step(script, tmp_path, small_rlla):
    env = _env(tmp_path, small_rlla)
    env["REFINEDREWARD"] = "1"  # a ToolRL reward switch set for the launch script is recorded with the run's config
    _run(
        [
            str(REPO_ROOT / script),
            f"trainer.default_local_dir={tmp_path}/ckpt",
            *COMMON,
            "critic.ppo_micro_batch_size_per_gpu=2",
        ],
        env,
    )
    assert _steps(tmp_path / "run") == [1]
    assert (tmp_path / "run" / "plots").is_dir()  # the script's plot step ran
    record = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert record["reward_switches_on"] == ["REFINEDREWARD"]


@pytest.mark.parametrize(
    "script,loss_mode",
    [("examples/gspo_trainer/run_gspo.sh", "gspo"), ("examples/cispo_trainer/run_cispo.sh", "cispo")],
)
def test_policy_loss_recipes_train_one_step(script, loss_mode, tmp_path, small_rlla):
    _run([str(REPO_ROOT / script), f"trainer.default_local_dir={tmp_path}/ckpt", *COMMON], _env(tmp_path, small_rlla))
    assert _steps(tmp_path / "run") == [1]
    config = (tmp_path / "run" / "config.yaml").read_text()
    assert f"loss_mode: {loss_mode}" in config


def test_agent_script_trains_one_step(tmp_path):
    env = _env(tmp_path, tmp_path)
    env.update(
        ENV_NAME="line_world",
        TASKS_PER_STEP="2",
        GROUP_N="2",
        MAX_TURNS="2",
        MAX_RESPONSE_LENGTH="8",
        VAL_TASKS="2",
        TEST_FREQ="-1",
        MICRO_BATCH="2",
    )
    _run(
        [
            str(REPO_ROOT / "examples/gigpo_trainer/run_agent.sh"),
            f"trainer.default_local_dir={tmp_path}/ckpt",
            *COMMON,
            "trainer.single_process=true",
            "env.use_ray_workers=false",
            "env.train_tasks=2",
        ],
        env,
    )
    assert _steps(tmp_path / "run") == [1]


def test_async_script_trains_one_step(tmp_path):
    env = _env(tmp_path, tmp_path)
    env.pop("DATA_DIR")  # the RLLA environment finds the real rows itself
    env.update(STEPS="1", NAME="smoke")
    _run(
        [
            str(REPO_ROOT / "examples/async/run_async.sh"),
            f"trainer.default_local_dir={tmp_path}/ckpt",
            f"trainer.run_dir={tmp_path}/run",
            "trainer.save_freq=-1",
        ],
        env,
    )
    assert 1 in _steps(tmp_path / "run")


def test_grpo_learning_recipe_trains_one_step_with_its_settings(tmp_path, small_rlla):
    """``examples/grpo_trainer/run_grpo_smollm2_sft_cpu.sh`` (the 16-prompt GRPO run of experiments/results.md): the values a
    user does not set come from the recipe (sizes here are the test's, through the same variables)."""
    env = _env(tmp_path, small_rlla)
    _run(
        [
            str(REPO_ROOT / "examples/grpo_trainer/run_grpo_smollm2_sft_cpu.sh"),
            f"trainer.default_local_dir={tmp_path}/ckpt",
        ],
        env,
    )
    assert _steps(tmp_path / "run") == [1]
    record = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    config, actor = record, record["actor_rollout_ref"]["actor"]
    assert record["reward_switches_on"] == ["REFINEDREWARD"]
    assert config["actor_rollout_ref"]["rollout"]["temperature"] == 0.5
    assert (actor["use_kl_loss"], actor["kl_loss_coef"], config["algorithm"]["use_kl_in_reward"]) == (True, 0.04, False)
    assert actor["optim"]["lr"] == 1e-5 and config["trainer"]["save_on_exit"] is True


def test_grpo_learning_recipe_defaults_reach_the_trainer():
    """The recipe's own values when the user sets none (composed as ``main_ppo`` composes the script's command line;
    nothing is trained or built)."""
    from verl.trainer.config_utils import load_default_config

    config = load_default_config(["recipe=grpo_smollm2_sft_cpu"], environ={"N_GPUS": "0"})
    actor = config.actor_rollout_ref.actor
    assert (
        config.actor_rollout_ref.model.path,
        config.data.train_batch_size,
        config.actor_rollout_ref.rollout.n,
        actor.ppo_mini_batch_size,
        config.data.max_prompt_length,
        config.data.max_response_length,
        actor.optim.lr,
        config.trainer.total_training_steps,
        config.trainer.save_freq,
        config.trainer.test_freq,
        config.trainer.experiment_name,
        list(config.reward_model.switches),
    ) == ("smollm2-135m-sft", 16, 4, 4, 1024, 256, 1e-5, 20, 5, -1, "grpo_smollm2_sft_cpu", ["REFINEDREWARD"])
