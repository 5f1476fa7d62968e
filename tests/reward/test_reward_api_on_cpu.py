"""Reward authoring API (``../shared/specs/reward_api.md``; issue 7 "Reward authoring API").

Types and coercion, the decorator (modes, signature checks, batch length checks), loading by path/name and the registry,
the process sandbox (a reward that raises, sleeps past its timeout, returns garbage, allocates too much or kills its
worker: each row invalid with its reason, the other rows and the next call fine), the reward manager over the API (the
registered RLLA reward gives the default manager's numbers), ``main_ppo``'s wiring, invalid rows left out of the GRPO
group statistics, and the aligner.
"""

from __future__ import annotations

import io
import json
import logging
import textwrap

import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from test_reward_manager import build_batch

from agent_system.reward import (
    EvaluateResult,
    InProcessRunner,
    Message,
    MetricResult,
    ProcessSandbox,
    RewardFunction,
    RewardRequest,
    RewardSandboxError,
    RewardSource,
    StepData,
    StepOutput,
    align,
    coerce_result,
    get_reward_function,
    load_reward_function,
    register_reward_function,
    reward_function,
)
from conftest import REPO_ROOT
from verl.protocol import DataProto
from verl.trainer.config_utils import default_section
from verl.trainer.ppo import core_algos
from verl.utils.reward_score.rlla import RewardSwitches
from agent_system.reward.manager import RewardAPIManager
from verl.workers.reward_manager import RLLARewardManager

REWARDS = textwrap.dedent('''
    import os, time
    from agent_system.reward import EvaluateResult, reward_function

    @reward_function(timeout_s=0.5)
    def misbehave(messages, ground_truth, **kwargs):
        """Behaviour chosen by the last message: raise / sleep / garbage / hog / crash, else a valid score."""
        action = messages[-1].content
        print("reward output on stdout must not corrupt the protocol")
        if action == "raise":
            raise RuntimeError("reward bug")
        if action == "sleep":
            time.sleep(30)
        if action == "garbage":
            return "not a score"
        if action == "hog":
            return float(len(bytearray(8 * 1024 ** 3)))
        if action == "crash":
            os._exit(3)
        return EvaluateResult(score=float(len(messages)), metrics={"format": 1.0, "n_user": float(
            sum(m.role == "user" for m in messages))})

    @reward_function(mode="batch")
    def short_batch(rollouts_messages, ground_truths, **kwargs):
        return [1.0] * (len(rollouts_messages) - 1)

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        """upstream verl style"""
        if extra_info.get("index") == 0:
            raise ValueError("bad row")
        return {"score": float(solution_str == ground_truth), "exact": 1.0}
''')


@pytest.fixture(scope="module")
def reward_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("rewards") / "rewards.py"
    path.write_text(REWARDS)
    return str(path)


def requests(*actions: str) -> list[RewardRequest]:
    return [
        RewardRequest(
            messages=[{"role": "user", "content": "q"}, {"role": "assistant", "content": a}], ground_truth="gt"
        )
        for a in actions
    ]


# -------------------- types ------------------------------------------------------------------------------------------
def test_models_validate_and_round_trip_json():
    msg = Message.model_validate(
        {
            "role": "assistant",
            "content": None,
            "extra": 1,
            "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"x": 1}}}],
        }
    )
    assert msg.tool_calls[0].function.arguments == '{"x": 1}' and msg.tool_calls[0].type == "function"
    assert msg.text() == "" and Message(role="user", content=[{"type": "text", "text": "hi"}]).text() == "hi"
    result = EvaluateResult(
        score=1.5,
        metrics={"format": 1, "acc": MetricResult(score=0.5, reason="half")},
        step_outputs=[StepOutput(step_index=0, base_reward=0.25), StepOutput(step_index="s", base_reward=1)],
    )
    again = EvaluateResult.model_validate_json(result.model_dump_json())
    assert again == result and again.metric_values() == {"format": 1.0, "acc": 0.5}
    assert again.step_outputs[1].step_index == "s"
    for bad in (dict(score=float("nan")), dict(score=float("inf"))):
        with pytest.raises(ValueError, match="finite"):
            EvaluateResult(**bad)
    with pytest.raises(ValueError, match="finite"):
        StepOutput(step_index=0, base_reward=float("nan"))
    step = StepData(
        system_step_index=0,
        resulting_messages_history=[{"role": "user", "content": "x"}],
        step_info={"assistant_turn_index": 0},
    )
    assert isinstance(step.resulting_messages_history[0], Message) and step.base_reward is None


