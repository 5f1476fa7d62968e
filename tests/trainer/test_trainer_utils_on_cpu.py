"""Sampler resume, tracking backends, progress heartbeat, metric helpers and the plotting script."""

import json
import logging

import numpy as np
import torch

from verl.trainer.ppo.metric_utils import marked_timer, reduce_metrics, zero_variance_group_fraction
from verl.utils.dataset.sampler import EpochSeededSampler
from verl.utils.tracking import StepProgress, Tracking


def test_sampler_order_depends_only_on_seed_and_epoch():
    a, b = EpochSeededSampler(50, seed=3), EpochSeededSampler(50, seed=3)
    assert list(a) == list(b)
    a.set_epoch(1)
    assert sorted(a.order(1)) == list(range(50)) and a.order(1) != a.order(0)
    assert EpochSeededSampler(50, seed=4).order(0) != a.order(0)
    assert list(EpochSeededSampler(5, shuffle=False)) == [0, 1, 2, 3, 4]


def test_sampler_resume_skips_consumed_batches():
    full = EpochSeededSampler(20, seed=7, batch_size=4)
    full.set_epoch(2)
    expected = list(full)[8:]  # two batches consumed before the interruption
    state = full.state_dict(batches_consumed_in_epoch=2)
    resumed = EpochSeededSampler(20, seed=7, batch_size=4)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)
    assert len(resumed) == 12
    assert list(resumed) == expected
    assert len(list(resumed)) == 20  # the next pass over the same epoch starts from the beginning again


def test_sampler_rejects_mismatched_state():
    state = EpochSeededSampler(20, seed=7).state_dict(1)
    try:
        EpochSeededSampler(21, seed=7).load_state_dict(state)
    except ValueError as err:
        assert "num_samples" in str(err)
    else:
        raise AssertionError("mismatched sampler state accepted")


def test_tracking_writes_jsonl_and_text(tmp_path):
    tracker = Tracking("p", "e", ["console"], run_dir=tmp_path)
    tracker.log({"critic/score/mean": torch.tensor(1.5), "x": np.float32(2.0), "bad": float("nan")}, step=3)
    tracker.log_text("val/generations", "hello", step=3)
    tracker.finish()
    lines = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[0] == {"step": 3, "critic/score/mean": 1.5, "x": 2.0, "bad": "nan"}
    assert lines[1] == {"step": 3, "text": {"val/generations": "hello"}}


def _steps(path):
    return [json.loads(line)["step"] for line in path.read_text().splitlines()]


def test_tracking_resume_cuts_the_steps_an_interrupted_run_lost(tmp_path):
    first = Tracking("p", "e", ["console", "tensorboard"], run_dir=tmp_path, resume_step=0)
    for step in range(6):
        first.log({"x": float(step)}, step=step)
    first.log_text("val/generations", "t", step=5)
    first.finish()
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 6, "x"')  # a line torn by SIGKILL
    # resumed from the step-3 checkpoint: steps 4, 5 (and the torn 6) are redone, so they are cut
    again = Tracking("p", "e", ["console", "tensorboard"], run_dir=tmp_path, resume_step=3)
    for step in (4, 5):
        again.log({"x": 10.0 + step}, step=step)
    again.finish()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5]
    assert [r["x"] for r in records[4:]] == [14.0, 15.0]  # the redone values, once
    # a fresh start in the same folder keeps the old records aside, never mixed in
    fresh = Tracking("p", "e", ["console"], run_dir=tmp_path, resume_step=0)
    fresh.log({"x": 0.5}, step=0)
    fresh.finish()
    assert _steps(tmp_path / "metrics.jsonl") == [0]
    [aside] = tmp_path.glob("metrics.*-*.jsonl")
    assert _steps(aside) == [0, 1, 2, 3, 4, 5]
    # without resume_step (the SFT trainer): appends as before
    plain = Tracking("p", "e", ["console"], run_dir=tmp_path)
    plain.log({"x": 1.0}, step=0)
    plain.finish()
    assert _steps(tmp_path / "metrics.jsonl") == [0, 0]


