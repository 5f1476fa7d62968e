"""Kill test (issue 6): a training process killed at several moments, started again with the same command each time,
ends with the same weights as a run that was never interrupted.

Training process: ``tests/trainer/run_in_process.py`` (``main_ppo`` with in-process workers), tiny model, GRPO with the
router on, 4 prompts (2 steps per epoch), 4 steps, a checkpoint every step. A custom reward that varies with the
response text makes the advantages (and so the actor's gradients) non-zero. Interruptions, in order
(``VERL_TEST_FAULT`` is the hook of ``verl.trainer.ppo.run_guard``):

1. SIGKILL in the middle of writing the step-2 checkpoint (actor files written, ``data.pt`` and manifest not);
2. SIGKILL in the actor update of step 3 (resumed from step 1: the half-written save was ignored);
3. SIGTERM during generation of step 3 with ``trainer.save_on_exit`` and ``save_freq=2`` (resumed from step 2, the
   end of epoch 0): the step finishes, ``save_on_exit`` writes step 3, exit 143;
4. SIGKILL from outside, the moment the step-4 save's temporary directory appears (an unaligned kill mid-save);
5. a clean finish.

Checked: each start resumes from the newest complete checkpoint; the step-3 checkpoint written on SIGTERM and the final
one equal the uninterrupted run's bit for bit (actor weights, Adam moments, router head, sampler position, λ state);
logged metrics agree to 1e-5 relative (the resume test's tolerance, see there).

Also here: the same command with ``trainer.single_process=true`` (worker in the driver process, no Ray) ends equal to
its Ray run."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import REPO_ROOT, e2e_overrides
from verl.utils import checkpoint_manifest as cm

REWARD = '''
def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Deterministic, varies with the text: gives GRPO groups a non-zero reward spread."""
    return (sum(map(ord, solution_str)) % 7) / 6.0
