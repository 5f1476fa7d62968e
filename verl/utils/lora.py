"""LoRA RL through ``peft``: verl's keys ``actor_rollout_ref.model.{lora_rank, lora_alpha, target_modules}``.

With ``lora_rank > 0`` the actor's causal LM is wrapped by ``peft.get_peft_model`` (:func:`apply_lora`): the base
weights are frozen and only the adapters ``A`` [r, in] and ``B`` [out, r] of each target linear layer train, so the
layer computes ``W x + (alpha / r) · B A x`` (Hu et al. 2021, "LoRA", eq. 3; ``B`` starts at zero, so step 0 is the
base model). What the rest of the trainer sees:

- the reference policy is the same module with the adapters disabled (:func:`adapters_disabled`): the base model,
  without a second copy in memory;
- the rollout engines and the HF export receive merged weights under the base model's own names
  (:func:`merged_state_dict`: ``W + (alpha / r) · B A``, computed out of place, so the training weights are never
  merged and unmerged in floating point);
- checkpoints hold the adapters only (:func:`trainable_state`): the frozen base comes back from ``model.path``.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

ADAPTER = "default"  # peft's name of the one adapter


def lora_rank(model_config: Any) -> int:
    """``actor_rollout_ref.model.lora_rank`` (0: full fine-tuning)."""
    return int(model_config.lora_rank)


def apply_lora(model: torch.nn.Module, model_config: Any) -> torch.nn.Module:
    """Wrap ``model`` with LoRA adapters of rank ``model.lora_rank`` on ``model.target_modules`` (``all-linear``:
    every linear layer but the output head, peft's meaning; or a list of module names such as ``[q_proj, v_proj]``).

    Returns:
        The ``peft.PeftModel``; its base parameters have ``requires_grad=False``.

    Raises:
        ValueError: ``lora_rank`` not positive, ``lora_alpha`` not positive, ``target_modules`` empty, or a target
            that is not an ``nn.Linear`` (embeddings, GPT-2's ``Conv1D``).
    """
    from peft import LoraConfig, get_peft_model

    rank, alpha = int(model_config.lora_rank), float(model_config.lora_alpha)
    targets = model_config.target_modules
    if rank <= 0 or alpha <= 0:
        raise ValueError(f"actor_rollout_ref.model.lora_rank / lora_alpha must be positive, got {rank} / {alpha}")
    if not isinstance(targets, str):
        targets = [str(t) for t in targets]
        if not targets:
            raise ValueError("actor_rollout_ref.model.target_modules is empty")
    config = LoraConfig(
        r=rank, lora_alpha=alpha, target_modules=targets, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(model, config)
    # merged_state_dict and the adapter-only checkpoints handle nn.Linear layers (W [out, in]); an embedding or a
    # GPT-2-style Conv1D (W stored transposed) target would be merged wrongly or left out of checkpoints
    for name, module in peft_model.named_modules():
        base = getattr(module, "base_layer", None)
        if base is not None and (type(base) is not torch.nn.Linear or getattr(module, "fan_in_fan_out", False)):
            raise ValueError(
                f"actor_rollout_ref.model.target_modules: {name} is a {type(base).__name__}; LoRA RL "
                "supports nn.Linear layers only (e.g. target_modules=[q_proj,k_proj,v_proj,o_proj])"
            )
    return peft_model


def is_lora(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a peft model (adapters attached)."""
    return hasattr(module, "peft_config") and hasattr(module, "disable_adapter")


@contextlib.contextmanager
def adapters_disabled(module: torch.nn.Module) -> Iterator[None]:
    """Inside the block ``module`` computes the base model (the reference policy); a plain module is unchanged."""
    if not is_lora(module):
        yield
        return
    with module.disable_adapter():
        yield


def merged_state_dict(state: dict[str, torch.Tensor], scaling: float) -> dict[str, torch.Tensor]:
    """The base model's state dict with every LoRA delta added: ``W + scaling · B @ A`` under ``W``'s name.

    Args:
        state: a peft model's full state dict (``base_model.model.<name>.base_layer.weight``,
            ``...lora_A.default.weight`` [r, in], ``...lora_B.default.weight`` [out, r]), float tensors on one device.
        scaling: ``lora_alpha / lora_rank``.

    Returns:
        ``{<name>: tensor}`` with the names of the plain HF model (what ``save_pretrained`` and vLLM load), new
        tensors for the merged weights; the input is not modified.
    """
    prefix = "base_model.model."
    out: dict[str, torch.Tensor] = {}
    for key, value in state.items():
        if ".lora_A." in key or ".lora_B." in key:
            continue
        name = key.removeprefix(prefix)
        if ".base_layer." in name:
            module, _, leaf = name.rpartition(".base_layer.")
            if leaf == "weight":
                src = key[: -len(".base_layer.weight")]
                a = state[f"{src}.lora_A.{ADAPTER}.weight"]
                b = state[f"{src}.lora_B.{ADAPTER}.weight"]
                value = value + scaling * (b.to(value.dtype) @ a.to(value.dtype))
            name = f"{module}.{leaf}"
        out[name] = value
    return out


def lora_scaling(module: torch.nn.Module) -> float:
    """``lora_alpha / r`` of the module's adapter."""
    config = module.peft_config[ADAPTER]
    return float(config.lora_alpha) / float(config.r)


def trainable_state(module: torch.nn.Module, state: dict[str, Any]) -> dict[str, Any]:
    """The entries of ``state`` (the module's state dict) that a checkpoint must hold: everything for a plain
    module, the adapters only for a LoRA model (the frozen base is reloaded from ``model.path``)."""
    if not is_lora(module):
        return state
    return {k: v for k, v in state.items() if ".lora_A." in k or ".lora_B." in k}


__all__ = [
    "ADAPTER",
    "adapters_disabled",
    "apply_lora",
    "is_lora",
    "lora_rank",
    "lora_scaling",
    "merged_state_dict",
    "trainable_state",
]
