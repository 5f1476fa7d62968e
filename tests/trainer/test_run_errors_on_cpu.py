"""Issue 22 in the trainer: errors found before training, errors in the middle of a run, and runs that learn nothing.

- An error inside a step (``VERL_TEST_FAULT=RAISE@reward:3``) with ``trainer.save_on_exit`` saves step 2 (the last
  completed one) before the error is raised, with a note saying so; the same command then resumes and ends with
  weights, optimizer and driver state bitwise equal to an uninterrupted run (one process: one shared RNG).
- An error during the updates saves nothing (the weights are partly updated) and says so.
- A reward that fails on every sample stops the run after ``trainer.max_consecutive_bad_steps`` steps with
  ``RunStopped`` naming the reward and its first failure, after a save; the logged score mean leaves invalid samples
  out.
- ``python -m verl.trainer.main_ppo`` prints a user's mistake (unknown ``+key``, bad model path) as one ``error:``
  line with exit status 2, no traceback.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, e2e_overrides
from verl.utils import checkpoint_manifest as cm

ALWAYS_RAISES = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    raise ValueError("cannot parse ground truth " + repr(ground_truth)[:20])
"""
VARIES = """
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return (sum(map(ord, solution_str)) % 7) / 6.0
"""


def _run(tmp_path: Path, data_dir: Path, reward: str, *extra: str, steps: int = 4):
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo

    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "reward.py").write_text(reward)
    overrides = e2e_overrides(tmp_path, data_dir) + [
        "trainer.single_process=true",
        "trainer.val_before_train=False",
        "trainer.test_freq=-1",
        "trainer.save_freq=-1",
        f"trainer.total_training_steps={steps}",
        "trainer.log_val_generations=0",
        "trainer.logger=[console,jsonl]",
        "data.max_response_length=8",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        f"custom_reward_function.path={tmp_path}/reward.py",
        "reward.sandbox=none",
        *extra,
    ]
    return run_ppo(load_default_config(overrides))


def _weights(step_dir: Path) -> dict:
    out = {}
    for name in ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt"):
        obj = torch.load(step_dir / "actor" / name, weights_only=False)
        flat = cm.flatten(obj if "optim" not in name else {"state": {str(k): v for k, v in obj["state"].items()}})
        out.update({f"{name}/{k}": v for k, v in flat.items() if isinstance(v, torch.Tensor)})
    data = torch.load(step_dir / "data.pt", weights_only=False)
    out["sampler"], out["step"] = data["sampler"], data["global_step"]
    return out


