"""Load-time checks of the model settings (``validate_config`` calls :func:`validate_model_settings`): LoRA, the
attention kernel, and FSDP2 mixed precision — each error names its key."""

from __future__ import annotations

import logging

from omegaconf import DictConfig, OmegaConf

from verl.trainer.config_errors import ConfigError

logger = logging.getLogger(__name__)

# every model's fsdp_config that carries mixed_precision (verl/utils/mixed_precision.py)
MIXED_PRECISION_SECTIONS = (
    "actor_rollout_ref.actor.fsdp_config",
    "actor_rollout_ref.ref.fsdp_config",
    "critic.model.fsdp_config",
)


def validate_model_settings(config: DictConfig, device: str) -> None:
    """LoRA, attention and mixed-precision settings of the composed trainer config, on ``device`` (``cpu``/``cuda``).

    Raises:
        ConfigError: the first bad setting, named by its key.
    """
    _validate_lora(config.actor_rollout_ref.model)
    _validate_attention(config, device)
    _validate_mixed_precision(config, device)


def _validate_lora(model: DictConfig) -> None:
    """``actor_rollout_ref.model.lora_rank`` (0: full fine-tuning) and, with LoRA, ``lora_alpha`` and
    ``target_modules`` (``verl/utils/lora.py``)."""
    if model.lora_rank < 0:
        raise ConfigError(f"actor_rollout_ref.model.lora_rank={model.lora_rank}: 0 (full fine-tuning) or a rank > 0")
    if model.lora_rank == 0:
        return
    if model.lora_alpha <= 0:
        raise ConfigError(f"actor_rollout_ref.model.lora_alpha={model.lora_alpha}: must be positive with lora_rank > 0")
    targets = model.target_modules
    if not (isinstance(targets, str) and targets) and not (OmegaConf.is_list(targets) and len(targets)):
        raise ConfigError(
            f"actor_rollout_ref.model.target_modules={targets!r}: 'all-linear' or a non-empty list of "
            "module names (e.g. [q_proj,v_proj])"
        )


def _validate_attention(config: DictConfig, device: str) -> None:
    """Each model's ``override_config.attn_implementation`` is known; shared prompts need an arbitrary mask
    (``verl/utils/shared_prompt.py``); FlexAttention is CUDA only (no CPU backward; CPU compile fails on some
    shapes)."""
    from verl.utils.model_utils import attn_implementation_of
    from verl.utils.shared_prompt import SUPPORTED_ATTENTION

    for where, model in (("actor_rollout_ref", config.actor_rollout_ref.model), ("critic", config.critic.model)):
        try:
            implementation = attn_implementation_of(model)
        except ValueError as err:
            raise ConfigError(f"{where}.{err}") from None
        if implementation == "flex_attention" and device == "cpu":
            raise ConfigError(
                f"{where}.model.override_config.attn_implementation=flex_attention needs a CUDA device "
                "(trainer.device resolves to cpu): use sdpa on CPU"
            )
        if where == "actor_rollout_ref" and model.use_shared_prompt and implementation not in SUPPORTED_ATTENTION:
            raise ConfigError(
                f"actor_rollout_ref.model.use_shared_prompt=true needs attention that takes an arbitrary "
                f"mask ({', '.join(SUPPORTED_ATTENTION)}); attn_implementation is {implementation!r}"
            )


def _validate_mixed_precision(config: DictConfig, device: str) -> None:
    """Each ``fsdp_config.mixed_precision`` builds a policy on ``device``; the HF rollout runs the actor's module, so
    ``rollout.dtype`` must be the actor's compute dtype whenever a policy is on."""
    from verl.utils.mixed_precision import dtype_from_name, mixed_precision_policy

    policies = {}
    for where in MIXED_PRECISION_SECTIONS:
        key = f"{where}.mixed_precision"
        try:
            policies[where] = mixed_precision_policy(OmegaConf.select(config, key), device, key)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    actor = policies[MIXED_PRECISION_SECTIONS[0]]
    ref = policies[MIXED_PRECISION_SECTIONS[1]]
    actor_dtype, ref_dtype = (p.param_dtype if p is not None else None for p in (actor, ref))
    if ref_dtype != actor_dtype:
        if config.actor_rollout_ref.model.lora_rank > 0:  # the reference is the actor's module, adapters disabled
            raise ConfigError(
                f"{MIXED_PRECISION_SECTIONS[1]}.mixed_precision asks for {ref_dtype or 'float32'} but with "
                "LoRA the reference policy is the actor's own module (adapters disabled), which "
                f"computes in {actor_dtype or 'float32'}: leave the reference's keys as the actor's"
            )
        logger.warning(
            "the reference policy computes in %s, the actor in %s (%s.mixed_precision): the KL between "
            "them is not 0 before the first update",
            ref_dtype or "float32",
            actor_dtype or "float32",
            MIXED_PRECISION_SECTIONS[1],
        )
    rollout = config.actor_rollout_ref.rollout
    ranks = int(config.trainer.nnodes) * max(int(config.trainer.n_gpus_per_node), 1)
    if actor is not None and rollout.name == "hf" and rollout.cache_implementation == "static" and ranks > 1:
        # one rank decodes with a plain copy of the model (verl/workers/rollout/decode_copy.py), which compiles whole
        logger.warning(
            "actor_rollout_ref.rollout.cache_implementation=static with the actor sharded over %d ranks "
            "under the %s mixed-precision policy: transformers compiles the decoding step of the "
            "FSDP2-wrapped model (graph breaks at each unit's hooks): its one GPU timing (an H200, "
            "docs/gpu.md) found it no faster than the dynamic cache",
            ranks,
            actor.param_dtype,
        )
    if actor is not None and rollout.name == "hf":
        try:
            dtype = dtype_from_name(rollout.dtype, "actor_rollout_ref.rollout.dtype")
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if dtype != actor.param_dtype:
            raise ConfigError(
                f"actor_rollout_ref.rollout.dtype={rollout.dtype!r}, but the actor computes in "
                f"{actor.param_dtype} ({MIXED_PRECISION_SECTIONS[0]}.mixed_precision.param_dtype) and the "
                "HF rollout runs the actor's module: set them equal"
            )
