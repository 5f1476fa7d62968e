"""Entry point of the asynchronous RL mode: ``python -m verl.trainer.main_async [key=value ...]``.

Composes ``verl/trainer/config/async_trainer.yaml`` (the synchronous trainer's tree plus the ``async:`` section;
``docs/async.md``, section "Configuration"), starts Ray (``verl.trainer.main_ppo.init_ray``), and runs the
:class:`~verl.async_rl.orchestrator.Orchestrator` until the learner reaches ``trainer.total_training_steps`` policy
versions (a resumed run continues from its checkpoint's version). Metrics go to one tracker on the driver
(``verl.utils.tracking.Tracking``: ``trainer.logger`` backends, ``{run_dir}/metrics.jsonl``); ``{run_dir}/config.yaml``
records the resolved config and the RLLA reward switches that are on, as ``main_ppo``'s does.

Rewards are the synchronous trainer's: :func:`make_reward_manager` builds ``main_ppo``'s reward manager (the built-in
RLLA manager as ``reward_model.*`` configures it, or ``custom_reward_function`` through the reward API and the
``reward.*`` sandbox) inside each RLLA env actor and for validation, and ``reward_model.switches`` turns ToolRL's
reward switches on before Ray starts, so every actor reads them.
"""

from __future__ import annotations

import functools
import logging
from typing import Any, Mapping

import hydra
from omegaconf import DictConfig, OmegaConf

logger = logging.getLogger(__name__)


def make_reward_manager(config: Mapping[str, Any], tokenizer: Any, validation: bool = False) -> Any:
    """``main_ppo.build_reward_managers``' training manager (``validation``: its validation manager, which logs
    ``reward_model.num_examine`` samples) for ``config``, a plain container of the typed config (so it pickles into
    the env actors, which call this with their tokenizer).

    Raises: what ``build_reward_managers`` raises (a reward file that cannot be loaded, the key named).
    """
    from verl.trainer.main_ppo import build_reward_managers

    train, val = build_reward_managers(OmegaConf.create(dict(config)), tokenizer)
    return val if validation else train


def build_orchestrator(config: DictConfig, tracker: Any = None):
    """The :class:`~verl.async_rl.orchestrator.Orchestrator` of ``config`` with this project's env actors
    (``agent_system.environments.env_actor.make_env_actor``) and :func:`make_reward_manager` bound to the typed config.
    Requires ``ray.init``. Raises what ``Orchestrator`` raises."""
    from agent_system.environments.env_actor import make_env_actor
    from verl.async_rl.config import typed_async_config
    from verl.async_rl.orchestrator import Orchestrator

    config = typed_async_config(config)
    rewards = functools.partial(make_reward_manager, OmegaConf.to_container(config, resolve=True))
    return Orchestrator(config, tracker, make_env_actor=make_env_actor, make_reward_manager=rewards)


def run_async(config: DictConfig) -> list:
    """Train in async mode; returns the per-step metric records of this process.

    Raises ConfigError (printed as one ``error:`` line by ``main``): a key the async mode does not read, a value out
    of range, ``trainer.total_training_steps`` not set (the async mode has no epochs); see
    ``verl.async_rl.config.typed_async_config``.
    """
    from verl.async_rl.config import typed_async_config
    from verl.async_rl.prompts import check_data_files
    from verl.trainer.config_utils import ConfigError, write_run_record
    from verl.trainer.main_ppo import apply_reward_switches, init_ray, load_custom_reward, resolve_models, run_folders
    from verl.utils.checkpoint_space import check_writable
    from verl.utils.run_lock import hold_folders
    from verl.utils.tracking import Tracking

    config = typed_async_config(config)
    try:  # a reward file that cannot be loaded fails here, before Ray and the env actors start
        load_custom_reward(config)
    except (OSError, ImportError, SyntaxError, AttributeError, TypeError, KeyError) as err:
        raise ConfigError(f"custom_reward_function: {err}") from None
    for name, spec in config["async"].envs.items():  # tools that do not load fail here, not inside a Ray actor
        if list(spec.tools):
            from agent_system.tools.base import ToolRegistry

            try:
                ToolRegistry.from_specs(list(spec.tools))
            except (ValueError, TypeError, ImportError) as err:
                raise ConfigError(f"async.envs.{name}.tools: {err}") from None
    total = config.trainer.total_training_steps
    if total is None:
        raise ConfigError("trainer.total_training_steps must be set in async mode (learner steps to reach)")
    check_data_files(config)  # main_ppo's row check of the rlla envs' files and data.val_files
    resolve_models(config)  # main_ppo's: a preset prepared (an SFT one built with trainer.build_sft_preset=true)
    check_writable(config.trainer.default_local_dir)  # a read-only folder fails here, not at the first save
    folders = run_folders(config)  # the checkpoint folder always: it also holds the replay logs (async.replay.log_dir)
    run_dir = folders[-1][1]
    apply_reward_switches(config)  # before Ray starts: the env actors and the validator inherit the variables
    with hold_folders(folders):  # one run per experiment folder, as main_ppo
        init_ray(config)
        tracker = Tracking(
            config.trainer.project_name,
            config.trainer.experiment_name,
            config.trainer.logger,
            config=write_run_record(config, run_dir),
            run_dir=run_dir,
        )
        orchestrator = build_orchestrator(config, tracker)
        try:
            left = int(total) - orchestrator.version
            logger.info("async: policy version %d, %d learner steps to go", orchestrator.version, max(left, 0))
            return orchestrator.run(left) if left > 0 else []
        finally:
            orchestrator.shutdown()


@hydra.main(config_path="config", config_name="async_trainer", version_base="1.3")
def main(config: DictConfig) -> None:
    import os
    import sys

    from verl.trainer.main_ppo import setup_logging, user_errors

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the driver's tokenizers too (the workers get it)

    setup_logging()
    try:
        run_async(config)
    except user_errors() as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    from verl.trainer.main_ppo import cli

    cli(main, "main_async")
