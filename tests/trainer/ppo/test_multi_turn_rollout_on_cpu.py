"""The PPO trainer's multi-turn rollout (``actor_rollout_ref.rollout.multi_turn``): the executing tool loop over the
rollout workers, its response mask kept by the trainer, its metrics logged, its settings checked at load."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from scripted_rounds import ScriptedRounds
from verl.protocol import DataProto
from verl.trainer.config_utils import ConfigError, load_default_config
from verl.utils.prompt_batch import left_pad_prompts
from verl.utils.reward_score import tool_formats

CALCULATOR = "agent_system.tools.builtin:calculator"
ADD = "tests/agent_system/tool_fixtures.py:add"
TOOLS = "actor_rollout_ref.rollout.multi_turn.tools"


def _mt(*extra: str) -> list[str]:
    return ["actor_rollout_ref.rollout.multi_turn.enable=true", *extra]


def test_calls_run_and_only_the_policys_tokens_are_masked_in(tokenizer):
    """Two prompts, a calculator call then an answer: the observation (the tool's real result) sits between the two
    turns with response_mask 0, the prompts are the rows' own ids, the metrics count one call per episode."""
    from verl.trainer.ppo.multi_turn import MultiTurnRollout

    config = load_default_config(
        _mt(
            f"{TOOLS}=[{CALCULATOR}]",
            "actor_rollout_ref.rollout.multi_turn.sandbox=none",
            "data.max_response_length=160",
        )
    )
    rollout = MultiTurnRollout.from_trainer_config(config, tokenizer)
    call = tool_formats.render_calls([{"name": "calculator", "parameters": {"expression": "6 * 7"}}], "toolrl")
    rounds = ScriptedRounds(tokenizer, [call, "<response> 42 </response>"])
    prompts = [tokenizer.encode("Six times seven?"), tokenizer.encode("What is six times seven, please?")]
    gen = DataProto.from_dict(tensors=left_pad_prompts(prompts, tokenizer.pad_token_id))
    out = rollout.generate(gen, rounds, do_sample=False, validate=True)
    metrics = out.meta_info["rollout_metrics"]
    rollout.close()
    assert rounds.prompts[0] == prompts  # the dataset's ids, not a re-rendering
    assert out.batch["responses"].shape == (2, 160)
    for i in range(2):
        mask, ids = out.batch["response_mask"][i].bool(), out.batch["responses"][i]
        width = int(out.batch["attention_mask"][i, -160:].sum())
        observation = tokenizer.decode(ids[:width][~mask[:width]])
        assert "42" in observation  # the calculator really ran: 6 * 7 came back as a tool turn
        policy = tokenizer.decode(ids[mask], skip_special_tokens=True)
        assert policy == tokenizer.decode(
            tokenizer.encode(call + "<response> 42 </response>", add_special_tokens=False)
        )
        assert rounds.prompts[1][i] == prompts[i] + ids[:width].tolist()[: len(rounds.prompts[1][i]) - len(prompts[i])]
    assert "rollout_log_probs" not in out.batch.keys()  # the rounds returned none: no zeros posing as them
    assert out.non_tensor_batch["tool_calls"].tolist() == [1, 1]
    assert out.non_tensor_batch["stop_reason"].tolist() == ["answer", "answer"]
    assert metrics["tool_loop/calls_per_episode"] == 1.0 and metrics["tool_loop/failure_rate"] == 0.0
    assert metrics["tool/calls"] == 2 and metrics["tool/calls_calculate"] == 2


@pytest.mark.parametrize(
    "overrides, message",
    [
        (_mt(), "multi_turn.tools is empty"),
        (_mt(f"{TOOLS}=[{CALCULATOR}]", "actor_rollout_ref.rollout.multi_turn.sandbox=docker"), "sandbox"),
        (_mt(f"{TOOLS}=[{CALCULATOR}]", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=0"), "turns"),
        (_mt(f"{TOOLS}=[{CALCULATOR}]", "reward_model.overlong_buffer.enable=true"), "overlong_buffer.enable=true"),
        (_mt(f"{TOOLS}=[{CALCULATOR}]", "actor_rollout_ref.actor.mask_truncated=true"), "mask_truncated=true"),
        (_mt(f"{TOOLS}=[{CALCULATOR}]", "algorithm.adv_estimator=rlvcr"), "rlvcr"),
        (_mt(f"{TOOLS}=[{CALCULATOR}]", "env.env_name=sokoban"), "multi_turn.enable"),
    ],
)
def test_bad_settings_are_refused_at_load_naming_the_key(overrides, message):
    from verl.trainer.config_utils import default_config, typed_config, validate_config
    from verl.trainer.key_table import check_keys

    config = typed_config(load_default_config(overrides))
    with pytest.raises(ConfigError, match=message):
        check_keys(config, default_config(), "agent" if config.env.env_name else "main_ppo")
        validate_config(config, check_files=False)


def test_a_tool_that_does_not_load_is_refused_naming_the_key(tokenizer):
    from verl.trainer.ppo.multi_turn import MultiTurnRollout

    config = load_default_config(_mt(f"{TOOLS}=[no_such_module_here:tool]"))
    with pytest.raises(ConfigError, match="multi_turn.tools: .*no_such_module_here"):
        MultiTurnRollout.from_trainer_config(config, tokenizer)


def test_trainer_trains_on_executed_calls(tmp_path, small_rlla, monkeypatch):
    """Two GRPO steps of the tiny model with calls executed in the process sandbox: every step logs the loop's and the
    sandbox's metrics (validation too), the batch's response mask is 0 on the observations the attention covers, and
    the update is finite. The tiny model is random, so a test format reads a call of ``add`` in every turn, and a turn
    that used its whole budget is closed with EOS."""
    from conftest import close_tool_loop_turns, e2e_overrides
    from verl.trainer.main_ppo import run_ppo

    parse = lambda text: tool_formats.ParsedCalls(({"name": "add", "parameters": {"a": len(text), "b": 1}},), True)  # noqa: E731
    monkeypatch.setitem(tool_formats.TOOL_FORMATS, "odd", tool_formats.ToolFormat("odd", parse, lambda calls: ""))
    close_tool_loop_turns(monkeypatch)
    overrides = [o for o in e2e_overrides(tmp_path, small_rlla) if not o.startswith("data.max_response_length")]
    config = load_default_config(
        overrides
        + _mt(
            f"{TOOLS}=[{ADD}]",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
            "actor_rollout_ref.rollout.multi_turn.max_tokens_per_turn=6",
            "actor_rollout_ref.rollout.multi_turn.num_workers=1",
            "data.max_response_length=96",
            "data.tool_format=odd",
            "algorithm.adv_estimator=grpo",
            "trainer.single_process=true",
            "trainer.save_freq=-1",
            "trainer.logger=[console,jsonl]",
        )
    )
    trainer = run_ppo(config)
    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "tool_loop/calls_per_episode" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for r in steps:  # 2 prompts x 2 copies, 3 turns each, every turn a call (the last one's result is not appended)
        assert r["tool_loop/calls_per_episode"] == 3.0 and r["tool_loop/stop_max_turns"] == 1.0
        assert r["tool/calls"] == 12.0 and r["tool/calls_calculate"] == 12.0 and r["tool/failures"] == 0.0
        assert math.isfinite(r["actor/pg_loss"])
    assert [r["val/tool_loop/calls_per_episode"] for r in records if "val/tool_loop/calls_per_episode" in r] == [
        3.0,
        3.0,
    ]
    batch = trainer.last_batch
    response = batch.batch["attention_mask"][:, -96:].bool()
    mask = batch.batch["response_mask"].bool()
    assert not (mask & ~response).any()  # the policy's tokens are real tokens
    called = np.asarray(batch.non_tensor_batch["tool_calls"]) > 0
    assert called.any() and all((response[i] & ~mask[i]).any() for i in np.flatnonzero(called))
