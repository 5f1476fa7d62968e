"""Tensor helpers shared by the trainer, the workers and ``core_algos`` (verl's ``verl.utils.torch_functional``).

Conventions used by every function here:

- ``mask`` tensors are 0/1 (int, float or bool) and broadcast against ``values``; positions with mask 0 never
  influence a result, even when they hold NaN or inf.
- Sequence tensors are ``[B, L]`` (batch, tokens); logits are ``[..., V]`` (vocabulary last).
- Log-probabilities and entropies are computed in float32 (float64 when the logits are float64), in chunks over the
  flattened token dimension, so a large vocabulary never materialises a full-precision ``[N, V]`` log-softmax; the
  backward pass is chunked the same way (custom autograd functions), so its only ``[N, V]`` allocation is the
  gradient itself.
"""

from __future__ import annotations

import math
from typing import List, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

DEFAULT_LOGIT_CHUNK_SIZE = 1024  # tokens per chunk: 1024 x 49,152 x 4 B = 192 MiB of float32 scratch


# --------------------------------------------------------------------------------------------------------------------
# masked reductions
# --------------------------------------------------------------------------------------------------------------------
def masked_sum(values: torch.Tensor, mask: torch.Tensor, axis: Optional[int] = None) -> torch.Tensor:
    """Sum of ``values`` where ``mask`` is non-zero (weighted by ``mask``).

    Args:
        values: float tensor, any shape.
        mask: tensor broadcastable to ``values`` (0/1, int/float/bool).
        axis: dimension to reduce; ``None`` reduces everything to a scalar.

    Returns:
        ``sum(values * mask)`` over ``axis``; NaN/inf at masked-out positions are replaced by 0 first, so they do
        not poison the sum. Same dtype as ``values``.
    """
    mask_f = mask.to(values.dtype) if values.is_floating_point() else mask
    valid = torch.where(mask.bool(), values, torch.zeros_like(values))
    return (valid * mask_f).sum(dim=axis) if axis is not None else (valid * mask_f).sum()


