"""Typed config of ``ppo_trainer.yaml``: one dataclass per section, the worker sections in ``verl.workers.config``.

The YAML stays the single source of defaults and of every key name (ToolRL's and upstream's): the fields here are
``MISSING`` and are filled by merging the composed YAML into :class:`PPOTrainerConfig`
(``verl.trainer.config_utils.typed_config``, called by ``load_default_config`` and ``main_ppo.prepare_config``). The
merged config is an OmegaConf ``DictConfig`` whose nodes carry these types, so a value of the wrong type is refused
at load and on assignment with the key's full name, and code reads attributes. Derived fields (not YAML keys, filled
by ``normalize_config``, the trainer or a worker) default to ``None`` and are listed by :func:`derived_keys`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from verl.workers.config import ActorRolloutRefConfig, CriticConfig, MultiTurnConfig


@dataclass
class DataConfig:
    """``data``: the parquet files, prompt/response lengths, batch size and sampling of the prompts."""

    tokenizer: Optional[str] = MISSING
    train_files: Any = MISSING
    val_files: Any = MISSING
    task: Optional[str] = MISSING
    task_dir: Optional[str] = MISSING
    prompt_key: str = MISSING
    reward_fn_key: str = MISSING
    tool_format: str = MISSING
    max_prompt_length: int = MISSING
    max_response_length: int = MISSING
    train_batch_size: int = MISSING
    val_batch_size: Optional[int] = MISSING
    return_raw_input_ids: bool = MISSING
    return_raw_chat: bool = MISSING
    truncation: str = MISSING
    filter_overlong_prompts: bool = MISSING
    shuffle: bool = MISSING
    seed: int = MISSING
    dataloader_num_workers: int = MISSING
    max_samples: int = MISSING
    val_max_samples: int = MISSING


@dataclass
class OverlongBufferConfig:
    """``reward_model.overlong_buffer``: DAPO's soft overlong punishment (``verl/trainer/ppo/overlong.py``)."""

    enable: bool = MISSING
    len: int = MISSING
    penalty_factor: float = MISSING


@dataclass
class RewardModelFSDPConfig:
    """``reward_model.model.fsdp_config`` (upstream's keys; model-based rewards are refused at load)."""

    min_num_params: int = MISSING
    param_offload: bool = MISSING


@dataclass
class RewardModelModelConfig:
    """``reward_model.model`` (upstream's keys; model-based rewards are refused at load)."""

    input_tokenizer: Optional[str] = MISSING
    path: Optional[str] = MISSING
    external_lib: Optional[str] = MISSING
    use_remove_padding: bool = MISSING
    fsdp_config: RewardModelFSDPConfig = field(default_factory=RewardModelFSDPConfig)


@dataclass
class RewardModelConfig:
    """``reward_model``: the rule-reward manager and how a response is decoded for it."""

    enable: bool = MISSING
    strategy: str = MISSING
    reward_manager: str = MISSING
    decode: str = MISSING
    wrapper: str = MISSING
    num_examine: int = MISSING
    switches: List[str] = MISSING
    overlong_buffer: OverlongBufferConfig = field(default_factory=OverlongBufferConfig)
    micro_batch_size: Optional[int] = MISSING
    max_length: Optional[int] = MISSING
    ulysses_sequence_parallel_size: int = MISSING
    use_dynamic_bsz: bool = MISSING
    forward_max_token_len_per_gpu: int = MISSING
    model: RewardModelModelConfig = field(default_factory=RewardModelModelConfig)


@dataclass
class CustomRewardFunctionConfig:
    """``custom_reward_function``: a user reward file or a registered reward (``docs/reward_api.md``)."""

    path: Optional[str] = MISSING
    name: str = MISSING


@dataclass
class RewardConfig:
    """``reward``: the reward API's runner and sandbox."""

    sandbox: Optional[str] = MISSING
    num_workers: int = MISSING
    timeout_s: Optional[float] = MISSING
    memory_mb: int = MISSING


@dataclass
class RolloutCorrectionConfig:
    """``algorithm.rollout_correction``: truncated IS / rejection on the rollout-vs-trainer gap."""

    rollout_is: Optional[str] = MISSING
    rollout_is_threshold: float = MISSING
    rollout_rs: Optional[str] = MISSING
    rollout_rs_threshold: Optional[float] = MISSING
    rollout_rs_threshold_lower: Optional[float] = MISSING


@dataclass
class FilterGroupsConfig:
    """``algorithm.filter_groups``: DAPO's dynamic sampling."""

    enable: bool = MISSING
    metric: Optional[str] = MISSING
    max_num_gen_batches: int = MISSING


