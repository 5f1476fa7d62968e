"""A plain copy of a one-rank FSDP2 actor for the HF rollout to decode with: the same numbers, no per-token hooks.

On one GPU the actor is wrapped with FSDP2 only for its bf16 ``MixedPrecisionPolicy`` (``verl/utils/mixed_precision
.py``). Decoding through that wrapper runs FSDP2's pre- and post-forward hooks on every decoder layer at every
generated token (Python work that the GPU waits on), and a ``torch.compile``d static-cache decode step (the
``rollout.cache_implementation=static`` path) cannot capture the hooked forward: an unwrapped bf16 model decoded
4,442 tokens/s with the static cache and 1,126 without (an H100, 2026-11-25), the FSDP2-wrapped one ~1,000 with either
(an H200, 2026-11-27; ``benchmarks/README.md``, "MFU on a GPU"). On 2 CPU cores, where decoding is bound by the
arithmetic, the two decode at the same speed (the tiny model, 8 rows x 64 tokens: 435 and 428 tokens/s); the GPU
suite's rollout variants ``plain`` / ``static`` against ``wrapped`` measure the gain on a GPU.

:class:`DecodeCopy` keeps one plain module of the same class, its parameters in the policy's compute dtype and its
buffers as loaded: what the policy computes with (the bf16 exactness test of ``tests/workers/
test_mixed_precision_on_cpu.py`` compares the policy with the same hand-built model, bit for bit), so the tokens
decoded are those of the wrapped module (``tests/workers/test_decode_copy_on_cpu.py``, a Llama-architecture model).
One difference could break that for another architecture: FSDP2's policy also casts each decoder layer's floating
inputs to the compute dtype, which the copy does not; Llama and Qwen2 (their transformers modelling code) give their
layers hidden states and rotary tables already in that dtype. Before each rollout its parameters are overwritten in
place from the actor's current weights (stable storage: a compiled or CUDA-graphed decode step keeps its inputs'
addresses). Memory: the copy stays resident, so every phase's peak, the update's
included, grows by the model's size in the compute dtype (0.25 GiB for SmolLM2-135M, 0.92 GiB for Qwen2-0.5B);
while decoding, the wrapped module is no longer unsharded (it held as much then). Not used with
``fsdp_config.param_offload`` (the parameters live in host memory: a resident copy would defeat it), over several
ranks (each rank holds a shard; decoding there is a collective), for LoRA (peft) models, or for plain modules
(nothing to gain).
"""

from __future__ import annotations

import copy
import logging
from typing import Optional

import torch

from verl.utils.mixed_precision import fsdp_modules, param_dtype_of

logger = logging.getLogger(__name__)


def _model_class(module: torch.nn.Module) -> type:
    """The class ``fully_shard`` subclassed (``FSDP<Class>``): the first class of the MRO that is not an FSDP one."""
    from torch.distributed.fsdp import FSDPModule

    return next(c for c in type(module).__mro__ if not issubclass(c, FSDPModule))


class DecodeCopy:
    """The plain decoding copy of ``module`` (a one-rank FSDP2 causal LM under a mixed-precision policy).

    Args:
        module: the wrapped actor; its class must build from ``module.config`` (every transformers causal LM).

    Use :meth:`applicable` first; :meth:`refreshed` returns the copy holding the module's current weights.
    """

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self.dtype = param_dtype_of(module)
        device = next(module.parameters()).device
        config = copy.deepcopy(module.config)
        if getattr(config, "_attn_implementation", None) == "flex_attention":
            config._attn_implementation = "sdpa"  # decoding with a KV cache runs sdpa (as the rollout does)
        # building runs the model's weight init, which draws from the global RNGs: fork them, so that a run that
        # builds its copy at another step (a resumed one) samples the same tokens
        devices = [device] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices), torch.device(device):
            plain = _model_class(module)(config)
        for param in plain.parameters():
            param.requires_grad_(False)
            param.data = param.data.to(self.dtype)
        plain.generation_config = copy.deepcopy(module.generation_config)
        plain.eval()
        self.plain = plain
        buffers = dict(module.named_buffers())
        for name, buffer in plain.named_buffers():  # as loaded (rotary frequencies in float32 under a bf16 policy)
            buffer.copy_(buffers[name])
        size = sum(p.numel() * p.element_size() for p in plain.parameters()) / 2**30
        logger.info(
            "HF rollout: decoding with a plain %s copy of the one-rank FSDP2 actor (%.2f GiB; no FSDP2 hooks "
            "per token)",
            self.dtype,
            size,
        )

    @staticmethod
    def applicable(module: torch.nn.Module, world_size: int) -> bool:
        """One rank, an FSDP2 module under a mixed-precision policy, not a peft (LoRA) model, parameters not offloaded
        to host memory (on a machine with CUDA, parameters on the CPU are FSDP2's offload)."""
        if (
            world_size != 1
            or not fsdp_modules(module)
            or param_dtype_of(module) is None
            or hasattr(module, "peft_config")
        ):
            return False
        return not (torch.cuda.is_available() and next(module.parameters()).device.type == "cpu")

    @torch.no_grad()
    def refreshed(self) -> torch.nn.Module:
        """The copy with the module's current parameters (cast to the compute dtype, in place)."""
        from torch.distributed.tensor import DTensor

        source = dict(self.module.named_parameters())
        for name, param in self.plain.named_parameters():
            value = source[name]
            if isinstance(value, DTensor):  # one rank: its local shard is the whole tensor (no collective)
                value = value.to_local() if value.device_mesh.size() == 1 else value.full_tensor()
            param.copy_(value)
        return self.plain


def decode_copy_for(module: torch.nn.Module, world_size: int) -> Optional[DecodeCopy]:
    """A :class:`DecodeCopy` of ``module`` where :meth:`DecodeCopy.applicable`, else None."""
    return DecodeCopy(module) if DecodeCopy.applicable(module, world_size) else None
