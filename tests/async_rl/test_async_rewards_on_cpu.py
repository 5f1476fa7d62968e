"""Rewards and data of the async mode with main_ppo's meaning: the RLLA env actors score with the synchronous
trainer's reward managers (a reward-API function, ToolRL's scheduled switches at the learner's step), a sample the
reward cannot score stays out of its group's advantage, and the data keys (train_files, max_samples, shuffle / seed,
train_batch_size) are read as main_ppo reads them or refused where nothing reads them."""

from __future__ import annotations

import os

import pytest
import torch
from omegaconf import OmegaConf

GT = '<think> x </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1"}}\n</tool_call>'
WRONG = '<think> news </think>\n<tool_call>\n{"name": "GetWeather", "parameters": {"city": "Oslo"}}\n</tool_call>'

REWARD_FILE = """
def compute_score(data_source, solution_str, ground_truth, extra_info):
    if ground_truth == "raise":
        raise ValueError("bad row")
    return float(extra_info["step"]) + len(solution_str) / 1000
"""


def _compose(overrides=()):
    from hydra import compose, initialize_config_dir

    import verl.trainer
    from verl.async_rl.config import typed_async_config

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        return typed_async_config(compose(config_name="async_trainer", overrides=list(overrides)))


RLLA_ONLY = ["~async.envs.line_world", "+async.envs.rlla={kind: rlla, fraction: 1.0}"]


class _Server:
    """An inference server's answer: the given texts as the choices, at ``version``."""

    def __init__(self, tokenizer, texts, version):
        self.tokenizer, self.texts, self.version, self.base_url = tokenizer, texts, version, "http://fake/v1"

    def completions(self, prompt_ids, max_tokens, temperature, n):
        assert n == len(self.texts)
        choices = []
        for text in self.texts:
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            choices.append(
                {"token_ids": ids, "logprobs": {"token_logprobs": [-0.5] * len(ids)}, "finish_reason": "stop"}
            )
        return {"policy_version": self.version, "choices": choices}


def _actor(tokenizer, rewards, rows, texts, version, **kwargs):
    from agent_system.environments.env_actor import EnvActor

    actor = EnvActor(
        "rlla",
        {"kind": "rlla"},
        "http://fake/v1",
        "tiny",
        group_size=len(texts),
        reward_manager=rewards,
        rows=rows,
        **kwargs,
    )
    actor.client = _Server(tokenizer, texts, version)
    return actor


def _row(index, ground_truth):
    return {
        "index": index,
        "prompt_ids": [1, 2, 3],
        "reward_model": {"ground_truth": ground_truth},
        "data_source": "rlla",
        "extra_info": {},
    }


def test_a_reward_function_scores_the_group_at_the_learners_step(tmp_path, tokenizer):
    """custom_reward_function through the reward API: the score is the function's at step policy_version + 1 (the
    step these rollouts train at); a row whose reward raises keeps reward 0 and ``reward_valid`` False."""
    import functools

    from verl.async_rl.types import Rollout
    from verl.trainer.main_async import make_reward_manager

    path = tmp_path / "reward.py"
    path.write_text(REWARD_FILE)
    config = _compose([*RLLA_ONLY, f"custom_reward_function.path={path}", "reward.sandbox=none"])
    rewards = functools.partial(make_reward_manager, OmegaConf.to_container(config, resolve=True))
    texts = ["abc", "a longer answer"]
    actor = _actor(tokenizer, rewards, [_row(0, GT), _row(1, "raise")], texts, version=4)
    group = [Rollout.from_dict(r) for r in actor.run_group()]
    assert [r.reward for r in group] == pytest.approx([5 + len(t) / 1000 for t in texts])
    assert all(r.reward_valid for r in group) and group[0].problem_id == "rlla-0-0"
    bad = [Rollout.from_dict(r) for r in actor.run_group()]  # row 1: its reward raises
    assert [r.reward for r in bad] == [0.0, 0.0]
    assert [r.reward_valid for r in bad] == [False, False]
    assert "bad row" in bad[0].metadata["reward_error"]


