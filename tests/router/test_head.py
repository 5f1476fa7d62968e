"""Router head: pooling under left padding, detach, sampling, hidden states of the tiny Llama."""

import pytest
import torch
import torch.nn.functional as F

from verl.router import NUM_ROUTER_ACTIONS, RouterAction
from verl.router.head import (
    RouterHead,
    compute_router_logits,
    last_valid_index,
    pool_hidden,
    prompt_hidden_states,
    sample_actions,
)
from verl.utils.torch_functional import compute_position_id_with_mask


def test_enum_values():
    assert [int(a) for a in RouterAction] == [0, 1, 2]
    assert [a.name for a in RouterAction] == ["ANSWER", "SEARCH", "CALCULATE"]


def test_pool_hidden_ignores_left_padding_garbage():
    torch.manual_seed(0)
    hidden = torch.randn(2, 5, 4)
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    last = pool_hidden(hidden, mask, "last_token")
    assert torch.equal(last, hidden[:, -1])
    mean = pool_hidden(hidden, mask, "mean")
    assert torch.allclose(mean[0], hidden[0, 2:].mean(0))
    assert torch.allclose(mean[1], hidden[1].mean(0))
    garbage = hidden.clone()
    garbage[0, :2] = 1e6  # padding positions must never contribute
    assert torch.equal(pool_hidden(garbage, mask, "last_token"), last)
    assert torch.allclose(pool_hidden(garbage, mask, "mean"), mean)


def test_last_valid_index_and_errors():
    assert last_valid_index(torch.tensor([[0, 1, 1], [1, 1, 0], [1, 0, 1]])).tolist() == [2, 1, 2]
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        last_valid_index(torch.tensor([[1, 1], [0, 0]]))
    with pytest.raises(ValueError, match="pooling"):
        pool_hidden(torch.zeros(1, 2, 3), torch.ones(1, 2), "max")


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    model.eval()
    return model


def _left_pad(ids, length, pad_id=2):
    n = len(ids)
    input_ids = torch.tensor([[pad_id] * (length - n) + ids])
    mask = torch.tensor([[0] * (length - n) + [1] * n])
    return input_ids, mask, compute_position_id_with_mask(mask)


@pytest.mark.parametrize("pooling", ["last_token", "mean"])
def test_padding_never_changes_pooled_vector(tiny_lm, pooling):
    ids = [5, 17, 300, 42, 9, 1000, 77]
    pooled = []
    for length in (7, 10, 16):
        input_ids, mask, pos = _left_pad(ids, length)
        with torch.no_grad():
            hidden = prompt_hidden_states(tiny_lm, input_ids, mask, pos)
        assert hidden.shape == (1, length, tiny_lm.config.hidden_size)
        pooled.append(pool_hidden(hidden, mask, pooling))
    for other in pooled[1:]:
        torch.testing.assert_close(other, pooled[0], atol=1e-5, rtol=1e-4)


