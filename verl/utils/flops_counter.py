"""Model FLOPs of a decoder-only causal LM (Llama / Qwen2 / SmolLM2 family), and MFU against a GPU's peak.

Counting convention (the "model FLOPs" of PaLM, Chowdhery et al. 2022, appendix B, and Megatron-LM, Narayanan et al.
2021, section 5.1): a multiply-add is 2 FLOPs; only matrix products are counted (norms, activations, softmax and
rotary embeddings are left out); a training pass (forward + backward) costs 3x the forward, whatever activation
checkpointing recomputes. Attention is counted exactly for causal sequences of the given lengths, so packed and
padded batches of the same sequences get the same count: padding is wasted work, not model FLOPs, and shows up as
a lower MFU.

Forward FLOPs of one sequence of ``s`` tokens through one decoder layer (hidden ``h``, ``a`` query heads of size
``d = h / a``, ``k`` key/value heads, MLP width ``f``, gated MLP with three projections)::

    projections   2 * s * (h*a*d + 2*h*k*d + a*d*h)      # q, k, v, o
    mlp           2 * s * 3*h*f                          # gate, up, down
    attention     2 * 2 * a*d * s*(s+1)/2                # q.k^T and p.v over the causal triangle

plus the output projection ``2 * h * V`` for each position whose logits are computed (``logits_to_keep``; the
embedding lookup is free).

Shared-prompt layout (``verl/utils/shared_prompt.py``; the HF rollout's shared prefill computes the same): a prompt of
``p`` tokens computed once for responses of ``r_1 .. r_n`` tokens costs the projections and MLP of
``p + sum(r_i)`` tokens and attention over ``p(p+1)/2 + sum(r_i * p + r_i(r_i+1)/2)`` query-key pairs (every response
token sees the whole prompt and its own earlier tokens). With ``n = 1`` this is the unshared count.
"""

from __future__ import annotations

from typing import Iterable, Sequence

# Dense (no sparsity) bf16 tensor-core peaks in FLOP/s, from the vendors' data sheets.
GPU_BF16_PEAK_FLOPS = {
    "H100 SXM": 989.4e12,  # NVIDIA H100 Tensor Core GPU data sheet (SXM5), BF16 dense
    "H100 PCIe": 756.0e12,
    "H200": 989.4e12,  # NVIDIA H200 data sheet: same tensor cores as the H100 SXM
    "A100": 312.0e12,  # NVIDIA A100 data sheet, BF16 dense
}


def gpu_bf16_peak_flops(device_name: str) -> float:
    """Peak dense bf16 FLOP/s of the GPU named ``device_name`` (``torch.cuda.get_device_name()``).

    Raises:
        KeyError: the name matches no entry of ``GPU_BF16_PEAK_FLOPS`` (the message lists them).
    """
    name = device_name.upper()
    if "H200" in name:
        return GPU_BF16_PEAK_FLOPS["H200"]
    if "H100" in name:
        return GPU_BF16_PEAK_FLOPS["H100 PCIe" if "PCIE" in name else "H100 SXM"]
    if "A100" in name:
        return GPU_BF16_PEAK_FLOPS["A100"]
    raise KeyError(f"no bf16 peak known for GPU {device_name!r}; known: {sorted(GPU_BF16_PEAK_FLOPS)}")