def test_a_reward_function_gets_the_chat_as_main_ppo_gives_it(tmp_path, tokenizer):
    """With data.return_raw_chat (the default) the rows carry the prompt's messages, and a reward-API function sees
    them before the answer, as in main_ppo (here: the number of messages, 2)."""
    import functools

    from verl.async_rl.types import Rollout
    from verl.trainer.main_async import make_reward_manager

    path = tmp_path / "chat.py"
    path.write_text("def turns(messages, ground_truth, **kwargs):\n    return float(len(messages))\n")
    config = _compose(
        [*RLLA_ONLY, f"custom_reward_function.path={path}", "custom_reward_function.name=turns", "reward.sandbox=none"]
    )
    rewards = functools.partial(make_reward_manager, OmegaConf.to_container(config, resolve=True))
    row = {**_row(0, GT), "raw_prompt": [{"role": "user", "content": "What is the news?"}]}
    actor = _actor(tokenizer, rewards, [row], ["an answer", "another"], version=0)
    assert [Rollout.from_dict(r).reward for r in actor.run_group()] == [2.0, 2.0]
    actor = _actor(tokenizer, rewards, [_row(0, GT)], ["an answer"], version=0)  # no chat: the answer alone
    assert [Rollout.from_dict(r).reward for r in actor.run_group()] == [1.0]


def test_toolrl_switches_read_the_learners_step(monkeypatch, tokenizer):
    """The built-in RLLA manager with SCHEDULEREWARD (reward_model.switches): a rollout generated by version 99 is
    scored at step 100, where the schedule's ranges differ from step 0's."""
    import functools

    from verl.async_rl.types import Rollout
    from verl.trainer.main_async import make_reward_manager
    from verl.trainer.main_ppo import apply_reward_switches
    from verl.utils.reward_score.rlla import RewardSwitches, compute_score

    monkeypatch.setenv("SCHEDULEREWARD", "")  # unset for the switch; the variable is restored after the test
    config = _compose([*RLLA_ONLY, "reward_model.switches=[SCHEDULEREWARD]"])
    assert apply_reward_switches(config) == ["SCHEDULEREWARD"]
    rewards = functools.partial(make_reward_manager, OmegaConf.to_container(config, resolve=True))
    actor = _actor(tokenizer, rewards, [_row(0, GT)], [WRONG], version=99)
    (rollout,) = [Rollout.from_dict(r) for r in actor.run_group()]
    switches = RewardSwitches.from_env()
    assert switches.schedulereward
    at = {step: compute_score(WRONG, GT, step=step, wrapper="none", switches=switches)[0] for step in (0, 100)}
    assert at[0] != pytest.approx(at[100])  # the step matters
    assert rollout.reward == pytest.approx(at[100])


def test_rows_in_file_order_or_reshuffled_every_pass(tokenizer):
    """data.shuffle=false: draw k plays row k mod N; data.shuffle with data.seed: each pass over the N rows is a
    permutation of its own, the same for the same seed."""

    def order(seed, draws=15):
        actor = _actor(tokenizer, lambda tok: None, [_row(i, GT) for i in range(5)], ["x"], 0, shuffle_seed=seed)
        return [actor._row(k)["index"] for k in range(draws)]

    assert order(None) == [0, 1, 2, 3, 4] * 3
    shuffled = order(7)
    passes = [shuffled[i : i + 5] for i in (0, 5, 10)]
    assert all(sorted(p) == [0, 1, 2, 3, 4] for p in passes)  # every row once per pass
    assert len({tuple(p) for p in passes}) > 1 and shuffled != order(None)  # passes reshuffled
    assert order(7) == shuffled and order(8) != shuffled


