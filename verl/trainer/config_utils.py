"""Config loading, deprecated-key mapping and validation for the PPO/GRPO trainer.

Everything that can be checked before a worker starts is checked here, with errors that name the keys involved:
batch-size arithmetic, the estimator name, the rollout backend, data files. Deprecated ToolRL-era keys still work:
they are mapped to upstream's names with a warning (``normalize_config``), so ToolRL's launch scripts run unchanged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from verl.trainer.config_errors import ConfigError  # re-exported: callers import it from here
from verl.trainer.multi_turn_config_checks import check_multi_turn_config
from verl.trainer.config_keys import check_known_keys
from verl.trainer.model_config_checks import validate_model_settings
from verl.trainer.router_config_checks import validate_router_settings
from verl.trainer.unsupported_config_checks import refuse_unsupported
from verl.utils.reward_score.rlla import RewardSwitches

logger = logging.getLogger(__name__)

ROLLOUT_BACKENDS = ("hf", "vllm")


def load_default_config(overrides: list[str] | None = None, environ=None) -> DictConfig:
    """Compose ``ppo_trainer.yaml`` with Hydra-style ``key=value`` overrides (for tests and scripts), as
    ``main_ppo`` composes its command line: a ``recipe=<name>`` among them goes through
    :func:`verl.trainer.launch.launch_overrides` (hardware group, launch variables read from ``environ``, default
    ``os.environ``).

    Raises:
        hydra.errors.ConfigCompositionException: an override names a key that does not exist (struct mode).
        LaunchError: a wrong recipe, hardware or launch variable.
    """
    from hydra import compose, initialize_config_dir

    from verl.trainer.launch import launch_overrides

    config_dir = str(Path(__file__).parent / "config")
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="ppo_trainer", overrides=launch_overrides(list(overrides or []), environ))
    check_known_keys(config)
    return typed_config(config)


def typed_config(config: DictConfig) -> DictConfig:
    """The composed config with the types of ``verl.trainer.config_schema`` (``PPOTrainerConfig``): every value
    converted to its field's type or refused, every YAML key present. A config that is already typed is returned as it
    is. Call :func:`check_known_keys` first for its friendlier message about unknown keys.

    Raises:
        ConfigError: a value of the wrong type, a key the schema does not define, or a key the config lacks (each
            named by its full dotted path).
    """
    from verl.trainer.config_schema import PPOTrainerConfig

    return typed_as(config, PPOTrainerConfig, "ppo_trainer.yaml")


def typed_as(config: DictConfig, schema: type, yaml_name: str, may_be_missing: tuple = ()) -> DictConfig:
    """``config`` merged into the dataclass ``schema`` (see :func:`typed_config`); keys in ``may_be_missing`` may
    stay ``???`` (mandatory values the entry point checks with its own message).

    Raises:
        ConfigError: a value of the wrong type, a key the schema does not define, or a key without a value.
    """
    from omegaconf.errors import OmegaConfBaseException

    if OmegaConf.get_type(config) is schema:
        return config
    try:
        typed = OmegaConf.merge(OmegaConf.structured(schema), config)
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        first = str(err).splitlines()[0]
        kind = _field_type_name(schema, key) if key else None
        raise ConfigError(
            f"{key} must be of type {kind}: {first}" if kind else f"{key}: {first}" if key else f"config: {first}"
        ) from None
    missing = sorted(set(OmegaConf.missing_keys(typed)) - set(may_be_missing))
    if missing:
        raise ConfigError(
            f"config key(s) without a value ({yaml_name} defines them all; was a section replaced by "
            "hand?): " + ", ".join(missing)
        )
    OmegaConf.set_struct(typed, True)
    return typed


def _field_type_name(schema: type, key: str) -> str | None:
    """``int``, ``float or null``, ... for the dotted ``key`` of a schema dataclass; None when it names no field."""
    import dataclasses
    import typing

    kind: typing.Any = schema
    for part in key.split("."):
        if not dataclasses.is_dataclass(kind):
            return None
        kind = typing.get_type_hints(kind).get(part)
        if kind is None:
            return None
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    if typing.get_origin(kind) is typing.Union and len(args) == 1:  # Optional[X]
        return f"{getattr(args[0], '__name__', args[0])} or null"
    return getattr(kind, "__name__", None) or str(kind)


def default_section(where: str, /, **overrides) -> DictConfig:
    """A typed copy of one section of the default config, interpolations resolved, with ``overrides`` applied — for
    tests and benchmarks that drive one component (``DataParallelPPOActor`` takes ``actor_rollout_ref.actor``)::

        default_section("actor_rollout_ref.actor", ppo_mini_batch_size=6, **{"policy_loss.loss_mode": "gspo"})

    Keys may be dotted (relative to the section); derived fields (``use_remove_padding`` and the like) are set the
    same way.

    Raises:
        ConfigError: ``where`` is not a section, or an override names an unknown key or has the wrong type.
    """
    import copy

    from omegaconf.errors import OmegaConfBaseException

    section = OmegaConf.select(_default_config(), where)
    if not isinstance(section, DictConfig):
        raise ConfigError(f"{where!r} is not a section of ppo_trainer.yaml")
    section = copy.deepcopy(section)
    OmegaConf.resolve(section)
    for key, value in overrides.items():
        try:
            OmegaConf.update(
                section, key, value, merge=isinstance(value, (dict, DictConfig))
            )  # a mapping fills a section
        except OmegaConfBaseException as err:
            kind = _field_type_name(OmegaConf.get_type(section), key)
            raise ConfigError(
                f"{where}.{key}" + (f" must be of type {kind}" if kind else "") + f": {str(err).splitlines()[0]}"
            ) from None
    return section


def default_config() -> DictConfig:
    """A typed copy of ``ppo_trainer.yaml``'s defaults, without Hydra (no overrides; usable inside a Hydra app)."""
    import copy

    return copy.deepcopy(_default_config())