def masked_mean(values: torch.Tensor, mask: torch.Tensor, axis: Optional[int] = None) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is non-zero.

    Args:
        values: float tensor, any shape.
        mask: tensor broadcastable to ``values``.
        axis: dimension to reduce; ``None`` reduces everything.

    Returns:
        ``masked_sum / sum(mask)``. NaN outside the mask is ignored. Where the mask is empty the result is 0
        (the denominator is clamped to 1e-8, as upstream verl's ``+ 1e-8`` guard), never NaN.
    """
    mask_f = torch.broadcast_to(mask, values.shape).to(values.dtype)
    denom = mask_f.sum(dim=axis) if axis is not None else mask_f.sum()
    return masked_sum(values, mask, axis) / denom.clamp(min=1e-8)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of ``values`` over the masked positions (all dimensions reduced).

    Args:
        values: float tensor, any shape.
        mask: tensor broadcastable to ``values``.
        unbiased: apply Bessel's correction ``n / (n - 1)`` with ``n = sum(mask)``.

    Returns:
        Scalar tensor.

    Raises:
        ValueError: if ``unbiased`` and the mask selects no element or exactly one element (the corrected variance
        is undefined), as upstream verl.
    """
    mean = masked_mean(values, mask)
    var = masked_mean((values - mean) ** 2, mask)
    if unbiased:
        n = torch.broadcast_to(mask, values.shape).to(values.dtype).sum()
        if n == 0:
            raise ValueError("masked_var: the mask selects no element")
        if n == 1:
            raise ValueError("masked_var: the mask selects one element; the unbiased variance is undefined")
        var = var * n / (n - 1)
    return var


def masked_whiten(values: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalise ``values`` to zero mean and unit (unbiased) variance over the masked positions.

    ``whitened = (values - mean) / sqrt(var + 1e-8)``; with ``shift_mean=False`` the mean is added back (only the
    scale changes). Statistics use the masked positions only; the formula is applied to every position (callers mask
    the result). Shape and dtype of ``values``.

    Raises:
        ValueError: from :func:`masked_var` when the mask selects fewer than two elements.
    """
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=True)
    whitened = (values - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened


def clip_by_value(x: torch.Tensor, tensor_min: torch.Tensor, tensor_max: torch.Tensor) -> torch.Tensor:
    """Element-wise clip of ``x`` into ``[tensor_min, tensor_max]`` (bounds are tensors broadcastable to ``x``)."""
    return torch.max(torch.min(x, tensor_max), tensor_min)


# --------------------------------------------------------------------------------------------------------------------
# masks and positions
# --------------------------------------------------------------------------------------------------------------------
def get_response_mask(
    response_id: torch.Tensor, eos_token: Union[int, Sequence[int]] = 2, dtype: torch.dtype = torch.int64
) -> torch.Tensor:
    """Mask of the generated tokens up to and including the first EOS.

    Args:
        response_id: LongTensor ``[B, L]`` of generated token ids.
        eos_token: one id or a list of ids that end a response.
        dtype: dtype of the returned mask.

    Returns:
        ``[B, L]`` tensor: 1 for positions ``<=`` the first EOS of the row (all positions when the row has none),
        0 after it.
    """
    eos_ids = [eos_token] if isinstance(eos_token, int) else list(eos_token)
    is_eos = torch.isin(response_id, torch.tensor(eos_ids, device=response_id.device, dtype=response_id.dtype))
    # number of EOS strictly before position t: 0 means "not yet ended"
    eos_before = torch.cumsum(is_eos.long(), dim=-1) - is_eos.long()
    return (eos_before == 0).to(dtype)


get_eos_mask = get_response_mask  # ToolRL-era name


def compute_position_id_with_mask(mask: torch.Tensor) -> torch.Tensor:
    """Position ids for a (left- or right-) padded batch: ``clip(cumsum(mask, -1) - 1, min=0)``.

    Args:
        mask: attention mask ``[B, L]`` (0/1).

    Returns:
        LongTensor ``[B, L]``: 0 on left padding, then 0, 1, 2, ... on real tokens (right padding repeats the last
        position).
    """
    return torch.clip(torch.cumsum(mask.long(), dim=-1) - 1, min=0)


def pad_sequence_to_length(
    tensors: torch.Tensor, max_seq_len: int, pad_token_id: float, left_pad: bool = False
) -> torch.Tensor:
    """Pad the last dimension of ``tensors`` ``[B, L]`` to ``max_seq_len`` with ``pad_token_id``.

    Returns the input unchanged when ``L >= max_seq_len``; pads on the left with ``left_pad=True``.
    """
    length = tensors.shape[-1]
    if length >= max_seq_len:
        return tensors
    pad = (max_seq_len - length, 0) if left_pad else (0, max_seq_len - length)
    return F.pad(tensors, pad, "constant", pad_token_id)


def postprocess_data(
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_length: int,
    pad_token_id: int,
    left_pad: bool = True,
    truncation: str = "error",
):
    """Pad or truncate ``[1, L]`` ``input_ids``/``attention_mask`` to exactly ``max_length``.

    ``truncation``: ``left`` keeps the last tokens, ``right`` the first, ``middle`` both ends, ``error`` raises.

    Raises:
        NotImplementedError: ``truncation='error'`` and the sequence is longer than ``max_length``.
        ValueError: unknown ``truncation``.
    """
    length = input_ids.shape[-1]
    if length < max_length:
        input_ids = pad_sequence_to_length(input_ids, max_length, pad_token_id, left_pad)
        attention_mask = pad_sequence_to_length(attention_mask, max_length, 0, left_pad)
    elif length > max_length:
        if truncation == "left":
            input_ids, attention_mask = input_ids[:, -max_length:], attention_mask[:, -max_length:]
        elif truncation == "right":
            input_ids, attention_mask = input_ids[:, :max_length], attention_mask[:, :max_length]
        elif truncation == "middle":
            head = max_length // 2
            tail = max_length - head
            input_ids = torch.cat([input_ids[:, :head], input_ids[:, length - tail :]], dim=-1)
            attention_mask = torch.cat([attention_mask[:, :head], attention_mask[:, length - tail :]], dim=-1)
        elif truncation == "error":
            raise NotImplementedError(f"sequence length {length} exceeds max_length {max_length}")
        else:
            raise ValueError(f"unknown truncation {truncation!r} (left, right, middle, error)")
    return input_ids, attention_mask


def tokenize_and_postprocess_data(
    prompt: str, tokenizer, max_length: int, pad_token_id: int, left_pad: bool = True, truncation: str = "error"
):
    """Tokenise one string and pad/truncate it with :func:`postprocess_data`; returns ``(input_ids, attention_mask)``
    each ``[1, max_length]``."""
    enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
    return postprocess_data(enc["input_ids"], enc["attention_mask"], max_length, pad_token_id, left_pad, truncation)


# --------------------------------------------------------------------------------------------------------------------
# log-probs and entropy, chunked over tokens
# --------------------------------------------------------------------------------------------------------------------
def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_logit_args(chunk_size: int, temperature: float, logits=None, labels=None) -> None:
    """The shared argument checks of the chunked log-prob / entropy functions (ValueError naming the argument)."""
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if labels is not None and logits.shape[:-1] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} leading shapes differ")


def _scaled_chunk(logits: torch.Tensor, start: int, end: int, cdtype: torch.dtype, temperature: float):
    """Rows ``[start, end)`` of ``logits`` in ``cdtype``, divided by ``temperature`` unless it is 1: the same values,
    bit for bit, as the same rows of ``logits.to(cdtype) / temperature``, without that full-size tensor."""
    chunk = logits[start:end].to(cdtype)
    return chunk if temperature == 1.0 else chunk / temperature


def _logprob_chunk(z: torch.Tensor, lse: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """``z[label] - lse`` per row of a chunk (``z`` the scaled logits, ``lse`` their logsumexp)."""
    return z.gather(-1, labels.unsqueeze(-1)).squeeze(-1) - lse


def _entropy_chunk(z: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """``-sum_j p_j log p_j`` per row of a chunk."""
    logp = z - lse.unsqueeze(-1)
    return -(torch.exp(logp) * logp).sum(-1)  # non-negative terms: no cancellation


def _logprob_chunk_grad(z: torch.Tensor, lse: torch.Tensor, labels: torch.Tensor, grad_out: torch.Tensor):
    """d/dz_j [z_label - lse] = 1[j == label] - softmax_j, times the incoming gradient (float32 ``[rows, V]``)."""
    g = -torch.exp(z - lse.unsqueeze(-1))
    g.scatter_add_(-1, labels.unsqueeze(-1), torch.ones_like(lse).unsqueeze(-1))
    return g * grad_out.unsqueeze(-1)


def _entropy_chunk_grad(z: torch.Tensor, lse: torch.Tensor, entropy: torch.Tensor, grad_out: torch.Tensor):
    """dH/dz_j = -p_j (z_j - E_p[z]) = -p_j (log p_j + H) (since E_p[z] = lse - H), times the incoming gradient."""
    logp = z - lse.unsqueeze(-1)
    return -torch.exp(logp) * (logp + entropy.unsqueeze(-1)) * grad_out.unsqueeze(-1)


def _store_grad(grad: torch.Tensor, start: int, end: int, g: torch.Tensor, temperature: float) -> None:
    """Rows ``[start, end)`` of the input's gradient: ``g`` (d/dz) times dz/dx = 1 / temperature, in x's dtype."""
    grad[start:end] = (g if temperature == 1.0 else g / temperature).to(grad.dtype)


class _ChunkedLogProb(torch.autograd.Function):
    """log p(label) = z[label] - logsumexp(z), z = x / temperature, forward and backward in row chunks of a flat
    ``[N, V]`` input ``x`` of any float dtype (z in float32, or float64 for float64 input). Only ``x`` is kept for the
    backward: no float32 copy of the ``[N, V]`` logits is ever whole."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int, temperature: float):
        cdtype = _compute_dtype(logits.dtype)
        n = logits.shape[0]
        out = torch.empty(n, dtype=cdtype, device=logits.device)
        lse = torch.empty(n, dtype=cdtype, device=logits.device)
        for s in range(0, n, chunk_size):
            e = s + chunk_size
            chunk = _scaled_chunk(logits, s, e, cdtype, temperature)
            lse[s:e] = torch.logsumexp(chunk, dim=-1)
            out[s:e] = _logprob_chunk(chunk, lse[s:e], labels[s:e])
        ctx.save_for_backward(logits, labels, lse)
        ctx.chunk_size, ctx.temperature = chunk_size, temperature
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, labels, lse = ctx.saved_tensors
        chunk_size, temperature = ctx.chunk_size, ctx.temperature
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], chunk_size):
            e = s + chunk_size
            z = _scaled_chunk(logits, s, e, lse.dtype, temperature)
            _store_grad(grad, s, e, _logprob_chunk_grad(z, lse[s:e], labels[s:e], grad_out[s:e]), temperature)
        return grad, None, None, None