def test_tracking_restores_the_record_of_a_step_killed_between_save_and_log(tmp_path):
    """Step 2's checkpoint was published, then the run was killed before step 2's line: the resume from step 2 logs
    the record the checkpoint stored; a resume whose step is already logged does not log it twice."""
    first = Tracking("p", "e", ["console"], run_dir=tmp_path, resume_step=0)
    first.log({"x": 1.0}, step=1)
    first.finish()
    again = Tracking("p", "e", ["console"], run_dir=tmp_path, resume_step=2, resume_record={"x": 2.0})
    again.log({"x": 3.0}, step=3)
    again.finish()
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["x"]) for r in records] == [(1, 1.0), (2, 2.0), (3, 3.0)]
    once_more = Tracking("p", "e", ["console"], run_dir=tmp_path, resume_step=2, resume_record={"x": 99.0})
    once_more.finish()
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2]


def test_tracking_rejects_unknown_backend(tmp_path):
    try:
        Tracking("p", "e", ["console", "mlflowx"], run_dir=tmp_path)
    except ValueError as err:
        assert "mlflowx" in str(err)
    else:
        raise AssertionError("unknown backend accepted")


def test_heartbeat_without_tty(caplog):
    progress = StepProgress(total=4, use_tqdm=False)
    with caplog.at_level(logging.INFO):
        progress.update({"critic/score/mean": 0.25})
    assert "[heartbeat] step 1/4" in caplog.text and "critic/score/mean=0.25" in caplog.text and "ETA" in caplog.text


def test_zero_variance_groups():
    scores = torch.tensor([1.0, 1.0, 0.0, 2.0, 5.0])
    uids = ["a", "a", "b", "b", "c"]  # a: zero variance, b: varied, c: singleton (not counted)
    assert zero_variance_group_fraction(scores, uids) == 0.5


def test_timer_and_reduce():
    timing = {}
    with marked_timer("gen", timing):
        pass
    with marked_timer("gen", timing):
        pass
    assert timing["gen"] >= 0 and list(timing) == ["gen"]
    assert reduce_metrics({"a": [1.0, 3.0], "b": 2.0}) == {"a": 2.0, "b": 2.0}


def test_plot_metrics_writes_pngs(tmp_path):
    from verl.utils import plot_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(r)
            for r in [
                {"step": 0, "val/test_score/rlla": 0.1},
                {"step": 1, "critic/score/mean": 0.5, "timing_s/gen": 2.0, "actor/entropy": 1.0},
                {"step": 1, "text": {"val/generations": "x"}},
                {"step": 2, "critic/score/mean": 0.7, "timing_s/gen": 2.5, "actor/entropy": 0.9},
            ]
        )
    )
    written = plot_metrics.plot(path, tmp_path / "plots")
    names = sorted(p.name for p in written)
    assert names == ["entropy.png", "reward.png", "timing.png"]
    assert all(p.stat().st_size > 1000 for p in written)


def test_the_router_panel_draws_the_policys_cost_against_the_budget(tmp_path, monkeypatch):
    """Each quantity on a plot of its own, and the cost plotted is the policy's expected cost (what λ drives to B), not
    the stratified batch's mean cost (fixed near the uniform mix's 0.67 whatever the policy does)."""
    from verl.utils import plot_metrics

    path = tmp_path / "metrics.jsonl"
    path.write_text(
        "\n".join(
            json.dumps(
                {
                    "step": s,
                    "router/lambda": 3.0 - s,
                    "router/policy_cost": 0.3,
                    "router/mean_cost": 0.67,
                    "router/budget": 0.3,
                    "router/policy_prob_answer": 0.7,
                    "router/policy_prob_search": 0.15,
                    "router/policy_prob_calculate": 0.15,
                    "router/frac_answer": 0.33,
                    "router/policy_task_reward": -2.0,
                }
            )
            for s in (1, 2)
        )
    )
    drawn = {}
    original = plot_metrics._draw
    monkeypatch.setattr(
        plot_metrics,
        "_draw",
        lambda ax, series, keys, title: (drawn.__setitem__(title, keys), original(ax, series, keys, title)),
    )
    assert [p.name for p in plot_metrics.plot(path, tmp_path / "plots")] == ["router.png"]
    assert drawn == {
        "lambda": ["router/lambda"],
        "policy cost vs budget B": ["router/policy_cost", "router/budget"],
        "route probabilities": [
            "router/policy_prob_answer",
            "router/policy_prob_calculate",
            "router/policy_prob_search",
        ],
        "task reward": ["router/policy_task_reward"],
    }
