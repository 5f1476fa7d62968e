"""``main_ppo`` in agent mode (``env.env_name`` set): GiGPO on the ``line_world`` corridor with the tiny model.

Checks the contract: no RLLA files are needed, every step logs the episode metrics and GiGPO's step-group
statistics, validation runs greedy episodes on its own seeds, checkpoints are the single-turn trainer's and a run
resumes from them.
"""

from __future__ import annotations

import json

import pytest

from conftest import agent_e2e_overrides
from verl.trainer.config_utils import ConfigError, load_default_config, validate_config

AGENT = [
    "data.train_files=null",
    "data.val_files=null",
    "data.max_prompt_length=512",
    "env.env_name=line_world",
    "env.max_steps=3",
    "env.train_tasks=8",
    "env.val_tasks=2",
    "env.num_workers=1",
    "env.line_world.length=4",
    "algorithm.adv_estimator=gigpo",
]


def _records(run_dir):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "text" not in r]


def test_gigpo_on_line_world_trains_validates_and_resumes(tmp_path, ray_session):
    from verl.trainer.main_ppo import run_ppo

    config = load_default_config(agent_e2e_overrides(tmp_path) + AGENT)
    run_ppo(config)
    records = _records(tmp_path / "run")
    assert [r["step"] for r in records] == [0, 1, 2]
    for r in (records[0], records[2]):
        assert 0.0 <= r["val/env/line_world/success_rate"] <= 1.0 and "val/env/line_world/episode_length/mean" in r
    for r in records[1:]:
        rows = r["env/line_world/rows"]
        assert 2 * 2 <= rows <= 2 * 2 * 3  # 2 tasks x 2 copies, 1..3 turns each
        assert r["env/line_world/episode_length/mean"] == pytest.approx(rows / 4)
        for key in (
            "gigpo/num_step_groups",
            "gigpo/mean_step_group_size",
            "env/line_world/invalid_action_rate",
            "actor/pg_loss",
            "timing_s/gen",
            "timing_s/update_actor",
            "response_length/mean",
        ):
            assert key in r, key
        assert 1 <= r["gigpo/num_step_groups"] <= rows
    assert (tmp_path / "ckpt" / "global_step_2" / "data.pt").is_file()

    resumed = load_default_config(
        agent_e2e_overrides(tmp_path) + AGENT + ["trainer.total_training_steps=3", "trainer.test_freq=-1"]
    )
    run_ppo(resumed)
    steps = [r["step"] for r in _records(tmp_path / "run")]
    assert steps == [0, 1, 2, 3], steps  # resumed at step 3: no new validation at 0, no replayed steps


def test_agent_config_is_validated(tmp_path):
    base = agent_e2e_overrides(tmp_path) + AGENT
    with pytest.raises(ConfigError, match="env.env_name='nowhere'.*line_world"):
        validate_config(load_default_config(base + ["env.env_name=nowhere"]), check_files=False)
    with pytest.raises(ConfigError, match="env.rollout.n"):
        validate_config(load_default_config(base + ["env.rollout.n=3"]), check_files=False)
    with pytest.raises(ConfigError, match="env.train_tasks"):
        validate_config(load_default_config(base + ["env.train_tasks=1"]), check_files=False)


REWARD_FILE = """
from agent_system.reward import EvaluateResult, reward_function


@reward_function
def turns(messages, ground_truth, **kwargs):
    return EvaluateResult(score=float(len(messages) // 2))  # the return of a trajectory = its number of turns
"""


def test_custom_reward_function_scores_agent_trajectories(tmp_path, ray_session):
    """custom_reward_function in agent mode replaces the environments' rewards (it was ignored before)."""
    from verl.trainer.main_ppo import run_ppo

    path = tmp_path / "turns.py"
    path.write_text(REWARD_FILE)
    config = load_default_config(
        agent_e2e_overrides(tmp_path)
        + AGENT
        + [
            f"custom_reward_function.path={path}",
            "custom_reward_function.name=turns",
            "reward.sandbox=none",
            "trainer.save_freq=-1",
        ]
    )
    run_ppo(config)
    records = _records(tmp_path / "run")
    for r in records[1:]:
        assert r["reward/score/mean"] == pytest.approx(r["env/line_world/episode_length/mean"])
        assert r["reward/invalid_count"] == 0.0
        # GiGPO's returns are the reward's: every trajectory's return is its length (>= 1), never the corridor's 0/1
        assert r["critic/score/max"] >= 1.0 or r["env/line_world/episode_length/mean"] == pytest.approx(1.0)
    assert records[0]["val/reward/score/mean"] == pytest.approx(records[0]["val/env/line_world/episode_length/mean"])


def test_default_step_reward_is_refused_where_nothing_reads_it(tmp_path):
    base = agent_e2e_overrides(tmp_path) + AGENT
    with pytest.raises(ConfigError, match="default_step_reward=0.5: only read when custom_reward_function"):
        validate_config(load_default_config(base + ["algorithm.gigpo.default_step_reward=0.5"]), check_files=False)
    validate_config(
        load_default_config(base + ["algorithm.gigpo.default_step_reward=0.5", "custom_reward_function.name=rlla"]),
        check_files=False,
    )
