"""``custom_reward_function`` in agent mode: a reward-API function scores whole trajectories and its per-step rewards
(``StepOutput``) reach the rows GiGPO reads, through the aligner (agent_system/reward/trajectory.py).

The scripted ``line_world`` rollout of test_rollout_loop_on_cpu.py makes every trajectory known by hand: an optimal
policy walks |goal - start| turns and wins on the last one.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agent_system.environments.manager import EnvironmentManager
from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
from agent_system.reward import EvaluateResult, StepOutput, make_runner, reward_function
from agent_system.reward.trajectory import TrajectoryRewardScorer
from test_rollout_loop_on_cpu import _scripted_generate, _towards

SEEN: list = []


@reward_function
def per_turn(messages, ground_truth, **kwargs):
    """r_t = -0.1 per turn, +1 on the turn after which the environment reported the win; no score (return = sum)."""
    SEEN.append((messages, ground_truth, kwargs))
    turns = len(messages) // 2
    won = kwargs["extra_info"]["won"]
    return EvaluateResult(
        step_outputs=[
            StepOutput(step_index=t, base_reward=1.0 if (won and t == turns - 1) else -0.1) for t in range(turns)
        ]
    )


@reward_function
def outcome_only(messages, ground_truth, **kwargs):
    """An outcome reward: 2 x (number of turns); no step outputs."""
    return EvaluateResult(score=2.0 * (len(messages) // 2))


@reward_function
def flaky(messages, ground_truth, **kwargs):
    """Fails on trajectories of odd length; names a turn that does not exist on the others."""
    turns = len(messages) // 2
    if turns % 2:
        raise RuntimeError("reward bug")
    return EvaluateResult(score=1.0, step_outputs=[StepOutput(step_index=99, base_reward=5.0)])


def _play(tokenizer, fn, reward_mode="step", default_step_reward=0.0, seeds=(3, 4)):
    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=len(seeds), group_n=2, use_ray=False)
    scorer = TrajectoryRewardScorer(
        make_runner(fn, sandbox="none"), tokenizer, reward_mode=reward_mode, default_step_reward=default_step_reward
    )
    collector = TrajectoryCollector(
        tokenizer, max_steps=6, max_prompt_length=2048, reward_mode=reward_mode, reward_scorer=scorer
    )
    generate, _ = _scripted_generate(tokenizer, _towards)
    return collector.multi_turn_loop(envs, generate, list(seeds), step=7)


def _last_token_scores(batch):
    last = batch.batch["response_mask"].sum(-1) - 1
    return batch.batch["token_level_scores"][torch.arange(len(batch)), last].tolist()


def test_step_outputs_become_the_rows_step_rewards(tokenizer):
    SEEN.clear()
    batch, metrics = _play(tokenizer, per_turn)
    nt = batch.non_tensor_batch
    assert len(SEEN) == len(set(nt["traj_uid"])) == 4  # one request per trajectory
    for traj in set(nt["traj_uid"]):
        rows = np.flatnonzero(nt["traj_uid"] == traj)
        rows = rows[np.argsort(nt["step_index"][rows])]
        T = len(rows)
        expected = [-0.1] * (T - 1) + [1.0]
        assert nt["step_reward"][rows].tolist() == pytest.approx(expected)
        assert nt["episode_return"][rows].tolist() == pytest.approx([sum(expected)] * T)  # no score: the sum
        assert nt["env_step_reward"][rows].tolist() == [0.0] * (T - 1) + [1.0]  # the environment's, kept
        assert nt["reward_valid"][rows].all()
    assert _last_token_scores(batch) == pytest.approx(nt["step_reward"].tolist())
    assert float(batch.batch["token_level_scores"].sum()) == pytest.approx(float(nt["step_reward"].sum()))
    # what the reward saw: user = the observation the action was taken in, assistant = the decoded action
    messages, ground_truth, kwargs = SEEN[0]
    assert ground_truth is None and kwargs["step"] == 7 and kwargs["data_source"] == "line_world"
    assert [m.role for m in messages[:2]] == ["user", "assistant"] and messages[1].content == _towards(0, 1)
    assert kwargs["extra_info"]["won"] is True and kwargs["extra_info"]["env_return"] == 1.0
    assert metrics["reward/invalid_count"] == 0.0 and metrics["reward/align_unmatched"] == 0.0
    assert metrics["reward/score/mean"] == pytest.approx(
        np.mean([nt["episode_return"][np.flatnonzero(nt["traj_uid"] == t)[0]] for t in set(nt["traj_uid"])])
    )


def test_an_outcome_reward_lands_on_the_last_turn(tokenizer):
    batch, _ = _play(tokenizer, outcome_only, default_step_reward=0.25)
    nt = batch.non_tensor_batch
    for traj in set(nt["traj_uid"]):
        rows = np.flatnonzero(nt["traj_uid"] == traj)
        rows = rows[np.argsort(nt["step_index"][rows])]
        T = len(rows)
        assert nt["step_reward"][rows].tolist() == [0.25] * (T - 1) + [2.0 * T]
        assert np.all(nt["episode_return"][rows] == 2.0 * T)  # the score, not the sum
    episode, _ = _play(tokenizer, outcome_only, reward_mode="episode")
    assert _last_token_scores(episode) == pytest.approx(episode.non_tensor_batch["episode_return"].tolist())


def test_a_failing_reward_invalidates_only_its_trajectories(tokenizer):
    batch, metrics = _play(tokenizer, flaky, seeds=(3, 4, 5, 6))
    nt = batch.non_tensor_batch
    lengths = {t: int((nt["traj_uid"] == t).sum()) for t in set(nt["traj_uid"])}
    odd = [t for t, n in lengths.items() if n % 2]
    assert odd and len(odd) < len(lengths)  # both kinds occur with these seeds
    for traj, n in lengths.items():
        rows = np.flatnonzero(nt["traj_uid"] == traj)
        if n % 2:
            assert not nt["reward_valid"][rows].any() and not nt["step_reward"][rows].any()
        else:  # the unmatched step output is dropped (and counted): an outcome reward, the score on the last turn
            rows = rows[np.argsort(nt["step_index"][rows])]
            assert nt["reward_valid"][rows].all() and np.all(nt["episode_return"][rows] == 1.0)
            assert nt["step_reward"][rows].tolist() == [0.0] * (n - 1) + [1.0]
    assert metrics["reward/invalid_count"] == len(odd)
    assert metrics["reward/invalid_frac"] == pytest.approx(len(odd) / len(lengths))
    assert metrics["reward/align_unmatched"] == len(lengths) - len(odd)


def test_scorer_arguments_are_checked(tokenizer):
    with pytest.raises(TypeError, match="RewardRunner"):
        TrajectoryRewardScorer(per_turn, tokenizer)
    with pytest.raises(ValueError, match="env.reward_mode"):
        TrajectoryRewardScorer(make_runner(per_turn, sandbox="none"), tokenizer, reward_mode="turn")


@reward_function(mode="batch")
def first_rollout_pays(rollouts_messages, ground_truths, **kwargs):
    """Batch mode: the first trajectory of the batch gets r_t = 1 on every turn, the others 0 (no score: return = sum)."""
    return [
        EvaluateResult(
            step_outputs=[StepOutput(step_index=t, base_reward=1.0 if k == 0 else 0.0) for t in range(len(m) // 2)]
        )
        for k, m in enumerate(rollouts_messages)
    ]


def test_step_rewards_change_gigpo_advantages_as_a_hand_computation_says(tokenizer):
    """One task, two copies playing the same two turns (same seed, same scripted policy): with the corridor's rewards
    both win and GiGPO gives 0 everywhere; with the reward's r_t = (1, 1) vs (0, 0), by hand (omega = 1, gamma = 1,
    mean_std_norm with the unbiased std): episode returns 2 vs 0 -> A_E = +-1/sqrt(2); step returns (2, 1) vs (0, 0)
    in the anchor groups of turns 0 and 1 -> A_S = +-1/sqrt(2) each; so A = +-sqrt(2) on every row."""
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    from verl.trainer.ppo.gigpo import gigpo_batch_inputs

    seed = next(s for s in range(100) if _distance(tokenizer, s) == 2)
    config = {
        "gamma": 1.0,
        "gigpo": {"step_advantage_w": 1.0, "mode": "mean_std_norm", "epsilon": 1e-9, "invalid_action_penalty": 0.0},
    }

    def advantages(batch):
        nt = batch.non_tensor_batch
        adv, _ = get_adv_estimator_fn("gigpo")(
            token_level_rewards=batch.batch["token_level_scores"],
            response_mask=batch.batch["response_mask"],
            index=nt["uid"],
            config=config,
            **gigpo_batch_inputs(nt),
        )
        return (adv * batch.batch["response_mask"]).sum(-1) / batch.batch["response_mask"].sum(-1)

    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=1, group_n=2, use_ray=False)
    generate, _ = _scripted_generate(tokenizer, _towards)
    plain, _ = TrajectoryCollector(tokenizer, max_steps=6, max_prompt_length=2048).multi_turn_loop(
        envs, generate, [seed]
    )
    assert torch.equal(advantages(plain), torch.zeros(4, dtype=advantages(plain).dtype))
    batch, _ = _play(tokenizer, first_rollout_pays, seeds=(seed,))
    nt = batch.non_tensor_batch
    first = nt["traj_uid"] == min(set(nt["traj_uid"]), key=list(nt["traj_uid"]).index)
    expected = torch.tensor([2**0.5 if f else -(2**0.5) for f in first], dtype=torch.float64)
    torch.testing.assert_close(advantages(batch).to(torch.float64), expected, rtol=1e-6, atol=1e-6)


def _distance(tokenizer, seed):
    envs = EnvironmentManager("line_world", {"length": 5}, num_tasks=1, group_n=1, use_ray=False)
    obs, _ = envs.reset([seed])
    pos, goal = obs["anchor"][0]
    return abs(goal - pos)