@dataclass
class KLControlConfig:
    """``algorithm.kl_ctrl``: the KL-in-reward coefficient (fixed or adaptive)."""

    type: str = MISSING
    kl_coef: float = MISSING
    horizon: int = MISSING
    target_kl: float = MISSING


@dataclass
class GiGPOConfig:
    """``algorithm.gigpo``: step-level grouping for ``adv_estimator=gigpo`` (``docs/gigpo.md``)."""

    step_advantage_w: float = MISSING
    mode: str = MISSING
    epsilon: float = MISSING
    invalid_action_penalty: float = MISSING
    anchor_similarity: float = MISSING
    default_step_reward: float = MISSING


@dataclass
class RLVCRConfig:
    """``algorithm.rlvcr``: thinking-level credit for ``adv_estimator=rlvcr`` (``docs/rlvcr.md``)."""

    enable: bool = MISSING
    step_advantage_w: float = MISSING
    thinking_diversity_w: float = MISSING
    mode: str = MISSING
    thinking_cost_w: float = MISSING
    cost_max: int = MISSING
    num_levels: int = MISSING
    action_tags: List[str] = MISSING
    alt_temperature: float = MISSING
    alt_top_p: float = MISSING
    alt_max_think_tokens: int = MISSING
    only_positive_episodes: bool = MISSING
    epsilon: float = MISSING


@dataclass
class AlgorithmConfig:
    """``algorithm``: the advantage estimator, discounting and the KL penalty."""

    gamma: float = MISSING
    lam: float = MISSING
    adv_estimator: str = MISSING
    norm_adv_by_std_in_grpo: bool = MISSING
    use_kl_in_reward: Optional[bool] = MISSING
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    kl_penalty: str = MISSING
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)
    gigpo: GiGPOConfig = field(default_factory=GiGPOConfig)
    rlvcr: RLVCRConfig = field(default_factory=RLVCRConfig)


@dataclass
class CostWeightsConfig:
    """``router.cost_weights``: the tool cost of a trajectory (``docs/router.md``)."""

    any_tool: float = MISSING
    search: float = MISSING
    calculate: float = MISSING
    per_call: float = MISSING
    obs_tokens: float = MISSING
    seconds: float = MISSING


@dataclass
class RouterOptimConfig:
    """``router.optim``: the router head's optimizer."""

    lr: float = MISSING
    shared: bool = MISSING


@dataclass
class RouterConfig:
    """``router``: the budgeted tool router and its Lagrangian (``docs/router.md``)."""

    enable: bool = MISSING
    head: str = MISSING
    pooling: str = MISSING
    input_norm: str = MISSING
    detach_backbone: bool = MISSING
    greedy_eval: bool = MISSING
    answer_forbids_tool_calls: bool = MISSING
    sample_per_rollout: bool = MISSING
    route_sampling: str = MISSING
    route_adv_norm: str = MISSING
    route_pg: str = MISSING
    loss_mode: str = MISSING
    value_temperature: float = MISSING
    value_baseline_decay: float = MISSING
    value_fit: str = MISSING
    value_ridge_alpha: float = MISSING
    filter_tools: bool = MISSING
    other_as: str = MISSING
    tool_family_file: Optional[str] = MISSING
    irrelevance_fraction: float = MISSING
    irrelevance_seed: int = MISSING
    budget_B: float = MISSING
    lambda_init: float = MISSING
    dual_lr: float = MISSING
    lambda_max: float = MISSING
    dual_update_freq: int = MISSING
    dual_kp: float = MISSING
    cost_weights: CostWeightsConfig = field(default_factory=CostWeightsConfig)
    entropy_coeff: float = MISSING
    sup_coeff: float = MISSING
    grad_clip: float = MISSING
    micro_batch_size: int = MISSING
    actor_reward: str = MISSING
    optim: RouterOptimConfig = field(default_factory=RouterOptimConfig)


@dataclass
class EnvRolloutConfig:
    """``env.rollout``: copies per task (must equal ``actor_rollout_ref.rollout.n``)."""

    n: int = MISSING


@dataclass
class LineWorldConfig:
    """``env.line_world``."""

    length: int = MISSING


@dataclass
class SokobanConfig:
    """``env.sokoban``."""

    dim_room: List[int] = MISSING
    num_boxes: int = MISSING
    max_steps: int = MISSING


@dataclass
class TextWorldConfig:
    """``env.textworld``."""

    challenge: str = MISSING
    level: Optional[int] = MISSING
    settings: Dict[str, Any] = MISSING
    games_dir: Optional[str] = MISSING
    max_steps: int = MISSING


