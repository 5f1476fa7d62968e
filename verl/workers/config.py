"""Typed config of the worker sections: ``actor_rollout_ref`` and ``critic`` of ``ppo_trainer.yaml``.

The YAML is the single source of defaults: every field here is ``MISSING`` until the composed YAML is merged in
(``verl.trainer.config_utils.typed_config``), so a key the YAML lacks is an error at load, not a silent default. The
result is an OmegaConf ``DictConfig`` whose nodes carry these types: values are converted or refused when the config
is built and on every later assignment (``actor.optim.lr=abc`` fails naming ``actor_rollout_ref.actor.optim.lr``),
an unknown key is refused, and code reads attributes (``cfg.actor.clip_ratio``). Fields below a "derived" comment are
not YAML keys: they are filled by ``normalize_config``, the trainer or the worker itself, and start as ``None``.
Each worker receives its own section (:class:`ActorRolloutRefConfig`, :class:`CriticConfig`) and keeps its type
(:func:`worker_section`). The meaning of every key is in the comments of ``verl/trainer/config/ppo_trainer.yaml``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf


@dataclass
class ModelConfig:
    """``actor_rollout_ref.model``: the policy's weights (a preset, a local HF folder or a hub id) and how its forward runs."""

    path: str = MISSING
    external_lib: Optional[str] = MISSING
    override_config: Dict[str, Any] = MISSING
    enable_gradient_checkpointing: bool = MISSING
    use_remove_padding: bool = MISSING
    use_shared_prompt: bool = MISSING
    use_fused_kernels: bool = MISSING
    trust_remote_code: bool = MISSING
    lora_rank: int = MISSING
    lora_alpha: float = MISSING
    target_modules: Any = MISSING  # "all-linear" or a list of module names


@dataclass
class PolicyLossConfig:
    """``actor.policy_loss``: which registered policy loss the update uses (``vanilla`` | ``gspo`` | ``cispo``)."""

    loss_mode: str = MISSING


@dataclass
class OptimConfig:
    """``actor.optim`` / ``critic.optim``: AdamW and its LR schedule (``verl.utils.model_utils.build_lr_scheduler``)."""

    lr: float = MISSING
    lr_warmup_steps: int = MISSING
    lr_warmup_steps_ratio: float = MISSING
    min_lr_ratio: Optional[float] = MISSING
    warmup_style: str = MISSING
    total_training_steps: int = MISSING
    weight_decay: float = MISSING
    betas: List[float] = MISSING


@dataclass
class WrapPolicyConfig:
    """``fsdp_config.wrap_policy``: FSDP2 wraps modules of at least ``min_num_params`` parameters."""

    min_num_params: int = MISSING


@dataclass
class MixedPrecisionConfig:
    """``fsdp_config.mixed_precision`` (verl's keys): FSDP2's ``MixedPrecisionPolicy``, see
    ``verl/utils/mixed_precision.py``. ``param_dtype`` null: bf16 on CUDA, fp32 on CPU."""

    param_dtype: Optional[str] = MISSING
    reduce_dtype: Optional[str] = MISSING
    buffer_dtype: Optional[str] = MISSING


@dataclass
class FSDPConfig:
    """``actor.fsdp_config`` / ``critic.model.fsdp_config``: sharding and CPU offload of a trained module."""

    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    param_offload: bool = MISSING
    grad_offload: bool = MISSING
    optimizer_offload: bool = MISSING
    fsdp_size: int = MISSING
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


# what a checkpoint may hold (upstream's names): sharded weights, optimizer state, LR schedule + RNG, an HF export
SAVE_CONTENTS = ("model", "optimizer", "extra", "hf_model")


def check_save_contents(contents, key: str = "checkpoint.save_contents") -> None:
    """Raise ``ValueError`` naming ``key`` when ``contents`` has an entry no checkpointer writes (not in
    :data:`SAVE_CONTENTS`)."""
    unknown = [entry for entry in contents if entry not in SAVE_CONTENTS]
    if unknown:
        raise ValueError(f"{key}={list(contents)}: unknown {unknown}; expected entries of {list(SAVE_CONTENTS)}")


@dataclass
class CheckpointConfig:
    """``actor.checkpoint`` / ``critic.checkpoint``: what a checkpoint holds (entries of :data:`SAVE_CONTENTS`)."""

    save_contents: List[str] = MISSING


