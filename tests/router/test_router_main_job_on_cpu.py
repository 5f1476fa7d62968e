"""The main job: the seed's Option A command composes verbatim, and `bash run_router_training.sh` trains, checkpoints
the router head and λ, survives SIGTERM with a checkpoint, resumes when started again, and writes the plots."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT
from verl.trainer.config_utils import load_default_config, normalize_config, validate_config

# seed 000 §8 "Option A", verbatim (DATA_DIR / BASE_MODEL filled in)
OPTION_A = [
    "algorithm.adv_estimator=grpo",
    "data.train_files=D/train_router.parquet",
    "data.val_files=D/test_router.parquet",
    "data.train_batch_size=512",
    "data.val_batch_size=128",
    "data.max_prompt_length=2048",
    "data.max_response_length=1024",
    "actor_rollout_ref.model.path=M",
    "actor_rollout_ref.rollout.name=hf",
    "actor_rollout_ref.rollout.tensor_model_parallel_size=1",
    "router.enable=true",
    "router.budget_B=0.3",
    "router.cost_weights.any_tool=1.0",
    "trainer.save_freq=200",
    "trainer.save_on_exit=true",
    "trainer.project_name=router_grpo",
    "trainer.experiment_name=baseline_router",
    "trainer.n_gpus_per_node=1",
    "trainer.nnodes=1",
    "trainer.total_epochs=15",
]


def test_seed_option_a_composes_verbatim():
    cfg = normalize_config(load_default_config(OPTION_A + ["trainer.device=cpu"]))
    assert cfg.router.enable is True and cfg.router.budget_B == 0.3 and cfg.router.cost_weights.any_tool == 1.0
    assert cfg.trainer.save_on_exit is True and cfg.actor_rollout_ref.router.enable is True
    validate_config(cfg, check_files=False)  # Option A with verl's default mini-batch (256 of 512 prompts) is valid
    with pytest.raises(Exception, match="ppo_mini_batch_size"):  # one that does not divide 512 is rejected
        validate_config(
            normalize_config(
                load_default_config(OPTION_A + ["trainer.device=cpu", "actor_rollout_ref.actor.ppo_mini_batch_size=3"])
            ),
            check_files=False,
        )


def _env(tmp_path, data_dir, steps):
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
        MAX_RESPONSE_LENGTH="12",
        TOTAL_STEPS=str(steps),
        SAVE_FREQ="1",
        TEST_FREQ="-1",
        RUN_DIR=str(tmp_path / "run"),
        EXPERIMENT_NAME="smoke",
        PYTHONUNBUFFERED="1",
        # the seed's router (routes sampled from the head, λ on the batch's cost); the CPU default recipe
        # (value_ridge) is run by tests/test_first_run_on_cpu.py
        ROUTER_RECIPE="option_a",
    )
    return env


def _script_args(tmp_path):
    return [
        "bash",
        str(REPO_ROOT / "run_router_training.sh"),
        f"trainer.default_local_dir={tmp_path}/ckpt",
        "trainer.cpus_per_worker=0.5",
        "trainer.val_before_train=False",
        "actor_rollout_ref.rollout.micro_batch_size=8",
        "router.dual_lr=0.5",
    ]


def _steps(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [r for r in map(json.loads, path.read_text().splitlines()) if "text" not in r]


@pytest.fixture(scope="module")
def router_data_dir(small_rlla):
    from verl.router.preprocess import preprocess_dir

    preprocess_dir(small_rlla)
    return small_rlla


def test_main_job_sigterm_then_resume(tmp_path, router_data_dir):
    env = _env(tmp_path, router_data_dir, steps=3)
    log = open(tmp_path / "first.log", "w")
    proc = subprocess.Popen(_script_args(tmp_path), cwd=REPO_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 400
    while not _steps(tmp_path / "run") and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
    assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
    proc.send_signal(signal.SIGTERM)  # during step 2 (or between steps): finish it, save, exit non-zero
    rc = proc.wait(timeout=400)
    text = (tmp_path / "first.log").read_text()
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert "Run the same command again to resume" in text
    stopped_at = int((tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").read_text())
    assert stopped_at in (1, 2)
    first = _steps(tmp_path / "run")
    assert [r["step"] for r in first] == list(range(1, stopped_at + 1))
    actor_dir = tmp_path / "ckpt" / f"global_step_{stopped_at}" / "actor"
    assert (actor_dir / "router_world_size_1_rank_0.pt").is_file()
    lam_saved = torch.load(actor_dir.parent / "data.pt", weights_only=False)["router"]["lagrange"]["lambda"]
    assert lam_saved == pytest.approx(first[-1]["router/lambda"])

    # same command again: resumes after the saved step, finishes, plots
    second = subprocess.run(_script_args(tmp_path), cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, (second.stdout + second.stderr)[-3000:]
    records = _steps(tmp_path / "run")
    assert [r["step"] for r in records] == list(range(1, 4))
    lam = lam_saved
    for record in records[stopped_at:]:  # the λ trajectory continues from the checkpoint
        lam = min(10.0, max(0.0, lam + 0.5 * (record["router/mean_cost"] - 0.3)))
        assert record["router/lambda"] == pytest.approx(lam)
    plots = sorted(p.name for p in (tmp_path / "run" / "plots").glob("*.png"))
    assert "router.png" in plots and "reward.png" in plots