def test_coerce_result_legacy_returns():
    assert coerce_result(2).score == 2.0 and coerce_result(True).score == 1.0
    legacy = coerce_result({"score": 0.5, "acc": True, "format": 1})
    assert legacy.score == 0.5 and legacy.metrics == {"acc": 1.0, "format": 1.0} and legacy.is_score_valid
    native = coerce_result({"score": None, "step_outputs": [{"step_index": 1, "base_reward": 2.0}]})
    assert native.score is None and native.step_outputs[0].base_reward == 2.0
    with pytest.raises(TypeError, match="expected EvaluateResult"):
        coerce_result("garbage")
    with pytest.raises(TypeError, match="without 'score'"):
        coerce_result({"value": 1.0})
    with pytest.raises(TypeError, match="'pred' is a str"):
        coerce_result({"score": 1.0, "pred": "abc"})
    with pytest.raises(ValueError, match="finite"):
        coerce_result(float("nan"))


# -------------------- decorator --------------------------------------------------------------------------------------
def test_decorator_forms_convert_messages_and_check_signatures():
    seen = []

    @reward_function
    def bare(messages, ground_truth, **kwargs):
        seen.append((messages, kwargs))
        return {"score": 1.0}

    @reward_function(mode="batch", timeout_s=3, name="judge")
    def batch(rollouts_messages, ground_truths, **kwargs):
        return [EvaluateResult(score=float(len(r))) for r in rollouts_messages]

    assert isinstance(bare, RewardFunction) and bare.mode == "pointwise" and bare.name == "bare"
    assert bare.__doc__ is None and bare.__wrapped__ is not None
    assert batch.mode == "batch" and batch.timeout_s == 3.0 and batch.name == "judge"
    out = bare([{"role": "user", "content": "x"}], "gt", step=4)
    assert out == EvaluateResult(score=1.0) and isinstance(seen[0][0][0], Message) and seen[0][1] == {"step": 4}
    assert [r.score for r in batch([[{"role": "user", "content": "a"}], []], [None, None])] == [1.0, 0.0]

    with pytest.raises(TypeError, match=r"\*\*kwargs"):
        reward_function(lambda messages, ground_truth: 1.0)
    with pytest.raises(TypeError, match="must accept"):
        reward_function(lambda messages, **kwargs: 1.0)
    with pytest.raises(ValueError, match="mode"):
        reward_function(mode="listwise")(lambda m, g, **k: 1.0)
    with pytest.raises(ValueError, match="timeout_s"):
        reward_function(timeout_s=0)(lambda m, g, **k: 1.0)
    with pytest.raises(TypeError, match="messages must be a list"):
        bare("just a string", "gt")


def test_batch_length_mismatch_is_a_clear_error():
    @reward_function(mode="batch")
    def short(rollouts_messages, ground_truths, **kwargs):
        return [1.0]

    two = [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}]]
    with pytest.raises(ValueError, match="returned 1 results for 2 rollouts"):
        short(two, ["x", "y"])
    with pytest.raises(ValueError, match="2 rollouts but 1 ground truths"):
        short(two, ["x"])
    with pytest.raises(TypeError, match="expected a list"):
        reward_function(mode="batch")(lambda r, g, **k: 1.0)(two, ["x", "y"])
    report = InProcessRunner(short).run(requests("a", "b", "c"))
    assert [r.is_score_valid for r in report.results] == [False] * 3
    assert "returned 1 results for 3 rollouts" in report.results[0].reason


