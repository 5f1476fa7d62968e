"""Checks of ``actor_rollout_ref.rollout.multi_turn`` at load (``validate_config``), apart from the loop itself so
that loading a config imports no tool code (``verl.trainer.ppo.multi_turn`` runs the loop)."""

from __future__ import annotations

from typing import Any

from verl.trainer.config_errors import ConfigError

__all__ = ["KEY", "check_multi_turn_config"]

KEY = "actor_rollout_ref.rollout.multi_turn"


def check_multi_turn_config(config: Any) -> None:
    """The settings the loop cannot honour, refused at load (``validate_config``) with the keys named.

    Raises:
        ConfigError: ``multi_turn.enable`` with no tools; with ``algorithm.adv_estimator=rlvcr`` (its phase
            regenerates single turns); or with DAPO's
            ``reward_model.overlong_buffer.enable`` / ``actor_rollout_ref.actor.mask_truncated`` (they read the
            response's length and last token as one generation's).
    """
    mt = config.actor_rollout_ref.rollout.multi_turn
    if not mt.enable:
        return
    if not list(mt.tools):
        raise ConfigError(f"{KEY}.tools is empty: name the tools the calls run on (docs/tools.md)")
    for key, on in (
        ("reward_model.overlong_buffer.enable", config.reward_model.overlong_buffer.enable),
        ("actor_rollout_ref.actor.mask_truncated", config.actor_rollout_ref.actor.mask_truncated),
    ):
        if on:
            raise ConfigError(
                f"{key}=true with {KEY}.enable=true: DAPO's overlong handling reads the response as one generation "
                "(its length and last token), a multi-turn response holds observations too; set it false"
            )
    if config.algorithm.adv_estimator == "rlvcr":
        raise ConfigError(
            f"algorithm.adv_estimator=rlvcr with {KEY}.enable=true: RLVCR's phase regenerates single turns; use "
            "another estimator, or RLVCR in agent mode (env.env_name)"
        )