def test_invalid_rows_stay_out_of_their_groups_advantage(make_rollout, tmp_path):
    """A rollout whose reward could not be scored (reward_valid False) reaches the learner's batch as
    ``reward_valid`` False: GRPO gives it advantage 0 and normalises its group over the valid rollouts alone."""
    from verl.async_rl.batcher import Batcher
    from verl.async_rl.learner import example_to_batch, pad_to_multiple
    from verl.async_rl.replay_buffer import ReplayBuffer
    from verl.trainer.ppo.advantage import compute_advantage

    buffer = ReplayBuffer("a", tmp_path, min_group_size=3)
    rollouts = [make_rollout(problem_id="p", reward=r) for r in (1.0, 0.0)]
    invalid = make_rollout(problem_id="p", reward=0.0)
    invalid.metadata.update(reward_valid=False, reward_error="ValueError('bad row')")
    buffer.add_many(rollouts + [invalid])
    made = Batcher(10_000, {"a": 1.0}, 64, spillover="fill").make_batch({"a": buffer})
    assert made.segment_valid() == [True, True, False]
    rows = example_to_batch(made.example, made.segment_groups(), 0, made.segment_valid())
    assert rows.non_tensor_batch["reward_valid"].tolist() == [True, True, False]
    rows.batch["token_level_rewards"] = rows.batch["token_level_scores"]
    algo = OmegaConf.create({"gamma": 1.0, "lam": 1.0, "norm_adv_by_std_in_grpo": True})
    adv = compute_advantage(rows, "grpo", algo).batch["advantages"]
    per_row = (adv * rows.batch["response_mask"]).sum(-1) / rows.batch["response_mask"].sum(-1)
    std = torch.tensor([1.0, 0.0]).std()  # the valid pair alone
    assert per_row.tolist() == pytest.approx([0.5 / float(std + 1e-6), -0.5 / float(std + 1e-6), 0.0], abs=1e-5)
    padded, added = pad_to_multiple(rows, 4)
    assert added == 1 and padded.non_tensor_batch["reward_valid"].tolist() == [True, True, False, True]
    with pytest.raises(ValueError, match="2 validity flags for 3 segments"):
        example_to_batch(made.example, made.segment_groups(), 0, [True, True])


def test_data_keys_read_as_main_ppo_or_refused():
    from verl.trainer.config_utils import ConfigError

    config = _compose([*RLLA_ONLY, "data.train_batch_size=3", "actor_rollout_ref.actor.ppo_mini_batch_size=2"])
    assert config["async"].batcher.max_groups == 3  # prompts per step: problems per batch
    assert _compose(RLLA_ONLY)["async"].batcher.max_groups is None  # left at its default: the token budget sizes
    for overrides, message in (
        (["data.train_batch_size=-5"], "data.train_batch_size=-5: expected >= 1"),
        (["data.train_batch_size=4", "async.batcher.max_groups=2"], "both size a batch in problems"),
        (["data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=4"], "must not exceed"),
    ):
        with pytest.raises(ConfigError, match=message):
            _compose([*RLLA_ONLY, *overrides])
    # line_world alone reads no data file: the RLLA data keys are refused, named
    for key, value in (("data.train_files", "/x.parquet"), ("data.max_samples", 3), ("data.shuffle", False)):
        with pytest.raises(ConfigError, match=f"{key}={value}: main_async reads it for the envs of kind rlla"):
            _compose([f"{key}={value}"])
    with pytest.raises(ConfigError, match="data.train_files=/x.parquet"):  # the rlla env has its own data_file
        _compose(["~async.envs.line_world", "+async.envs.rlla={kind: rlla, fraction: 1.0, data_file: /y.parquet}",
                  "data.train_files=/x.parquet"])  # fmt: skip
    with pytest.raises(ConfigError, match=r"custom_reward_function scores the rlla envs and validation; async.envs"):
        _compose(["custom_reward_function.path=/x.py"])
    assert _compose([*RLLA_ONLY, "custom_reward_function.path=/x.py"]).custom_reward_function.path == "/x.py"


def test_rlla_rows_load_as_the_synchronous_trainer(tokenizer, small_rlla):
    """data.train_files and data.max_samples: the rlla env's rows are RLHFDataset's (main_ppo's prompt ids), the
    first max_samples rows."""
    from verl.async_rl.prompts import load_prompt_rows, train_files
    from verl.utils.dataset.rl_dataset import RLHFDataset

    files = f"{small_rlla}/train.parquet"
    config = _compose([*RLLA_ONLY, f"data.train_files={files}", "data.max_samples=2", "data.max_prompt_length=1024"])
    assert train_files(config) == files and train_files(config, "/own.parquet") == "/own.parquet"
    rows = load_prompt_rows(config, train_files(config), tokenizer, "data.train_files", config.data.max_samples)
    dataset = RLHFDataset(data_files=files, tokenizer=tokenizer, config={"max_prompt_length": 1024})
    assert [r["index"] for r in rows] == [0, 1]
    item = dataset[1]
    assert rows[1]["prompt_ids"] == item["input_ids"][item["attention_mask"].bool()].tolist()
    assert rows[1]["reward_model"]["ground_truth"] == item["reward_model"]["ground_truth"]