def test_batch_mode_gets_per_rollout_kwargs_as_lists():
    got = {}

    @reward_function(mode="batch")
    def judge(rollouts_messages, ground_truths, **kwargs):
        got.update(kwargs, ground_truths=ground_truths)
        return [float(i) for i in range(len(rollouts_messages))]

    reqs = requests("a", "b")
    reqs[0].kwargs["data_source"] = "s0"
    reqs[1].kwargs.update(data_source="s1", extra=7)
    report = InProcessRunner(judge).run(reqs, {"step": 3})
    assert [r.score for r in report.results] == [0.0, 1.0]
    assert got == {"step": 3, "data_source": ["s0", "s1"], "extra": [None, 7], "ground_truths": ["gt", "gt"]}


def test_load_by_path_and_name_and_registry(reward_file, tmp_path):
    fn = load_reward_function(reward_file, "misbehave")
    assert fn.timeout_s == 0.5 and fn.source == RewardSource(path=reward_file, name="misbehave")
    legacy = load_reward_function(reward_file)  # default name compute_score, upstream signature -> adapted
    assert legacy.mode == "pointwise"
    ok = legacy([{"role": "assistant", "content": "gt"}], "gt", extra_info={"index": 1})
    assert ok.score == 1.0 and ok.metrics == {"exact": 1.0}
    # the reward manager's decoded text wins over the last assistant message
    assert legacy([], "gt", solution_str="gt", extra_info={"index": 1}).score == 1.0
    with pytest.raises(FileNotFoundError, match="custom_reward_function.path"):
        load_reward_function(str(tmp_path / "missing.py"))
    with pytest.raises(AttributeError, match="no function 'nope'"):
        load_reward_function(reward_file, "nope")
    (tmp_path / "plain.py").write_text("def f(messages, ground_truth):\n    return 1.0\nX = 3\n")
    with pytest.raises(TypeError, match=r"\*\*kwargs"):
        load_reward_function(str(tmp_path / "plain.py"), "f")
    with pytest.raises(TypeError, match="not a function"):
        load_reward_function(str(tmp_path / "plain.py"), "X")

    rlla = get_reward_function("rlla")
    assert isinstance(rlla, RewardFunction) and rlla.source.module == "agent_system.reward.builtin"
    with pytest.raises(KeyError, match="registered: .*rlla"):
        get_reward_function("no-such-reward")
    with pytest.raises(ValueError, match="already registered"):
        register_reward_function("rlla", fn)


# -------------------- sandbox ----------------------------------------------------------------------------------------
def test_sandbox_turns_every_failure_into_an_invalid_result_and_goes_on(reward_file):
    sandbox = ProcessSandbox(load_reward_function(reward_file, "misbehave"), num_workers=2, memory_mb=256)
    try:
        report = sandbox.run(requests("ok", "raise", "sleep", "garbage", "hog", "crash", "ok"))
        valid = [r.is_score_valid for r in report.results]
        assert valid == [True, False, False, False, False, False, True]
        reasons = [r.reason for r in report.results]
        assert reasons[1] == "RuntimeError: reward bug"
        assert "timed out after 0.5s" in reasons[2]
        assert "reward returned str 'not a score'" in reasons[3]
        assert reasons[4].startswith("MemoryError") and "memory limit" in reasons[4]
        assert "crashed (exit code 3)" in reasons[5]
        assert report.results[0].score == 2.0 and report.results[0].metrics == {"format": 1.0, "n_user": 1.0}
        metrics = report.metrics()
        assert metrics["reward/timeouts"] == 1.0 and metrics["reward/crashes"] == 1.0
        assert metrics["reward/invalid_count"] == 5.0 and metrics["reward/invalid_frac"] == pytest.approx(5 / 7)
        # the killed / crashed workers were replaced: the next calls are served normally
        again = sandbox.run(requests("ok", "ok", "ok"), {"step": 2})
        assert [r.score for r in again.results] == [2.0] * 3 and again.timeouts == again.crashes == 0
        assert len(sandbox.pool.workers) == 2 and all(w.proc.poll() is None for w in sandbox.pool.workers)
    finally:
        sandbox.close()
    assert sandbox.pool.workers == []


