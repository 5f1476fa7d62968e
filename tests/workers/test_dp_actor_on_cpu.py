"""DataParallelPPOActor on the tiny model: log-probs vs a direct forward, remove-padding and dynamic batch size
equivalences (values and gradients), update semantics (zero advantages, KL sign, epochs/shuffle)."""

from __future__ import annotations

import copy

import pytest
import torch

from verl.trainer.config_utils import default_section
from verl.trainer.ppo.core_algos import kl_penalty
from verl.utils.torch_functional import masked_mean
from verl.workers.actor.dp_actor import DataParallelPPOActor

from workers_testlib import make_batch

# float32 on CPU: packing changes the summation order of attention and matmuls only, so results agree to ~1e-6
# (measured: log-probs 1e-6 absolute; gradients ~3e-6 absolute on entries up to 8, i.e. ~1e-7 of the tensor norm).
# Tolerances: 1e-5 absolute on log-probs (|lp| ~ 11), 1e-5 relative Frobenius error per gradient tensor.
LP_ATOL = 1e-5
GRAD_REL_NORM = 1e-5


def actor_config(**overrides):
    """The typed ``actor_rollout_ref.actor`` section of the YAML with this file's batch settings and ``overrides``."""
    base = dict(
        ppo_mini_batch_size=6,
        ppo_micro_batch_size_per_gpu=6,
        use_dynamic_bsz=False,
        ppo_max_token_len_per_gpu=40,
        grad_clip=1.0,
        clip_ratio=0.2,
        clip_ratio_c=3.0,
        loss_agg_mode="token-mean",
        entropy_coeff=0.0,
        use_kl_loss=False,
        kl_loss_coef=0.0,
        kl_loss_type="low_var_kl",
        ppo_epochs=1,
        shuffle=False,
        use_remove_padding=False,
    )
    base.update(overrides)
    return default_section("actor_rollout_ref.actor", **base)


def log_prob_meta(batch, **meta):
    batch.meta_info.update(
        {"temperature": 0.7, "micro_batch_size": 4, "use_dynamic_bsz": False, "max_token_len": 24, **meta}
    )
    return batch


def test_compute_log_prob_matches_direct_forward(causal_lm, batch):
    data = log_prob_meta(batch, micro_batch_size=4)
    log_probs, entropy = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(data, calculate_entropy=True)
    tensors = data.batch
    with torch.no_grad():
        logits = causal_lm(
            input_ids=tensors["input_ids"],
            attention_mask=tensors["attention_mask"],
            position_ids=tensors["position_ids"],
        ).logits
    response_length = tensors["responses"].shape[1]
    logits = logits[:, -response_length - 1 : -1].float() / 0.7
    expected = torch.log_softmax(logits, -1).gather(-1, tensors["responses"].unsqueeze(-1)).squeeze(-1)
    expected_entropy = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    mask = tensors["response_mask"].bool()
    assert log_probs.shape == entropy.shape == mask.shape
    torch.testing.assert_close(log_probs[mask], expected[mask], atol=LP_ATOL, rtol=0)
    torch.testing.assert_close(entropy[mask], expected_entropy[mask], atol=LP_ATOL, rtol=0)
    # temperature matters: log-probs at temperature 1 differ
    other, _ = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(
        log_prob_meta(make_batch(), temperature=1.0)
    )
    assert not torch.allclose(other[mask], log_probs[mask])


@pytest.mark.parametrize("variant", [{"use_remove_padding": True}, {"use_dynamic_bsz": True}])
def test_log_probs_equal_padded_fixed_path(causal_lm, variant):
    reference, _ = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(log_prob_meta(make_batch()))
    meta = {"use_dynamic_bsz": variant.get("use_dynamic_bsz", False)}
    actor = DataParallelPPOActor(actor_config(use_remove_padding=variant.get("use_remove_padding", False)), causal_lm)
    got, _ = actor.compute_log_prob(log_prob_meta(make_batch(), **meta))
    mask = make_batch().batch["response_mask"].bool()
    torch.testing.assert_close(got[mask], reference[mask], atol=LP_ATOL, rtol=0)


def test_columns_of_padding_change_no_log_prob(causal_lm):
    """The trainer cuts prompts to the batch's longest one before the rollout (``trim_left_padding``): the log-probs
    must not depend on how many all-padding columns precede the prompts."""
    from verl.protocol import DataProto
    from workers_testlib import EOS

    narrow = make_batch()
    extra = 9
    wide = {k: v.clone() for k, v in narrow.batch.items()}
    rows = len(narrow)
    for key, fill in (("input_ids", EOS), ("prompts", EOS), ("attention_mask", 0), ("position_ids", 0)):
        wide[key] = torch.cat([torch.full((rows, extra), fill, dtype=wide[key].dtype), wide[key]], dim=1)
    wide = DataProto.from_dict(wide)
    for variant in ({}, {"use_remove_padding": True}):
        actor = DataParallelPPOActor(actor_config(**variant), causal_lm)
        reference, _ = actor.compute_log_prob(log_prob_meta(make_batch()))
        got, _ = actor.compute_log_prob(log_prob_meta(wide))
        mask = narrow.batch["response_mask"].bool()
        torch.testing.assert_close(got[mask], reference[mask], atol=LP_ATOL, rtol=0)