def test_dynamic_sampling_drops_groups_that_all_agree_until_its_bound(make_rollout):
    """algorithm.filter_groups in main_async: an arriving group whose valid rewards all agree is dropped; after
    max_num_gen_batches x max_groups groups since the last batch, such groups fill the batch instead; the next batch
    reports the counts and they start again."""
    from collections import Counter
    from types import SimpleNamespace

    from verl.async_rl.orchestrator import Orchestrator

    fg = SimpleNamespace(enable=True, metric=None, max_num_gen_batches=2)
    orch = object.__new__(Orchestrator)
    orch.config = SimpleNamespace(algorithm=SimpleNamespace(filter_groups=fg))
    orch.a = SimpleNamespace(batcher=SimpleNamespace(max_groups=2))  # bound: 2 x 2 = 4 groups a batch
    orch._filter = Counter()

    def group(*rewards, invalid=()):
        rollouts = [make_rollout(problem_id="p", reward=r) for r in rewards]
        for i in invalid:
            rollouts[i].metadata["reward_valid"] = False
        return rollouts

    kept = [orch._keep_group(g) for g in (group(1.0, 0.0), group(1.0, 1.0), group(0.0, 0.5, invalid=[1]))]
    assert kept == [True, False, False]  # the invalid rollout's 0.5 does not count towards the variance
    assert [orch._keep_group(group(2.0, 2.0)) for _ in range(2)] == [False, True]  # the 5th group passes the bound
    orch.batcher = SimpleNamespace(make_batch=lambda buffers: SimpleNamespace(metrics={}, layout=[0], **_flags()))
    orch.buffers, orch.learner = {}, SimpleNamespace(step=SimpleNamespace(remote=lambda *args: "ref"))
    orch._try_batch()
    assert orch._pending_batch["filter_groups/kept_group_frac"] == pytest.approx(1 / 5)
    assert orch._pending_batch["filter_groups/filled_groups"] == 1.0
    assert not orch._filter and orch._keep_group(group(3.0, 3.0)) is False  # counted afresh
    fg.metric = "correctness"
    correctness = group(1.0, 0.0)
    for rollout in correctness:
        rollout.metadata["rewards"] = {"correctness": 1.0}
    assert orch._keep_group(correctness) is False  # the rewards differ, the metric does not


def _flags():
    return dict(segment_groups=list, segment_valid=list, segment_truncated=list, example=None)