def test_sandbox_batch_mismatch_and_unsendable_inputs(reward_file):
    with ProcessSandbox(load_reward_function(reward_file, "short_batch"), num_workers=1) as sandbox:
        report = sandbox.run(requests("a", "b"))
        assert [r.is_score_valid for r in report.results] == [False, False]
        assert "returned 1 results for 2 rollouts" in report.results[0].reason
    with ProcessSandbox(load_reward_function(reward_file, "misbehave"), num_workers=1) as sandbox:
        reqs = requests("ok", "ok")
        reqs[0].kwargs["extra_info"] = {"index": np.int64(4), "ids": np.arange(2)}  # numpy is converted
        reqs[1].kwargs["extra_info"] = {"obj": object()}
        report = sandbox.run(reqs)
        assert report.results[0].score == 2.0
        assert "cannot be sent to the sandbox" in report.results[1].reason


def test_sandbox_needs_a_loadable_source():
    @reward_function
    def local(messages, ground_truth, **kwargs):
        return 1.0

    assert local.source is None
    with pytest.raises(ValueError, match="not defined in a file"):
        ProcessSandbox(local)
    broken = RewardFunction(local.fn, source=RewardSource(module="no_such_module_for_rewards", name="f"))
    with pytest.raises(RewardSandboxError, match="cannot load the reward: ModuleNotFoundError"):
        ProcessSandbox(broken, num_workers=1).start()


# -------------------- reward manager and main_ppo wiring -------------------------------------------------------------
@pytest.fixture(scope="module")
def rows(shared_dir):
    frame = pd.read_parquet(shared_dir / "data" / "rlla_4k" / "test.parquet")
    return frame.head(5).to_dict("records")


@pytest.mark.parametrize("decode", ["response", "prompt+response"])
def test_registered_rlla_reward_matches_the_default_manager(tokenizer, rows, decode):
    gts = [r["reward_model"]["ground_truth"] for r in rows]
    gts[1] = "<think> r </think>\n<tool_call>\n{not json}\n</tool_call>"  # invalid ground truth in both paths
    batch = build_batch(tokenizer, rows, ground_truths=gts)
    switches = RewardSwitches(schedulereward=True)
    default = RLLARewardManager(tokenizer, decode=decode, switches=switches)(batch, step=75, return_dict=True)
    api = RewardAPIManager(tokenizer, InProcessRunner(get_reward_function("rlla")), decode=decode, switches=switches)(
        batch, step=75, return_dict=True
    )
    for key in (
        "reward_tensor",
        "token_level_scores_format",
        "token_level_scores_correctness",
        "token_level_scores_length",
    ):
        assert torch.equal(api[key], default[key]), key
    assert api["reward_extra_info"]["reward_valid"] == default["reward_extra_info"]["reward_valid"]
    assert api["reward_extra_info"]["reward_valid"][1] is False
    assert "InvalidGroundTruthError" in api["reward_extra_info"]["reward_error"][1]
    assert api["reward_metrics"]["reward/timeouts"] == 0.0 and api["reward_invalid_count"] == 1


def test_api_manager_sandboxed_reward_sees_the_chat_and_marks_failures(tokenizer, rows, reward_file):
    batch = build_batch(tokenizer, rows)
    batch.non_tensor_batch["raw_prompt"] = np.array([list(r["prompt"]) for r in rows], dtype=object)
    with ProcessSandbox(load_reward_function(reward_file), num_workers=1) as sandbox:  # upstream compute_score
        out = RewardAPIManager(tokenizer, sandbox)(batch, step=1, return_dict=True)
    info = out["reward_extra_info"]
    assert info["reward_valid"] == [False] + [True] * 4 and "ValueError: bad row" in info["reward_error"][0]
    assert out["reward_tensor"].sum(-1).tolist() == [0.0] + [1.0] * 4  # response == ground truth
    assert info["exact"] == [None] + [1.0] * 4
    assert out["reward_metrics"]["reward/invalid_frac"] == pytest.approx(0.2)

    with ProcessSandbox(load_reward_function(reward_file, "misbehave"), num_workers=1) as sandbox:
        out = RewardAPIManager(tokenizer, sandbox)(batch, step=1, return_dict=True)
    n_messages = [len(r["prompt"]) + 1 for r in rows]  # the raw chat plus the decoded response
    assert out["reward_tensor"].sum(-1).tolist() == n_messages
    assert out["token_level_scores_format"].sum(-1).tolist() == [1.0] * 5
    assert out["reward_extra_info"]["n_user"] == [float(sum(m["role"] == "user" for m in r["prompt"])) for r in rows]