class _ChunkedEntropy(torch.autograd.Function):
    """H = -sum_j p_j log p_j with log p = z - logsumexp(z), z = x / temperature, forward and backward in row chunks
    of a flat ``[N, V]`` input ``x`` (as :class:`_ChunkedLogProb`)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, chunk_size: int, temperature: float):
        cdtype = _compute_dtype(logits.dtype)
        n = logits.shape[0]
        out = torch.empty(n, dtype=cdtype, device=logits.device)
        lse = torch.empty(n, dtype=cdtype, device=logits.device)
        for s in range(0, n, chunk_size):
            e = s + chunk_size
            chunk = _scaled_chunk(logits, s, e, cdtype, temperature)
            lse[s:e] = torch.logsumexp(chunk, dim=-1)
            out[s:e] = _entropy_chunk(chunk, lse[s:e])
        ctx.save_for_backward(logits, lse, out)
        ctx.chunk_size, ctx.temperature = chunk_size, temperature
        return out

    @staticmethod
    def backward(ctx, grad_out: torch.Tensor):
        logits, lse, entropy = ctx.saved_tensors
        chunk_size, temperature = ctx.chunk_size, ctx.temperature
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], chunk_size):
            e = s + chunk_size
            z = _scaled_chunk(logits, s, e, lse.dtype, temperature)
            _store_grad(grad, s, e, _entropy_chunk_grad(z, lse[s:e], entropy[s:e], grad_out[s:e]), temperature)
        return grad, None, None


class _ChunkedLogProbEntropy(torch.autograd.Function):
    """Both of :class:`_ChunkedLogProb` and :class:`_ChunkedEntropy` from one pass over the chunks. Their gradients
    are summed in float32 before the division by the temperature and the cast to ``x``'s dtype, as autograd sums
    them when both take the same float32 tensor (``x.float() / temperature``): the same bits, where two separate
    calls on bf16 ``x`` would each round their gradient to bf16 before adding. (An output whose gradient is not
    used gets zeros from autograd, so both terms are always there.)"""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, labels: torch.Tensor, chunk_size: int, temperature: float):
        cdtype = _compute_dtype(logits.dtype)
        n = logits.shape[0]
        logprob, entropy, lse = (torch.empty(n, dtype=cdtype, device=logits.device) for _ in range(3))
        for s in range(0, n, chunk_size):
            e = s + chunk_size
            chunk = _scaled_chunk(logits, s, e, cdtype, temperature)
            lse[s:e] = torch.logsumexp(chunk, dim=-1)
            logprob[s:e] = _logprob_chunk(chunk, lse[s:e], labels[s:e])
            entropy[s:e] = _entropy_chunk(chunk, lse[s:e])
        ctx.save_for_backward(logits, labels, lse, entropy)
        ctx.chunk_size, ctx.temperature = chunk_size, temperature
        return logprob, entropy

    @staticmethod
    def backward(ctx, grad_logprob: torch.Tensor, grad_entropy: torch.Tensor):
        logits, labels, lse, entropy = ctx.saved_tensors
        chunk_size, temperature = ctx.chunk_size, ctx.temperature
        grad = torch.empty_like(logits)
        for s in range(0, logits.shape[0], chunk_size):
            e = s + chunk_size
            z = _scaled_chunk(logits, s, e, lse.dtype, temperature)
            g = _logprob_chunk_grad(z, lse[s:e], labels[s:e], grad_logprob[s:e]) + _entropy_chunk_grad(
                z, lse[s:e], entropy[s:e], grad_entropy[s:e]
            )
            _store_grad(grad, s, e, g, temperature)
        return grad, None, None, None


def logprobs_from_logits(
    logits: torch.Tensor,
    labels: torch.Tensor,
    inplace_backward: bool = True,
    *,
    chunk_size: int = DEFAULT_LOGIT_CHUNK_SIZE,
    temperature: float = 1.0,
) -> torch.Tensor:
    """Log-probability of ``labels`` under ``softmax(logits / temperature)``, memory-bounded.

    Args:
        logits: float tensor ``[..., V]`` (any float dtype; computed in float32, or float64 for float64 input, a chunk
            of rows at a time: bf16 logits are never copied whole to float32).
        labels: LongTensor ``[...]`` of token ids, same leading shape as ``logits``.
        inplace_backward: upstream's third argument (its flash-attn cross-entropy option), in upstream's place so
            that upstream calls, positional or keyword, keep working. Either value gives the same result here: the
            chunked backward below writes each chunk's gradient once and never needs an in-place variant.
        chunk_size: keyword only; tokens (rows of the flattened ``[N, V]`` logits) processed at once. Any other
            keyword is a ``TypeError``.
        temperature: keyword only; the sampling temperature the logits are divided by (verl divides the logits by
            it before the log-softmax). The result equals, bit for bit, that of ``logits.float() / temperature``
            passed with ``temperature=1`` (the division is elementwise, per chunk), gradient included.

    Returns:
        float32 (float64) tensor of shape ``labels.shape``. Differentiable w.r.t. ``logits``; the backward is chunked
        too (gradient ``(onehot(label) - softmax) / temperature``, in ``logits``' dtype).

    Raises:
        ValueError: ``chunk_size < 1``, ``temperature <= 0`` or mismatched leading shapes.
    """
    _check_logit_args(chunk_size, temperature, logits, labels)
    lead = labels.shape
    flat = _ChunkedLogProb.apply(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), chunk_size, float(temperature)
    )
    return flat.reshape(lead)


def logprobs_from_logits_naive(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Reference implementation: ``log_softmax(logits.float())`` gathered at ``labels`` (materialises ``[N, V]``)."""
    logp = F.log_softmax(logits.to(_compute_dtype(logits.dtype)), dim=-1)
    return logp.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)


