"""The router over tools that run (``router.enable`` with ``actor_rollout_ref.rollout.multi_turn``): each route's
episode may call its family's tools only, the cost can price the executed calls' observation tokens and seconds,
and measured seconds are replayed on resume so that a resumed run is bitwise the uninterrupted one."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from scripted_rounds import ScriptedRounds
from verl.protocol import DataProto
from verl.router import RouterAction, ToolFamily
from verl.router.cost import CostWeights, compute_costs
from verl.trainer.config_utils import ConfigError, load_default_config
from verl.utils.prompt_batch import left_pad_prompts
from verl.utils.reward_score import tool_formats
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

CALCULATOR = "agent_system.tools.builtin:calculator"
MT = "actor_rollout_ref.rollout.multi_turn"


def _rollout(tokenizer, *extra, run_dir=None):
    from verl.trainer.ppo.multi_turn import MultiTurnRollout

    config = load_default_config([f"{MT}.enable=true", f"{MT}.tools=[{CALCULATOR}]", f"{MT}.sandbox=none", *extra])
    return MultiTurnRollout.from_trainer_config(config, tokenizer, run_dir)


def test_each_route_calls_only_its_family(tokenizer):
    """Three rows routed ANSWER, SEARCH, CALCULATE all call the calculator: only the CALCULATE row's call runs, the
    others fail without running (refused); the ANSWER row's forbid flag reaches the rollout."""
    rollout = _rollout(tokenizer, "router.enable=true")
    call = tool_formats.render_calls([{"name": "calculator", "parameters": {"expression": "6 * 7"}}], "toolrl")
    rounds = ScriptedRounds(tokenizer, [call, "<response>42</response>"])
    prompts = [tokenizer.encode(q) for q in ("Six times seven?", "What is 6 * 7?", "Multiply six by seven.")]
    gen = DataProto.from_dict(tensors=left_pad_prompts(prompts, tokenizer.pad_token_id))
    gen.batch[FORBID_TOOL_CALLS] = torch.tensor([True, False, False])
    routes = torch.tensor([int(RouterAction.ANSWER), int(RouterAction.SEARCH), int(RouterAction.CALCULATE)])
    try:
        out = rollout.generate(gen, rounds, do_sample=False, validate=True, routes=routes)
        refused = rollout.runner.metrics()["tool/refused"]
    finally:
        rollout.close()
    assert rounds.batches[0].batch[FORBID_TOOL_CALLS].tolist() == [True, False, False]
    nt = out.non_tensor_batch
    assert nt["tool_calls"].tolist() == [1, 1, 1]
    assert nt["tool_failures"].tolist() == [1, 1, 0] and refused == 2
    assert nt["tool_obs_tokens"].dtype == np.int64 and (nt["tool_obs_tokens"] > 0).all()
    assert nt["tool_seconds"].dtype == np.float64 and (nt["tool_seconds"] >= 0).all()
    ids, mask = out.batch["responses"][2], out.batch["response_mask"][2].bool()
    width = int(out.batch["attention_mask"][2, -ids.shape[0] :].sum())
    assert tokenizer.decode(ids[:width][~mask[:width]]).count("42") == 1  # the calculator's result as a tool turn


def test_without_routes_every_tool_is_offered(tokenizer):
    rollout = _rollout(tokenizer)
    assert rollout.offered_for([0, 1, 2]) == [[], [], ["calculator"]]
    call = tool_formats.render_calls([{"name": "calculator", "parameters": {"expression": "1 + 1"}}], "toolrl")
    gen = DataProto.from_dict(tensors=left_pad_prompts([tokenizer.encode("1 + 1?")], tokenizer.pad_token_id))
    try:
        out = rollout.generate(gen, ScriptedRounds(tokenizer, [call, "<response>2</response>"]), False, True)
    finally:
        rollout.close()
    assert out.non_tensor_batch["tool_failures"].tolist() == [0]


def test_recorded_seconds_are_replayed_and_a_different_rollout_is_refused(tmp_path):
    from verl.trainer.ppo.multi_turn import RecordedSeconds

    path = tmp_path / "run" / "tool_seconds.jsonl"
    first = RecordedSeconds(path)
    out = first.replay("3:0", np.array([1, 0]), np.array([0.25, 0.0]))
    assert out.tolist() == [0.25, 0.0]
    again = RecordedSeconds(path)  # a resumed run reads the file
    assert again.replay("3:0", np.array([1, 0]), np.array([9.0, 0.0])).tolist() == [0.25, 0.0]
    assert again.replay("4:0", np.array([2]), np.array([0.5])).tolist() == [0.5]
    assert [json.loads(x)["key"] for x in path.read_text().splitlines()] == ["3:0", "4:0"]
    with pytest.raises(RuntimeError, match="rollout 3:0 made other calls"):
        again.replay("3:0", np.array([2, 0]), np.array([0.1, 0.0]))
    path.write_text(path.read_text() + "not json\n")
    with pytest.raises(ValueError, match="tool_seconds.jsonl:3: not a tool-seconds record"):
        RecordedSeconds(path)


def test_cost_prices_observation_tokens_and_seconds():
    families = [{"calculator": ToolFamily.CALCULATE}] * 2
    texts = ['<tool_call>\n{"name": "calculator", "parameters": {}}\n</tool_call>', "<response>4</response>"]
    weights = CostWeights(any_tool=1.0, obs_tokens=0.01, seconds=2.0)
    cost, usage = compute_costs(texts, families, weights, obs_tokens=[30, 0], seconds=[0.5, 0.0])
    assert cost.tolist() == pytest.approx([1.0 + 0.3 + 1.0, 0.0])
    assert usage["obs_tokens"].tolist() == [30.0, 0.0] and usage["seconds"].tolist() == [0.5, 0.0]
    plain, _ = compute_costs(texts, families, CostWeights(), obs_tokens=[30, 0], seconds=[0.5, 0.0])
    assert plain.tolist() == [1.0, 0.0]  # default weights: the executed calls do not change the cost
    with pytest.raises(ValueError, match="cost_weights.seconds=2.0: the responses executed no tools"):
        compute_costs(texts, families, weights, obs_tokens=[30, 0])
    with pytest.raises(ValueError, match="1 obs_tokens values for 2 responses"):
        compute_costs(texts, families, weights, obs_tokens=[30], seconds=[0.5, 0.0])


