"""Typed config of the asynchronous mode: ``async_trainer.yaml`` is the trainer's tree (typed by
``verl.trainer.config_schema.PPOTrainerConfig``) plus an ``async`` section typed by :class:`AsyncConfig`.

As for the trainer, the YAML holds every default and the fields of the fixed sections are ``MISSING`` until it is
merged in. ``async.envs`` is the user's map of environments: each entry is an :class:`AsyncEnvSpec`, whose fields
have their defaults here (an entry the YAML does not list cannot take them from it). ``async`` is a Python keyword,
so the section is typed on its own and attached under that name (:func:`typed_async_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf, open_dict


@dataclass
class AsyncVLLMConfig:
    """``async.inference.vllm``: the in-process vLLM engine (backend=vllm)."""

    max_model_len: int = MISSING
    engine_kwargs: Dict[str, Any] = MISSING


@dataclass
class AsyncInferenceConfig:
    """``async.inference``: the OpenAI-compatible inference servers."""

    backend: str = MISSING
    host: str = MISSING
    num_servers: int = MISSING
    num_threads: int = MISSING
    num_gpus: float = MISSING
    dtype: Optional[str] = MISSING
    vllm: AsyncVLLMConfig = field(default_factory=AsyncVLLMConfig)
    max_tokens: int = MISSING


@dataclass
class AsyncEnvSpec:
    """One entry of ``async.envs`` (``agent_system.environments.env_actor``): ``fraction`` must be given."""

    kind: str = "text_env"  # text_env | rlla
    env: Optional[str] = None  # the registered environment (text_env)
    env_kwargs: Dict[str, Any] = field(default_factory=dict)
    replicas: int = 1
    fraction: float = MISSING  # share of the batch token budget
    group_size: Optional[int] = None  # rollouts per problem (null: actor_rollout_ref.rollout.n)
    max_turns: int = 2
    seed: int = 0
    data_file: Optional[str] = None  # rlla: the parquet (null: RLLA discovery)
    max_rows: Optional[int] = None  # rlla: the first rows only
    tools: List[Any] = field(default_factory=list)  # rlla: tool references; calls run in the executing loop
    tool_sandbox: str = "process"  # rlla with tools: process | none (docs/tools.md)


@dataclass
class AsyncReplayConfig:
    """``async.replay``: the per-env replay buffers."""

    max_age: int = MISSING
    min_group_size: int = MISSING
    log_dir: Optional[str] = MISSING


@dataclass
class AsyncBatcherConfig:
    """``async.batcher``: packing of rollouts into the learner's batch."""

    total_token_budget: int = MISSING
    max_seq_len: int = MISSING
    spillover: str = MISSING
    order: str = MISSING
    max_groups: Optional[int] = MISSING


@dataclass
class AsyncConfig:
    """The ``async`` section of ``async_trainer.yaml`` (docs/async.md)."""

    inference: AsyncInferenceConfig = field(default_factory=AsyncInferenceConfig)
    learner_threads: Optional[int] = MISSING
    envs: Dict[str, AsyncEnvSpec] = MISSING
    replay: AsyncReplayConfig = field(default_factory=AsyncReplayConfig)
    batcher: AsyncBatcherConfig = field(default_factory=AsyncBatcherConfig)
    max_buffer_rollouts: Optional[int] = MISSING
    broadcast_timeout_s: float = MISSING
    max_restarts: int = MISSING


# keys of main_ppo's launch path that the async mode has no step for: refused when set
ASYNC_IGNORES = (
    "trainer.plot_on_finish",
    "trainer.deterministic",
    "router.irrelevance_fraction",
    "router.irrelevance_seed",
)


