"""Fused chunked LM-head log-probs/entropy (verl/utils/fused_linear_logprob.py) against the materialised logits:
values and gradients w.r.t. the hidden states and the head weight, at a temperature, chunk sizes that do and do not
divide N, and log-prob-only losses."""

import pytest
import torch

from verl.utils.fused_linear_logprob import linear_logprobs_and_entropy
from verl.utils.torch_functional import entropy_from_logits_naive, logprobs_from_logits_naive


def _inputs(seed=0, n=37, h=16, v=300):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(n, h, generator=g, dtype=torch.float64)
    weight = torch.randn(v, h, generator=g, dtype=torch.float64) * 0.5
    labels = torch.randint(0, v, (n,), generator=g)
    coef = torch.randn(n, generator=g, dtype=torch.float64), torch.randn(n, generator=g, dtype=torch.float64)
    return hidden, weight, labels, coef


@pytest.mark.parametrize("chunk_size", [1, 8, 37, 1000])
@pytest.mark.parametrize("with_entropy", [True, False])
def test_values_and_gradients_match_materialised_logits(chunk_size, with_entropy):
    hidden, weight, labels, (a, b) = _inputs()
    temperature = 0.7
    h1, w1 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logits = h1 @ w1.t() / temperature
    ref_lp = logprobs_from_logits_naive(logits, labels)
    ref_h = entropy_from_logits_naive(logits)
    ref_loss = (a * ref_lp).sum() + ((b * ref_h).sum() if with_entropy else 0)
    ref_loss.backward()

    h2, w2 = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    lp, ent = linear_logprobs_and_entropy(h2, w2, labels, temperature, with_entropy, chunk_size)
    assert lp.dtype == torch.float32 and lp.shape == (37,)
    torch.testing.assert_close(lp.double(), ref_lp, atol=1e-5, rtol=0)
    loss = (a * lp.double()).sum()
    if with_entropy:
        torch.testing.assert_close(ent.double(), ref_h, atol=1e-5, rtol=0)
        loss = loss + (b * ent.double()).sum()
    else:
        assert ent is None
    loss.backward()
    torch.testing.assert_close(h2.grad, h1.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(w2.grad, w1.grad, atol=1e-4, rtol=1e-4)


def test_bad_arguments_raise():
    hidden, weight, labels, _ = _inputs()
    with pytest.raises(ValueError, match="hidden"):
        linear_logprobs_and_entropy(hidden, weight[:, :3], labels)
    with pytest.raises(ValueError, match="labels"):
        linear_logprobs_and_entropy(hidden, weight, labels[:3])
    with pytest.raises(ValueError, match="temperature"):
        linear_logprobs_and_entropy(hidden, weight, labels, temperature=0)