def test_dynamic_sampling_is_checked_as_in_main_ppo():
    from verl.trainer.config_utils import ConfigError

    on = ["algorithm.filter_groups.enable=true"]
    config = _compose([*RLLA_ONLY, *on, "algorithm.filter_groups.max_num_gen_batches=0"])
    assert config.algorithm.filter_groups.enable
    for overrides, message in (
        (on + ["algorithm.filter_groups.max_num_gen_batches=0"], "filter_groups.enable=true: main_async applies it"),
        ([*RLLA_ONLY, *on], "max_num_gen_batches=10 bounds the groups generated per step"),
        ([*RLLA_ONLY, *on, "data.train_batch_size=2", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
          "algorithm.adv_estimator=reinforce_plus_plus"], "needs a group-relative estimator"),
        ([*RLLA_ONLY, *on, "algorithm.filter_groups.max_num_gen_batches=0", "algorithm.filter_groups.metric=acc"],
         "filter_groups.metric='acc'"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            _compose(overrides)


def test_a_launch_whose_reward_scored_nothing_stops(make_rollout):
    """As main_ppo: when every rollout of a launch is invalid the run stops (after its save) naming the first
    failure; one scored rollout is enough to go on."""
    from collections import Counter

    from verl.async_rl.orchestrator import Orchestrator
    from verl.trainer.ppo.run_guard import RunStopped

    orch = object.__new__(Orchestrator)
    orch.counts = Counter(rollouts_generated=4, rollouts_unscored=4)
    orch._first_reward_error = "ValueError: bad row"
    with pytest.raises(RunStopped, match=r"could not score any of the 4 rollouts of this run's 2 step.*bad row"):
        orch._check_something_scored(2)
    orch.counts["rollouts_unscored"] = 3
    orch._check_something_scored(2)  # one scored: no error
    orch._check_something_scored(0)  # no step: nothing to say


class _ToolServer:
    """An inference server that writes a calculator call when the episode has no tool turn yet, else an answer; it
    records every prompt (token ids) it was asked to complete."""

    def __init__(self, tokenizer, version):
        from verl.utils.reward_score import tool_formats

        self.tokenizer, self.version, self.base_url, self.prompts = tokenizer, version, "http://fake/v1", []
        call = {"name": "calculator", "parameters": {"expression": "6 * 7"}}
        self.call = tool_formats.render_calls([call], "toolrl")

    def completions(self, prompt_ids, max_tokens, temperature, n):
        assert n == 1
        first = not self.prompts or len(prompt_ids) <= len(self.prompts[0])
        self.prompts.append(list(prompt_ids))
        text = self.call if first else "<response> 42 </response>"
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        lps = [-0.25] * len(ids)
        choice = {"token_ids": ids, "logprobs": {"token_logprobs": lps}, "finish_reason": "stop"}
        return {"policy_version": self.version, "choices": [choice]}


def test_an_rlla_env_with_tools_executes_the_calls_token_in_token_out(tmp_path, tokenizer):
    """async.envs.<name>.tools: each completion's calls run (the calculator's 42 comes back as a tool turn), the
    next request continues the episode's own ids, the turns are user / assistant / tool / assistant with only the
    assistant ones generated, and the reward (at step version + 1) sits on the last assistant turn."""
    import functools

    from agent_system.environments.env_actor import EnvActor
    from verl.async_rl.inference_server import template_ids
    from verl.async_rl.types import Rollout
    from verl.trainer.main_async import make_reward_manager

    path = tmp_path / "reward.py"
    path.write_text(REWARD_FILE)
    config = _compose([*RLLA_ONLY, f"custom_reward_function.path={path}", "reward.sandbox=none"])
    rewards = functools.partial(make_reward_manager, OmegaConf.to_container(config, resolve=True))
    spec = {"kind": "rlla", "tools": ["agent_system.tools.builtin:calculator"], "tool_sandbox": "none"}
    prompt = template_ids(tokenizer, [{"role": "user", "content": "6 x 7?"}], add_generation_prompt=True)
    row = {**_row(0, GT), "prompt_ids": list(prompt)}
    actor = EnvActor("rlla", spec, "http://fake/v1", "tiny", group_size=2, max_tokens=64, max_turns=3,
                     reward_manager=rewards, rows=[row])  # fmt: skip
    actor.client = server = _ToolServer(tokenizer, version=4)
    group = [Rollout.from_dict(r) for r in actor.run_group()]
    assert len(group) == 2 and len(server.prompts) == 4
    for rollout in group:
        assert [t.role for t in rollout.turns] == ["user", "assistant", "tool", "assistant"]
        user, call, tool, answer = rollout.turns
        assert "42" in tool.message and not tool.is_generated
        assert list(user.tokens + call.tokens + tool.tokens) in server.prompts[2:]  # token in, token out
        assert list(call.logprobs) == [-0.25] * len(call.tokens) and call.reward is None
        assert answer.reward == rollout.reward and int(rollout.reward) == 5  # step policy_version + 1
        assert rollout.metadata["tool_calls"] == 1 and rollout.metadata["stop_reason"] == "answer"
        assert rollout.metadata["policy_versions"] == [4, 4] and rollout.metadata["done"]
    with pytest.raises(ValueError, match="rlla envs only"):
        EnvActor("line", {"kind": "text_env", "env": "line_world", "tools": ["x:y"]}, "http://fake/v1", "tiny")


def test_env_tools_are_checked_at_load():
    from verl.trainer.config_utils import ConfigError

    tools = "[agent_system.tools.builtin:calculator]"
    assert list(_compose(["~async.envs.line_world", f"+async.envs.rlla={{kind: rlla, fraction: 1.0, tools: {tools}}}"])
                ["async"].envs.rlla.tools) == ["agent_system.tools.builtin:calculator"]  # fmt: skip
    with pytest.raises(ConfigError, match="async.envs.line_world.tools: only kind rlla"):
        _compose([f"+async.envs.line_world.tools={tools}"])
    with pytest.raises(ConfigError, match="async.envs.rlla.tool_sandbox must be process or none"):
        _compose([*RLLA_ONLY[:1], "+async.envs.rlla={kind: rlla, fraction: 1.0, tool_sandbox: docker}"])