def typed_async_config(config: DictConfig) -> DictConfig:
    """The composed ``async_trainer.yaml`` typed: the trainer's tree as ``PPOTrainerConfig`` (unknown keys refused
    as ``check_known_keys`` does), the ``async`` section as :class:`AsyncConfig`. A typed config is returned as is.

    Raises:
        KeyError: no ``async`` section. ConfigError: an unknown key, a value of the wrong type, a missing value
            (the key named).
    """
    from verl.trainer.config_schema import PPOTrainerConfig
    from verl.trainer.config_keys import check_known_keys
    from verl.trainer.config_utils import ConfigError, typed_as, typed_config

    if "async" not in config:
        raise KeyError("config has no 'async' section (use verl/trainer/config/async_trainer.yaml)")
    if OmegaConf.get_type(config) is PPOTrainerConfig and OmegaConf.get_type(config["async"]) is AsyncConfig:
        return config
    plain = OmegaConf.to_container(config, resolve=False)
    section = plain.pop("async")
    rest = OmegaConf.create(plain)
    check_known_keys(rest)
    typed = typed_config(rest)
    try:
        typed_section = typed_as(OmegaConf.create(section), AsyncConfig, "async_trainer.yaml")
    except ConfigError as err:  # its keys are named from the section: say where it is
        raise ConfigError(f"async.{err}") from None
    with open_dict(typed):
        typed["async"] = typed_section
    # what the async mode does not implement is refused here rather than ignored
    from verl.trainer.config_utils import default_config
    from verl.trainer.unsupported_config_checks import refuse_unsupported

    defaults = default_config()
    refuse_unsupported(typed, defaults)  # the trainer's refusals (Megatron, sequence parallelism, ...) hold here too
    for key in ASYNC_IGNORES:  # the synchronous trainer's launch keys (docs/recipes.md) that main_async does not run
        if OmegaConf.select(typed, key) != OmegaConf.select(defaults, key):
            raise ConfigError(
                f"{key}={OmegaConf.select(typed, key)}: the async mode does not read it (it builds no "
                f"irrelevance rows, plots or deterministic kernels); leave it at "
                f"{OmegaConf.select(defaults, key)}"
            )
    _check_data_and_reward(typed, async_defaults())
    if typed.data.tool_format != "toolrl":
        raise ConfigError(
            f"data.tool_format={typed.data.tool_format!r}: the async mode's environments score ToolRL's format only"
        )
    attention = (typed.actor_rollout_ref.model.override_config or {}).get("attn_implementation")
    if attention not in (None, "sdpa"):
        raise ConfigError(
            f"actor_rollout_ref.model.override_config.attn_implementation={attention!r}: the async "
            "learner and inference servers load the model with sdpa"
        )
    if typed.trainer.val_only:
        raise ConfigError(
            "trainer.val_only=true: not in the async mode (it validates with trainer.test_freq and "
            "trainer.val_before_train); use python -m verl.trainer.main_ppo trainer.val_only=true"
        )
    if typed.trainer.test_freq > 0 or typed.trainer.val_before_train:
        from verl.async_rl.validation import validation_sampling

        try:
            validation_sampling(typed.actor_rollout_ref.rollout.val_kwargs)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if typed.actor_rollout_ref.rollout.cache_implementation is not None:
        raise ConfigError(
            f"actor_rollout_ref.rollout.cache_implementation="
            f"{typed.actor_rollout_ref.rollout.cache_implementation!r}: the async inference servers "
            "decode with a dynamic cache (async.inference.*)"
        )
    from verl.trainer.key_table import check_keys

    check_keys(typed, async_defaults(), "main_async")  # every key main_async does not read, refused when set
    _check_estimator(typed.algorithm.adv_estimator)
    from verl.trainer.config_utils import normalize_config

    normalize_config(typed)  # main_ppo's derived values: device, micro-batch mapping, the KL-in-reward rule
    with open_dict(typed):
        # the learning-rate schedule's horizon, as main_ppo sets it (learner steps)
        if typed.trainer.total_training_steps is not None:
            typed.actor_rollout_ref.actor.optim.total_training_steps = int(typed.trainer.total_training_steps)
        for spec in typed["async"].envs.values():
            if spec.group_size is None:  # rollouts per problem: main_ppo's rollouts per prompt
                spec.group_size = int(typed.actor_rollout_ref.rollout.n)
    return typed


# the data keys only the rlla envs read (their rows: verl/async_rl/prompts.py, agent_system's env actor)
RLLA_DATA_KEYS = ("data.train_files", "data.max_samples", "data.shuffle", "data.seed")