@dataclass
class ActorConfig:
    """``actor_rollout_ref.actor``: the PPO update (mini/micro batches, clipping, loss aggregation, KL loss, entropy)."""

    strategy: str = MISSING
    ppo_mini_batch_size: int = MISSING
    ppo_micro_batch_size: Optional[int] = MISSING
    ppo_micro_batch_size_per_gpu: Optional[int] = MISSING  # null: only with use_dynamic_bsz
    use_dynamic_bsz: bool = MISSING
    ppo_max_token_len_per_gpu: int = MISSING
    grad_clip: float = MISSING
    clip_ratio: float = MISSING
    clip_ratio_low: Optional[float] = MISSING
    clip_ratio_high: Optional[float] = MISSING
    clip_ratio_c: float = MISSING
    policy_loss: PolicyLossConfig = field(default_factory=PolicyLossConfig)
    loss_agg_mode: str = MISSING
    mask_truncated: bool = MISSING
    entropy_coeff: float = MISSING
    use_kl_loss: bool = MISSING
    kl_loss_coef: float = MISSING
    kl_loss_type: str = MISSING
    ppo_epochs: int = MISSING
    shuffle: bool = MISSING
    ulysses_sequence_parallel_size: int = MISSING
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # derived inside the worker from model.* (the actor, the reference and the log-prob pass share
    # one forward); not keys of the YAML
    use_remove_padding: Optional[bool] = None
    use_shared_prompt: Optional[bool] = None
    use_fused_kernels: Optional[bool] = None


@dataclass
class RefFSDPConfig:
    """``actor_rollout_ref.ref.fsdp_config``: sharding and offload of the frozen reference policy."""

    param_offload: bool = MISSING
    wrap_policy: WrapPolicyConfig = field(default_factory=WrapPolicyConfig)
    fsdp_size: int = MISSING
    mixed_precision: MixedPrecisionConfig = field(default_factory=MixedPrecisionConfig)


@dataclass
class RefConfig:
    """``actor_rollout_ref.ref``: the reference policy's log-prob pass."""

    fsdp_config: RefFSDPConfig = field(default_factory=RefFSDPConfig)
    log_prob_micro_batch_size: Optional[int] = MISSING
    log_prob_micro_batch_size_per_gpu: Optional[int] = MISSING  # null: only with log_prob_use_dynamic_bsz
    log_prob_use_dynamic_bsz: bool = MISSING
    log_prob_max_token_len_per_gpu: int = MISSING
    ulysses_sequence_parallel_size: int = MISSING


@dataclass
class ValKwargsConfig:
    """``rollout.val_kwargs``: sampling for validation (greedy by default)."""

    do_sample: bool = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING
    n: int = MISSING


@dataclass
class MultiTurnConfig:
    """``actor_rollout_ref.rollout.multi_turn``: the executing tool loop of the rollout step (``docs/tools.md``)."""

    enable: bool = MISSING
    max_assistant_turns: int = MISSING
    max_tokens_per_turn: Optional[int] = MISSING  # null: response_length
    max_tool_response_length: int = MISSING
    tools: List[Any] = MISSING  # tool references: a string or {ref, kwargs}
    sandbox: str = MISSING  # process | none
    num_workers: int = MISSING
    timeout_s: float = MISSING
    memory_mb: Optional[int] = MISSING