def test_main_ppo_builds_managers_from_custom_reward_function(tokenizer, reward_file):
    from verl.trainer.main_ppo import build_reward_managers

    base = OmegaConf.load(REPO_ROOT / "verl/trainer/config/ppo_trainer.yaml")

    def build(**overrides):
        cfg = OmegaConf.merge(base, OmegaConf.from_dotlist([f"{k}={v}" for k, v in overrides.items()]))
        return build_reward_managers(cfg, tokenizer)

    train, val = build()
    assert type(train) is RLLARewardManager and val.num_examine == 1
    train, val = build(
        **{
            "custom_reward_function.path": reward_file,
            "custom_reward_function.name": "misbehave",
            "reward.timeout_s": 2.5,
            "reward.num_workers": 1,
        }
    )
    assert isinstance(train, RewardAPIManager) and train.runner is val.runner
    assert isinstance(train.runner, ProcessSandbox) and train.runner.timeout_s == 2.5 and train.runner.num_workers == 1
    assert train.runner.pool.workers == []  # workers start on the first call
    train, _ = build(**{"custom_reward_function.name": "rlla"})
    assert isinstance(train.runner, InProcessRunner) and train.runner.fn is get_reward_function("rlla")
    with pytest.raises(ValueError, match="reward.sandbox"):
        build(**{"custom_reward_function.path": reward_file, "reward.sandbox": "docker"})


def test_reward_dry_run_with_any_reward_function(shared_dir, reward_file, tmp_path):
    from agent_system.reward import dry_run

    def run(*args: str) -> dict:
        out = io.StringIO()
        assert dry_run.main([*args, "--json", "--show-invalid", "9"], out=out) == 0
        return json.loads(out.getvalue())

    parquet = str(shared_dir / "data" / "rlla_4k" / "test.parquet")
    default, via_api = (
        run("--parquet", parquet, "--limit", "12"),
        run("--parquet", parquet, "--limit", "12", "--reward-name", "rlla"),
    )
    assert via_api["stats"] == default["stats"] and via_api["valid"] == 12
    lines = tmp_path / "rollouts.jsonl"
    lines.write_text(
        "".join(json.dumps({"response": r, "ground_truth": "gt"}) + "\n" for r in ("ok", "raise", "garbage", "ok"))
    )
    custom = run("--jsonl", str(lines), "--reward-path", reward_file, "--reward-name", "misbehave")
    assert custom["valid"] == 2 and custom["invalid"] == 2
    assert [r["reason"] for r in custom["invalid_reasons"]] == [
        "RuntimeError: reward bug",
        "TypeError: reward returned str 'not a score'; expected EvaluateResult, a number or a dict with 'score'",
    ]
    assert custom["stats"]["score"]["mean"] == 1.0 and custom["stats"]["n_user"]["count"] == 2  # one message each
    assert dry_run.main(["--jsonl", str(lines), "--reward-name", "nope"], out=io.StringIO()) == 2