def _check_data_and_reward(typed: DictConfig, defaults: DictConfig) -> None:
    """``data.*`` and reward keys with ``main_ppo``'s meaning, or refused where nothing in this run reads them.

    * ``data.train_batch_size`` (prompts per step) is ``async.batcher.max_groups`` (problems per batch) when set
      (other than its default); both set to different values is refused; ``ppo_mini_batch_size`` must not exceed it.
    * ``data.train_files`` / ``max_samples`` / ``shuffle`` / ``seed`` are read by the ``rlla`` envs without a
      ``data_file`` (``train_files``) and without ``max_rows`` (``max_samples``): set with no such env, refused.
    * ``custom_reward_function`` scores the ``rlla`` envs and validation; a ``text_env`` scores with its
      environment's step rewards, so a reward function with a ``text_env`` in ``async.envs`` is refused.
    * DAPO's ``reward_model.overlong_buffer`` and ``actor.mask_truncated`` act on single-turn completions (``L_max``
      = ``async.inference.max_tokens``, the buffer's ``len`` at most that), and its dynamic sampling
      (``algorithm.filter_groups``, ``main_ppo``'s checks plus a batch size in problems for its bound) on RLLA groups:
      refused with a ``text_env``, as in ``main_ppo``'s agent mode.

    Raises ConfigError (the key named).
    """
    from verl.trainer.config_utils import ConfigError
    from verl.trainer.unsupported_config_checks import uses_reward_api

    envs = typed["async"].envs
    n = int(typed.actor_rollout_ref.rollout.n)
    if n < 1:
        raise ConfigError(f"actor_rollout_ref.rollout.n must be >= 1, got {n} (rollouts per problem)")
    for name, spec in envs.items():
        if spec.group_size is not None and int(spec.group_size) < 1:
            raise ConfigError(f"async.envs.{name}.group_size must be >= 1 or null (rollout.n), got {spec.group_size}")
        if list(spec.tools) and spec.kind != "rlla":
            raise ConfigError(
                f"async.envs.{name}.tools: only kind rlla runs tool calls (a text_env's environment answers its turns)"
            )
        if spec.tool_sandbox not in ("process", "none"):
            raise ConfigError(f"async.envs.{name}.tool_sandbox must be process or none, got {spec.tool_sandbox!r}")
    rlla = [name for name, spec in envs.items() if spec.kind == "rlla"]
    readers = {
        "data.train_files": [n for n in rlla if not envs[n].data_file],
        "data.max_samples": [n for n in rlla if envs[n].max_rows is None],
        "data.shuffle": rlla,
        "data.seed": rlla,
    }
    for key in RLLA_DATA_KEYS:
        value = OmegaConf.select(typed, key)
        if value != OmegaConf.select(defaults, key) and not readers[key]:
            raise ConfigError(
                f"{key}={value}: main_async reads it for the envs of kind rlla (train_files: those with "
                f"data_file null, max_samples: with max_rows null), and async.envs {sorted(envs)} has none; "
                f"leave it at {OmegaConf.select(defaults, key)}"
            )
    batch = int(typed.data.train_batch_size)
    if batch != int(defaults.data.train_batch_size):
        groups = typed["async"].batcher.max_groups
        if batch < 1:
            raise ConfigError(f"data.train_batch_size={batch}: expected >= 1 (problems per learner batch)")
        if groups is not None and int(groups) != batch:
            raise ConfigError(
                f"data.train_batch_size={batch} and async.batcher.max_groups={groups}: both size a batch in "
                "problems (groups); set one"
            )
        mini = int(typed.actor_rollout_ref.actor.ppo_mini_batch_size)
        if mini > batch:
            raise ConfigError(
                f"actor_rollout_ref.actor.ppo_mini_batch_size ({mini}) must not exceed data.train_batch_size ({batch})"
            )
        with open_dict(typed):
            typed["async"].batcher.max_groups = batch
    text_envs = [name for name, spec in envs.items() if spec.kind != "rlla"]
    overlong = typed.reward_model.overlong_buffer
    shaping = [
        key
        for key, on in (
            ("reward_model.overlong_buffer.enable", overlong.enable),
            ("actor_rollout_ref.actor.mask_truncated", typed.actor_rollout_ref.actor.mask_truncated),
        )
        if on
    ]
    fg = typed.algorithm.filter_groups
    if fg.enable:
        from verl.trainer.config_utils import validate_filter_groups

        validate_filter_groups(typed)  # main_ppo's checks: a group-relative estimator, the metric, the bound
        if text_envs:
            shaping.insert(0, "algorithm.filter_groups.enable")
        small = {n: spec.group_size for n, spec in envs.items() if spec.group_size is not None and spec.group_size < 2}
        if small:
            raise ConfigError(f"algorithm.filter_groups.enable=true: groups of one have no variance ({small})")
        if int(fg.max_num_gen_batches) > 0 and typed["async"].batcher.max_groups is None:
            raise ConfigError(
                f"algorithm.filter_groups.max_num_gen_batches={fg.max_num_gen_batches} bounds the groups generated "
                "per step by that many batches of data.train_batch_size problems: set data.train_batch_size (or "
                "async.batcher.max_groups), or max_num_gen_batches=0 (no bound)"
            )
    if shaping and text_envs:
        raise ConfigError(
            f"{shaping[0]}=true: main_async applies it to the single-turn rlla envs; async.envs {text_envs} are "
            "multi-turn, where main_ppo's agent mode does not take it either"
        )
    limit = int(typed["async"].inference.max_tokens)
    if overlong.enable and not 1 <= int(overlong.len) <= limit:
        raise ConfigError(
            f"reward_model.overlong_buffer.len={overlong.len}: expected 1..async.inference.max_tokens ({limit}), "
            "the completion length limit L_max of main_async"
        )
    if uses_reward_api(typed) and text_envs:
        raise ConfigError(
            f"custom_reward_function scores the rlla envs and validation; async.envs {text_envs} "
            "score with their environment's step rewards. Train them with python -m verl.trainer.main_ppo "
            "env.env_name=... (whose agent mode scores whole trajectories with it), or drop them here"
        )


