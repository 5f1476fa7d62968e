"""The bad-step guard: rows with NaN/Inf loss inputs are named; a step whose share of invalid reward samples exceeds
``trainer.max_invalid_frac`` is a bad step naming the reward and its first failure; after
``max_consecutive_bad_steps`` bad steps in a row the trainer saves and stops (``RunStopped``); a good step resets the
count."""

import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.run_guard import RunStopped, StepHealth, invalid_reward_problem, non_finite_rows
from verl.trainer.ppo.trainer_state import TrainerState


def test_non_finite_rows_named_only_on_response_tokens():
    adv = torch.zeros(3, 4)
    adv[1, 2] = float("nan")
    adv[2, 3] = float("inf")  # outside the response mask of row 2: ignored
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 0, 0]])
    batch = DataProto.from_dict(tensors={"advantages": adv, "response_mask": mask, "old_log_probs": torch.zeros(3, 4)})
    assert non_finite_rows(batch) == {"advantages": [1]}


def test_invalid_reward_share_is_a_bad_step_naming_reward_and_first_failure():
    assert invalid_reward_problem({"reward/invalid_frac": 0.5}, 0.5, "r", ["x"]) is None  # at the limit: fine
    assert invalid_reward_problem({}, 0.5, "r", []) is None  # nothing scored: nothing to judge
    problem = invalid_reward_problem(
        {"reward/invalid_frac": 1.0}, 0.5, "my_reward.score", ["TypeError: bad ground truth", "later"]
    )
    assert "100%" in problem and "my_reward.score" in problem and "TypeError: bad ground truth" in problem
    assert "later" not in problem


def _trainer(tmp_path, limit):
    trainer = object.__new__(RayPPOTrainer)
    trainer.config = OmegaConf.create({"trainer": {"default_local_dir": str(tmp_path)}})
    trainer.health, trainer.state = StepHealth(limit), TrainerState()
    saved = []
    trainer._save_checkpoint = lambda: saved.append(trainer.global_steps)
    return trainer, saved


def test_bad_steps_save_and_stop(tmp_path):
    trainer, saved = _trainer(tmp_path, 2)
    trainer.global_steps, trainer.step_problem = 7, "non-finite advantages"
    trainer._check_step_health()
    assert trainer.health.count == 1 and saved == []
    trainer.global_steps = 8
    with pytest.raises(RunStopped, match="2 consecutive bad steps.*non-finite advantages.*global_step_8"):
        trainer._check_step_health()
    assert saved == [8]


def test_a_good_step_resets_the_count(tmp_path):
    trainer, saved = _trainer(tmp_path, 2)
    for step, problem in ((1, "bad"), (2, None), (3, "bad"), (4, None)):
        trainer.global_steps, trainer.step_problem = step, problem
        trainer._check_step_health()
    assert saved == [] and trainer.health.count == 0


def test_limit_must_be_positive():
    with pytest.raises(ValueError, match="max_consecutive_bad_steps"):
        StepHealth(0)


def test_agent_batch_without_a_valid_action_is_a_bad_step():
    from verl.trainer.ppo.run_guard import agent_action_problem

    assert agent_action_problem({"env/sokoban/invalid_action_rate": 0.5}) is None
    problem = agent_action_problem({"env/sokoban/invalid_action_rate": 1.0, "critic/score/mean": 0.0})
    assert "no step produced a valid action (env/sokoban/invalid_action_rate=1.0)" in problem


def test_zero_variance_groups_warn_above_the_threshold(caplog):
    import logging

    from verl.trainer.ppo.run_guard import warn_zero_variance

    with caplog.at_level(logging.WARNING):
        warn_zero_variance({"critic/zero_std_groups_frac": 0.5}, 0.9, step=3)
        assert caplog.text == ""
        warn_zero_variance({"critic/zero_std_groups_frac": 0.95}, 0.9, step=4)
        warn_zero_variance({"critic/zero_std_groups_frac": 1.0}, 1.0, step=5)  # 1.0 turns the warning off
        # a frozen actor (trainer.critic_warmup not reached): its groups' variance is nobody's signal
        warn_zero_variance({"critic/zero_std_groups_frac": 1.0}, 0.9, step=6, actor_updated=False)
    assert "step 4: 95% of the prompt groups have zero reward variance" in caplog.text
    assert "step 5" not in caplog.text and "step 6" not in caplog.text
