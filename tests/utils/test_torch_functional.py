"""Tests for verl.utils.torch_functional: masked reductions, masks/positions, chunked log-probs/entropy, schedules."""

import math

import pytest
import torch

import verl.utils.torch_functional as verl_F


# ---------------------------------------------------------------------------------------------------------------------
# masked reductions
# ---------------------------------------------------------------------------------------------------------------------
def test_masked_mean():
    values = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, float("nan")]])
    mask = torch.tensor([[1, 0, 0], [1, 1, 0]])
    # all: (1 + 4 + 5) / 3; the NaN sits outside the mask and must not leak
    assert verl_F.masked_mean(values, mask).item() == pytest.approx(10 / 3)
    # per row: [1 / 1, (4 + 5) / 2]
    torch.testing.assert_close(verl_F.masked_mean(values, mask, axis=-1), torch.tensor([1.0, 4.5]))
    assert verl_F.masked_sum(values, mask).item() == pytest.approx(10.0)
    # inf outside the mask is ignored too; an empty mask gives 0, not NaN
    inf_values = torch.tensor([1.0, float("inf")])
    assert verl_F.masked_mean(inf_values, torch.tensor([1, 0])).item() == 1.0
    assert verl_F.masked_mean(values, torch.zeros_like(mask)).item() == 0.0
    # bool and float masks behave like 0/1 int masks
    assert verl_F.masked_mean(values, mask.bool()).item() == pytest.approx(10 / 3)
    assert verl_F.masked_mean(values, mask.float()).item() == pytest.approx(10 / 3)


def test_masked_var():
    values = torch.tensor([1.0, 2.0, 3.0, 100.0])
    mask = torch.tensor([1, 1, 1, 0])
    # mean 2, squared deviations [1, 0, 1]: biased 2/3, unbiased 2/2 = 1
    assert verl_F.masked_var(values, mask, unbiased=False).item() == pytest.approx(2 / 3)
    assert verl_F.masked_var(values, mask).item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        verl_F.masked_var(values, torch.tensor([1, 0, 0, 0]))
    with pytest.raises(ValueError):
        verl_F.masked_var(values, torch.zeros(4))


def test_masked_whiten():
    values = torch.tensor([[1.0, 2.0, 3.0, float("nan")]])
    mask = torch.tensor([[1, 1, 1, 0]])
    # mean 2, unbiased var 1 -> (v - 2) / sqrt(1 + 1e-8)
    out = verl_F.masked_whiten(values, mask)
    torch.testing.assert_close(out[:, :3], torch.tensor([[-1.0, 0.0, 1.0]]))
    # shift_mean=False only rescales: the mean is added back
    out = verl_F.masked_whiten(values, mask, shift_mean=False)
    torch.testing.assert_close(out[:, :3], torch.tensor([[1.0, 2.0, 3.0]]))
    # invariant on random data: whitened masked entries have mean 0 and unbiased variance 1
    torch.manual_seed(0)
    values = torch.randn(4, 7) * 3 + 5
    mask = (torch.rand(4, 7) > 0.3).long()
    w = verl_F.masked_whiten(values, mask)
    assert verl_F.masked_mean(w, mask).item() == pytest.approx(0.0, abs=1e-5)
    assert verl_F.masked_var(w, mask).item() == pytest.approx(1.0, abs=1e-5)


def test_clip_by_value():
    x = torch.tensor([-2.0, 0.5, 3.0])
    out = verl_F.clip_by_value(x, torch.tensor([-1.0, 0.0, 0.0]), torch.tensor([1.0, 1.0, 2.5]))
    torch.testing.assert_close(out, torch.tensor([-1.0, 0.5, 2.5]))


# ---------------------------------------------------------------------------------------------------------------------
# masks, positions, padding
# ---------------------------------------------------------------------------------------------------------------------
def test_get_response_mask():
    ids = torch.tensor([[5, 2, 7, 2], [1, 1, 1, 1], [2, 4, 9, 0], [3, 9, 2, 0]])
    # eos 2: ones up to and including the first 2; a row without EOS is all ones
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 0]])
    out = verl_F.get_response_mask(ids, eos_token=2)
    assert out.dtype == torch.int64
    assert torch.equal(out, expected)
    # several EOS ids: the first of either ends the response
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    out = verl_F.get_response_mask(ids, eos_token=[2, 9], dtype=torch.float32)
    assert out.dtype == torch.float32
    assert torch.equal(out, expected.float())


def test_compute_position_id_with_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 2, 2], [0, 1, 2, 3, 4]])
    assert torch.equal(verl_F.compute_position_id_with_mask(mask), expected)