def test_router_logits_batch_matches_single_rows(tiny_lm):
    head = RouterHead(tiny_lm.config.hidden_size, head="mlp", pooling="last_token")
    torch.nn.init.normal_(head.net[-1].weight)  # non-zero so the rows differ
    rows = [[5, 17, 300], [8, 9, 10, 11, 12, 13]]
    batch = [_left_pad(r, 8) for r in rows]
    input_ids = torch.cat([b[0] for b in batch])
    mask = torch.cat([b[1] for b in batch])
    logits = compute_router_logits(tiny_lm, head, input_ids, mask, compute_position_id_with_mask(mask))
    assert logits.shape == (2, NUM_ROUTER_ACTIONS) and logits.dtype == torch.float32
    for i, r in enumerate(rows):
        single = compute_router_logits(tiny_lm, head, *_left_pad(r, len(r)))
        torch.testing.assert_close(logits[i], single[0], atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("detach", [True, False])
def test_detach_backbone_controls_gradient_flow(tiny_lm, detach):
    head = RouterHead(tiny_lm.config.hidden_size, detach_backbone=detach)
    torch.nn.init.normal_(head.net.weight)
    tiny_lm.zero_grad(set_to_none=True)
    input_ids, mask, pos = _left_pad([5, 6, 7, 8], 6)
    logits = compute_router_logits(tiny_lm, head, input_ids, mask, pos)
    F.log_softmax(logits, -1)[0, 1].backward()
    assert head.net.weight.grad is not None and head.net.weight.grad.abs().sum() > 0
    backbone_grads = [p.grad for p in tiny_lm.parameters() if p.grad is not None]
    if detach:
        assert backbone_grads == []
    else:
        assert any(g.abs().sum() > 0 for g in backbone_grads)
    tiny_lm.zero_grad(set_to_none=True)
    # the head's own forward detaches too (not only compute_router_logits' no_grad)
    hidden = torch.randn(1, 3, tiny_lm.config.hidden_size, requires_grad=True)
    head(hidden, torch.ones(1, 3)).sum().backward()
    assert (hidden.grad is None) == detach


def test_zero_init_head_is_uniform():
    head = RouterHead(16, head="mlp")
    logits = head(torch.randn(3, 4, 16), torch.ones(3, 4))
    torch.testing.assert_close(F.softmax(logits, -1), torch.full((3, 3), 1 / 3))


def test_sample_actions_consistent_with_logits():
    logits = torch.tensor([[2.0, 0.0, -1.0], [0.0, 0.0, 5.0], [1.0, 1.0, 1.0]])
    gen = torch.Generator().manual_seed(0)
    actions, log_probs = sample_actions(logits, greedy=False, generator=gen)
    assert actions.shape == (3,) and actions.dtype == torch.int64
    assert log_probs.shape == (3,) and log_probs.dtype == torch.float32
    torch.testing.assert_close(log_probs, F.log_softmax(logits, -1).gather(-1, actions[:, None])[:, 0])
    greedy_actions, greedy_lp = sample_actions(logits, greedy=True)
    assert greedy_actions.tolist() == [0, 2, 0]  # argmax, ties -> lowest index
    torch.testing.assert_close(greedy_lp, F.log_softmax(logits, -1).max(-1).values)


def test_sampling_frequencies_follow_softmax():
    probs = torch.tensor([0.2, 0.5, 0.3])
    logits = probs.log().expand(6000, 3).clone()
    actions, _ = sample_actions(logits, generator=torch.Generator().manual_seed(1))
    freq = torch.bincount(actions, minlength=3).float() / 6000
    assert torch.allclose(freq, probs, atol=0.025)
    again, _ = sample_actions(logits, generator=torch.Generator().manual_seed(1))
    assert torch.equal(actions, again)


def test_sample_actions_rejects_bad_logits():
    with pytest.raises(ValueError, match=r"\[B, 3\]"):
        sample_actions(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="NaN"):
        sample_actions(torch.tensor([[float("nan"), 0.0, 0.0]]))


def test_running_input_norm_centres_and_scales_by_the_observed_prompts():
    """router.input_norm=running: Welford's running mean / variance over every observed prompt (batches combined
    exactly), features centred and divided by one RMS; the identity before any observation; saved with the head."""
    head = RouterHead(2, input_norm="running")
    x = torch.tensor([[1.0, 2.0], [3.0, 6.0]])
    assert torch.equal(head.normalize(x), x)  # nothing observed yet
    head.observe(x)
    head.observe(torch.tensor([[5.0, 4.0]]))
    # all three rows: means (3, 4), population variances (8/3, 8/3) -> one scale sqrt(8/3)
    torch.testing.assert_close(head.feature_mean, torch.tensor([3.0, 4.0], dtype=torch.float64))
    z = head.normalize(torch.tensor([[3.0, 4.0], [5.0, 4.0]]))
    torch.testing.assert_close(z, torch.tensor([[0.0, 0.0], [2.0, 0.0]]) / (8 / 3 + 1e-6) ** 0.5)
    # a constant offset common to every prompt (the dominant dimension of a real LM's state) is removed entirely
    shifted = RouterHead(2, input_norm="running")
    shifted.observe(x + 40.0)
    shifted.observe(torch.tensor([[45.0, 44.0]]))
    torch.testing.assert_close(shifted.normalize(torch.tensor([[45.0, 44.0]])), z[1:])
    # forward(observe=True) folds the batch in first; the buffers travel in the state dict
    fresh = RouterHead(2, input_norm="running")
    fresh(x.unsqueeze(1), torch.ones(2, 1), observe=True)
    assert float(fresh.feature_count) == 2.0
    restored = RouterHead(2, input_norm="running")
    restored.load_state_dict(fresh.state_dict())
    torch.testing.assert_close(restored.feature_m2, torch.tensor([2.0, 8.0], dtype=torch.float64))
    with pytest.raises(ValueError, match="router.input_norm must be one of"):
        RouterHead(2, input_norm="batch")
