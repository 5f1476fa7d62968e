"""Config values the YAML accepts but nothing here would act on: refused at load, naming the key and what to do.

ToolRL's and upstream verl's launch lines set keys whose non-default values this project does not implement
(Megatron, sequence parallelism, a model-based reward, ...), and a few keys act only together with another setting
(the reward runner's sandbox limits, the checkpoint's contents). A value that would be accepted and then ignored is
a silent change of behaviour, so :func:`refuse_unsupported` raises ``ConfigError`` instead. It is called last by
``config_utils.validate_config``.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config_errors import ConfigError
from verl.workers.config import check_save_contents

# (key, supported value or tuple of supported values, what to do instead)
UNSUPPORTED = (
    (
        "actor_rollout_ref.actor.ulysses_sequence_parallel_size",
        1,
        "sequence parallelism is not implemented: set 1 (use_remove_padding / use_dynamic_bsz keep long sequences cheap)",
    ),
    ("actor_rollout_ref.ref.ulysses_sequence_parallel_size", 1, "sequence parallelism is not implemented: set 1"),
    ("critic.ulysses_sequence_parallel_size", 1, "sequence parallelism is not implemented: set 1"),
    (
        "actor_rollout_ref.actor.strategy",
        ("fsdp", "fsdp2"),
        "the actor is always trained with FSDP2 here (Megatron is not implemented): set fsdp or fsdp2",
    ),
    ("critic.strategy", ("fsdp", "fsdp2"), "the critic is always trained with FSDP2 here: set fsdp or fsdp2"),
    (
        "actor_rollout_ref.rollout.mode",
        "sync",
        "the trainer's rollout is synchronous; the asynchronous mode is its own entry point, python -m "
        "verl.trainer.main_async (docs/async.md): set sync",
    ),
    (
        "data.tokenizer",
        None,
        "prompts are always tokenized with the actor's tokenizer (actor_rollout_ref.model.path): leave null",
    ),
    (
        "reward_model.enable",
        False,
        "model-based rewards are not implemented: score with a rule reward (custom_reward_function.path)",
    ),
    (
        "router.sample_per_rollout",
        True,
        "only an independent route per copy of a prompt is implemented: set true (or rollout.n=1)",
    ),
    (
        "router.detach_backbone",
        True,
        "the router head has its own optimizer over the head only, so a gradient into the LM would be dropped: set "
        "true",
    ),
    ("data.return_raw_input_ids", False, "raw prompt ids are not returned by the dataset: set false"),
    ("actor_rollout_ref.hybrid_engine", True, "the actor and its rollout always share weights here: set true"),
    (
        "actor_rollout_ref.actor.fsdp_config.fsdp_size",
        -1,
        "hybrid sharding is not implemented: set -1 (shard over all workers)",
    ),
    ("actor_rollout_ref.ref.fsdp_config.fsdp_size", -1, "hybrid sharding is not implemented: set -1"),
    ("critic.model.fsdp_config.fsdp_size", -1, "hybrid sharding is not implemented: set -1"),
    (
        "actor_rollout_ref.actor.fsdp_config.wrap_policy.min_num_params",
        0,
        "FSDP2 shards every decoder layer (no size-based wrap policy): set 0",
    ),
    ("actor_rollout_ref.ref.fsdp_config.wrap_policy.min_num_params", 0, "FSDP2 shards every decoder layer: set 0"),
    ("critic.model.fsdp_config.wrap_policy.min_num_params", 0, "FSDP2 shards every decoder layer: set 0"),
    (
        "trainer.default_hdfs_dir",
        None,
        "HDFS checkpoints are not implemented: leave null (trainer.default_local_dir holds them)",
    ),
    (
        "trainer.del_local_ckpt_after_load",
        False,
        "checkpoints are never deleted after a resume: set false (trainer.max_actor_ckpt_to_keep rotates them)",
    ),
)

# the reward runner's keys that only the process sandbox reads (agent_system.reward.sandbox.ProcessSandbox)
SANDBOX_LIMITS = ("num_workers", "timeout_s", "memory_mb")


def supported_values(supported) -> tuple:
    """The values a rule of :data:`UNSUPPORTED` accepts, as a tuple."""
    return supported if isinstance(supported, tuple) else (supported,)


def refuse_unsupported(config: DictConfig, defaults: DictConfig) -> None:
    """Refuse, at load, every value that would be accepted and then ignored; ``defaults`` is ``ppo_trainer.yaml``'s
    tree (``config_utils.default_config()``).

    - a key of :data:`UNSUPPORTED` set to a value nothing implements (null passes where the supported value is not
      null: upstream's "unset"); ``critic.*`` rules apply only with ``critic.enable``, ``router.*`` rules only with
      ``router.enable``;
    - ``reward_model.reward_manager`` not in the registry, and the ``reward.*`` runner keys where they act on nothing
      (:func:`validate_reward_runner`);
    - ``checkpoint.save_contents`` entries that no checkpointer writes (:func:`validate_save_contents`);
    - ``rollout.engine_kwargs`` for an engine that is not the rollout's, ``rollout.ignore_eos`` without vLLM
      (:func:`validate_engine_kwargs`).

    Raises:
        ConfigError: naming the key, the value and what to do.
    """
    for key, supported, instead in UNSUPPORTED:
        value = OmegaConf.select(config, key)
        allowed = supported_values(supported)
        if value in allowed or (value is None and None not in allowed):
            continue
        if key.startswith("critic.") and not config.critic.enable:
            continue
        if key.startswith("router.") and not config.router.enable:
            continue
        raise ConfigError(f"{key}={value}: {instead}")
    validate_reward_runner(config, defaults.reward)
    validate_save_contents(config)
    validate_engine_kwargs(config.actor_rollout_ref.rollout)


def uses_reward_api(config: DictConfig) -> bool:
    """Whether the reward goes through the reward API: ``custom_reward_function.path`` set, or ``.name`` a registered
    reward other than the default ``compute_score`` (otherwise the built-in scores in the trainer process)."""
    spec = config.custom_reward_function
    return bool(spec.path) or (spec.name or "compute_score") != "compute_score"


def reward_sandbox(config: DictConfig) -> str:
    """``reward.sandbox``, null resolved: ``process`` for a reward from ``custom_reward_function.path``, ``none`` for
    a registered one."""
    return config.reward.sandbox or ("process" if config.custom_reward_function.path else "none")


def validate_reward_runner(config: DictConfig, default: DictConfig) -> None:
    """``reward_model.reward_manager`` names a registered manager, and ``reward.*`` acts on something.

    The ``reward`` section configures the runner of a reward written with the reward API, which is used only with
    ``custom_reward_function.path`` or a registered ``custom_reward_function.name`` other than ``compute_score``
    (``main_ppo.load_custom_reward``); the built-in default scores in the trainer process. Its ``num_workers``,
    ``timeout_s`` and ``memory_mb`` are limits of the process sandbox (``reward.sandbox=process``; null: process for a
    reward from a file, none for a registered one); ``reward-dry-run`` refuses the same combinations. ``default`` is
    the YAML's ``reward`` section.

    Raises:
        ConfigError: an unregistered manager name; ``reward.num_workers`` < 1; a ``reward.*`` value other than the
            YAML's default that nothing would read.
    """
    from verl.workers.reward_manager import get_reward_manager_cls

    try:
        get_reward_manager_cls(config.reward_model.reward_manager)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    cfg = config.reward
    if cfg.num_workers is None or int(cfg.num_workers) < 1:
        raise ConfigError(f"reward.num_workers={cfg.num_workers}: expected an integer >= 1 (sandbox worker processes)")
    changed = [key for key in default if cfg[key] != default[key]]
    if not uses_reward_api(config) and changed:
        key = changed[0]
        raise ConfigError(
            f"reward.{key}={cfg[key]}: the reward section configures the runner of a reward written "
            "with the reward API (custom_reward_function.path, or .name of a registered reward); the "
            "built-in default scores in the trainer process, so it would be ignored"
        )
    limits = [key for key in SANDBOX_LIMITS if key in changed]
    if reward_sandbox(config) == "none" and limits:
        key = limits[0]
        why = "reward.sandbox=none" if cfg.sandbox else "reward.sandbox=null, which is none for a registered reward"
        shown = "null" if default[key] is None else default[key]
        raise ConfigError(
            f"reward.{key}={cfg[key]} is a limit of the process sandbox, but the reward runs in the "
            f"trainer process ({why}): set reward.sandbox=process, or leave reward.{key} at its "
            f"default ({shown})"
        )


def validate_save_contents(config: DictConfig) -> None:
    """``actor.checkpoint.save_contents`` and, with ``critic.enable``, ``critic.checkpoint.save_contents``: only
    upstream's entries (:data:`verl.workers.config.SAVE_CONTENTS`). A list without ``model`` saves checkpoints that
    cannot be resumed, which ``trainer.resume_mode=auto`` would try on the next launch: allowed only with
    ``trainer.resume_mode=disable`` (an HF export only, say).

    Raises:
        ConfigError: an entry no checkpointer writes; no ``model`` while resuming is on.
    """
    sections = [("actor_rollout_ref.actor", config.actor_rollout_ref.actor)]
    if config.critic.enable:
        sections.append(("critic", config.critic))
    for where, section in sections:
        contents = list(section.checkpoint.save_contents)
        try:
            check_save_contents(contents, f"{where}.checkpoint.save_contents")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if "model" not in contents and config.trainer.resume_mode != "disable":
            raise ConfigError(
                f"{where}.checkpoint.save_contents={contents} has no 'model': its checkpoints cannot be "
                f"resumed, and trainer.resume_mode={config.trainer.resume_mode} would try the newest on "
                "the next launch; add model, or set trainer.resume_mode=disable"
            )


def validate_engine_kwargs(rollout: DictConfig) -> None:
    """``actor_rollout_ref.rollout.engine_kwargs`` (verl's key, one mapping per engine): only ``vllm`` is an engine
    here, and its arguments reach ``vllm.LLM`` only with ``rollout.name=vllm``; so does ``rollout.ignore_eos``.

    Raises:
        ConfigError: a section for another engine, ``engine_kwargs.vllm`` entries or ``ignore_eos=true`` with another
            rollout.
    """
    kwargs = OmegaConf.to_container(rollout.engine_kwargs, resolve=True) or {}
    other = sorted(set(kwargs) - {"vllm"})
    if other:
        raise ConfigError(
            f"actor_rollout_ref.rollout.engine_kwargs.{other[0]}: no such engine here; only "
            "engine_kwargs.vllm (with rollout.name=vllm) is read"
        )
    if rollout.ignore_eos and rollout.name != "vllm":
        raise ConfigError(
            f"actor_rollout_ref.rollout.ignore_eos=true with rollout.name={rollout.name!r}: only vLLM's "
            "engine decodes past EOS (transformers' generate stops there); set rollout.name=vllm"
        )
    if kwargs.get("vllm") and rollout.name != "vllm":
        raise ConfigError(
            f"actor_rollout_ref.rollout.engine_kwargs.vllm={kwargs['vllm']} with rollout.name="
            f"{rollout.name!r}: the arguments go to vLLM's engine only; set rollout.name=vllm or drop "
            "them"
        )
