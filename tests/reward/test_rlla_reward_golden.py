"""Every line of ../shared/golden/rlla_reward_public.jsonl: scores to 1e-9, typed errors where the reference raised."""

from __future__ import annotations

import json

import pytest

from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.rlla import (
    InvalidGroundTruthError,
    RewardSwitches,
    UnknownModelWrapperError,
    compute_score,
)

# The golden file records the reference's exception as "ExceptionType: message".
EXPECTED_ERROR = {"JSONDecodeError": InvalidGroundTruthError, "NotImplementedError": UnknownModelWrapperError}


def _golden(shared_dir):
    path = shared_dir / "golden" / "rlla_reward_public.jsonl"
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


@pytest.fixture(scope="module")
def golden(shared_dir):
    return _golden(shared_dir)


def _check(case, result):
    expected = (case["score"], case["format"], case["correctness"], case["length"])
    for name, got, want in zip(("score", "format", "correctness", "length"), result, expected):
        assert got == pytest.approx(want, abs=1e-9), f"{case['case']} env={case['env']} step={case['step']}: {name}"


def test_golden_file_shape(golden):
    assert len(golden) == 2868
    errors = [c for c in golden if "error" in c]
    assert len(errors) == 53
    assert {c["error"].split(":")[0] for c in errors} == set(EXPECTED_ERROR)


def test_every_golden_line_with_switch_snapshot(golden):
    """compute_score(switches=RewardSwitches.from_env(case env)) reproduces every line (no env mutation)."""
    for case in golden:
        switches = RewardSwitches.from_env(case["env"])
        if "error" in case:
            with pytest.raises(EXPECTED_ERROR[case["error"].split(":")[0]]):
                compute_score(case["solution_str"], case["ground_truth"], case["step"], switches=switches)
            continue
        _check(case, compute_score(case["solution_str"], case["ground_truth"], case["step"], switches=switches))


def test_golden_lines_reading_the_environment(golden, monkeypatch):
    """Same cases with the switches set as real environment variables, read at call time like ToolRL."""
    all_vars = {var for case in golden for var in case["env"]}
    by_env: dict[str, list] = {}
    for case in golden:
        by_env.setdefault(json.dumps(case["env"], sort_keys=True), []).append(case)
    for cases in by_env.values():
        for var in all_vars:
            monkeypatch.delenv(var, raising=False)
        for var, value in cases[0]["env"].items():
            monkeypatch.setenv(var, value)
        for case in cases[:40]:  # a sample per environment keeps this fast; the snapshot test covers all lines
            if "error" in case:
                with pytest.raises(EXPECTED_ERROR[case["error"].split(":")[0]]):
                    compute_score(case["solution_str"], case["ground_truth"], case["step"])
            else:
                _check(case, compute_score(case["solution_str"], case["ground_truth"], case["step"]))


def test_typed_errors_are_informative(golden):
    gt_case = next(c for c in golden if c["case"] == "synthetic/gt_invalid_json_crash")
    with pytest.raises(InvalidGroundTruthError) as info:
        compute_score(gt_case["solution_str"], gt_case["ground_truth"], 0, wrapper="qwen")
    assert "line 0" in str(info.value) and "{not json}" in str(info.value)
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value.__cause__, json.JSONDecodeError)

    with pytest.raises(UnknownModelWrapperError) as info:
        compute_score("x", "<think>a</think>", switches=RewardSwitches(experiment_name="grpo-Qwen2.5-3B"))
    message = str(info.value)
    assert "grpo-Qwen2.5-3B" in message and "'llama' or 'qwen'" in message and "wrapper=" in message
    assert isinstance(info.value, NotImplementedError)
    with pytest.raises(UnknownModelWrapperError):
        compute_score("x", "<think>a</think>", wrapper="chatml", switches=RewardSwitches())


def test_explicit_wrapper_overrides_experiment_name(golden):
    """wrapper="qwen" scores the qwen-named lines identically even when EXPERIMENT_NAME would fail."""
    cases = [c for c in golden if c["env"] == {"EXPERIMENT_NAME": "grpo-qwen2.5-3b"} and "error" not in c]
    assert len(cases) > 200
    unset = RewardSwitches()  # EXPERIMENT_NAME unset: wrapper=None would raise
    for case in cases:
        _check(
            case,
            compute_score(case["solution_str"], case["ground_truth"], case["step"], wrapper="qwen", switches=unset),
        )


def test_default_compute_score_dispatch(golden):
    case = next(c for c in golden if c["case"] == "self/test00" and c["env_name"] == "default")
    info = {"step": 0, "wrapper": "qwen", "reward_switches": RewardSwitches()}
    out = default_compute_score("rlla_4k", case["solution_str"], case["ground_truth"], info)
    assert out == {"score": 4.0, "format": 1.0, "correctness": 3.0, "length": 0.0, "pred": out["pred"]}
    assert out["pred"].startswith("tool_call:")
    with pytest.raises(NotImplementedError, match="openai/gsm8k"):
        default_compute_score("openai/gsm8k", "x", "y", info)
    # step travels through extra_info: SCHEDULEREWARD at step 0 makes a perfect tool answer 2 + 2.
    sched = {"step": 0, "wrapper": "qwen", "reward_switches": RewardSwitches(schedulereward=True)}
    assert default_compute_score("rlla", case["solution_str"], case["ground_truth"], sched)["score"] == 4.0
    sched["step"] = 150
    assert default_compute_score("rlla", case["solution_str"], case["ground_truth"], sched)["score"] == 4.0
    sched["step"] = 75
    assert {
        k: v
        for k, v in default_compute_score("rlla", case["solution_str"], case["ground_truth"], sched).items()
        if k != "pred"
    } == pytest.approx({"score": 1.5 + 2.5, "format": 1.5, "correctness": 2.5, "length": 0.0})