_DEFAULT_CONFIG: list = []


def _default_config() -> DictConfig:
    """The typed defaults of ``ppo_trainer.yaml`` read without Hydra (so it also works inside a running Hydra app,
    e.g. ``main_generation``): the YAML has no defaults list, only its own ``hydra:`` block, which is dropped."""
    if not _DEFAULT_CONFIG:
        raw = OmegaConf.load(Path(__file__).parent / "config" / "ppo_trainer.yaml")
        del raw["hydra"]
        _DEFAULT_CONFIG.append(typed_config(raw))
    return _DEFAULT_CONFIG[0]


def resolve_device(config: DictConfig) -> str:
    """``trainer.device`` if set, else ``cuda`` when CUDA is usable and ``trainer.n_gpus_per_node > 0``, else ``cpu``."""
    explicit = config.trainer.device
    if explicit:
        if explicit not in ("cpu", "cuda"):
            raise ConfigError(f"trainer.device must be 'cpu' or 'cuda', got {explicit!r}")
        return explicit
    import torch

    return "cuda" if int(config.trainer.n_gpus_per_node) > 0 and torch.cuda.is_available() else "cpu"


def require_device(config: DictConfig) -> None:
    """Where the models are placed: ``trainer.device=cuda`` needs a CUDA device that torch can see.

    Raises:
        ConfigError: ``cuda`` asked for (e.g. by the ``gpu`` hardware of a recipe: ``N_GPUS`` > 0) on a machine where
            ``torch.cuda.is_available()`` is false.
    """
    import torch

    if config.trainer.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.device=cuda (trainer.n_gpus_per_node={config.trainer.n_gpus_per_node}) but torch "
            f"sees no CUDA device here (torch {torch.__version__}): train on the CPU with N_GPUS=0 or "
            f"hardware=cpu, or install a CUDA build of torch"
        )


def world_size(config: DictConfig) -> int:
    """Number of data-parallel workers: ``nnodes × n_gpus_per_node`` (one CPU worker per node when that is 0)."""
    return int(config.trainer.nnodes) * max(1, int(config.trainer.n_gpus_per_node))


