"""The environment manager and the multi-turn rollout loop on the dependency-free ``line_world`` corridor.

A scripted ``generate_fn`` (no model) answers with known token ids, so every row field can be checked by hand:
rows only for active steps, the exact sampled ids (token-in/token-out), anchors taken before the action, rewards,
returns, groups, crash handling, and the inert padding rows used before the update.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch

from agent_system.environments.base import make_env, project_action
from agent_system.environments.manager import EnvironmentManager
from agent_system.multi_turn_rollout.agent_rollout import pad_rows_to_multiple
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector, _chat_ids
from verl.protocol import DataProto
from verl.workers.rollout.base import assemble_rollout_output

R = 16  # response length of the scripted rollout


@pytest.mark.parametrize(
    "text,expected",
    [
        ("<action>left</action>", "left"),
        ("I think <action> right </action>", "right"),
        ("<action>left</action> no wait <ACTION>right</ACTION>", "right"),  # the last pair counts
        ("<action></action>", None),
        ("<action>left", None),
        ("go left", None),
        ("", None),
        (None, None),
    ],
)
def test_project_action(text, expected):
    assert project_action(text) == expected


def test_make_env_unknown_name_lists_registered():
    with pytest.raises(ValueError, match="line_world"):
        make_env("no_such_env")


def _corridor(anchor):
    pos, goal = anchor
    return pos, goal


def test_group_semantics_and_invalid_actions():
    envs = EnvironmentManager("line_world", {"length": 6}, num_tasks=3, group_n=2, use_ray=False, num_workers=2)
    obs, infos = envs.reset([11, 12, 13])
    assert len(obs["text"]) == 6 and obs["image"] is None
    for task in range(3):
        a, b = 2 * task, 2 * task + 1
        assert envs.uid[a] == envs.uid[b] and obs["anchor"][a] == obs["anchor"][b]  # copies share task and state
        assert infos[a]["seed"] == infos[b]["seed"] == 11 + task
    assert len(set(envs.uid)) == 3 and len(set(envs.traj_uid)) == 6
    # an unparseable output and an illegal move change nothing and are invalid; a legal move is valid
    before = obs["anchor"]
    obs, rewards, dones, infos = envs.step(["no tags", "<action>jump</action>"] + ["<action>left</action>"] * 4)
    assert obs["anchor"][0] == before[0] and obs["anchor"][1] == before[1]
    assert [i["is_action_valid"] for i in infos[:2]] == [False, False] and infos[0]["action"] is None
    assert infos[1]["action"] == "jump" and all(i["is_action_valid"] for i in infos[2:])
    for i in range(2, 6):
        pos, goal = _corridor(before[i])
        assert obs["anchor"][i][0] == max(pos - 1, 0)
        assert rewards[i] == (1.0 if max(pos - 1, 0) == goal else 0.0)
    # history window: the next prompt repeats the previous observation and the action taken
    assert "Your action: left" in envs.prompt_text(2) and "Corridor:" in envs.prompt_text(2)
    with pytest.raises(ValueError, match="task seeds"):
        envs.reset([1])


def _scripted_generate(tokenizer, policy, length=R):
    """A rollout stand-in: reads each prompt's corridor, answers ``policy(pos, goal)`` as token ids (at most
    ``length``), returns the rollout output and records the ids it produced."""
    produced = []

    def generate(gen: DataProto) -> DataProto:
        outs = []
        for ids, mask in zip(gen.batch["input_ids"], gen.batch["attention_mask"]):
            text = tokenizer.decode(ids[mask.bool()].tolist())
            line = text.split("Current observation")[-1].split("Corridor: ")[1].split("\n")[0].split()
            pos, goal = line.index("A"), line.index("G")
            answer = tokenizer(policy(pos, goal), add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            outs.append(torch.tensor(answer[:length]))
        responses = torch.nn.utils.rnn.pad_sequence(outs, batch_first=True, padding_value=tokenizer.pad_token_id)
        produced.append(responses)
        return assemble_rollout_output(gen, responses, length, tokenizer.eos_token_id, tokenizer.pad_token_id)

    return generate, produced


def _towards(pos, goal):
    return f"<action>{'right' if goal > pos else 'left'}</action>"


def test_rollout_rows_are_active_steps_with_exact_tokens(tokenizer):
    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=2, group_n=2, use_ray=False)
    collector = TrajectoryCollector(tokenizer, max_steps=6, max_prompt_length=2048, reward_mode="step")
    generate, produced = _scripted_generate(tokenizer, _towards)
    batch, metrics = collector.multi_turn_loop(envs, generate, [3, 4])
    nt = batch.non_tensor_batch
    # an optimal policy needs |goal - start| turns; one row per turn actually played, none after the episode ended
    starts = {}
    for inst, step, anchor in zip(nt["instance"], nt["step_index"], nt["anchor_obs"]):
        if step == 0:
            starts[int(inst)] = anchor
    lengths = {i: abs(a[1] - a[0]) for i, a in starts.items()}
    assert len(batch) == sum(lengths.values())
    for i, length in lengths.items():
        rows = np.flatnonzero(nt["instance"] == i)
        assert sorted(nt["step_index"][rows].tolist()) == list(range(length))
        assert nt["step_reward"][rows].tolist() == [0.0] * (length - 1) + [1.0]  # reward on the winning step
        assert np.all(nt["episode_return"][rows] == 1.0) and np.all(nt["won"][rows])
    assert metrics["env/line_world/success_rate"] == 1.0 and metrics["env/line_world/invalid_action_rate"] == 0.0
    assert metrics["env/line_world/episode_length/mean"] == pytest.approx(np.mean(list(lengths.values())))
    assert metrics["env/line_world/tool_calls_per_turn"] == metrics["env/line_world/tool_call_turn_rate"] == 0.0
    # token-in/token-out: the row's response ids are exactly what the rollout produced, in order of the turns
    expected = torch.cat(
        [torch.nn.functional.pad(p, (0, R - p.shape[1]), value=tokenizer.pad_token_id) for p in produced]
    )
    assert torch.equal(batch.batch["responses"], expected)
    # prompts were left-padded to the widest turn without changing any row's tokens or the loss mask
    for k in range(len(batch)):
        mask = batch.batch["attention_mask"][k]
        prompt = batch.batch["input_ids"][k][:-R][mask[:-R].bool()].tolist()
        assert prompt == batch.batch["prompts"][k][mask[:-R].bool()].tolist()
        assert torch.equal(batch.batch["response_mask"][k], mask[-R:])
        assert batch.batch["position_ids"][k][mask.bool()].tolist() == list(range(int(mask.sum())))
    # the step reward sits on the last response token; the anchor is the state the action was taken in
    last = batch.batch["response_mask"].sum(-1) - 1
    scores = batch.batch["token_level_scores"]
    assert torch.equal(scores[torch.arange(len(batch)), last], torch.tensor(nt["step_reward"], dtype=torch.float32))
    assert float(scores.sum()) == pytest.approx(float(nt["step_reward"].sum()))
    for inst, step, anchor in zip(nt["instance"], nt["step_index"], nt["anchor_obs"]):
        pos0, goal = starts[int(inst)]
        direction = 1 if goal > pos0 else -1
        assert anchor == (pos0 + direction * int(step), goal)
    # copies of a task share uid; each instance has one traj_uid
    for i in lengths:
        rows = np.flatnonzero(nt["instance"] == i)
        assert len(set(nt["traj_uid"][rows])) == 1
    assert len(set(nt["uid"])) == 2


def test_tool_calls_per_turn(tokenizer):
    """Turns whose response holds ToolRL tool calls are counted: a policy that calls two tools (one block) the first
    time it meets a state. One instance meets a new state every turn (2 calls per turn, every turn); two copies of a
    task move in lockstep, so in each turn only the first copy calls (1 call per turn, half the turns)."""
    calls = '<tool_call>\n{"name": "look", "parameters": {}}\n{"name": "map", "parameters": {}}\n</tool_call>'
    seen = set()

    def calling(pos, goal):
        key = (pos, goal)
        text = _towards(pos, goal)
        if key not in seen:  # the first time a state is met: call the tools too
            seen.add(key)
            return calls + text
        return text

    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=1, group_n=1, use_ray=False)
    collector = TrajectoryCollector(tokenizer, max_steps=6, max_prompt_length=2048, reward_mode="step")
    generate, _ = _scripted_generate(tokenizer, calling, length=64)
    batch, metrics = collector.multi_turn_loop(envs, generate, [3])
    assert len(batch) >= 1
    assert metrics["env/line_world/tool_calls_per_turn"] == pytest.approx(2.0)
    assert metrics["env/line_world/tool_call_turn_rate"] == pytest.approx(1.0)
    seen.clear()
    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=1, group_n=2, use_ray=False)
    batch, metrics = collector.multi_turn_loop(envs, generate, [3])  # the copy meets the same states: no calls
    assert metrics["env/line_world/tool_calls_per_turn"] == pytest.approx(1.0)
    assert metrics["env/line_world/tool_call_turn_rate"] == pytest.approx(0.5)


def test_episode_mode_scores_every_row_with_its_return_and_respects_max_steps(tokenizer):
    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=1, group_n=3, use_ray=False)
    collector = TrajectoryCollector(tokenizer, max_steps=2, max_prompt_length=2048, reward_mode="episode")
    wander = lambda pos, goal: f"<action>{'left' if goal > pos else 'right'}</action>"  # noqa: E731 - away
    generate, _ = _scripted_generate(tokenizer, wander)
    batch, metrics = collector.multi_turn_loop(envs, generate, [7])
    assert len(batch) == 3 * 2  # nobody wins: every instance plays exactly max_steps turns
    assert metrics["env/line_world/success_rate"] == 0.0
    assert float(batch.batch["token_level_scores"].abs().sum()) == 0.0
    with pytest.raises(ValueError, match="reward_mode"):
        TrajectoryCollector(tokenizer, max_steps=2, max_prompt_length=8, reward_mode="turn")


def test_long_prompts_keep_their_last_tokens(tokenizer):
    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=1, group_n=1, use_ray=False)
    collector = TrajectoryCollector(tokenizer, max_steps=1, max_prompt_length=40, reward_mode="step")
    generate, _ = _scripted_generate(tokenizer, _towards)
    full = _chat_ids(tokenizer, EnvironmentManager("line_world", {"length": 5}, use_ray=False).prompt_text(0), True)
    assert len(full) > 40
    batch, metrics = collector.multi_turn_loop(envs, generate, [5])
    assert metrics["env/line_world/prompt_truncated_frac"] == 1.0
    assert int(batch.batch["attention_mask"][0, :-R].sum()) == 40


def test_crashing_instance_is_rebuilt_and_its_trajectory_marked_invalid(tokenizer):
    envs = EnvironmentManager("line_world", {"length": 9, "crash_at_step": 2}, num_tasks=1, group_n=2, use_ray=False)
    collector = TrajectoryCollector(tokenizer, max_steps=6, max_prompt_length=2048)
    stay = lambda pos, goal: "<action>stay</action>"  # noqa: E731 - invalid move: nobody wins, both crash at turn 2
    generate, _ = _scripted_generate(tokenizer, stay)
    batch, metrics = collector.multi_turn_loop(envs, generate, [1])
    nt = batch.non_tensor_batch
    assert len(batch) == 4  # turns 0 and 1 of both instances are kept (the crash ends the episode), nothing dropped
    assert not nt["reward_valid"].any() and metrics["env/line_world/invalid_trajectories"] == 2.0
    envs.reset([2])  # the rebuilt instances play again
    assert envs.active.all()


def test_dead_ray_worker_is_restarted(ray_session):
    import ray

    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=2, group_n=1, num_workers=2, use_ray=True)
    envs.reset([1, 2])
    victim = envs.workers[0]
    ray.kill(victim)
    # ray.kill is asynchronous: wait until the actor is really gone, else the step below may still reach it
    for _ in range(200):
        try:
            ray.get(victim.__ray_ready__.remote(), timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            break
        time.sleep(0.05)
    else:
        pytest.fail("ray.kill did not stop the env worker within 10 s")
    obs, rewards, dones, infos = envs.step(["<action>left</action>"] * 2)
    assert envs.restarts == 1 and dones[0] and infos[0]["traj_valid"] is False and "died" in infos[0]["env_error"]
    assert infos[1].get("traj_valid", True) and infos[1]["is_action_valid"]
    _, infos = envs.reset([3, 4])
    assert envs.active.all()
    envs.close()


def test_padding_rows_are_inert_for_the_estimate(tokenizer):
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.ppo.ray_trainer import compute_advantage

    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=2, group_n=2, use_ray=False)
    collector = TrajectoryCollector(tokenizer, max_steps=3, max_prompt_length=2048, reward_mode="step")
    calls = iter(range(10_000))
    # copies of a task answer differently (every third answer moves away), so groups have reward variance
    mixed = lambda pos, goal: "<action>left</action>" if next(calls) % 3 == 0 else _towards(pos, goal)  # noqa: E731
    generate, _ = _scripted_generate(tokenizer, mixed)
    batch, _ = collector.multi_turn_loop(envs, generate, [21, 22])
    algo = load_default_config(["algorithm.adv_estimator=gigpo"]).algorithm
    batch.batch["token_level_rewards"] = batch.batch["token_level_scores"].clone()
    plain = compute_advantage(DataProto.concat([batch]), "gigpo", algo)
    assert float(plain.batch["advantages"].abs().sum()) > 0  # the case is not trivially all-zero
    padded = pad_rows_to_multiple(DataProto.concat([batch]), 8, tokenizer.pad_token_id)
    assert len(padded) % 8 == 0 and len(padded) > len(batch)
    out = compute_advantage(padded, "gigpo", algo)
    n = len(batch)
    assert torch.allclose(out.batch["advantages"][:n], plain.batch["advantages"], atol=1e-12)
    assert float(out.batch["advantages"][n:].abs().sum()) == 0.0
    assert float(out.batch["response_mask"][n:].sum()) == 0.0 and out.non_tensor_batch["is_pad"][n:].all()
    assert float(out.batch["attention_mask"][n:, -R:].sum()) == 0.0
