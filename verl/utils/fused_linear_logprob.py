"""Log-probs and entropies straight from final hidden states: the vocabulary projection, log-softmax and entropy
fused and computed in row chunks, so the ``[N, V]`` logits never exist in full (forward or backward).

With SmolLM2's 49,152-token vocabulary a GRPO micro-batch of 32 rows x 128 response tokens has ``4,096 x 49,152``
float32 logits = 805 MB, plus as much again for their gradient and the temperature-scaled copy; with this function
the scratch is one chunk (``chunk_size x V``) at a time. This is what verl calls ``model.use_fused_kernels``
(a fused linear-for-PPO computation); here it is plain PyTorch, no Triton.

Math (temperature ``T``, logits ``z = h W^T / T``, ``log p = z - logsumexp(z)``, ``H = -sum_j p_j log p_j``):

* forward: ``log p(y) = z_y - lse(z)`` and ``H`` per row, chunk by chunk;
* backward, recomputing ``z`` per chunk: ``dL/dz = g_lp (onehot(y) - p) + g_H (-p (log p + H))``
  (``dH/dz_j = -p_j (log p_j + H)``, as ``torch_functional._ChunkedEntropy``), then ``dL/dh = dL/dz W / T`` and
  ``dL/dW = (dL/dz)^T h / T``.

Matches ``logprobs_from_logits`` / ``entropy_from_logits`` of the materialised logits up to float32 summation order
(``tests/utils/test_fused_linear_logprob_on_cpu.py``).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from verl.utils.model_utils import is_dtensor

__all__ = ["linear_logprobs_and_entropy", "fused_head_problem", "check_fused_head", "FUSED_CHUNK_SIZE"]


# rows per chunk: each chunk holds two float32 [rows, V] buffers (see _LinearLogProbEntropy):
# 256 x 49,152 x 4 B = 48 MiB each for SmolLM2's vocabulary
FUSED_CHUNK_SIZE = 256


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    """float32 ``[c, V]`` logits of a ``[c, H]`` chunk (a fresh tensor the caller may overwrite). The matmul runs in
    the weights' dtype (this runs outside autocast: with float32 master weights on a GPU it is a float32 GEMM where
    the logits path under bf16 autocast would run a bf16 one)."""
    z = hidden.to(weight.dtype) @ weight.t()
    return z.float().mul_(inv_temperature) if z.dtype != torch.float32 else z.mul_(inv_temperature)


class _LinearLogProbEntropy(torch.autograd.Function):
    """Per chunk, at most two ``[c, V]`` float32 buffers are alive (plus ``logsumexp``'s own scratch in the forward):
    the logits, overwritten in place by the log-probs, and the probabilities, overwritten by the gradient."""

    @staticmethod
    def forward(ctx, hidden, weight, labels, inv_temperature: float, chunk_size: int, with_entropy: bool):
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None: its term is skipped
        n = hidden.shape[0]
        log_probs = torch.empty(n, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        for s in range(0, n, chunk_size):
            e = s + chunk_size
            z = _chunk_logits(hidden[s:e], weight, inv_temperature)
            lse[s:e] = torch.logsumexp(z, dim=-1)
            log_probs[s:e] = z.gather(-1, labels[s:e].unsqueeze(-1)).squeeze(-1) - lse[s:e]
            if with_entropy:
                logp = z.sub_(lse[s:e].unsqueeze(-1))  # z's buffer now holds log p
                entropy[s:e] = -torch.exp(logp).mul_(logp).sum(-1)
        ctx.save_for_backward(hidden, weight, labels, lse, entropy)
        ctx.inv_temperature, ctx.chunk_size = inv_temperature, chunk_size
        return log_probs, entropy

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy):
        hidden, weight, labels, lse, entropy = ctx.saved_tensors
        inv_t, chunk_size = ctx.inv_temperature, ctx.chunk_size
        need_hidden, need_weight = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_weight else None
        for s in range(0, hidden.shape[0], chunk_size):
            e = s + chunk_size
            g_lp = grad_log_probs[s:e].unsqueeze(-1) if grad_log_probs is not None else None  # [c, 1]
            logp = _chunk_logits(hidden[s:e], weight, inv_t).sub_(lse[s:e].unsqueeze(-1))  # [c, V] log p
            p = torch.exp(logp)
            # dL/dz = g_lp onehot(y) - p (g_lp + g_H (log p + H)); the bracket is built in log p's buffer
            if grad_entropy is not None:
                coeff = logp.add_(entropy[s:e].unsqueeze(-1)).mul_(grad_entropy[s:e].unsqueeze(-1))
                if g_lp is not None:
                    coeff.add_(g_lp)
            else:
                coeff = g_lp
            dz = p.mul_(coeff).neg_()  # p's buffer now holds dL/dz
            del logp, coeff
            if g_lp is not None:
                dz.scatter_add_(-1, labels[s:e].unsqueeze(-1), g_lp)
            dz.mul_(inv_t)
            if need_hidden:
                grad_hidden[s:e] = (dz.to(weight.dtype) @ weight).to(hidden.dtype)
            if need_weight:
                grad_weight.addmm_(dz.t(), hidden[s:e].float())
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, None, None, None, None


def linear_logprobs_and_entropy(hidden: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor,
                                temperature: float = 1.0, calculate_entropy: bool = True,
                                chunk_size: int = FUSED_CHUNK_SIZE
                                ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """``log softmax(h W^T / T)[y]`` and the entropy of that distribution, without materialising the logits.

    Args:
        hidden: ``[N, H]`` final hidden states (after the model's last norm: what its LM head sees), any float dtype.
        weight: ``[V, H]`` the LM head's weight (no bias, no logit soft-capping or scaling; tied weights are fine:
            the gradient goes to the shared parameter).
        labels: ``[N]`` int64 token ids in ``[0, V)``.
        temperature: logits are divided by it (> 0).
        calculate_entropy: also return the entropy (its gradient is computed only when it is used).
        chunk_size: rows per chunk (``FUSED_CHUNK_SIZE``; a few float32 ``chunk_size x V`` temporaries at a time).

    Returns:
        ``(log_probs [N] float32, entropy [N] float32 or None)``, differentiable w.r.t. ``hidden`` and ``weight``.

    Raises:
        ValueError: mismatched shapes, ``temperature <= 0`` or ``chunk_size < 1``.
    """
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"hidden [N, H] and weight [V, H] expected, got {tuple(hidden.shape)} and "
                         f"{tuple(weight.shape)}")
    if labels.shape != hidden.shape[:1]:
        raise ValueError(f"labels must be [N] = [{hidden.shape[0]}], got {tuple(labels.shape)}")
    if temperature <= 0 or chunk_size < 1:
        raise ValueError(f"temperature must be > 0 and chunk_size >= 1, got {temperature} and {chunk_size}")
    log_probs, entropy = _LinearLogProbEntropy.apply(hidden, weight, labels.long(), 1.0 / float(temperature),
                                                     int(chunk_size), bool(calculate_entropy))
    return log_probs, (entropy if calculate_entropy else None)


def fused_head_problem(model: torch.nn.Module) -> Optional[str]:
    """Why :func:`linear_logprobs_and_entropy` cannot stand in for ``model``'s LM head, or None when it can.

    It can when ``model.get_output_embeddings()`` is a bias-free ``nn.Linear`` with a plain (unsharded) weight and the
    config has no logit soft-capping or scaling (``final_logit_softcapping``, ``logit_scale``, ``logits_scaling``);
    architectures that transform the hidden states in other ways are caught at the first forward by
    :func:`check_fused_head`. A sharded FSDP2 head
    (a DTensor weight) would need an all-gather per micro-batch: the padded logits path is used there instead.
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, torch.nn.Linear):
        return f"the model has no nn.Linear output embedding ({type(head).__name__})"
    if head.bias is not None:
        return "the LM head has a bias"
    if is_dtensor(head.weight):
        return "the LM head weight is sharded (FSDP2)"
    config = getattr(model, "config", None)
    for key in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, key, None)
        if value not in (None, 1, 1.0):
            return f"the model config sets {key}={value}"
    return None