@pytest.mark.parametrize("key", ["seconds", "obs_tokens"])
def test_pricing_executed_calls_without_them_is_refused_at_load(key):
    from verl.trainer.config_utils import typed_config, validate_config

    config = typed_config(load_default_config(["router.enable=true", f"router.cost_weights.{key}=0.5"]))
    with pytest.raises(ConfigError, match=f"router.cost_weights.{key}=0.5 prices executed tool calls"):
        validate_config(config, check_files=False)


def _route_qa_run(tmp_path, data_dir, name, steps, monkeypatch, save_freq=1):
    """A GRPO run of the tiny model on route_qa rows, the router on, calls executed in-process: the random model's
    every turn is read as a calculator call (a test format), so the routes decide what runs."""
    from conftest import close_tool_loop_turns, e2e_overrides
    from verl.trainer.main_ppo import run_ppo

    parse = lambda text: tool_formats.ParsedCalls(  # noqa: E731
        ({"name": "calculator", "parameters": {"expression": f"{len(text)} + 1"}},), True
    )
    monkeypatch.setitem(tool_formats.TOOL_FORMATS, "odd", tool_formats.ToolFormat("odd", parse, lambda calls: ""))
    close_tool_loop_turns(monkeypatch)
    overrides = [o for o in e2e_overrides(tmp_path / name, data_dir) if not o.startswith("data.max_response_length")]
    config = load_default_config(
        overrides
        + [
            f"data.train_files={data_dir}/train.parquet",
            f"data.val_files={data_dir}/val.parquet",
            f"{MT}.enable=true",
            f"{MT}.tools=[{CALCULATOR}]",
            f"{MT}.sandbox=none",
            f"{MT}.max_assistant_turns=2",
            f"{MT}.max_tokens_per_turn=6",
            "data.max_response_length=64",
            "data.tool_format=odd",
            "algorithm.adv_estimator=grpo",
            "actor_rollout_ref.rollout.n=3",
            "router.enable=true",
            "router.route_sampling=stratified",
            "router.sup_coeff=0",
            "router.cost_weights.any_tool=0",
            "router.cost_weights.seconds=1000",
            "router.dual_lr=0.5",
            "trainer.single_process=true",
            "trainer.test_freq=-1",
            "trainer.val_before_train=False",
            f"trainer.save_freq={save_freq}",
            f"trainer.total_training_steps={steps}",
            "trainer.logger=[console,jsonl]",
        ]
    )
    trainer = run_ppo(config)
    records = [json.loads(x) for x in (tmp_path / name / "run" / "metrics.jsonl").read_text().splitlines()]
    return trainer, {r["step"]: r for r in records if "router/lambda" in r}


@pytest.fixture(scope="module")
def route_qa_small(tmp_path_factory):
    from verl.utils.dataset.route_qa import write_task

    out = tmp_path_factory.mktemp("route_qa")
    write_task(out, train=6, val=3, test=3)
    return out


def test_router_trains_on_executed_tools_and_resume_replays_seconds(tmp_path, route_qa_small, monkeypatch):
    """Three steps with checkpoints; then the last two checkpoints are removed and the run resumes from step 1: steps
    2 and 3 are played again with the recorded seconds, so λ, the costs and the weights are bitwise the first run's."""
    import shutil

    trainer, first = _route_qa_run(tmp_path, route_qa_small, "a", 3, monkeypatch)
    batch = trainer.last_batch
    routes = batch.batch["router_action"].tolist()
    assert sorted(set(routes)) == [0, 1, 2]  # stratified: every route of every prompt
    failures, calls = batch.non_tensor_batch["tool_failures"], batch.non_tensor_batch["tool_calls"]
    for route, f, c in zip(routes, failures, calls):
        assert c > 0 and (f == 0 if route == int(RouterAction.CALCULATE) else f == c)  # only CALCULATE runs it
    seconds = torch.tensor(batch.non_tensor_batch["tool_seconds"], dtype=torch.float32)
    assert torch.allclose(batch.batch["router_cost"], 1000 * seconds)  # the cost is the measured seconds only
    assert all(first[s]["tool/refused"] > 0 and "router/mean_tool_seconds" in first[s] for s in (1, 2, 3))
    record = (tmp_path / "a" / "run" / "tool_seconds.jsonl").read_text().splitlines()
    assert [json.loads(x)["key"] for x in record] == ["1:0", "2:0", "3:0"]
    ckpt = tmp_path / "a" / "ckpt"
    before = torch.load(ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False)
    for step in (2, 3):
        shutil.rmtree(ckpt / f"global_step_{step}")
    (ckpt / "latest_checkpointed_iteration.txt").write_text("1")
    _, resumed = _route_qa_run(tmp_path, route_qa_small, "a", 3, monkeypatch)
    for step in (2, 3):
        for key in ("router/lambda", "router/mean_cost", "router/mean_tool_seconds"):
            assert resumed[step][key] == first[step][key], (step, key)
    after = torch.load(ckpt / "global_step_3" / "actor" / "model_world_size_1_rank_0.pt", weights_only=False)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert len((tmp_path / "a" / "run" / "tool_seconds.jsonl").read_text().splitlines()) == 3