def test_pad_and_postprocess():
    t = torch.tensor([[1, 2, 3]])
    assert torch.equal(verl_F.pad_sequence_to_length(t, 5, 0), torch.tensor([[1, 2, 3, 0, 0]]))
    assert torch.equal(verl_F.pad_sequence_to_length(t, 5, 0, left_pad=True), torch.tensor([[0, 0, 1, 2, 3]]))
    assert verl_F.pad_sequence_to_length(t, 2, 0) is t
    ids, am = verl_F.postprocess_data(t, torch.ones_like(t), 5, pad_token_id=9, left_pad=True)
    assert ids.tolist() == [[9, 9, 1, 2, 3]] and am.tolist() == [[0, 0, 1, 1, 1]]
    long_ids = torch.arange(6).unsqueeze(0)
    ones = torch.ones_like(long_ids)
    assert verl_F.postprocess_data(long_ids, ones, 4, 0, truncation="left")[0].tolist() == [[2, 3, 4, 5]]
    assert verl_F.postprocess_data(long_ids, ones, 4, 0, truncation="right")[0].tolist() == [[0, 1, 2, 3]]
    assert verl_F.postprocess_data(long_ids, ones, 4, 0, truncation="middle")[0].tolist() == [[0, 1, 4, 5]]
    with pytest.raises(NotImplementedError):
        verl_F.postprocess_data(long_ids, ones, 4, 0, truncation="error")
    with pytest.raises(ValueError):
        verl_F.postprocess_data(long_ids, ones, 4, 0, truncation="sideways")


# ---------------------------------------------------------------------------------------------------------------------
# chunked log-probs and entropy
# ---------------------------------------------------------------------------------------------------------------------
def test_logprob_entropy_hand_case():
    # logits [0, ln 3] -> p = [1/4, 3/4]
    logits = torch.tensor([[0.0, math.log(3.0)]])
    lp = verl_F.logprobs_from_logits(logits, torch.tensor([1]))
    assert lp.item() == pytest.approx(math.log(0.75), abs=1e-6)
    # H = -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.5623351446
    ent = verl_F.entropy_from_logits(logits)
    assert ent.item() == pytest.approx(-(0.25 * math.log(0.25) + 0.75 * math.log(0.75)), abs=1e-6)
    # uniform over V: H = ln V
    assert verl_F.entropy_from_logits(torch.zeros(3, 7)).tolist() == pytest.approx([math.log(7)] * 3, abs=1e-6)


@pytest.mark.parametrize("chunk_size", [1, 5, 16, 1024])
def test_chunked_equals_naive(chunk_size):
    torch.manual_seed(0)
    logits = torch.randn(3, 11, 257) * 2
    labels = torch.randint(0, 257, (3, 11))
    lp = verl_F.logprobs_from_logits(logits, labels, chunk_size=chunk_size)
    assert lp.shape == (3, 11) and lp.dtype == torch.float32
    torch.testing.assert_close(lp, verl_F.logprobs_from_logits_naive(logits, labels), atol=1e-6, rtol=1e-6)
    ent = verl_F.entropy_from_logits(logits, chunk_size=chunk_size)
    torch.testing.assert_close(ent, verl_F.entropy_from_logits_naive(logits), atol=1e-6, rtol=1e-6)


def test_chunked_gradients_equal_naive():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 33, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, 33, (2, 5))
    weights = torch.randn(2, 5, dtype=torch.float64)
    for fast, slow in [
        (
            lambda x: verl_F.logprobs_from_logits(x, labels, chunk_size=3),
            lambda x: verl_F.logprobs_from_logits_naive(x, labels),
        ),
        (lambda x: verl_F.entropy_from_logits(x, chunk_size=3), verl_F.entropy_from_logits_naive),
    ]:
        (g_fast,) = torch.autograd.grad((fast(logits) * weights).sum(), logits)
        (g_slow,) = torch.autograd.grad((slow(logits) * weights).sum(), logits)
        torch.testing.assert_close(g_fast, g_slow, atol=1e-10, rtol=0)
    small = logits[:1, :3].detach().requires_grad_()
    assert torch.autograd.gradcheck(lambda x: verl_F.entropy_from_logits(x, 2), (small,))
    assert torch.autograd.gradcheck(lambda x: verl_F.logprobs_from_logits(x, labels[:1, :3], chunk_size=2), (small,))