def _map_global_micro_batch(section: DictConfig, old: str, new: str, where: str, n_workers: int) -> None:
    value = section.get(old)
    if value is None:
        return
    per_gpu = max(1, int(value) // n_workers)
    logger.warning(
        "%s.%s is deprecated: using %s.%s=%d (%d / %d workers)", where, old, where, new, per_gpu, int(value), n_workers
    )
    section[new] = per_gpu
    section[old] = None


def normalize_config(config: DictConfig) -> DictConfig:
    """Map deprecated keys to upstream's names in place (with a warning each) and fill derived values.

    - ``*.ppo_micro_batch_size`` / ``*.log_prob_micro_batch_size`` (global) → ``*_per_gpu`` (divided by the world size).
    - ``*.fsdp_config.grad_offload``: removed upstream; ignored with a warning when true.
    - ``data.val_batch_size``: validation runs over the whole set; ignored with a warning when set.
    - ``critic.enable`` null → true exactly for ``algorithm.adv_estimator=gae``.
    - ``critic.rollout_n`` and ``actor_rollout_ref.router`` copied from ``rollout.n`` and ``router`` (the workers
      only see their own section).
    - ``trainer.device`` resolved (see ``resolve_device``) and copied into the worker sections as ``device``.
    - ``algorithm.use_kl_in_reward`` null → ToolRL's rule (:func:`resolve_kl_in_reward`).
    """
    n_workers = world_size(config)
    with open_dict(config):
        arr = config.actor_rollout_ref
        _map_global_micro_batch(
            arr.actor, "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "actor_rollout_ref.actor", n_workers
        )
        _map_global_micro_batch(
            arr.ref,
            "log_prob_micro_batch_size",
            "log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.ref",
            n_workers,
        )
        _map_global_micro_batch(
            arr.rollout,
            "log_prob_micro_batch_size",
            "log_prob_micro_batch_size_per_gpu",
            "actor_rollout_ref.rollout",
            n_workers,
        )
        _map_global_micro_batch(
            config.critic, "ppo_micro_batch_size", "ppo_micro_batch_size_per_gpu", "critic", n_workers
        )
        _map_global_micro_batch(
            config.critic, "forward_micro_batch_size", "forward_micro_batch_size_per_gpu", "critic", n_workers
        )
        for where, section in (
            ("actor_rollout_ref.actor", arr.actor.fsdp_config),
            ("critic.model", config.critic.model.fsdp_config),
        ):
            if section.grad_offload:
                logger.warning("%s.fsdp_config.grad_offload is deprecated and ignored", where)
        if config.data.val_batch_size is not None:
            logger.warning(
                "data.val_batch_size=%s is ignored: validation runs over the whole set in one pass "
                "(upstream behaviour)",
                config.data.val_batch_size,
            )
        resolve_kl_in_reward(config)
        if config.critic.enable is None:
            from verl.trainer.ppo.core_algos import get_estimator_plugin

            try:
                config.critic.enable = get_estimator_plugin(config.algorithm.adv_estimator).needs_values
            except ValueError:  # an unknown estimator: validate_config names it
                config.critic.enable = False
        arr.router = config.router  # the actor worker owns the router head
        config.critic.rollout_n = arr.rollout.n  # the critic's mini-batches are given in prompts too
        device = resolve_device(config)
        config.trainer.device = device
        arr.device = device
        config.critic.device = device
    return config


def resolve_kl_in_reward(config: DictConfig) -> bool:
    """``algorithm.use_kl_in_reward`` when it is null (the default): ToolRL's rule — the KL penalty goes into the
    reward whenever ``actor.use_kl_loss`` is false (ToolRL's TinyZero-era trainer; upstream made it an explicit key
    defaulting to false, which would silently drop the penalty from ToolRL's own launch lines). Not in agent mode
    (``env.env_name``; not a ToolRL setup: upstream's false), and not when ``algorithm.kl_ctrl.kl_coef`` is 0 (the
    penalty would be zero and the reference pass wasted). One INFO line says what was chosen and why; an explicit
    true/false is kept as given. See ``docs/toolrl_defaults.md``.

    Returns:
        The resolved value (also written into the config).
    """
    algo = config.algorithm
    if algo.use_kl_in_reward is not None:
        return bool(algo.use_kl_in_reward)
    use_kl_loss = bool(config.actor_rollout_ref.actor.use_kl_loss)
    agent_mode = bool(config.env.env_name)
    coef = float(algo.kl_ctrl.kl_coef)
    value = not use_kl_loss and not agent_mode and coef > 0
    why = (
        "actor.use_kl_loss=true: the KL term is in the loss"
        if use_kl_loss
        else "agent mode (env.env_name set): upstream's default"
        if agent_mode
        else "algorithm.kl_ctrl.kl_coef=0: no penalty to apply"
        if coef <= 0
        else f"KL penalty in the reward (kl_coef={coef:g}) because actor.use_kl_loss=false"
    )
    with open_dict(config):
        algo.use_kl_in_reward = value
    logger.info("algorithm.use_kl_in_reward=null -> %s (ToolRL's rule: %s)", value, why)
    return value


def _check_divides(small: int, big: int, small_key: str, big_key: str) -> None:
    if small <= 0:
        raise ConfigError(f"{small_key} must be positive, got {small}")
    if big % small != 0:
        raise ConfigError(f"{big_key} ({big}) must be divisible by {small_key} ({small})")


def validate_config(config: DictConfig, check_files: bool = True) -> None:
    """Check batch-size arithmetic, names and files; raise ``ConfigError`` naming the keys on the first problem.

    Batch arithmetic (verl's): ``data.train_batch_size`` prompts per step are rolled out ``rollout.n`` times and split
    across the world; ``ppo_mini_batch_size`` is in prompts, so each worker sees
    ``ppo_mini_batch_size × n / world_size`` rows per mini-batch, which the per-GPU micro batch must divide (unless
    ``use_dynamic_bsz``).
    """
    from verl.trainer.ppo.core_algos import (
        get_adv_estimator_fn,
        get_estimator_plugin,
        get_policy_loss_fn,
        policy_loss_mode,
    )

    n_workers = world_size(config)
    _validate_single_process(config, n_workers)
    arr = config.actor_rollout_ref
    n = int(arr.rollout.n)
    train_bs = int(config.data.train_batch_size)
    estimator = config.algorithm.adv_estimator
    try:
        get_adv_estimator_fn(estimator)
    except (KeyError, ValueError) as err:
        raise ConfigError(f"algorithm.adv_estimator: {err}") from None
    try:
        get_policy_loss_fn(policy_loss_mode(arr.actor))
    except ValueError as err:
        raise ConfigError(f"actor_rollout_ref.actor.policy_loss.loss_mode: {err}") from None
    plugin = get_estimator_plugin(estimator)
    if plugin.check_config is not None:  # the estimator's own section (algorithm.gigpo, algorithm.rlvcr, ...)
        try:
            plugin.check_config(config.algorithm)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if estimator == "gigpo" and not config.env.env_name:
        raise ConfigError(
            "algorithm.adv_estimator=gigpo groups the steps of agent episodes (traj_uid, step_index, anchor_obs): "
            "it needs env.env_name; single-turn rows train with grpo, rloo or another estimator"
        )
    if n < 1:
        raise ConfigError(f"actor_rollout_ref.rollout.n must be >= 1, got {n}")
    val_n = arr.rollout.val_kwargs.n
    if val_n is None or int(val_n) < 1:
        raise ConfigError(f"actor_rollout_ref.rollout.val_kwargs.n must be >= 1, got {val_n}")
    if plugin.grouped and n == 1:
        logger.warning(
            "algorithm.adv_estimator=%s with actor_rollout_ref.rollout.n=1: every group is a singleton, "
            "so advantages carry no relative signal",
            estimator,
        )
    if arr.rollout.name not in ROLLOUT_BACKENDS:
        raise ConfigError(f"actor_rollout_ref.rollout.name must be one of {ROLLOUT_BACKENDS}, got {arr.rollout.name!r}")
    validate_router_settings(config)
    cache = arr.rollout.cache_implementation
    if cache is not None and (cache not in ("dynamic", "static") or arr.rollout.name != "hf"):
        raise ConfigError(
            f"actor_rollout_ref.rollout.cache_implementation={cache!r}: null, 'dynamic' or 'static', "
            f"and only with rollout.name=hf (got {arr.rollout.name!r})"
        )
    if (train_bs * n) % n_workers != 0:
        raise ConfigError(
            f"data.train_batch_size × actor_rollout_ref.rollout.n ({train_bs} × {n}) must be divisible "
            f"by the number of workers (trainer.nnodes × trainer.n_gpus_per_node = {n_workers})"
        )
    sections = [("actor_rollout_ref.actor", arr.actor)]
    if config.critic.enable:
        sections.append(("critic", config.critic))
    for where, section in sections:
        mini = int(section.ppo_mini_batch_size)
        if mini > train_bs:
            raise ConfigError(
                f"{where}.ppo_mini_batch_size ({mini}) must not exceed data.train_batch_size ({train_bs})"
            )
        _check_divides(mini, train_bs, f"{where}.ppo_mini_batch_size", "data.train_batch_size")
        rows = mini * n
        if rows % n_workers != 0:
            raise ConfigError(
                f"{where}.ppo_mini_batch_size × rollout.n ({mini} × {n}) must be divisible by the "
                f"number of workers ({n_workers})"
            )
        if not section.use_dynamic_bsz:
            if section.ppo_micro_batch_size_per_gpu is None:
                raise ConfigError(f"{where}.ppo_micro_batch_size_per_gpu=null needs {where}.use_dynamic_bsz=true")
            micro = int(section.ppo_micro_batch_size_per_gpu)
            _check_divides(
                micro,
                rows // n_workers,
                f"{where}.ppo_micro_batch_size_per_gpu",
                f"{where}.ppo_mini_batch_size × rollout.n / workers",
            )
    passes = [("actor_rollout_ref.ref", arr.ref, "log_prob_"), ("actor_rollout_ref.rollout", arr.rollout, "log_prob_")]
    if config.critic.enable:
        passes.append(("critic", config.critic, "forward_"))
    for where, section, prefix in passes:  # a null micro batch is a per-token budget only (dynamic batch size)
        dynamic = section.log_prob_use_dynamic_bsz if prefix == "log_prob_" else section.use_dynamic_bsz
        if section[f"{prefix}micro_batch_size_per_gpu"] is None and not dynamic:
            raise ConfigError(
                f"{where}.{prefix}micro_batch_size_per_gpu=null needs "
                f"{where}.{'log_prob_use_dynamic_bsz' if prefix == 'log_prob_' else 'use_dynamic_bsz'}"
                "=true"
            )
    if arr.actor.use_kl_loss and config.algorithm.use_kl_in_reward:
        logger.warning(
            "both actor_rollout_ref.actor.use_kl_loss and algorithm.use_kl_in_reward are on: "
            "the KL term is applied twice"
        )
    if int(config.data.max_response_length) <= 0 or int(config.data.max_prompt_length) <= 0:
        raise ConfigError("data.max_prompt_length and data.max_response_length must be positive")
    if check_files:
        for key in ("train_files", "val_files"):
            files = config.data[key]
            if files is None:
                continue
            for path in [files] if isinstance(files, str) else list(files):
                if not os.path.isfile(os.path.expanduser(str(path))):
                    raise ConfigError(f"data.{key}: file not found: {path}")
    if config.trainer.total_training_steps is not None and int(config.trainer.total_training_steps) <= 0:
        raise ConfigError("trainer.total_training_steps must be positive when set")
    _validate_env(config)
    validate_filter_groups(config)
    validate_model_settings(config, resolve_device(config))
    from verl.utils.reward_score.tool_formats import TOOL_FORMATS

    if config.data.tool_format != "auto" and config.data.tool_format not in TOOL_FORMATS:
        raise ConfigError(f"data.tool_format={config.data.tool_format!r}: auto or one of {sorted(TOOL_FORMATS)}")
    if config.env.env_name and config.data.tool_format != "toolrl":
        raise ConfigError(
            f"data.tool_format={config.data.tool_format!r} with env.env_name: the agent environments "
            "score ToolRL's format only; leave data.tool_format=toolrl"
        )
    buffer = config.reward_model.overlong_buffer
    if buffer.enable and not 1 <= int(buffer.len) <= int(config.data.max_response_length):
        raise ConfigError(
            f"reward_model.overlong_buffer.len={buffer.len}: expected 1..data.max_response_length "
            f"({config.data.max_response_length}) with reward_model.overlong_buffer.enable=true"
        )
    from verl.trainer.ppo.rollout_corr import check_correction_settings, correction_settings

    try:
        check_correction_settings(**correction_settings(config.algorithm))
    except ValueError as err:
        raise ConfigError(str(err)) from None
    check_multi_turn_config(config)  # actor_rollout_ref.rollout.multi_turn
    refuse_unsupported(config, _default_config())


def _validate_single_process(config: DictConfig, n_workers: int) -> None:
    """``trainer.single_process``: one worker per role inside the driver, so nothing may need a second process."""
    if not config.trainer.single_process:
        return
    hint = " (a recipe's hardware/cpu.yaml and hardware/gpu.yaml set it: give trainer.single_process=false)"
    if n_workers != 1:
        raise ConfigError(
            f"trainer.single_process=true hosts one worker per role in the driver process, but "
            f"trainer.nnodes × trainer.n_gpus_per_node asks for {n_workers} workers{hint}"
        )
    address = config.ray_init.address or os.environ.get("RAY_ADDRESS")
    if address:
        raise ConfigError(
            f"trainer.single_process=true does not start Ray, but ray_init.address / RAY_ADDRESS="
            f"{address!r} asks to join a Ray cluster{hint}"
        )
    env = config.env
    if env.env_name and env.use_ray_workers:
        raise ConfigError(
            f"trainer.single_process=true does not start Ray: set env.use_ray_workers=false (the "
            f"environments then step in the driver process){hint}"
        )


# estimators whose advantage is group-relative on single-turn rows: where DAPO's dynamic sampling means something
FILTER_GROUPS_ESTIMATORS = ("grpo", "grpo_vectorized", "rloo", "rloo_vectorized", "reinforce_plus_plus_baseline")


def validate_filter_groups(config: DictConfig) -> None:
    """``algorithm.filter_groups`` (DAPO's dynamic sampling): only for group-relative single-turn estimators with
    ``rollout.n > 1``, without the router (routes are drawn per generation batch) or agent environments."""
    fg = config.algorithm.filter_groups
    if not fg.enable:
        return
    from verl.trainer.ppo.dynamic_sampling import METRIC_TENSORS

    where = "algorithm.filter_groups.enable=true"
    if config.algorithm.adv_estimator not in FILTER_GROUPS_ESTIMATORS:
        raise ConfigError(
            f"{where} needs a group-relative estimator ({', '.join(FILTER_GROUPS_ESTIMATORS)}), got "
            f"algorithm.adv_estimator={config.algorithm.adv_estimator}"
        )
    if int(config.actor_rollout_ref.rollout.n) < 2:
        raise ConfigError(f"{where} needs actor_rollout_ref.rollout.n >= 2 (a group of one has no variance)")
    if config.router.enable:
        raise ConfigError(f"{where} is not supported with router.enable=true")
    if config.env.env_name:
        raise ConfigError(f"{where} is not supported in agent mode (env.env_name)")
    if fg.metric is not None and fg.metric not in METRIC_TENSORS:
        raise ConfigError(
            f"algorithm.filter_groups.metric={fg.metric!r}: expected null or one of {sorted(METRIC_TENSORS)}"
        )
    if int(fg.max_num_gen_batches) < 0:
        raise ConfigError(
            f"algorithm.filter_groups.max_num_gen_batches={fg.max_num_gen_batches}: expected >= 0 "
            "(0: until the epoch's data run out)"
        )


def _validate_env(config: DictConfig) -> None:
    """``env.*`` (multi-turn agent mode), checked only when ``env.env_name`` is set; and
    ``algorithm.gigpo.default_step_reward``, which only a reward-API function scoring agent trajectories reads."""
    env = config.env
    agent = bool(env.env_name)
    reward = config.custom_reward_function
    custom = bool(reward.path) or (reward.name or "compute_score") != "compute_score"
    default_step = OmegaConf.select(config, "algorithm.gigpo.default_step_reward", default=0.0)
    if default_step not in (0, None) and not (agent and custom):
        raise ConfigError(
            f"algorithm.gigpo.default_step_reward={default_step}: only read when "
            "custom_reward_function scores the trajectories of env.env_name (the r_t of a turn no "
            "StepOutput names); environments give every step its own reward. Leave it 0.0"
        )
    if not agent:
        return
    if config.trainer.validation_data_dir:
        raise ConfigError(
            "trainer.validation_data_dir: the agent mode (env.env_name) validates by episodes, which "
            "are not written to files; leave it null (trainer.rollout_data_dir covers training)"
        )
    from agent_system.environments.base import available_envs

    if env.env_name not in available_envs():
        raise ConfigError(
            f"env.env_name={env.env_name!r} is not a registered environment; expected one of {available_envs()}"
        )
    if int(env.rollout.n) != int(config.actor_rollout_ref.rollout.n):
        raise ConfigError(
            f"env.rollout.n ({env.rollout.n}) must equal actor_rollout_ref.rollout.n "
            f"({config.actor_rollout_ref.rollout.n}): the group size also scales ppo_mini_batch_size"
        )
    for key in ("max_steps", "train_tasks", "val_tasks", "num_workers", "max_prompt_length"):
        if int(env[key]) < 1:
            raise ConfigError(f"env.{key} must be >= 1, got {env[key]}")
    if int(env.train_tasks) < int(config.data.train_batch_size):
        raise ConfigError(
            f"env.train_tasks ({env.train_tasks}) must be >= data.train_batch_size "
            f"({config.data.train_batch_size}) tasks per step"
        )
    if env.reward_mode not in (None, "step", "episode"):
        raise ConfigError(f"env.reward_mode must be step, episode or null, got {env.reward_mode!r}")


def run_record(config: DictConfig, environ=None) -> dict:
    """What the run directory's ``config.yaml`` (:func:`write_run_record`) and wandb's run config record: the resolved
    config, plus ``reward_switches_on``, the names of ToolRL's reward switches that are on (``REFINEDREWARD``, …;
    read from ``environ``, default ``os.environ``, as the reward reads them; ``docs/rlla_reward.md`` "Switches"), and
    ``launch``, the recipe and hardware it was composed with (:func:`launch_choices`).
    The switches change the reward without appearing in the config, so a run trained under one would otherwise
    read like a default run."""
    record = OmegaConf.to_container(config, resolve=True)
    record["reward_switches_on"] = RewardSwitches.from_env(environ).active()
    record["launch"] = launch_choices()
    return record


def launch_choices() -> dict:
    """``{"recipe": name or None, "hardware": cpu | gpu | None}``: the recipe and hardware the running Hydra app
    composed (``verl.trainer.launch``); both None outside a Hydra app or without a recipe."""
    from hydra.core.hydra_config import HydraConfig

    choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    return {"recipe": choices.get("recipe"), "hardware": choices.get("hardware")}


def write_run_record(config: DictConfig, run_dir: str, environ=None) -> dict:
    """Write :func:`run_record` to ``{run_dir}/config.yaml`` (creating ``run_dir``), log the reward switches that are
    on once, and return the record. Both entry points call it: ``main_ppo`` and ``main_async``."""
    record = run_record(config, environ)
    if record["reward_switches_on"]:
        logger.info("RLLA reward switches on: %s", ", ".join(record["reward_switches_on"]))
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, "config.yaml"), "w") as fh:
        fh.write(OmegaConf.to_yaml(record))
    return record