def _check_estimator(name: str) -> None:
    """Refuse an ``algorithm.adv_estimator`` the async learner's batches cannot feed: one that reads critic values
    (no critic), a greedy baseline rollout (ReMax) or per-step batch fields (GiGPO's anchors, RLVCR's levels), from
    what its registry entry declares. An unknown name is named by the registry."""
    from verl.trainer.config_utils import ConfigError
    from verl.trainer.ppo.core_algos import get_estimator_plugin

    try:
        plugin = get_estimator_plugin(name)
    except ValueError as err:
        raise ConfigError(f"algorithm.adv_estimator: {err}") from None
    missing = (
        "critic values (the async learner has no critic)" if plugin.needs_values
        else "a greedy baseline rollout per prompt" if plugin.needs_greedy_baseline
        else "per-step batch fields that async rollouts do not carry" if plugin.batch_inputs is not None
        else None
    )  # fmt: skip
    if missing:
        raise ConfigError(
            f"algorithm.adv_estimator={name}: it reads {missing}; main_async trains with the outcome estimators "
            "(grpo, rloo, reinforce_plus_plus, reinforce_plus_plus_baseline, ...); use python -m "
            "verl.trainer.main_ppo for this one"
        )


def async_defaults() -> DictConfig:
    """``async_trainer.yaml``'s defaults as a plain config: ``ppo_trainer.yaml``'s tree with the async file's own
    values merged over it (its ``async`` section and ``trainer.val_before_train``)."""
    from pathlib import Path

    from verl.trainer.config_utils import default_config

    own = OmegaConf.load(Path(__file__).resolve().parents[1] / "trainer" / "config" / "async_trainer.yaml")
    with open_dict(own):
        own.pop("defaults", None)
    return OmegaConf.merge(OmegaConf.create(OmegaConf.to_container(default_config())), own)


__all__ = [
    "ASYNC_IGNORES",
    "RLLA_DATA_KEYS",
    "AsyncBatcherConfig",
    "AsyncConfig",
    "AsyncEnvSpec",
    "AsyncInferenceConfig",
    "AsyncReplayConfig",
    "async_defaults",
    "typed_async_config",
]