# -------------------- invalid rows and group statistics --------------------------------------------------------------
def test_invalid_rows_are_excluded_from_grpo_group_statistics():
    from verl.trainer.ppo.ray_trainer import compute_advantage

    mask = torch.ones(6, 3)
    rewards = torch.zeros(6, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 100.0, 2.0, 4.0, 0.0])  # row 2: an invalid sample's leftover score
    uid = np.array(["a", "a", "a", "b", "b", "b"], dtype=object)
    valid = np.array([True, True, False, True, True, False])
    grpo = core_algos.get_adv_estimator_fn("grpo")
    adv, ret = core_algos.compute_advantage_on_valid_rows(
        grpo, valid, token_level_rewards=rewards, response_mask=mask, index=uid
    )
    expected, _ = grpo(token_level_rewards=rewards[valid], response_mask=mask[valid], index=uid[valid])
    assert torch.allclose(adv[valid], expected) and torch.equal(adv[~valid], torch.zeros(2, 3))
    assert adv[0, 0] == pytest.approx(0.5 / (0.5**0.5 + 1e-6))  # group a without row 2: mean 0.5, std 0.707
    all_valid = core_algos.compute_advantage_on_valid_rows(
        grpo, np.ones(6, bool), token_level_rewards=rewards, response_mask=mask, index=uid
    )
    assert torch.equal(all_valid[0], grpo(token_level_rewards=rewards, response_mask=mask, index=uid)[0])
    none_valid = core_algos.compute_advantage_on_valid_rows(
        grpo, np.zeros(6, bool), token_level_rewards=rewards, response_mask=mask, index=uid
    )
    assert not none_valid[0].any()
    with pytest.raises(ValueError, match="5 entries for a batch of 6"):
        core_algos.compute_advantage_on_valid_rows(
            grpo, valid[:5], token_level_rewards=rewards, response_mask=mask, index=uid
        )
    # GAE: an invalid row's return is its value, so it adds no value loss either
    values = torch.full((6, 3), 0.5)
    _, gae_ret = core_algos.compute_advantage_on_valid_rows(
        core_algos.get_adv_estimator_fn("gae"),
        valid,
        token_level_rewards=rewards,
        response_mask=mask,
        values=values,
        gamma=1.0,
        lam=1.0,
    )
    assert torch.equal(gae_ret[2], values[2])
    # the trainer's compute_advantage reads reward_valid from the batch
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uid, "reward_valid": valid}
    )
    out = compute_advantage(data, "grpo", default_section("algorithm", gamma=1.0, lam=1.0))
    assert torch.equal(out.batch["advantages"], adv)


# -------------------- aligner ----------------------------------------------------------------------------------------
def steps(*turns) -> list[StepData]:
    return [
        StepData(system_step_index=i, step_info={} if t is None else {"assistant_turn_index": t})
        for i, t in enumerate(turns)
    ]


def test_aligner_copies_step_rewards_by_assistant_turn_index():
    data = {"r0": steps(0, None, 1, 2), "r1": steps(0, 1)}
    results = [
        EvaluateResult(
            score=3.0,
            step_outputs=[StepOutput(step_index=2, base_reward=-1.0), StepOutput(step_index=0, base_reward=0.5)],
        ),
        EvaluateResult(score=1.0),
    ]
    out = align(results, data, ["r0", "r1"])
    r0, r1 = out.rollouts
    assert [s.base_reward for s in r0.steps] == [0.5, None, None, -1.0]
    assert r0.step_rewards() == [0.5, 0.0, 0.0, -1.0] and r0.step_rewards(default_step_reward=0.1)[1] == 0.1
    assert (r0.final_score, r1.final_score) == (3.0, 1.0) and r1.step_rewards() == [0.0, 0.0]
    assert out.steps_without_reward == 4 and out.unmatched_step_outputs == out.duplicate_step_outputs == 0
    assert data["r0"][0].base_reward is None  # inputs are not modified
    single = align(EvaluateResult(score=2.0, step_outputs=[StepOutput(step_index=1, base_reward=1.0)]), data, "r1")
    assert single.rollouts[0].step_rewards() == [0.0, 1.0]


