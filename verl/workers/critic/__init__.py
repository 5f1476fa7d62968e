"""PPO critics (verl's ``verl.workers.critic``)."""

from verl.workers.critic.dp_critic import DataParallelPPOCritic

__all__ = ["DataParallelPPOCritic"]