def _grads(actor, micro_batch, weights):
    actor.actor_module.zero_grad(set_to_none=True)
    _, log_probs = actor._forward_micro_batch(micro_batch, temperature=0.7)
    (log_probs * weights * micro_batch["response_mask"]).sum().backward()
    return {n: p.grad.clone() for n, p in actor.actor_module.named_parameters() if p.grad is not None}


def assert_gradients_equal_padded(causal_lm, micro, weights, **variant):
    """Gradients of sum(weights * log_probs) over the response mask: the ``variant`` actor config (e.g. a packing
    switch) against the padded path, within GRAD_REL_NORM relative Frobenius error per parameter tensor."""
    padded = _grads(DataParallelPPOActor(actor_config(), causal_lm), micro, weights)
    other = _grads(DataParallelPPOActor(actor_config(**variant), causal_lm), micro, weights)
    assert padded.keys() == other.keys() and len(padded) > 0
    for name in padded:
        error = (other[name] - padded[name]).norm() / padded[name].norm().clamp(min=1e-12)
        assert error < GRAD_REL_NORM, (name, float(error))
    causal_lm.zero_grad(set_to_none=True)


def test_remove_padding_gradients_equal_padded(causal_lm):
    micro = make_batch().batch
    weights = torch.randn(micro["responses"].shape, generator=torch.Generator().manual_seed(3))
    assert_gradients_equal_padded(causal_lm, micro, weights, use_remove_padding=True)


def _update(model, overrides, data, lr=1e-2, optimizer_cls=torch.optim.AdamW):
    """One update_policy call on a copy of ``model``; returns (new module, metrics, optimizer)."""
    module = copy.deepcopy(model)
    optimizer = optimizer_cls(module.parameters(), lr=lr, weight_decay=0.0)
    actor = DataParallelPPOActor(actor_config(**overrides), module, optimizer)
    data.meta_info["temperature"] = 1.0
    metrics = actor.update_policy(data)
    return module, metrics, optimizer


def test_update_changes_weights_and_reports_metrics(causal_lm):
    module, metrics, _ = _update(causal_lm, {"entropy_coeff": 0.01}, make_batch())
    changed = [n for (n, p), q in zip(module.named_parameters(), causal_lm.parameters()) if not torch.equal(p, q)]
    assert changed, "update_policy did not change any weight"
    for key in (
        "actor/pg_loss",
        "actor/pg_clipfrac",
        "actor/pg_clipfrac_lower",
        "actor/ppo_kl",
        "actor/entropy",
        "actor/grad_norm",
        "actor/lr",
    ):
        assert key in metrics, key
    assert metrics["actor/grad_norm"] > 0 and metrics["actor/lr"] == pytest.approx(1e-2)
    assert metrics["actor/entropy"] > 0


def test_update_skips_the_entropy_when_its_coefficient_is_zero(causal_lm, monkeypatch):
    """With entropy_coeff 0 the update computes no entropy (verl's rule; the trainer reports actor/entropy from the
    old-log-prob pass) and its weights equal those of an update that computes and detaches it."""
    asked = []
    original = DataParallelPPOActor._forward_micro_batch

    def spy(self, micro, temperature, calculate_entropy=False):
        asked.append(calculate_entropy)
        return original(self, micro, temperature, calculate_entropy)

    monkeypatch.setattr(DataParallelPPOActor, "_forward_micro_batch", spy)
    module, metrics, _ = _update(causal_lm, {"entropy_coeff": 0.0}, make_batch())
    assert asked and not any(asked) and "actor/entropy" not in metrics
    monkeypatch.setattr(
        DataParallelPPOActor,
        "_forward_micro_batch",
        lambda self, micro, temperature, calculate_entropy=False: original(self, micro, temperature, True),
    )
    reference, _, _ = _update(causal_lm, {"entropy_coeff": 0.0}, make_batch())
    for (name, p), q in zip(module.named_parameters(), reference.parameters()):
        assert torch.equal(p, q), name


def test_zero_advantages_give_zero_pg_loss_and_no_change(causal_lm):
    data = make_batch()
    data.batch["advantages"].zero_()
    module, metrics, _ = _update(causal_lm, {}, data)
    assert metrics["actor/pg_loss"] == 0.0
    assert metrics["actor/grad_norm"] == 0.0
    for p, q in zip(module.parameters(), causal_lm.parameters()):
        assert torch.equal(p, q)