def check_fused_head(logits: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor,
                     atol: Optional[float] = None) -> None:
    """Check that the model's own logits equal ``hidden @ weight^T`` (a plain linear head of the last hidden state).

    Args: ``logits`` ``[B, V]`` from the model (e.g. ``output.logits[:, -1]`` with ``logits_to_keep=1``), ``hidden``
        ``[B, H]`` the matching last hidden states, ``weight`` ``[V, H]``; ``atol`` relative to the logits' scale
        (default 1e-3 for float32 logits, 3e-2 for bf16/fp16 ones from autocast; a soft-capped or rescaled head is off
        by tens of percent).
    Raises ValueError: they differ (e.g. a model that scales logits under a config key not known to
        :func:`fused_head_problem`): the fused log-probs would be wrong for it.
    """
    if atol is None:
        atol = 1e-3 if logits.dtype in (torch.float32, torch.float64) else 3e-2
    expected = _chunk_logits(hidden, weight, 1.0)
    diff = float((logits.float() - expected).abs().max())
    scale = float(expected.abs().max().clamp(min=1.0))
    if diff > atol * scale:
        raise ValueError(f"actor_rollout_ref.model.use_fused_kernels: the model's logits are not its LM head applied "
                         f"to its last hidden state (max |difference| {diff:.3g}); set "
                         f"actor_rollout_ref.model.use_fused_kernels=false for this model")