def logprobs_and_entropy_from_logits(
    logits: torch.Tensor, labels: torch.Tensor, *, chunk_size: int = DEFAULT_LOGIT_CHUNK_SIZE, temperature: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(logprobs_from_logits(...), entropy_from_logits(...))`` of the same logits in one chunked pass, with the
    gradient both send to ``logits`` summed in float32 (the same bits as the two functions applied to
    ``logits.float() / temperature``; two separate calls on bf16 logits would round each gradient to bf16 first).

    Args:
        logits: float tensor ``[..., V]``; labels: LongTensor ``[...]``; chunk_size, temperature: as in
            :func:`logprobs_from_logits`.

    Returns:
        ``(log_probs, entropy)``, each float32 (float64) of shape ``labels.shape``; differentiable.

    Raises:
        ValueError: ``chunk_size < 1``, ``temperature <= 0`` or mismatched leading shapes.
    """
    _check_logit_args(chunk_size, temperature, logits, labels)
    logprob, entropy = _ChunkedLogProbEntropy.apply(
        logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long(), chunk_size, float(temperature)
    )
    return logprob.reshape(labels.shape), entropy.reshape(labels.shape)


def entropy_from_logits(
    logits: torch.Tensor, chunk_size: int = DEFAULT_LOGIT_CHUNK_SIZE, *, temperature: float = 1.0
) -> torch.Tensor:
    """Entropy ``H = -sum_v p_v log p_v`` of ``softmax(logits / temperature)`` per position, memory-bounded.

    Computed from ``log p = z - logsumexp(z)``, ``z = logits / temperature``, in chunks of ``chunk_size`` tokens
    (float32 scratch per chunk; equal bit for bit to passing ``logits.float() / temperature``).

    Args:
        logits: float tensor ``[..., V]``.
        chunk_size: tokens processed at once.
        temperature: keyword only; as in :func:`logprobs_from_logits`.

    Returns:
        float32 (float64) tensor ``[...]``; differentiable (``dH/dz_j = -p_j (z_j - E_p[z])``, chunked).

    Raises:
        ValueError: ``chunk_size < 1`` or ``temperature <= 0``.
    """
    _check_logit_args(chunk_size, temperature)
    lead = logits.shape[:-1]
    return _ChunkedEntropy.apply(logits.reshape(-1, logits.shape[-1]), chunk_size, float(temperature)).reshape(lead)


def entropy_from_logits_naive(logits: torch.Tensor) -> torch.Tensor:
    """Reference implementation of :func:`entropy_from_logits` (materialises the full softmax)."""
    x = logits.to(_compute_dtype(logits.dtype))
    return -(torch.softmax(x, -1) * torch.log_softmax(x, -1)).sum(-1)


def log_probs_from_logits_response(input_ids: torch.Tensor, logits: torch.Tensor, response_length: int):
    """Log-probs of the response tokens of full sequences.

    Args:
        input_ids: ``[B, P + R]`` prompt + response ids.
        logits: ``[B, P + R, V]`` next-token logits for every position.
        response_length: ``R``.

    Returns:
        ``[B, R]`` float32: ``log p(input_ids[:, t] | logits[:, t - 1])`` for the last ``R`` positions.
    """
    response_logits = logits[:, -response_length - 1 : -1]
    return logprobs_from_logits(response_logits, input_ids[:, -response_length:])


# --------------------------------------------------------------------------------------------------------------------
# learning-rate schedules (upstream names)
# --------------------------------------------------------------------------------------------------------------------
def get_constant_schedule_with_warmup(optimizer, num_warmup_steps: int, last_epoch: int = -1) -> LambdaLR:
    """Linear warm-up from 0 to the base lr over ``num_warmup_steps`` optimizer steps, then constant."""

    def lr_lambda(step: int) -> float:
        if step < num_warmup_steps:
            return float(step) / float(max(1, num_warmup_steps))
        return 1.0

    return LambdaLR(optimizer, lr_lambda, last_epoch)


def get_cosine_schedule_with_warmup(
    optimizer,
    num_warmup_steps: int,
    num_training_steps: int,
    min_lr_ratio: float = 0.0,
    num_cycles: float = 0.5,
    last_epoch: int = -1,
) -> LambdaLR:
    """Warm-up then cosine decay to ``min_lr_ratio`` x base lr (Loshchilov & Hutter 2017, SGDR eq. 5).

    Warm-up rises linearly from ``min_lr_ratio`` to 1; afterwards the multiplier is
    ``min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + cos(2 pi num_cycles progress))``.

    Raises:
        ValueError: ``min_lr_ratio`` outside ``[0, 1]``.
    """
    if not 0.0 <= min_lr_ratio <= 1.0:
        raise ValueError(f"min_lr_ratio must be in [0, 1], got {min_lr_ratio}")

    def lr_lambda(step: int) -> float:
        if step < num_warmup_steps:
            return min_lr_ratio + (1.0 - min_lr_ratio) * float(step) / float(max(1, num_warmup_steps))
        progress = float(step - num_warmup_steps) / float(max(1, num_training_steps - num_warmup_steps))
        cosine = 0.5 * (1.0 + math.cos(math.pi * 2.0 * num_cycles * progress))
        return min_lr_ratio + (1.0 - min_lr_ratio) * max(0.0, cosine)

    return LambdaLR(optimizer, lr_lambda, last_epoch)


__all__: List[str] = [
    "clip_by_value",
    "compute_position_id_with_mask",
    "entropy_from_logits",
    "entropy_from_logits_naive",
    "get_constant_schedule_with_warmup",
    "get_cosine_schedule_with_warmup",
    "get_eos_mask",
    "get_response_mask",
    "log_probs_from_logits_response",
    "logprobs_and_entropy_from_logits",
    "logprobs_from_logits",
    "logprobs_from_logits_naive",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "pad_sequence_to_length",
    "postprocess_data",
    "tokenize_and_postprocess_data",
    "zero_variance_group_fraction",
]


def trim_left_padding(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop the leading columns that are padding in every row of a left-padded ``[B, P]`` batch.

    ``attention_mask`` decides; every tensor in ``tensors`` is cut to the longest row (``[B, max valid length]``).
    Position ids are unchanged (they count valid tokens only). The dataset pads every prompt to
    ``data.max_prompt_length``; cutting to the batch's longest prompt before the rollout keeps that padding out of
    generation and of every later log-prob / update pass (their cost grows with the padded width).
    """
    width = max(int(tensors["attention_mask"].sum(-1).max()), 1)
    return {key: value[:, -width:] for key, value in tensors.items()}


def zero_variance_group_fraction(scores: torch.Tensor, uids: Sequence) -> float:
    """Fraction of groups (rows sharing a uid) of size > 1 whose ``scores`` ([B], any float dtype) are all equal
    (within 1e-8): a group-normalised estimator (GRPO, RLOO) gets no signal there, whatever a constant added to them."""
    groups: dict = {}
    for score, uid in zip(scores.tolist(), uids):
        groups.setdefault(uid, []).append(score)
    sized = [g for g in groups.values() if len(g) > 1]
    if not sized:
        return 0.0
    return sum(max(g) - min(g) < 1e-8 for g in sized) / len(sized)