'''
COMPARED = ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "router/lambda", "router/mean_cost")
ACTOR_FILES = ("model_world_size_1_rank_0.pt", "optim_world_size_1_rank_0.pt", "router_world_size_1_rank_0.pt")


@pytest.fixture(scope="module")
def short_prompt_data(small_rlla, tmp_path_factory):
    """4 train / 2 val RLLA rows with every message cut to 160 characters (short prompts keep CPU steps fast)."""
    import pandas as pd

    from verl.router.preprocess import preprocess_dir

    out = tmp_path_factory.mktemp("kill_data")
    for split, n in (("train", 4), ("test", 2)):
        df = pd.read_parquet(small_rlla / f"{split}.parquet").head(n).copy()
        df["prompt"] = df["prompt"].map(lambda msgs: [dict(m, content=m["content"][:160]) for m in msgs])
        df.to_parquet(out / f"{split}.parquet")
    preprocess_dir(out)
    (out / "reward.py").write_text(REWARD)
    return out


def _overrides(root: Path, data_dir: Path, extra: tuple = (), steps: int = 4) -> list[str]:
    return e2e_overrides(root, data_dir, "train_router", "test_router") + [
        "algorithm.adv_estimator=grpo",
        "router.enable=true",
        "router.dual_lr=0.5",
        "trainer.test_freq=-1",
        "trainer.val_before_train=False",
        "trainer.save_freq=1",
        f"trainer.total_training_steps={steps}",
        "trainer.log_val_generations=0",
        "data.max_response_length=8",
        "actor_rollout_ref.actor.optim.lr=1e-2",
        f"custom_reward_function.path={data_dir}/reward.py",
        *extra,
    ]


def _start(root: Path, data_dir: Path, log: Path, fault: str = "", extra: tuple = ()) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1", VERL_TEST_FAULT=fault)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(REPO_ROOT / "tests/trainer/run_in_process.py"), *_overrides(root, data_dir, extra)],
            cwd=REPO_ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.log_path = log
    return proc


def _wait(proc: subprocess.Popen, timeout: float = 400) -> tuple[int, str]:
    try:
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    return rc, proc.log_path.read_text()


def _resumed_from(text: str) -> int | None:
    marker = "resumed from "
    if marker not in text:
        return None
    return int(text.split(marker)[-1].split()[0].rsplit("global_step_", 1)[1])


def _state(step_dir: Path) -> dict:
    """Everything compared between runs: actor/optimizer/router tensors and the driver state of ``data.pt``."""
    out = {}
    for name in ACTOR_FILES:
        obj = torch.load(step_dir / "actor" / name, weights_only=False)
        flat = cm.flatten(
            obj if name != "optim_world_size_1_rank_0.pt" else {"state": {str(k): v for k, v in obj["state"].items()}}
        )
        out.update({f"{name}/{k}": v for k, v in flat.items() if isinstance(v, torch.Tensor)})
    data = torch.load(step_dir / "data.pt", weights_only=False)
    out["sampler"] = data["sampler"]
    out["lagrange"] = data["router"]["lagrange"]
    return out


def _compare(a: dict, b: dict) -> float:
    """Max |a − b| over the weight tensors; asserts every tensor is bitwise equal and the driver state identical."""
    assert a.keys() == b.keys()
    worst = 0.0
    for key in a:
        if isinstance(a[key], torch.Tensor):
            diff = (a[key].double() - b[key].double()).abs().max().item() if a[key].numel() else 0.0
            worst = max(worst, diff)
            assert torch.equal(a[key], b[key]), (key, diff)
        else:
            assert a[key] == b[key], key
    return worst


def _assert_same_metrics(a: dict[int, dict], b: dict[int, dict]) -> None:
    """The ``COMPARED`` metrics of every step of ``a`` agree with ``b``'s to 1e-5 relative (absent/NaN in ``a``:
    skipped)."""
    for step in a:
        for key in COMPARED:
            x, y = a[step].get(key), b[step].get(key)
            if x is not None and not (isinstance(x, float) and math.isnan(x)):
                assert x == pytest.approx(y, rel=1e-5, abs=1e-7), (step, key, x, y)


def _metrics(run_dir: Path) -> dict[int, dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r for r in records if "text" not in r}  # a replayed step: its last record counts


def test_killed_runs_end_equal_to_uninterrupted(tmp_path, short_prompt_data):
    data, ref, run = short_prompt_data, tmp_path / "ref", tmp_path / "killed"
    ckpt = run / "ckpt"
    rc, text = _wait(_start(ref, data, tmp_path / "ref.log"))
    assert rc == 0, text[-3000:]
    kills = []

    # 1. SIGKILL with the step-2 checkpoint half written
    rc, text = _wait(_start(run, data, tmp_path / "1.log", fault="KILL@save_partial:2"))
    assert rc == -signal.SIGKILL, text[-3000:]
    assert cm.latest_valid_checkpoint(ckpt).name == "global_step_1" and not (ckpt / "global_step_2").exists()
    leftovers = list(ckpt.glob(cm.TMP_PREFIX + "2.*"))
    assert leftovers and (leftovers[0] / "actor" / "model_world_size_1_rank_0.pt").is_file()
    assert not (leftovers[0] / cm.MANIFEST).exists()
    kills.append(
        {
            "signal": "SIGKILL",
            "at": "save_partial step 2 (actor files written, no data.pt/manifest)",
            "resumed_from": _resumed_from(text),
        }
    )

    # 2. SIGKILL in the middle of step 3
    rc, text = _wait(_start(run, data, tmp_path / "2.log", fault="KILL@update_actor:3"))
    assert rc == -signal.SIGKILL, text[-3000:]
    assert _resumed_from(text) == 1 and not list(ckpt.glob(cm.TMP_PREFIX + "*"))  # leftover removed on save
    assert cm.latest_valid_checkpoint(ckpt).name == "global_step_2"
    kills.append({"signal": "SIGKILL", "at": "update_actor step 3", "resumed_from": 1})

    # 3. SIGTERM with save_on_exit, resuming at the epoch boundary
    rc, text = _wait(
        _start(
            run,
            data,
            tmp_path / "3.log",
            fault="TERM@gen:3",
            extra=("trainer.save_on_exit=true", "trainer.save_freq=2"),
        )
    )
    assert rc == 128 + signal.SIGTERM, text[-3000:]
    assert _resumed_from(text) == 2 and "Run the same command again to resume" in text
    manifest = cm.verify_checkpoint(ckpt / "global_step_3")
    assert manifest["epoch"] == 1
    sigterm_diff = _compare(_state(ckpt / "global_step_3"), _state(ref / "ckpt" / "global_step_3"))
    kills.append({"signal": "SIGTERM", "at": "gen step 3 (save_on_exit)", "resumed_from": 2})

    # 4. SIGKILL from outside as soon as the step-4 save starts writing
    proc = _start(run, data, tmp_path / "4.log")
    deadline = time.monotonic() + 400
    while not list(ckpt.glob(cm.TMP_PREFIX + "4.*")) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    rc, text = _wait(proc)
    published = (ckpt / "global_step_4").is_dir()
    assert rc == -signal.SIGKILL and _resumed_from(text) == 3, text[-3000:]
    kills.append(
        {
            "signal": "SIGKILL",
            "at": "save of step 4 " + ("(after publish)" if published else "(temporary directory being written)"),
            "resumed_from": 3,
        }
    )

    # 5. finish
    rc, text = _wait(_start(run, data, tmp_path / "5.log"))
    assert rc == 0, text[-3000:]
    kills.append({"signal": None, "at": "finished", "resumed_from": _resumed_from(text)})
    final_diff = _compare(_state(ckpt / "global_step_4"), _state(ref / "ckpt" / "global_step_4"))

    straight, resumed = _metrics(ref / "run"), _metrics(run / "run")
    assert sorted(resumed) == sorted(straight) == [1, 2, 3, 4]
    # every step logged once, in order, although steps were redone after each kill (the log is cut on resume)
    logged = [json.loads(line) for line in (run / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "text" not in r] == [1, 2, 3, 4]
    assert [resumed[s]["training/epoch"] for s in (1, 2, 3, 4)] == [0, 0, 1, 1]
    assert any(straight[s]["actor/grad_norm"] > 0 for s in straight)  # the actor really trained
    _assert_same_metrics(straight, resumed)
    print(
        "kill test:",
        json.dumps(
            {"kills": kills, "max_abs_weight_diff_final": final_diff, "max_abs_weight_diff_sigterm_ckpt": sigterm_diff}
        ),
    )


def test_dead_ray_worker_names_worker_and_phase(tmp_path, short_prompt_data, ray_session, monkeypatch):
    """A Ray actor worker killed (as a crash or OOM kill would) during the actor update of step 2: the run stops with
    ``WorkerFailure`` naming the worker group, rank, method, phase and step, and the step-1 checkpoint stays valid."""
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.run_guard import WorkerFailure

    monkeypatch.setenv("VERL_TEST_FAULT", "WORKER@update_actor:2")
    with pytest.raises(WorkerFailure) as info:
        run_ppo(load_default_config(_overrides(tmp_path, short_prompt_data, steps=2)))
    message, ckpt = str(info.value), tmp_path / "ckpt"
    print("worker failure:", message[:400], "...", message.splitlines()[-1])
    for part in (
        "step 2, phase 'update_actor'",
        "worker group 'actor_rollout': rank 0 of 1 failed in update_actor()",
        "ActorDiedError",
        f"{ckpt / 'global_step_1'}: run the same command again",
    ):
        assert part in message, (part, message[:2000])
    failure = info.value
    assert (failure.phase, failure.step, failure.checkpoint) == ("update_actor", 2, str(ckpt / "global_step_1"))
    assert cm.latest_valid_checkpoint(ckpt) == ckpt / "global_step_1" and not (ckpt / "global_step_2").exists()


def test_single_process_run_equals_ray_run(tmp_path, short_prompt_data, ray_session):
    """``trainer.single_process=true`` (the worker inside the driver process, no Ray) and the Ray run of the same
    command end with bitwise-identical checkpoints (weights, Adam moments, router head, sampler, λ), also when the
    single-process run resumes from the Ray run's step-1 checkpoint (the workers' saved RNG state must win over the
    Ray driver's); logged metrics agree to 1e-5 relative (the resume test's tolerance)."""
    import shutil

    from verl.single_controller.local import LocalWorkerGroup
    from verl.single_controller.ray import RayWorkerGroup
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo
    from verl.trainer.ppo.metric_utils import _measured_cpu_peak

    (tmp_path / "resumed" / "ckpt").mkdir(parents=True)
    for name, single in (("ray", False), ("single", True), ("resumed", True)):
        if name == "resumed":
            shutil.copytree(tmp_path / "ray" / "ckpt" / "global_step_1", tmp_path / name / "ckpt" / "global_step_1")
        _measured_cpu_peak.cache_clear()  # each run measures the CPU peak (in the single process: beside the worker)
        overrides = _overrides(tmp_path / name, short_prompt_data, steps=2, extra=(f"trainer.single_process={single}",))
        trainer = run_ppo(load_default_config(overrides))
        assert isinstance(trainer.actor_rollout_wg, LocalWorkerGroup if single else RayWorkerGroup)
    ray_state = _state(tmp_path / "ray" / "ckpt" / "global_step_2")
    for name in ("single", "resumed"):
        assert _compare(_state(tmp_path / name / "ckpt" / "global_step_2"), ray_state) == 0.0, name
    ray_metrics, single_metrics = _metrics(tmp_path / "ray" / "run"), _metrics(tmp_path / "single" / "run")
    assert sorted(ray_metrics) == sorted(single_metrics) == [1, 2]
    _assert_same_metrics(ray_metrics, single_metrics)
    resumed = _metrics(tmp_path / "resumed" / "run")
    # resumed after step 1 into a run folder without metrics: step 1's record comes from the checkpoint (data.pt)
    assert sorted(resumed) == [1, 2]
    _assert_same_metrics(resumed, ray_metrics)
