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

The actor runs it *inside* the model's forward (:func:`head_computes_logprobs`: for the length of one forward the LM
head returns log-probs and entropies instead of logits), so under FSDP2 it sees the head's unsharded weight and its
gradient flows back to the shards like any other parameter's (``tests/workers/test_fused_head_fsdp2_on_cpu.py``, two
gloo ranks against the unsharded model).
"""

from __future__ import annotations

import contextlib
from typing import Callable, Optional, Tuple

import torch

__all__ = [
    "FUSED_CHUNK_SIZE",
    "check_forward_logits",
    "check_fused_head",
    "fused_head_problem",
    "head_computes_logprobs",
    "head_records_expected_logits",
    "linear_logprobs_and_entropy",
]


# rows per chunk: each chunk holds two float32 [rows, V] buffers (see _LinearLogProbEntropy):
# 256 x 49,152 x 4 B = 48 MiB each for SmolLM2's vocabulary
FUSED_CHUNK_SIZE = 256


def _chunk_logits(hidden: torch.Tensor, weight: torch.Tensor, inv_temperature: float) -> torch.Tensor:
    """float32 ``[c, V]`` logits of a ``[c, H]`` chunk (a fresh tensor the caller may overwrite). The matmul runs in
    the weights' dtype, outside any autocast: bf16 under the bf16 mixed-precision policy (the head's gathered bf16
    weight, as the logits path), float32 for a float32 model."""
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


def linear_logprobs_and_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    temperature: float = 1.0,
    calculate_entropy: bool = True,
    chunk_size: int = FUSED_CHUNK_SIZE,
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
        raise ValueError(
            f"hidden [N, H] and weight [V, H] expected, got {tuple(hidden.shape)} and {tuple(weight.shape)}"
        )
    if labels.shape != hidden.shape[:1]:
        raise ValueError(f"labels must be [N] = [{hidden.shape[0]}], got {tuple(labels.shape)}")
    if temperature <= 0 or chunk_size < 1:
        raise ValueError(f"temperature must be > 0 and chunk_size >= 1, got {temperature} and {chunk_size}")
    log_probs, entropy = _LinearLogProbEntropy.apply(
        hidden, weight, labels.long(), 1.0 / float(temperature), int(chunk_size), bool(calculate_entropy)
    )
    return log_probs, (entropy if calculate_entropy else None)


def fused_head_problem(model: torch.nn.Module) -> Optional[str]:
    """Why :func:`linear_logprobs_and_entropy` cannot stand in for ``model``'s LM head, or None when it can.

    It can when ``model.get_output_embeddings()`` is a bias-free ``nn.Linear`` and the config has no logit
    soft-capping or scaling (``final_logit_softcapping``, ``logit_scale``, ``logits_scaling``); architectures that
    transform the logits in other ways are caught at the first forward (the actor's ``_check_fused_head``:
    :func:`head_records_expected_logits` then :func:`check_forward_logits`). A sharded FSDP2 head is fine: the
    computation runs inside the forward (:func:`head_computes_logprobs`), where FSDP2 has gathered the weight.
    """
    get_head = getattr(model, "get_output_embeddings", None)
    head = get_head() if callable(get_head) else None
    if not isinstance(head, torch.nn.Linear):
        return f"the model has no nn.Linear output embedding ({type(head).__name__})"
    if head.bias is not None:
        return "the LM head has a bias"
    config = getattr(model, "config", None)
    for key in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, key, None)
        if value not in (None, 1, 1.0):
            return f"the model config sets {key}={value}"
    return None


def check_fused_head(
    logits: torch.Tensor, hidden: torch.Tensor, weight: torch.Tensor, atol: Optional[float] = None
) -> None:
    """Check that the model's own logits equal ``hidden @ weight^T`` (a plain linear head of the last hidden state).

    Args: ``logits`` ``[B, V]`` from the model (e.g. ``output.logits[:, -1]`` with ``logits_to_keep=1``), ``hidden``
        ``[B, H]`` the matching last hidden states, ``weight`` ``[V, H]``; ``atol`` relative to the logits' scale
        (default 1e-3 for float32 logits, 3e-2 for bf16/fp16 ones, e.g. under the bf16 policy; a soft-capped or
        rescaled head is off by tens of percent).
    Raises ValueError: they differ (e.g. a model that scales logits under a config key not known to
        :func:`fused_head_problem`): the fused log-probs would be wrong for it.
    """
    _check_logits(logits, _chunk_logits(hidden, weight, 1.0), atol)


def _check_logits(logits: torch.Tensor, expected: torch.Tensor, atol: Optional[float] = None) -> None:
    """:func:`check_fused_head` given the expected ``[B, V]`` float32 logits."""
    if atol is None:
        atol = 1e-3 if logits.dtype in (torch.float32, torch.float64) else 3e-2
    diff = float((logits.float() - expected).abs().max())
    scale = float(expected.abs().max().clamp(min=1.0))
    if diff > atol * scale:
        raise ValueError(
            f"actor_rollout_ref.model.use_fused_kernels: the model's logits are not its LM head applied "
            f"to its last hidden state (max |difference| {diff:.3g}); set "
            f"actor_rollout_ref.model.use_fused_kernels=false for this model"
        )


@contextlib.contextmanager
def _head_forward(head: torch.nn.Module, forward: Callable[[torch.Tensor], torch.Tensor]):
    """``head.forward`` is ``forward`` while open, as an instance attribute (``nn.Module.__call__`` and FSDP2's hooks on
    the root still run); whatever instance-level ``forward`` was there before (e.g. an accelerate hook) comes back."""
    previous = head.__dict__.get("forward")
    head.forward = forward
    try:
        yield
    finally:
        if previous is None:
            del head.forward
        else:
            head.forward = previous


def _lm_head(model: torch.nn.Module) -> torch.nn.Linear:
    head = model.get_output_embeddings()
    if not isinstance(head, torch.nn.Linear):
        raise ValueError(f"the model has no nn.Linear output embedding ({type(head).__name__})")
    return head


@contextlib.contextmanager
def head_computes_logprobs(
    model: torch.nn.Module,
    select: Callable[[torch.Tensor], torch.Tensor],
    labels: torch.Tensor,
    temperature: float,
    calculate_entropy: bool,
):
    """Context: while it is open, ``model``'s LM head returns ``[N, 2]`` float32 (log-prob of ``labels``, entropy)
    instead of logits, computed by :func:`linear_logprobs_and_entropy` from ``select(hidden)``.

    The head is called inside the model's own forward, so under FSDP2 its weight is the gathered one there and the
    gradient reaches the shards through FSDP2's hooks; ``[tokens, vocab]`` logits never exist. Autocast is off for
    the head (its GEMM runs in the weight's dtype, as when the function is called on its own).

    Args:
        model: a causal LM whose ``get_output_embeddings()`` is a bias-free ``nn.Linear`` (:func:`fused_head_problem`).
        select: maps the hidden states the model hands its head (``[b, K, H]``: the ``logits_to_keep`` positions) to
            the ``[N, H]`` rows whose next token is scored (rows may repeat: a shared prompt's last token predicts the
            first token of every response in its group).
        labels: ``[N]`` int64, the token each selected row predicts.
        temperature: logits are divided by it. calculate_entropy: column 1 holds the entropy (else zeros).

    Raises:
        ValueError: the model has no linear output embedding.
    """
    head = _lm_head(model)

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.autocast(hidden.device.type, enabled=False):
            log_probs, entropy = linear_logprobs_and_entropy(
                select(hidden), head.weight, labels, temperature, calculate_entropy
            )
        return torch.stack([log_probs, entropy if entropy is not None else torch.zeros_like(log_probs)], dim=-1)

    with _head_forward(head, forward):
        yield


@contextlib.contextmanager
def head_records_expected_logits(model: torch.nn.Module, record: dict):
    """Context for one ordinary forward (e.g. ``logits_to_keep=1``): the head returns its usual logits and stores in
    ``record["expected"]`` the float32 ``hidden[:, -1] @ W^T`` computed with the weight the forward sees (the gathered
    one under FSDP2). :func:`check_forward_logits` then compares the model's final logits with it."""
    head = _lm_head(model)
    original = head.forward

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        with torch.no_grad(), torch.autocast(hidden.device.type, enabled=False):
            record["expected"] = _chunk_logits(hidden[:, -1], head.weight, 1.0)
        return original(hidden)

    with _head_forward(head, forward):
        yield


def check_forward_logits(logits: torch.Tensor, record: dict, atol: Optional[float] = None) -> None:
    """:func:`check_fused_head` for a forward run under :func:`head_records_expected_logits`: ``logits`` ``[B, V]`` the
    model's final logits at the last position. Raises ValueError as :func:`check_fused_head`."""
    _check_logits(logits, record["expected"], atol)