def test_fixed_and_dynamic_micro_batches_give_the_same_update(causal_lm):
    """Micro-batch weighting makes the accumulated gradient independent of how the mini-batch is cut.

    SGD (not Adam, whose first step is ~lr·sign(g) and so amplifies float noise on near-zero gradients): the
    weights after one step differ by lr × the gradient difference.
    """
    sgd = dict(lr=1.0, optimizer_cls=torch.optim.SGD)
    one, m_one, _ = _update(causal_lm, {"ppo_micro_batch_size_per_gpu": 6}, make_batch(), **sgd)
    many, m_many, _ = _update(causal_lm, {"ppo_micro_batch_size_per_gpu": 2}, make_batch(), **sgd)
    dyn, m_dyn, _ = _update(
        causal_lm,
        {"use_dynamic_bsz": True, "ppo_max_token_len_per_gpu": 24, "use_remove_padding": True},
        make_batch(),
        **sgd,
    )
    assert 1 < m_one["actor/grad_norm"]  # clipped at grad_clip=1: the step is lr·g/|g|, big enough to compare
    assert m_one["actor/grad_norm"] == pytest.approx(m_many["actor/grad_norm"], rel=1e-4)
    assert m_one["actor/grad_norm"] == pytest.approx(m_dyn["actor/grad_norm"], rel=1e-4)
    assert m_one["actor/pg_loss"] == pytest.approx(m_dyn["actor/pg_loss"], rel=1e-4, abs=1e-6)
    for a, b, c in zip(one.parameters(), many.parameters(), dyn.parameters()):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-6)
        torch.testing.assert_close(c, a, rtol=0, atol=1e-6)


def _mean_kl_to_ref(module, ref_log_prob):
    data = make_batch()
    actor = DataParallelPPOActor(actor_config(), module)
    lp, _ = actor.compute_log_prob(log_prob_meta(data, temperature=1.0, micro_batch_size=6))
    kl = kl_penalty(lp, ref_log_prob, "low_var_kl")
    return float(masked_mean(kl, data.batch["response_mask"]))


def test_kl_loss_pulls_the_policy_toward_the_reference(causal_lm):
    data = make_batch()
    data.batch["advantages"].zero_()
    ref_lp, _ = DataParallelPPOActor(actor_config(), causal_lm).compute_log_prob(
        log_prob_meta(make_batch(), temperature=1.0)
    )
    data.batch["ref_log_prob"] = ref_lp
    # a policy away from the reference: perturb the weights
    start = copy.deepcopy(causal_lm)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(5)
        for p in start.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    kl_before = _mean_kl_to_ref(start, ref_lp)
    assert kl_before > 1e-3
    # a small plain gradient step (SGD on the clipped gradient) so the first-order effect decides the sign
    sgd = dict(lr=0.05, optimizer_cls=torch.optim.SGD)
    pulled, metrics, _ = _update(start, {"use_kl_loss": True, "kl_loss_coef": 1.0}, data, **sgd)
    pushed, _, _ = _update(start, {"use_kl_loss": True, "kl_loss_coef": -1.0}, make_batch_with(data), **sgd)
    assert metrics["actor/kl_loss"] == pytest.approx(kl_before, rel=1e-3)
    assert _mean_kl_to_ref(pulled, ref_lp) < kl_before < _mean_kl_to_ref(pushed, ref_lp)


def make_batch_with(data):
    """A fresh copy of ``data`` (update_policy reads the batch; tests reuse it)."""
    fresh = make_batch()
    for key in data.batch.keys():
        fresh.batch[key] = data.batch[key].clone()
    return fresh


def test_epochs_and_mini_batches_set_the_number_of_optimizer_steps(causal_lm):
    _, metrics, optimizer = _update(
        causal_lm,
        {"ppo_mini_batch_size": 3, "ppo_micro_batch_size_per_gpu": 3, "ppo_epochs": 2, "shuffle": True},
        make_batch(),
        lr=1e-4,
    )
    steps = {int(state["step"]) for state in optimizer.state.values()}
    assert steps == {4}  # 2 epochs x 2 mini-batches
    assert metrics["actor/skipped_steps"] == 0.0


def test_non_finite_gradient_skips_the_step(causal_lm):
    data = make_batch()
    data.batch["advantages"][0, 0] = float("inf")
    module, metrics, optimizer = _update(causal_lm, {}, data)
    assert metrics["actor/skipped_steps"] == 1.0
    assert not optimizer.state  # no step taken
    for p, q in zip(module.parameters(), causal_lm.parameters()):
        assert torch.equal(p, q)


def test_indivisible_mini_batch_names_the_key(causal_lm):
    with pytest.raises(ValueError, match="ppo_mini_batch_size"):
        _update(causal_lm, {"ppo_mini_batch_size": 4}, make_batch())
