"""Entry point of the asynchronous RL mode: ``python -m verl.trainer.main_async [key=value ...]``.

Composes ``verl/trainer/config/async_trainer.yaml`` (the synchronous trainer's tree plus the ``async:`` section;
``docs/async.md``, section "Configuration"), starts Ray (``verl.trainer.main_ppo.init_ray``), and runs the
:class:`~verl.async_rl.orchestrator.Orchestrator` until the learner reaches ``trainer.total_training_steps`` policy
versions (a resumed run continues from its checkpoint's version). Metrics go to one tracker on the driver
(``verl.utils.tracking.Tracking``: ``trainer.logger`` backends, ``{run_dir}/metrics.jsonl``); ``{run_dir}/config.yaml``
records the resolved config and the RLLA reward switches that are on, as ``main_ppo``'s does.
"""

from __future__ import annotations

import logging

import hydra
from omegaconf import DictConfig, open_dict

logger = logging.getLogger(__name__)


def run_async(config: DictConfig) -> list:
    """Train in async mode; returns the per-step metric records of this process.

    Raises ConfigError (printed as one ``error:`` line by ``main``): a key the async mode does not read, a value out
    of range, ``trainer.total_training_steps`` not set (the async mode has no epochs); see
    ``verl.async_rl.config.typed_async_config``.
    """
    from agent_system.environments.env_actor import make_env_actor
    from verl.async_rl.orchestrator import Orchestrator
    from verl.trainer.config_utils import write_run_record
    from verl.trainer.main_ppo import init_ray
    from verl.utils.model_presets import prepare_model
    from verl.utils.tracking import Tracking

    from verl.async_rl.config import typed_async_config

    from verl.trainer.config_utils import ConfigError

    config = typed_async_config(config)
    total = config.trainer.total_training_steps
    if total is None:
        raise ConfigError("trainer.total_training_steps must be set in async mode (learner steps to reach)")
    with open_dict(config):
        config.actor_rollout_ref.model.path = prepare_model(config.actor_rollout_ref.model.path)
    run_dir = config.trainer.run_dir or f"outputs/{config.trainer.project_name}/{config.trainer.experiment_name}"
    init_ray(config)
    tracker = Tracking(
        config.trainer.project_name,
        config.trainer.experiment_name,
        config.trainer.logger,
        config=write_run_record(config, run_dir),
        run_dir=run_dir,
    )
    orchestrator = Orchestrator(config, tracker, make_env_actor=make_env_actor)
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