def _assert_equal_states(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def test_error_mid_step_saves_last_completed_step_and_resume_equals_uninterrupted(tmp_path, small_rlla, monkeypatch):
    from verl.trainer.ppo.run_guard import InjectedFault

    _run(tmp_path / "ref", small_rlla, VARIES, "trainer.save_freq=4")
    monkeypatch.setenv("VERL_TEST_FAULT", "RAISE@reward:3")
    with pytest.raises(InjectedFault) as info:
        _run(tmp_path / "err", small_rlla, VARIES, "trainer.save_on_exit=true", "trainer.save_freq=4")
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "step 2, the last completed one, is saved: run the same command to resume" in notes, notes
    ckpt = tmp_path / "err" / "ckpt"
    assert [p.name for p in cm.step_dirs(ckpt)] == ["global_step_2"]
    monkeypatch.delenv("VERL_TEST_FAULT")
    _run(tmp_path / "err", small_rlla, VARIES, "trainer.save_on_exit=true", "trainer.save_freq=4")
    _assert_equal_states(_weights(ckpt / "global_step_4"), _weights(tmp_path / "ref" / "ckpt" / "global_step_4"))
    steps = [json.loads(line)["step"] for line in (tmp_path / "err" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_error_during_update_saves_nothing_and_says_why(tmp_path, small_rlla, monkeypatch):
    from verl.trainer.ppo.run_guard import InjectedFault

    monkeypatch.setenv("VERL_TEST_FAULT", "RAISE@update_actor:2")
    with pytest.raises(InjectedFault) as info:
        _run(tmp_path, small_rlla, VARIES, "trainer.save_on_exit=true", steps=2)
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "during the updates of step 2" in notes and "no checkpoint was written" in notes, notes
    assert cm.step_dirs(tmp_path / "ckpt") == []


def test_reward_failing_on_every_sample_stops_the_run(tmp_path, small_rlla):
    from verl.trainer.ppo.run_guard import RunStopped

    with pytest.raises(RunStopped) as info:
        _run(tmp_path, small_rlla, ALWAYS_RAISES, "trainer.max_consecutive_bad_steps=2", steps=4)
    message = str(info.value)
    assert "2 consecutive bad steps" in message and "100% of the samples could not be scored" in message
    assert "compute_score" in message and "cannot parse ground truth" in message
    assert (tmp_path / "ckpt" / "global_step_2" / cm.MANIFEST).is_file()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    assert all("critic/score/mean" not in r and r["reward/invalid_frac"] == 1.0 for r in records)


def test_a_run_shorter_than_the_bad_step_limit_that_scores_nothing_fails(tmp_path, small_rlla):
    """Two steps, under the default limit of 3 bad steps in a row: every sample invalid used to exit 0. It fails
    after its last step, saved, naming the reward's first failure."""
    from verl.trainer.ppo.run_guard import RunStopped

    with pytest.raises(RunStopped, match=r"could not score any sample of this run's 2 step\(s\).*cannot parse"):
        _run(tmp_path, small_rlla, ALWAYS_RAISES, steps=2)
    assert (tmp_path / "ckpt" / "global_step_2" / cm.MANIFEST).is_file()


def _main(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_ppo",
            f"hydra.run.dir={tmp_path}/hydra",
            "trainer.n_gpus_per_node=0",
            *overrides,
        ],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize(
    "override, expected",
    [
        (
            "+actor_rollout_ref.actor.optim.lrr=1e-5",
            "actor_rollout_ref.actor.optim.lrr (did you mean actor_rollout_ref.actor.optim.lr?)",
        ),
        ("actor_rollout_ref.model.path=tiny_sft_typo", "actor_rollout_ref.model.path=tiny_sft_typo: not a preset"),
        ("actor_rollout_ref.model.path=/nonexistent", "no folder /nonexistent exists"),
    ],
)
def test_main_prints_user_errors_in_one_line(tmp_path, small_rlla, override, expected):
    out = _main(
        tmp_path, f"data.train_files={small_rlla}/train.parquet", f"data.val_files={small_rlla}/test.parquet", override
    )
    assert out.returncode == 2, out.stderr[-2000:]
    assert "error: " in out.stderr and expected in out.stderr, out.stderr[-2000:]
    assert "Traceback" not in out.stderr


def test_rollout_data_dir_dumps_every_step(tmp_path, small_rlla):
    """``trainer.rollout_data_dir`` (verl's key, issue 21): each training step's rollouts as <dir>/<step>.jsonl,
    one line per response (2 prompts x 2 samples), with the score the reward gave; ``trainer.validation_data_dir``
    the same for each validation (4 prompts, greedy, before training and at step 2), its mean the logged one."""
    _run(
        tmp_path,
        small_rlla,
        VARIES,
        f"trainer.rollout_data_dir={tmp_path}/rollouts",
        "trainer.val_before_train=True",
        "trainer.test_freq=2",
        f"trainer.validation_data_dir={tmp_path}/val",
        steps=2,
    )
    logged = {r["step"]: r for r in map(json.loads, (tmp_path / "run" / "metrics.jsonl").read_text().splitlines())}
    for step in (0, 2):
        records = [json.loads(line) for line in (tmp_path / "val" / f"{step}.jsonl").read_text().splitlines()]
        assert len(records) == 4 and {r["step"] for r in records} == {step}
        assert logged[step]["val/test_score/rlla"] == pytest.approx(sum(r["score"] for r in records) / 4)
    assert sorted(p.name for p in (tmp_path / "val").iterdir()) == ["0.jsonl", "2.jsonl"]
    for step in (1, 2):
        records = [json.loads(line) for line in (tmp_path / "rollouts" / f"{step}.jsonl").read_text().splitlines()]
        assert len(records) == 4 and {r["step"] for r in records} == {step}
        for r in records:
            assert r["input"].startswith("<|im_start|>") and isinstance(r["output"], str)
            assert r["score"] == pytest.approx((sum(map(ord, r["output"].replace("<|im_end|>", ""))) % 7) / 6.0) or r[
                "score"
            ] == pytest.approx((sum(map(ord, r["output"])) % 7) / 6.0)
            assert r["reward_valid"] is True
