"""Loading models, optimizers and LR schedulers for the workers, FSDP2 wrapping, and sharded-state helpers.

One code path for CPU and GPU:

- parameters are always float32 (the optimizer's master copy); on CUDA the forward and backward run in bf16 through
  FSDP2's ``MixedPrecisionPolicy`` (``verl/utils/mixed_precision.py``: ``fsdp_config.mixed_precision``), on CPU in
  float32 unless that key asks for bf16;
- with more than one data-parallel rank, or one rank under a mixed-precision policy or with ``param_offload`` on
  CUDA, the model is sharded with FSDP2 (``torch.distributed.fsdp.fully_shard``), one FSDP unit per decoder layer
  (``model._no_split_modules``) plus the root, on a 1-D device mesh over the world (gloo on CPU, nccl on CUDA,
  created by ``Worker.init_distributed``, or ``init_single_rank_group`` for one rank); otherwise a single float32
  rank keeps a plain module. ``compute_autocast`` is left
  for the generation-only paths that load a plain model (``main_generation``, the router's inference).

Config keys read here: ``model.{path, override_config (attn_implementation included), enable_gradient_checkpointing,
trust_remote_code}``,
``optim.{lr, betas, weight_decay, lr_warmup_steps, lr_warmup_steps_ratio, warmup_style, min_lr_ratio,
total_training_steps}`` and ``fsdp_config.param_offload``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

from verl.utils.lora import apply_lora, is_lora, lora_rank, lora_scaling, merged_state_dict, trainable_state
from verl.utils.mixed_precision import dtype_from_name, init_single_rank_group, mark_param_dtype, mixed_precision_policy
from verl.utils.model_presets import prepare_model
from verl.utils.torch_functional import get_constant_schedule_with_warmup, get_cosine_schedule_with_warmup

logger = logging.getLogger(__name__)


def _plain(cfg: Any) -> dict:
    """A DictConfig/dict/None as a plain dict."""
    if cfg is None:
        return {}
    if isinstance(cfg, DictConfig):
        return OmegaConf.to_container(cfg, resolve=True)
    return dict(cfg)


def import_external_lib(model_config: DictConfig) -> None:
    """``model.external_lib`` (verl's key): import that module before the model is built, so that it can register
    custom architectures with transformers' Auto classes.

    Raises:
        ModuleNotFoundError: the module cannot be imported (the message names the key).
    """
    import importlib

    name = model_config.external_lib
    if name:
        try:
            importlib.import_module(str(name))
        except ModuleNotFoundError as err:
            raise ModuleNotFoundError(f"model.external_lib={name!r}: cannot import it ({err})") from err


def load_hf_config(model_config: DictConfig, **extra):
    """``(local path, HF config)`` of ``model_config.path`` (a preset is prepared first) with ``override_config`` and
    ``extra`` applied: what the workers build the model from."""
    from transformers import AutoConfig

    import_external_lib(model_config)
    path = prepare_model(model_config.path)
    hf_config = AutoConfig.from_pretrained(path, trust_remote_code=model_config.trust_remote_code)
    for key, value in {**_plain(model_config.override_config), **extra}.items():
        if key != "attn_implementation":  # chosen at load (attn_implementation_of), as verl does
            setattr(hf_config, key, value)
    return path, hf_config


ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flex_attention", "flash_attention_2", "flash_attention_3")


def attn_implementation_of(model_config: DictConfig) -> str:
    """The attention kernel the model is loaded with: ``model.override_config.attn_implementation`` (verl's key),
    default ``sdpa``.

    ``flex_attention`` (PyTorch FlexAttention through transformers' own implementation) attends with block masks: the
    packed layout (``use_remove_padding``) gets a document mask from the position ids, the shared-prompt layout a
    block mask built from its group structure (``verl/utils/shared_prompt.py``), so neither builds a dense
    ``[T, T]`` mask. Exactness against the padded ``sdpa`` path: ``tests/workers/test_flex_attention_on_cpu.py``.

    Raises:
        ValueError: a value outside :data:`ATTN_IMPLEMENTATIONS` (the message names the key).
    """
    value = _plain(model_config.override_config).get("attn_implementation") or "sdpa"
    if value not in ATTN_IMPLEMENTATIONS:
        raise ValueError(
            f"model.override_config.attn_implementation={value!r}: expected one of {', '.join(ATTN_IMPLEMENTATIONS)}"
        )
    return value


def load_causal_lm(model_config: DictConfig, trainable: bool = True) -> torch.nn.Module:
    """Load the causal LM of ``model_config.path`` (a preset, local dir or hub id) in float32.

    Args:
        model_config: the ``model`` subtree (``path``, ``override_config``, ``enable_gradient_checkpointing``,
            ``lora_rank`` / ``lora_alpha`` / ``target_modules``).
        trainable: False freezes the parameters and puts the module in eval mode (reference policy); LoRA adapters
            are attached only to a trainable model.

    Returns:
        ``transformers`` ``AutoModelForCausalLM`` instance on CPU (callers move it to their device), wrapped in a
        ``peft.PeftModel`` when ``lora_rank > 0``.
    """
    from transformers import AutoModelForCausalLM

    path, hf_config = load_hf_config(model_config)
    model = AutoModelForCausalLM.from_pretrained(
        path,
        config=hf_config,
        dtype=torch.float32,
        trust_remote_code=model_config.trust_remote_code,
        attn_implementation=attn_implementation_of(model_config),
    )
    model = _finish(model, model_config, trainable)
    if trainable and lora_rank(model_config) > 0:  # LoRA RL: only the adapters train (verl/utils/lora.py)
        model = apply_lora(model, model_config)
    return model


def load_value_model(model_config: DictConfig) -> torch.nn.Module:
    """Load a value model: ``AutoModelForTokenClassification`` with one label and no classifier dropout.

    The backbone weights come from ``model_config.path`` (a causal-LM checkpoint); the scalar ``score`` head is newly
    initialised (as upstream verl's critic). Output ``logits`` are ``[B, S, 1]``.
    """
    from transformers import AutoModelForTokenClassification

    path, hf_config = load_hf_config(model_config, num_labels=1, classifier_dropout=0.0)
    model = AutoModelForTokenClassification.from_pretrained(
        path,
        config=hf_config,
        dtype=torch.float32,
        trust_remote_code=model_config.trust_remote_code,
        attn_implementation=attn_implementation_of(model_config),
    )
    return _finish(model, model_config, trainable=True)


def _finish(model: torch.nn.Module, model_config: DictConfig, trainable: bool) -> torch.nn.Module:
    if trainable:
        if model_config.enable_gradient_checkpointing:
            kwargs = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5.2x name
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False  # training forwards never need a KV cache (generate turns it on per call)
        model.train()
    else:
        model.requires_grad_(False)
        model.eval()
    return model


def compute_autocast(device: str, dtype: str | torch.dtype = "bfloat16"):
    """Autocast context for forwards: ``dtype`` on CUDA, disabled (float32) on CPU.

    Raises:
        ValueError: an unknown dtype name.
    """
    if isinstance(dtype, str):
        dtype = dtype_from_name(dtype, "rollout.dtype")
    enabled = device == "cuda" and dtype != torch.float32
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device_type="cuda", dtype=dtype)


def apply_fsdp2(
    model: torch.nn.Module, device: str, fsdp_config: DictConfig | None = None, mp_policy=None
) -> torch.nn.Module:
    """Shard ``model`` in place with FSDP2 over all ranks (one unit per decoder layer, then the root).

    Requires an initialised default process group (one rank is fine: ``init_single_rank_group``).
    ``fsdp_config.param_offload`` keeps sharded parameters (and hence optimizer state) on the CPU between uses (CUDA
    only). ``mp_policy``: a ``MixedPrecisionPolicy`` (``verl.utils.mixed_precision.mixed_precision_policy``) for
    every unit; its compute dtype is recorded on the model (``param_dtype_of``).

    Returns:
        The same module, now an ``FSDPModule`` whose parameters are ``DTensor`` shards.

    Raises:
        RuntimeError: ``torch.distributed`` is not initialised.
        ValueError: no module of the model is one of its ``_no_split_modules`` classes (no decoder layers found).
    """
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    if not dist.is_initialized():
        raise RuntimeError("apply_fsdp2 needs torch.distributed to be initialised (Worker.init_distributed)")
    mesh = init_device_mesh(device, (dist.get_world_size(),), mesh_dim_names=("fsdp",))
    offload = OffloadPolicy()
    if fsdp_config is not None and fsdp_config.param_offload:
        if device == "cuda":
            offload = CPUOffloadPolicy(pin_memory=True)
        else:
            logger.info("fsdp_config.param_offload ignored on CPU (parameters already live in host memory)")
    policy = mp_policy or MixedPrecisionPolicy()
    # LoRA: the root unit is the HF model inside the peft wrapper, whose forward both training (through peft's
    # forward) and ``generate`` (which peft hands straight to it) go through
    root = model.get_base_model() if is_lora(model) else model
    layer_names = set(getattr(root, "_no_split_modules", None) or [])
    layers = [module for module in root.modules() if type(module).__name__ in layer_names]
    if not layers:  # the root alone would gather the whole model at once on every rank
        raise ValueError(
            f"{type(root).__name__}: no decoder layers to shard as FSDP2 units "
            f"(_no_split_modules={sorted(layer_names)})"
        )
    for module in layers:
        fully_shard(module, mesh=mesh, offload_policy=offload, mp_policy=policy)
    fully_shard(root, mesh=mesh, offload_policy=offload, mp_policy=policy)
    mark_param_dtype(model, policy.param_dtype)
    return model


def wrap_with_fsdp2(
    model: torch.nn.Module,
    device: str,
    world_size: int,
    mixed_precision: Any,
    key: str,
    fsdp_config: DictConfig | None = None,
) -> torch.nn.Module:
    """:func:`apply_fsdp2` where the model needs it: over several ranks, or on one rank when ``mixed_precision`` (an
    ``fsdp_config.mixed_precision`` value, named ``key`` in errors) gives a bf16 policy or ``fsdp_config.param_offload``
    asks for CUDA parameters in host memory (FSDP2's offload policy is what moves them), in a one-rank process group
    made when none exists (``verl/utils/mixed_precision.py``). Otherwise (one float32 rank) the model stays plain.

    Raises:
        ValueError: a bad ``mixed_precision`` (``mixed_precision_policy``); no decoder layers (:func:`apply_fsdp2`).
    """
    policy = mixed_precision_policy(mixed_precision, device, key)
    offload = device == "cuda" and fsdp_config is not None and bool(fsdp_config.param_offload)
    if world_size > 1 or policy is not None or offload:
        init_single_rank_group(device)  # a no-op when the ranks' group exists
        apply_fsdp2(model, device, fsdp_config, policy)
    return model


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: str | torch.device) -> int:
    """Move every tensor of ``optimizer.state`` (AdamW's ``exp_avg``, ``exp_avg_sq``, ``step``; DTensor shards under
    FSDP2) to ``device`` in place; returns how many tensors were moved."""
    moved = 0
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor) and value.device != torch.device(device):
                state[key] = value.to(device, non_blocking=True)
                moved += 1
    return moved


@contextlib.contextmanager
def optimizer_on_device(optimizer: torch.optim.Optimizer, device: str, offload: bool):
    """``fsdp_config.optimizer_offload`` (verl's key): the optimizer state lives in host memory between updates and
    is moved to ``device`` for the update only (as upstream verl's FSDP workers load and offload it around
    ``update_actor`` / ``update_critic``). Results are unchanged; device memory between updates drops by the state
    (two float32 moments per parameter for AdamW). A no-op when ``offload`` is false or ``device`` is the CPU."""
    if not offload or str(device) == "cpu":
        yield
        return
    move_optimizer_state(optimizer, device)
    try:
        yield
    finally:
        move_optimizer_state(optimizer, "cpu")
        if torch.cuda.is_available():
            torch.cuda.synchronize()


def build_optimizer(params, optim_config: DictConfig) -> torch.optim.Optimizer:
    """AdamW from ``optim.{lr, betas, weight_decay}`` (verl's defaults: betas (0.9, 0.999), weight_decay 0.01).

    Raises:
        ValueError: ``optim.lr`` missing or negative, or ``optim.betas`` not a pair.
    """
    lr = optim_config.lr
    if lr is None or float(lr) < 0:
        raise ValueError(f"optim.lr must be a non-negative number, got {lr!r}")
    betas = tuple(float(b) for b in optim_config.betas)
    if len(betas) != 2:
        raise ValueError(f"optim.betas must have two values, got {betas}")
    return torch.optim.AdamW(params, lr=float(lr), betas=betas, weight_decay=float(optim_config.weight_decay))


def build_lr_scheduler(optimizer: torch.optim.Optimizer, optim_config: DictConfig):
    """LR scheduler stepped once per training step (``update_actor``/``update_critic`` call).

    ``warmup_style``: ``constant`` (linear warm-up then flat) or ``cosine`` (warm-up then cosine decay to
    ``min_lr_ratio``·lr over ``total_training_steps``). Warm-up length: ``lr_warmup_steps`` when > 0, else
    ``int(lr_warmup_steps_ratio · total_training_steps)``.

    Raises:
        ValueError: unknown ``optim.warmup_style``, or ``cosine``/a warm-up ratio without a positive
            ``optim.total_training_steps``.
    """
    total = int(optim_config.total_training_steps or -1)
    ratio = float(optim_config.lr_warmup_steps_ratio or 0.0)
    warmup = int(optim_config.lr_warmup_steps or -1)
    if warmup <= 0:
        if ratio > 0 and total <= 0:
            raise ValueError(
                "optim.lr_warmup_steps_ratio > 0 needs optim.total_training_steps > 0 (set by the trainer)"
            )
        warmup = int(ratio * total) if total > 0 else 0
    style = optim_config.warmup_style
    if style == "constant":
        return get_constant_schedule_with_warmup(optimizer, num_warmup_steps=warmup)
    if style == "cosine":
        if total <= 0:
            raise ValueError("optim.warmup_style=cosine needs optim.total_training_steps > 0 (set by the trainer)")
        min_lr_ratio = optim_config.min_lr_ratio
        return get_cosine_schedule_with_warmup(optimizer, warmup, total, min_lr_ratio=float(min_lr_ratio or 0.0))
    raise ValueError(f"optim.warmup_style must be 'constant' or 'cosine', got {style!r}")


def clip_grad_norm(parameters, max_norm: float | None) -> torch.Tensor:
    """Clip the global gradient norm (DTensor/FSDP2-aware) and return the pre-clip norm as a plain scalar tensor.

    ``max_norm`` None or <= 0 measures without clipping. A non-finite norm is returned as is (callers skip the step).
    """
    params = [p for p in parameters if p.grad is not None]
    limit = float(max_norm) if max_norm and max_norm > 0 else float("inf")
    norm = torch.nn.utils.clip_grad_norm_(params, max_norm=limit)
    if hasattr(norm, "full_tensor"):
        norm = norm.full_tensor()
    return norm.detach()


# ---------------------------------------------------------------------------------------------------- sharded state
def is_dtensor(x: Any) -> bool:
    """Whether ``x`` is a ``torch.distributed.tensor.DTensor`` (an FSDP2 shard)."""
    from torch.distributed.tensor import DTensor

    return isinstance(x, DTensor)


def to_local_state(obj: Any, _copies: dict | None = None) -> Any:
    """Recursively replace DTensors by their local shard and move tensors to CPU (what a rank saves).

    A tensor reached under several keys (tied weights: ``lm_head.weight`` is ``model.embed_tokens.weight``) is copied
    once and stays shared, so ``torch.save`` stores it once (it saved the embedding twice before: ~half the model file
    of the tiny and SmolLM2 presets)."""
    copies = {} if _copies is None else _copies
    if is_dtensor(obj) or isinstance(obj, torch.Tensor):
        local = obj.to_local() if is_dtensor(obj) else obj
        # state_dict() detaches each entry into a new tensor object: tied entries share the storage, not the object
        key = (
            local.device,
            local.untyped_storage().data_ptr(),
            local.storage_offset(),
            tuple(local.shape),
            tuple(local.stride()),
            local.dtype,
        )
        if local.numel() == 0 or key not in copies:
            copies[key] = local.detach().cpu().clone()
        return copies[key]
    if isinstance(obj, dict):
        return {k: to_local_state(v, copies) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_local_state(v, copies) for v in obj)
    return obj


def _like(saved: torch.Tensor, reference: torch.Tensor) -> torch.Tensor:
    """``saved`` (a local shard) as a tensor shaped like ``reference`` (a DTensor or a plain tensor)."""
    from torch.distributed.tensor import DTensor

    if is_dtensor(reference):
        local = saved.to(device=reference.to_local().device, dtype=reference.dtype)
        return DTensor.from_local(
            local,
            reference.device_mesh,
            reference.placements,
            run_check=False,
            shape=reference.shape,
            stride=reference.stride(),
        )
    return saved.to(device=reference.device, dtype=reference.dtype)


def load_local_model_state(model: torch.nn.Module, saved: dict[str, torch.Tensor]) -> None:
    """Load a rank's ``to_local_state(model.state_dict())`` back into ``model`` (plain or FSDP2-sharded).

    Raises:
        RuntimeError: keys or shard shapes differ (e.g. a checkpoint written with another world size).
    """
    current = trainable_state(model, model.state_dict())  # a LoRA model's checkpoint holds its adapters only
    if set(current) != set(saved):
        raise RuntimeError(
            f"checkpoint keys differ from the model: missing {sorted(set(current) - set(saved))[:5]}, "
            f"unexpected {sorted(set(saved) - set(current))[:5]}"
        )
    rebuilt = {}
    for name, ref in current.items():
        local_ref = ref.to_local() if is_dtensor(ref) else ref
        if tuple(local_ref.shape) != tuple(saved[name].shape):
            raise RuntimeError(
                f"checkpoint shard {name} has shape {tuple(saved[name].shape)}, model expects "
                f"{tuple(local_ref.shape)} (saved with another world size?)"
            )
        rebuilt[name] = _like(saved[name], ref)
    model.load_state_dict(rebuilt, strict=not is_lora(model))


def load_local_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """Load a rank's ``to_local_state(optimizer.state_dict())`` (shards re-wrapped as DTensors like their params)."""
    optimizer.load_state_dict(saved)
    for group in optimizer.param_groups:
        for param in group["params"]:
            if not is_dtensor(param):
                continue
            state = optimizer.state.get(param, {})
            for key, value in list(state.items()):
                if isinstance(value, torch.Tensor) and not is_dtensor(value) and value.dim() > 0:
                    state[key] = _like(value, param)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The unsharded float32 CPU state dict (collective under FSDP2: every rank must call; all ranks receive it).
    A LoRA model gives its merged weights under the plain model's names (``verl.utils.lora.merged_state_dict``):
    what vLLM and the HF export load."""
    if any(is_dtensor(p) for p in model.parameters()):
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=False))
        state = {k: (v.full_tensor() if is_dtensor(v) else v).detach().cpu() for k, v in sd.items()}
    else:
        state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    return merged_state_dict(state, lora_scaling(model)) if is_lora(model) else state


__all__ = [
    "ATTN_IMPLEMENTATIONS",
    "apply_fsdp2",
    "attn_implementation_of",
    "build_lr_scheduler",
    "build_optimizer",
    "clip_grad_norm",
    "compute_autocast",
    "full_state_dict",
    "load_causal_lm",
    "load_local_model_state",
    "load_local_optimizer_state",
    "load_value_model",
    "to_local_state",
    "wrap_with_fsdp2",
]