@dataclass
class RLLAMultiTurnConfig:
    """``env.rlla_multiturn``."""

    split: str = MISSING
    data_dir: Optional[str] = MISSING


@dataclass
class EnvConfig:
    """``env``: multi-turn agent environments (off while ``env_name`` is null)."""

    env_name: Optional[str] = MISSING
    seed: int = MISSING
    train_tasks: int = MISSING
    val_tasks: int = MISSING
    val_seed_offset: int = MISSING
    max_steps: int = MISSING
    history_length: int = MISSING
    max_prompt_length: int = MISSING
    action_tag: str = MISSING
    num_workers: int = MISSING
    use_ray_workers: bool = MISSING
    reward_mode: Optional[str] = MISSING
    rollout: EnvRolloutConfig = field(default_factory=EnvRolloutConfig)
    line_world: LineWorldConfig = field(default_factory=LineWorldConfig)
    sokoban: SokobanConfig = field(default_factory=SokobanConfig)
    textworld: TextWorldConfig = field(default_factory=TextWorldConfig)
    rlla_multiturn: RLLAMultiTurnConfig = field(default_factory=RLLAMultiTurnConfig)


@dataclass
class TrainerConfig:
    """``trainer``: steps, devices, logging, checkpoints, resume and the run guards."""

    device: Optional[str] = MISSING
    balance_batch: bool = MISSING
    total_epochs: int = MISSING
    total_training_steps: Optional[int] = MISSING
    project_name: str = MISSING
    experiment_name: str = MISSING
    logger: Any = MISSING  # a list of backends, or one name (upstream Tracking accepts both)
    log_mfu: bool = MISSING
    peak_flops_per_s: Optional[float] = MISSING
    log_val_generations: int = MISSING
    rollout_data_dir: Optional[str] = MISSING
    validation_data_dir: Optional[str] = MISSING
    nnodes: int = MISSING
    n_gpus_per_node: int = MISSING
    cpus_per_worker: float = MISSING
    cpu_threads: Optional[int] = MISSING
    single_process: bool = MISSING
    save_freq: int = MISSING
    save_on_exit: bool = MISSING
    test_freq: int = MISSING
    critic_warmup: int = MISSING
    max_consecutive_bad_steps: int = MISSING
    max_invalid_frac: float = MISSING
    warn_zero_std_frac: float = MISSING
    val_before_train: bool = MISSING
    val_only: bool = MISSING
    default_hdfs_dir: Optional[str] = MISSING
    default_local_dir: str = MISSING
    run_dir: Optional[str] = MISSING
    resume_mode: str = MISSING
    resume_from_path: Optional[str] = MISSING
    del_local_ckpt_after_load: bool = MISSING
    max_actor_ckpt_to_keep: Optional[int] = MISSING
    max_critic_ckpt_to_keep: Optional[int] = MISSING
    resume_allow_changes: List[Any] = MISSING
    seed: int = MISSING
    deterministic: bool = MISSING
    build_sft_preset: bool = MISSING
    plot_on_finish: bool = MISSING
    after_fit: Optional[str] = MISSING


@dataclass
class RayInitConfig:
    """``ray_init``: the Ray cluster to start or join."""

    address: Optional[str] = MISSING
    num_cpus: Optional[int] = MISSING