def _shape(config) -> tuple[int, int, int, int, int, int, int]:
    """(layers, hidden, heads, kv_heads, head_dim, mlp width, vocab) of an HF config; KeyError names a missing key."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    missing = [
        key
        for key in ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
        if get(key) is None
    ]
    if missing:
        raise KeyError(f"model config lacks {missing} (needed to count FLOPs)")
    heads = int(get("num_attention_heads"))
    hidden = int(get("hidden_size"))
    head_dim = int(get("head_dim") or hidden // heads)
    kv_heads = int(get("num_key_value_heads") or heads)
    return (
        int(get("num_hidden_layers")),
        hidden,
        heads,
        kv_heads,
        head_dim,
        int(get("intermediate_size")),
        int(get("vocab_size")),
    )


def _layer_flops(config, tokens: int, attention_pairs: int) -> int:
    """One decoder layer: projections and MLP of ``tokens`` tokens, attention over ``attention_pairs`` (query, key)
    pairs (module docstring formula)."""
    _, h, a, k, d, f, _ = _shape(config)
    projections = 2 * tokens * (h * a * d + 2 * h * k * d + a * d * h)
    mlp = 2 * tokens * 3 * h * f
    attention = 2 * 2 * a * d * attention_pairs
    return projections + mlp + attention


def layer_forward_flops(config, seq_len: int) -> int:
    """Forward FLOPs of ONE decoder layer on one causal sequence of ``seq_len`` tokens (module docstring formula)."""
    s = int(seq_len)
    return _layer_flops(config, s, s * (s + 1) // 2)


def forward_flops(config, seq_lens: Iterable[int], logit_positions: int) -> int:
    """Forward FLOPs of a batch of independent causal sequences.

    Args:
        config: an HF model config (or dict) with ``num_hidden_layers, hidden_size, num_attention_heads,
            intermediate_size, vocab_size`` (and optionally ``num_key_value_heads``, ``head_dim``).
        seq_lens: the valid length of every sequence (padding excluded).
        logit_positions: how many positions get the output projection (all tokens, or only the positions that
            predict response tokens when ``logits_to_keep`` is used).

    Returns:
        FLOPs as a Python int.
    """
    layers, h, *_, vocab = _shape(config)
    per_layer = sum(layer_forward_flops(config, s) for s in seq_lens)
    return layers * per_layer + 2 * h * vocab * int(logit_positions)


def shared_prompt_forward_flops(config, groups: Iterable[tuple[int, Sequence[int]]], logit_positions: int) -> int:
    """Forward FLOPs of groups of responses sharing a prompt computed once (module docstring, shared layout).

    Args:
        config: as :func:`forward_flops`.
        groups: ``(prompt_tokens, [response_tokens of each member])`` per group (valid tokens only).
        logit_positions: positions that get the output projection.

    Returns:
        FLOPs as a Python int; equals :func:`forward_flops` of the concatenated sequences when every group has one
        member.
    """
    layers, h, *_, vocab = _shape(config)
    per_layer = 0
    for prompt, responses in groups:
        p = int(prompt)
        tokens = p + sum(int(r) for r in responses)
        pairs = p * (p + 1) // 2 + sum(int(r) * p + int(r) * (int(r) + 1) // 2 for r in responses)
        per_layer += _layer_flops(config, tokens, pairs)
    return layers * per_layer + 2 * h * vocab * int(logit_positions)


def train_flops(config, seq_lens: Sequence[int], logit_positions: int) -> int:
    """Forward + backward FLOPs = 3x :func:`forward_flops` (backward = 2x forward; recomputation not counted)."""
    return 3 * forward_flops(config, seq_lens, logit_positions)


def mfu(flops: float, seconds: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s over the peak, in [0, 1] for a real measurement.

    Raises:
        ValueError: ``seconds`` or ``peak_flops_per_s`` is not positive.
    """
    if seconds <= 0 or peak_flops_per_s <= 0:
        raise ValueError(f"mfu needs positive seconds and peak, got {seconds!r}, {peak_flops_per_s!r}")
    return flops / seconds / peak_flops_per_s


def measure_matmul_peak(seconds: float = 0.5, size: int = 1024, dtype=None, device: str = "cpu") -> float:
    """Measured dense matmul throughput of this machine, in FLOP/s: the best of repeated ``size x size`` products
    (``2 * size**3`` FLOPs each) over about ``seconds`` of wall time, with torch's current thread count.

    This is the CPU's practical peak (float32 by default) that ``perf/mfu_*`` is measured against on CPU (a
    matmul peak measured on the machine); GPUs use the data-sheet bf16 peak (:func:`gpu_bf16_peak_flops`).

    Raises:
        ValueError: ``seconds`` or ``size`` is not positive.
    """
    import time

    import torch

    if seconds <= 0 or size <= 0:
        raise ValueError(f"measure_matmul_peak needs positive seconds and size, got {seconds!r}, {size!r}")
    dtype = dtype or torch.float32
    # a private generator: the global RNG is the workers' sampling stream when they share this process
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, dtype=dtype, device=device, generator=gen)
    b = torch.randn(size, size, dtype=dtype, device=device, generator=gen)
    sync = torch.cuda.synchronize if str(device).startswith("cuda") else (lambda: None)
    torch.matmul(a, b)  # warm-up (thread pool, kernels)
    sync()
    best, deadline = float("inf"), time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        torch.matmul(a, b)
        sync()
        best = min(best, time.perf_counter() - start)
        if time.perf_counter() > deadline:
            break
    return 2.0 * size**3 / best


__all__ = [
    "GPU_BF16_PEAK_FLOPS",
    "forward_flops",
    "gpu_bf16_peak_flops",
    "layer_forward_flops",
    "measure_matmul_peak",
    "mfu",
    "train_flops",
]