@dataclass
class RolloutConfig:
    """``actor_rollout_ref.rollout``: generation (backend, sampling, lengths, group size ``n``, log-prob pass)."""

    name: str = MISSING
    mode: str = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING
    prompt_length: int = MISSING
    response_length: int = MISSING
    dtype: str = MISSING
    gpu_memory_utilization: float = MISSING
    ignore_eos: bool = MISSING
    enforce_eager: bool = MISSING
    free_cache_engine: bool = MISSING
    load_format: str = MISSING
    tensor_model_parallel_size: int = MISSING
    max_num_batched_tokens: int = MISSING
    max_num_seqs: int = MISSING
    log_prob_micro_batch_size: Optional[int] = MISSING
    log_prob_micro_batch_size_per_gpu: Optional[int] = MISSING  # null: only with log_prob_use_dynamic_bsz
    log_prob_use_dynamic_bsz: bool = MISSING
    log_prob_max_token_len_per_gpu: int = MISSING
    micro_batch_size: Optional[int] = MISSING  # null: one generate() call per batch
    cache_implementation: Optional[str] = MISSING  # HF rollout's KV cache: null (dynamic) or static
    calculate_log_probs: bool = MISSING
    engine_kwargs: Dict[str, Any] = MISSING
    do_sample: bool = MISSING
    n: int = MISSING
    val_kwargs: ValKwargsConfig = field(default_factory=ValKwargsConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    shared_prefill: Optional[bool] = None  # derived inside the worker: model.use_shared_prompt


@dataclass
class ActorRolloutRefConfig:
    """``actor_rollout_ref``: the section the actor/rollout/reference worker receives."""

    hybrid_engine: bool = MISSING
    model: ModelConfig = field(default_factory=ModelConfig)
    actor: ActorConfig = field(default_factory=ActorConfig)
    ref: RefConfig = field(default_factory=RefConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    # derived by verl.trainer.config_utils.normalize_config and the trainer (not keys of the YAML): the resolved
    # device, trainer.seed and trainer.deterministic, and the top-level router section (the actor worker owns the
    # router head)
    device: Optional[str] = None
    seed: Optional[int] = None
    deterministic: Optional[bool] = None
    router: Any = None


@dataclass
class CriticModelConfig:
    """``critic.model``: the value model (by default the actor's weights with a fresh scalar head)."""

    path: str = MISSING
    tokenizer_path: str = MISSING
    override_config: Dict[str, Any] = MISSING
    external_lib: Optional[str] = MISSING
    enable_gradient_checkpointing: bool = MISSING
    use_remove_padding: bool = MISSING
    trust_remote_code: bool = MISSING
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class CriticConfig:
    """``critic``: the section the critic worker receives (GAE only, unless ``enable`` says otherwise)."""

    enable: Optional[bool] = MISSING
    strategy: str = MISSING
    optim: OptimConfig = field(default_factory=OptimConfig)
    model: CriticModelConfig = field(default_factory=CriticModelConfig)
    ppo_mini_batch_size: int = MISSING
    ppo_micro_batch_size: Optional[int] = MISSING
    ppo_micro_batch_size_per_gpu: Optional[int] = MISSING  # null: only with use_dynamic_bsz
    forward_micro_batch_size: Optional[int] = MISSING
    forward_micro_batch_size_per_gpu: Optional[int] = MISSING  # null: only with use_dynamic_bsz
    use_dynamic_bsz: bool = MISSING
    ppo_max_token_len_per_gpu: int = MISSING
    forward_max_token_len_per_gpu: int = MISSING
    ulysses_sequence_parallel_size: int = MISSING
    ppo_epochs: int = MISSING
    shuffle: bool = MISSING
    grad_clip: float = MISSING
    cliprange_value: float = MISSING
    loss_agg_mode: str = MISSING
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    # derived (not keys of the YAML): rollout.n, the device, trainer.seed and trainer.deterministic from
    # normalize_config / the trainer, use_remove_padding inside the worker
    rollout_n: Optional[int] = None
    device: Optional[str] = None
    seed: Optional[int] = None
    deterministic: Optional[bool] = None
    use_remove_padding: Optional[bool] = None


def worker_section(config: DictConfig, schema: type) -> DictConfig:
    """A worker's own copy of its section, interpolations resolved (``${data.max_prompt_length}`` and the like).

    A section of a typed config (``OmegaConf.get_type(config) is schema``) keeps its type; a plain ``DictConfig``
    (tests and tools that build one section by hand) is merged into ``schema`` so that its values are checked the
    same way, and any key it leaves out raises ``omegaconf.errors.MissingMandatoryValue`` naming the key when read.

    Args:
        config: the ``actor_rollout_ref`` or ``critic`` section (the caller's object is never changed).
        schema: :class:`ActorRolloutRefConfig` or :class:`CriticConfig`.

    Raises:
        omegaconf.errors.ValidationError: a value of the wrong type; ``ConfigKeyError``: a key the schema lacks.
    """
    if OmegaConf.get_type(config) is schema:
        section = copy.deepcopy(config)
    else:
        section = OmegaConf.merge(OmegaConf.structured(schema), OmegaConf.to_container(config, resolve=True))
    OmegaConf.resolve(section)
    return section
