"""bf16 training the standard way: FSDP2's ``MixedPrecisionPolicy`` (float32 master weights and optimizer state, bf16
parameters for the forward and backward, float32 gradient reduction), on one GPU as on many — no autocast on top.

How it works (PyTorch's FSDP2 design): the sharded float32 parameters are all-gathered as bf16 copies before each
FSDP unit's forward (one unit per decoder layer plus the root), so every matmul of the model runs in bf16 with bf16
activations; the gradients of those copies are cast to ``reduce_dtype`` (float32) for the reduce-scatter and land on
the float32 shards that AdamW updates. On one rank the all-gather is a cast and the reduce-scatter a cast back: the
same arithmetic as casting the model to bf16, running it, and adding the bf16 gradients in float32 (tested exactly in
``tests/workers/test_mixed_precision_on_cpu.py``). Log-probs and entropies are taken in float32 from the bf16
logits (``verl/utils/torch_functional.py``), as verl does.

Config (verl's keys, under each model's ``fsdp_config``)::

    mixed_precision:
      param_dtype: null    # null: bf16 on CUDA, fp32 on CPU (no policy: CPU runs stay float32, unsharded on 1 rank)
      reduce_dtype: fp32
      buffer_dtype: fp32   # FSDP2 leaves buffers (rotary inv_freq) as loaded: only fp32 is accepted

``param_dtype=fp32`` anywhere means plain float32 (no policy). fp16 is refused (it would need loss scaling).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Optional

import torch
import torch.distributed as dist
from omegaconf import DictConfig, OmegaConf

__all__ = [
    "MIXED_PRECISION_KEYS",
    "dtype_from_name",
    "fsdp_modules",
    "init_single_rank_group",
    "mark_param_dtype",
    "mixed_precision_policy",
    "param_dtype_of",
    "unsharded_for_generation",
]

MIXED_PRECISION_KEYS = ("param_dtype", "reduce_dtype", "buffer_dtype")
_NAMES = {
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
    "fp32": torch.float32,
    "float32": torch.float32,
    "fp16": torch.float16,
    "float16": torch.float16,
}
_ATTR = "_verl_param_dtype"


def dtype_from_name(name: str, key: str) -> torch.dtype:
    """``torch`` dtype of a config name (``bf16``/``bfloat16``/``fp32``/``float32``/``fp16``/``float16``).

    Raises:
        ValueError: an unknown name (the message names ``key``)."""
    if str(name) not in _NAMES:
        raise ValueError(f"{key}={name!r}: expected one of {', '.join(sorted(_NAMES))}")
    return _NAMES[str(name)]


def mixed_precision_policy(mixed_precision: Any, device: str, key: str):
    """The FSDP2 ``MixedPrecisionPolicy`` a model's ``fsdp_config.mixed_precision`` asks for on ``device``, or None
    for plain float32 (no policy: a single rank then keeps an unsharded module).

    Args:
        mixed_precision: None, a dict/DictConfig with :data:`MIXED_PRECISION_KEYS`, or a dtype name (the SFT
            trainer's ``model.fsdp_config.mixed_precision: bf16``) read as ``param_dtype``.
        device: ``"cpu"`` or ``"cuda"`` (``param_dtype`` null means bf16 on CUDA, float32 on CPU).
        key: the config path, for error messages (e.g. ``actor_rollout_ref.actor.fsdp_config.mixed_precision``).

    Returns:
        ``MixedPrecisionPolicy(param_dtype, reduce_dtype, cast_forward_inputs=True)`` or None.

    Raises:
        ValueError: an unknown key or dtype name, fp16 (needs loss scaling, not implemented), a ``buffer_dtype`` other
            than fp32, or a ``reduce_dtype`` less precise than ``param_dtype``.
    """
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if isinstance(mixed_precision, DictConfig):
        mixed_precision = OmegaConf.to_container(mixed_precision, resolve=True)
    if mixed_precision is None:
        mixed_precision = {}
    elif isinstance(mixed_precision, str):
        mixed_precision = {"param_dtype": mixed_precision}
    elif not isinstance(mixed_precision, dict):
        raise ValueError(
            f"{key}={mixed_precision!r}: expected null, a dtype name or a mapping with "
            f"{', '.join(MIXED_PRECISION_KEYS)}"
        )
    unknown = sorted(set(mixed_precision) - set(MIXED_PRECISION_KEYS))
    if unknown:
        raise ValueError(f"{key}: unknown key(s) {unknown}; expected {', '.join(MIXED_PRECISION_KEYS)}")
    param_name = mixed_precision.get("param_dtype") or ("bf16" if device == "cuda" else "fp32")
    param = dtype_from_name(param_name, f"{key}.param_dtype")
    reduce = dtype_from_name(mixed_precision.get("reduce_dtype") or "fp32", f"{key}.reduce_dtype")
    buffer = dtype_from_name(mixed_precision.get("buffer_dtype") or "fp32", f"{key}.buffer_dtype")
    if torch.float16 in (param, reduce):
        raise ValueError(f"{key}: fp16 needs loss scaling, which is not implemented; use bf16")
    if buffer != torch.float32:
        raise ValueError(
            f"{key}.buffer_dtype={mixed_precision.get('buffer_dtype')!r}: FSDP2 keeps buffers as loaded "
            "(float32); only fp32 is accepted"
        )
    if param == torch.float32 and reduce != torch.float32:
        raise ValueError(f"{key}.reduce_dtype: float32 parameters reduce in float32 (got {reduce})")
    if param == torch.float32:
        return None
    return MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce, cast_forward_inputs=True)


def mark_param_dtype(module: torch.nn.Module, dtype: Optional[torch.dtype]) -> None:
    """Record on ``module`` the dtype its forward computes in under a policy (read by :func:`param_dtype_of`)."""
    setattr(module, _ATTR, dtype)


def param_dtype_of(module: torch.nn.Module) -> Optional[torch.dtype]:
    """The compute dtype of a module wrapped with a policy by ``apply_fsdp2``, or None (plain parameters)."""
    return getattr(module, _ATTR, None)


def init_single_rank_group(device: str) -> None:
    """A one-rank default process group (an in-memory store: no port, no environment variables), so that FSDP2 can
    wrap a model for its mixed-precision policy on one device. A no-op when a group exists.

    Raises:
        RuntimeError: ``WORLD_SIZE`` says more than one rank (their group must come from ``Worker.init_distributed``).
    """
    import os

    if dist.is_initialized():
        return
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise RuntimeError("init_single_rank_group with WORLD_SIZE > 1: the default process group must span the ranks")
    dist.init_process_group(
        backend="nccl" if device == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1
    )


def fsdp_modules(module: torch.nn.Module) -> list:
    """Every ``FSDPModule`` in ``module`` (itself included), outermost first."""
    from torch.distributed.fsdp import FSDPModule

    return [m for m in module.modules() if isinstance(m, FSDPModule)]


@contextlib.contextmanager
def unsharded_for_generation(module: torch.nn.Module) -> Iterator[None]:
    """Context for ``generate`` on an FSDP2 module: parameters are gathered (and cast to the policy's dtype) once, on
    the first decoding step, and kept until the context ends, instead of once per generated token. Their memory is
    the unsharded model in the compute dtype. A no-op for a plain module."""
    modules = fsdp_modules(module)
    if not modules:
        yield
        return
    for m in modules:
        m.set_reshard_after_forward(False, recurse=False)
    try:
        yield
    finally:
        for m in modules:
            m.set_reshard_after_forward(m is not modules[0], recurse=False)  # FSDP2's defaults: the root stays
            m.reshard()