def test_aligner_warns_on_unmatched_and_duplicate_indices(caplog):
    data = {"ep-7": steps(0, 1)}
    result = EvaluateResult(
        score=1.0,
        step_outputs=[
            StepOutput(step_index=0, base_reward=1.0),
            StepOutput(step_index=0, base_reward=9.0),
            StepOutput(step_index=5, base_reward=2.0),
            StepOutput(step_index="1", base_reward=3.0),
        ],
    )
    with caplog.at_level(logging.WARNING, logger="agent_system.reward.aligner"):
        out = align([result], data, ["ep-7"])
    assert [s.base_reward for s in out.rollouts[0].steps] == [1.0, None]  # first duplicate wins; "1" is not 1
    assert out.duplicate_step_outputs == 1 and out.unmatched_step_outputs == 2
    assert out.metrics()["reward/align_unmatched"] == 2.0
    messages = [rec.getMessage() for rec in caplog.records]
    assert len(messages) == 3 and all("ep-7" in m for m in messages)
    invalid = align(
        [
            EvaluateResult(
                score=None,
                is_score_valid=False,
                reason="timeout",
                step_outputs=[StepOutput(step_index=0, base_reward=1.0)],
            )
        ],
        data,
        ["ep-7"],
    )
    assert invalid.rollouts[0].final_score is None and invalid.rollouts[0].step_rewards() == [0.0, 0.0]
    assert not invalid.rollouts[0].is_score_valid and invalid.rollouts[0].reason == "timeout"
    with pytest.raises(ValueError, match="1 results for 2 rollout ids"):
        align([result], data, ["ep-7", "ep-8"])
    with pytest.raises(KeyError, match="ep-8"):
        align([result], data, ["ep-8"])


@reward_function
def _turn_rewards(messages, ground_truth, **kwargs):
    """Row 0: only a StepOutput for turn 0 (its reward is the score); row 1: only one naming turn 3 (no score)."""
    index = 0 if "1" not in str(kwargs["extra_info"].get("index", "")) else 3
    return EvaluateResult(step_outputs=[StepOutput(step_index=index, base_reward=0.75)])


def test_api_manager_single_turn_step_output_is_the_reward(tokenizer, rows):
    """A single-turn response is a one-step trajectory: its StepOutput(0) is the reward when there is no score (it
    used to be dropped, leaving the row invalid); a step output naming another turn is counted, not silently lost."""
    batch = build_batch(tokenizer, rows[:2])
    batch.non_tensor_batch["extra_info"] = np.array([{"index": 0}, {"index": 1}], dtype=object)
    out = RewardAPIManager(tokenizer, InProcessRunner(_turn_rewards))(batch, step=1, return_dict=True)
    info = out["reward_extra_info"]
    assert out["reward_tensor"].sum(-1).tolist() == [0.75, 0.0]
    assert info["reward_valid"] == [True, False] and "no StepOutput for turn 0" in info["reward_error"][1]
    assert out["reward_metrics"]["reward/align_unmatched"] == 1.0


def test_sandbox_ends_the_processes_its_workers_started(tmp_path):
    """A reward that forks a process and leaves it running: closing the sandbox, or replacing a worker after
    a timeout, ends it too (the worker's process group), where it used to outlive the run with parent 1."""
    import os
    import time

    path = tmp_path / "forks.py"
    pids = tmp_path / "pids"
    path.write_text(
        textwrap.dedent(f"""
        import os, time
        def spawn(messages, ground_truth, **kwargs):
            pid = os.fork()  # a forked copy of the worker, as a reward using multiprocessing leaves behind
            if pid == 0:
                time.sleep(120)
                os._exit(0)
            with open({str(pids)!r}, "a") as out:
                out.write(f"{{pid}}\\n")
            if messages[-1].content == "hang":
                time.sleep(30)
            return 1.0
        """)
    )

    def alive(pid):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is ended
            return stat.read().split()[2] != "Z"

    def ended(pid):
        deadline = time.monotonic() + 5
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        return not alive(pid)

    fn = load_reward_function(str(path), "spawn")
    with ProcessSandbox(fn, num_workers=1, timeout_s=2.0) as sandbox:
        assert sandbox.run(requests("ok")).results[0].is_score_valid
        first = int(pids.read_text().split()[0])
        assert alive(first)  # left running by the reward while its worker lives
    assert ended(first)  # closing the sandbox ended it (it used to stay, with parent 1)
    with ProcessSandbox(fn, num_workers=1, timeout_s=2.0) as sandbox:
        assert not sandbox.run(requests("hang")).results[0].is_score_valid  # timed out: the worker is replaced
        assert ended(int(pids.read_text().split()[1]))  # the replaced worker's child ended with it
