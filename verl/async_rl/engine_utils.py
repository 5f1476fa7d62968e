"""Helpers shared by the inference engines of the asynchronous mode (``inference_server.PolicyEngine`` and
``vllm_engine.VllmPolicyEngine``): weight loading, request checks, end-of-sequence ids, backend names and the
policy-version rule."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Mapping, Sequence, Union

import torch


class StaleWeightsError(ValueError):
    """``update_weights`` was given a version older than the one served (versions never go back)."""


def load_weights(source: Union[Mapping[str, torch.Tensor], str, os.PathLike]) -> Dict[str, torch.Tensor]:
    """A state dict from a mapping (returned as a dict), a ``.safetensors`` file, a ``torch.save`` file (``.pt`` /
    ``.bin``), or an HF model directory holding ``model.safetensors``.

    Raises FileNotFoundError: the path does not exist or the directory has no ``model.safetensors``.
    """
    if isinstance(source, Mapping):
        return dict(source)
    path = Path(source)
    if path.is_dir():
        path = path / "model.safetensors"
    if not path.is_file():
        raise FileNotFoundError(f"weights not found at {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(str(path))
    return torch.load(str(path), map_location="cpu", weights_only=True)


def check_generate_args(prompt_ids: Sequence[int], max_tokens: int, temperature: float, n: int) -> None:
    """The request checks both engines apply. Raises ValueError: empty prompt, ``max_tokens < 1``, ``n < 1`` or a
    negative temperature."""
    if len(prompt_ids) == 0:
        raise ValueError("prompt has no tokens")
    if int(max_tokens) < 1 or int(n) < 1 or float(temperature) < 0:
        raise ValueError(f"need max_tokens >= 1, n >= 1, temperature >= 0; got {max_tokens}, {n}, {temperature}")


def eos_token_ids(generation_eos, tokenizer) -> set:
    """The ids that end a completion: the generation config's ``eos_token_id`` (an int or a list), else the
    tokenizer's."""
    eos = generation_eos if generation_eos is not None else tokenizer.eos_token_id
    return set(eos if isinstance(eos, (list, tuple)) else [eos])


BACKENDS = ("hf", "vllm")


def check_backend(backend: str) -> str:
    """``backend`` when it is one of :data:`BACKENDS`. Raises ValueError naming ``async.inference.backend``."""
    if backend not in BACKENDS:
        raise ValueError(f"async.inference.backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def check_version(version: int, served: int) -> bool:
    """Whether weights of policy ``version`` should replace those of ``served``: True when newer, False when equal
    (nothing to do, e.g. a broadcast retried after a timeout). Raises StaleWeightsError: ``version`` is older."""
    if int(version) < int(served):
        raise StaleWeightsError(
            f"weights of policy version {version} rejected: serving version {served} already (versions never go back)"
        )
    return int(version) > int(served)