@dataclass
class PPOTrainerConfig:
    """The whole ``ppo_trainer.yaml`` tree: what ``main_ppo`` and ``RayPPOTrainer`` receive."""

    data: DataConfig = field(default_factory=DataConfig)
    actor_rollout_ref: ActorRolloutRefConfig = field(default_factory=ActorRolloutRefConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    reward_model: RewardModelConfig = field(default_factory=RewardModelConfig)
    custom_reward_function: CustomRewardFunctionConfig = field(default_factory=CustomRewardFunctionConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    ray_init: RayInitConfig = field(default_factory=RayInitConfig)


# ------------------------------------------------------------- generation.yaml (python -m verl.trainer.main_generation)
@dataclass
class GenerationTrainerConfig:
    """``trainer`` of ``generation.yaml``."""

    device: Optional[str] = MISSING


@dataclass
class GenerationDataConfig:
    """``data`` of ``generation.yaml``: the prompts and the output file."""

    path: Optional[str] = MISSING
    format: str = MISSING
    categories: Any = MISSING  # a list or a comma-separated string of BFCL categories
    prompt_key: str = MISSING
    n_samples: int = MISSING
    output_path: str = MISSING  # mandatory (``???`` in the YAML): checked by run_generation with its own message
    batch_size: int = MISSING
    max_samples: int = MISSING
    truncation: str = MISSING
    filter_overlong_prompts: bool = MISSING
    prompt_tail_chars: int = MISSING


@dataclass
class GenerationModelConfig:
    """``model`` of ``generation.yaml``."""

    path: str = MISSING
    trust_remote_code: bool = MISSING
    override_config: Dict[str, Any] = MISSING


@dataclass
class GenerationRolloutConfig:
    """``rollout`` of ``generation.yaml`` (verl's generation keys)."""

    name: str = MISSING
    temperature: float = MISSING
    top_k: int = MISSING
    top_p: float = MISSING
    do_sample: bool = MISSING
    prompt_length: int = MISSING
    response_length: int = MISSING
    micro_batch_size: Optional[int] = MISSING
    dtype: str = MISSING
    seed: int = MISSING
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)


@dataclass
class GenerationEvalConfig:
    """``eval`` of ``generation.yaml``."""

    enable: bool = MISSING
    dataset: str = MISSING
    output_path: Optional[str] = MISSING


@dataclass
class GenerationConfig:
    """The whole ``generation.yaml`` tree."""

    trainer: GenerationTrainerConfig = field(default_factory=GenerationTrainerConfig)
    data: GenerationDataConfig = field(default_factory=GenerationDataConfig)
    model: GenerationModelConfig = field(default_factory=GenerationModelConfig)
    rollout: GenerationRolloutConfig = field(default_factory=GenerationRolloutConfig)
    eval: GenerationEvalConfig = field(default_factory=GenerationEvalConfig)


# ------------------------------------------------------------ sft_trainer.yaml (python -m verl.trainer.fsdp_sft_trainer)
@dataclass
class SFTDataConfig:
    """``data`` of ``sft_trainer.yaml``."""

    train_files: Any = MISSING  # a path, a list of paths, or null (RLLA discovery)
    val_files: Any = MISSING  # as train_files; [] disables validation
    prompt_key: str = MISSING
    response_key: str = MISSING
    max_length: int = MISSING
    truncation: str = MISSING
    train_batch_size: int = MISSING
    micro_batch_size_per_gpu: int = MISSING
    max_samples: int = MISSING


@dataclass
class SFTFSDPConfig:
    """``model.fsdp_config`` of ``sft_trainer.yaml``."""

    mixed_precision: Optional[str] = MISSING


@dataclass
class SFTModelConfig:
    """``model`` of ``sft_trainer.yaml``."""

    partial_pretrain: str = MISSING
    enable_gradient_checkpointing: bool = MISSING
    trust_remote_code: bool = MISSING
    fsdp_config: SFTFSDPConfig = field(default_factory=SFTFSDPConfig)


@dataclass
class SFTOptimConfig:
    """``optim`` of ``sft_trainer.yaml``."""

    lr: float = MISSING
    betas: List[float] = MISSING
    weight_decay: float = MISSING
    warmup_steps_ratio: float = MISSING
    clip_grad: float = MISSING
    lr_scheduler: str = MISSING
    min_lr_ratio: float = MISSING


@dataclass
class SFTRunConfig:
    """``trainer`` of ``sft_trainer.yaml``."""

    default_local_dir: str = MISSING
    overwrite: bool = MISSING
    project_name: str = MISSING
    experiment_name: str = MISSING
    total_epochs: int = MISSING
    total_training_steps: Optional[int] = MISSING
    val_before_train: bool = MISSING
    logger: Any = MISSING
    seed: int = MISSING
    device: Optional[str] = MISSING


@dataclass
class SFTConfig:
    """The whole ``sft_trainer.yaml`` tree."""

    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    model: SFTModelConfig = field(default_factory=SFTModelConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    trainer: SFTRunConfig = field(default_factory=SFTRunConfig)


def derived_keys(schema: type = PPOTrainerConfig, prefix: str = "") -> list[str]:
    """Dotted paths of the derived fields of ``schema`` (those with a default of their own instead of ``MISSING``):
    values the code fills in, which are not keys of the YAML and which a user cannot set."""
    import typing

    hints = typing.get_type_hints(schema)
    keys = []
    for f in dataclasses.fields(schema):
        kind = hints[f.name]
        if dataclasses.is_dataclass(kind):
            keys.extend(derived_keys(kind, f"{prefix}{f.name}."))
        elif f.default is not MISSING and f.default_factory is dataclasses.MISSING:
            keys.append(prefix + f.name)
    return keys
