"""Reward managers: turn a rollout batch into token-level scores (verl's ``reward_model.reward_manager`` choices).

``naive`` (upstream's name) and ``rlla`` both resolve to :class:`RLLARewardManager`; see its module for the decode
modes and the invalid-sample handling. Rewards written with the reward authoring API (``custom_reward_function.path/
name``) are scored by ``agent_system.reward.manager.RewardAPIManager``, a subclass that lives with that API;
``main_ppo.build_reward_managers`` chooses between them.
"""

from __future__ import annotations

from verl.workers.reward_manager.naive import NaiveRewardManager, RLLARewardManager, infer_wrapper

REWARD_MANAGER_REGISTRY: dict[str, type] = {"naive": RLLARewardManager, "rlla": RLLARewardManager}

__all__ = [
    "REWARD_MANAGER_REGISTRY",
    "NaiveRewardManager",
    "RLLARewardManager",
    "get_reward_manager_cls",
    "infer_wrapper",
]


def get_reward_manager_cls(name: str) -> type:
    """Reward-manager class registered under ``name`` (config ``reward_model.reward_manager``).

    Raises:
        ValueError: unknown name; the message lists the registered ones.
    """
    if name not in REWARD_MANAGER_REGISTRY:
        raise ValueError(f"unknown reward_model.reward_manager={name!r}; registered: {sorted(REWARD_MANAGER_REGISTRY)}")
    return REWARD_MANAGER_REGISTRY[name]