def test_chunking_bounds_the_float32_work(monkeypatch):
    """A 49,152-entry vocabulary is processed at most ``chunk_size`` tokens at a time, in float32 from bf16 input."""
    seen = []
    real = torch.logsumexp

    def recording(x, dim, *args, **kwargs):
        seen.append((x.shape[0], x.dtype))
        return real(x, dim, *args, **kwargs)

    torch.manual_seed(2)
    logits = torch.randn(2, 24, 49152).to(torch.bfloat16)
    labels = torch.randint(0, 49152, (2, 24))
    monkeypatch.setattr(torch, "logsumexp", recording)
    lp = verl_F.logprobs_from_logits(logits, labels, chunk_size=16)
    ent = verl_F.entropy_from_logits(logits, chunk_size=16)
    monkeypatch.setattr(torch, "logsumexp", real)
    assert seen and all(rows <= 16 and dtype == torch.float32 for rows, dtype in seen)
    assert len(seen) == 2 * math.ceil(48 / 16)
    assert lp.dtype == torch.float32 and ent.dtype == torch.float32
    # against a float64 reference (a float32 sum over 49k terms carries ~1e-6 relative rounding)
    ref_lp = verl_F.logprobs_from_logits_naive(logits.double(), labels).float()
    torch.testing.assert_close(lp, ref_lp, atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(ent, verl_F.entropy_from_logits_naive(logits.double()).float(), atol=1e-5, rtol=1e-6)


def test_logprob_errors_and_response_helper():
    with pytest.raises(ValueError):
        verl_F.logprobs_from_logits(torch.zeros(2, 3), torch.zeros(2, dtype=torch.long), chunk_size=0)
    with pytest.raises(ValueError):
        verl_F.logprobs_from_logits(torch.zeros(2, 3), torch.zeros(3, dtype=torch.long))
    # upstream's inplace_backward (its third argument) is accepted and changes nothing; a misspelt keyword is refused
    logits, labels = torch.tensor([[0.0, 1.0, 2.0]]), torch.tensor([2])
    assert torch.equal(
        verl_F.logprobs_from_logits(logits, labels, inplace_backward=False), verl_F.logprobs_from_logits(logits, labels)
    )
    assert torch.equal(
        verl_F.logprobs_from_logits(logits, labels, False),  # upstream's positional form
        verl_F.logprobs_from_logits(logits, labels),
    )
    with pytest.raises(TypeError, match="chunksize"):
        verl_F.logprobs_from_logits(logits, labels, chunksize=2)
    torch.manual_seed(3)
    input_ids = torch.randint(0, 10, (2, 6))
    logits = torch.randn(2, 6, 10)
    out = verl_F.log_probs_from_logits_response(input_ids, logits, response_length=2)
    # the token at position t is predicted by the logits at t - 1
    expected = torch.log_softmax(logits[:, 3:5], -1).gather(-1, input_ids[:, 4:6, None]).squeeze(-1)
    torch.testing.assert_close(out, expected)


# ---------------------------------------------------------------------------------------------------------------------
# learning-rate schedules
# ---------------------------------------------------------------------------------------------------------------------
def _lrs(scheduler, optimizer, steps):
    out = []
    for _ in range(steps):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def test_lr_schedules():
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1e-3)
    # constant with 2 warm-up steps: 0, 1/2, 1, 1, 1 (x 1e-3)
    lrs = _lrs(verl_F.get_constant_schedule_with_warmup(opt, num_warmup_steps=2), opt, 5)
    assert lrs == pytest.approx([0.0, 5e-4, 1e-3, 1e-3, 1e-3])
    opt = torch.optim.SGD([p], lr=1e-3)
    sched = verl_F.get_cosine_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=5, min_lr_ratio=0.1)
    # warm-up 0.1 + 0.9 * s/2: 0.1, 0.55; then 0.1 + 0.9 * (1 + cos(pi * p)) / 2 with p = 0, 1/3, 2/3: 1, .775, .325
    assert _lrs(sched, opt, 5) == pytest.approx([1e-4, 5.5e-4, 1e-3, 7.75e-4, 3.25e-4])
    with pytest.raises(ValueError):
        verl_F.get_cosine_schedule_with_warmup(opt, 1, 5, min_lr_ratio=1.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_temperature_inside_the_chunks_is_bitwise_the_full_size_float32_division(dtype, temperature):
    """The actor used to pass ``logits.float() / temperature`` (two full-size float32 copies of the [N, V] logits);
    it now passes the logits in the model's dtype and the temperature: values and gradients must not move a bit."""
    torch.manual_seed(0)
    base = (torch.randn(37, 1000) * 3).to(dtype)
    labels = torch.randint(0, 1000, (37,))
    weights = torch.randn(37)

    def run(inside: bool, want: str):
        x = base.clone().requires_grad_(True)
        z = x if inside else x.float() / temperature
        t = {"temperature": temperature} if inside else {}
        if want == "both" and inside:
            lp, ent = verl_F.logprobs_and_entropy_from_logits(z, labels, chunk_size=8, **t)
        else:
            lp = verl_F.logprobs_from_logits(z, labels, chunk_size=8, **t) if want != "entropy" else None
            ent = verl_F.entropy_from_logits(z, 8, **t) if want != "logprob" else None
        loss = sum((v * w).sum() for v, w in ((lp, weights), (ent, weights.flip(0))) if v is not None)
        loss.backward()
        return [v.detach() for v in (lp, ent) if v is not None] + [x.grad]

    for want in ("logprob", "entropy", "both"):
        for new, old in zip(run(True, want), run(False, want), strict=True):
            assert new.dtype == old.dtype and torch.equal(new, old), want
    with pytest.raises(ValueError, match="temperature must be > 0"):
        verl_F.logprobs_from_logits(base, labels, temperature=0.0)
