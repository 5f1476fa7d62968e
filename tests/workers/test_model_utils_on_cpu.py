"""model_utils: LR schedules and their config errors, optimizer config errors, gradient checkpointing equivalence."""

from __future__ import annotations

import math

import pytest
import torch

from verl.trainer.config_utils import default_section
from verl.utils.model_utils import build_lr_scheduler, build_optimizer, load_causal_lm, to_local_state
from verl.workers.actor.dp_actor import DataParallelPPOActor
from workers_testlib import make_batch
import itertools


def _lrs(optim, steps):
    param = torch.nn.Parameter(torch.zeros(1))
    optim = default_section("actor_rollout_ref.actor.optim", **optim)
    optimizer = build_optimizer([param], optim)
    scheduler = build_lr_scheduler(optimizer, optim)
    lrs = []
    for _ in range(steps):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return lrs


def test_constant_and_cosine_schedules():
    assert _lrs({"lr": 1.0}, 3) == [1.0, 1.0, 1.0]
    warm = _lrs({"lr": 1.0, "lr_warmup_steps": 2}, 4)
    assert warm == [0.0, 0.5, 1.0, 1.0]
    cosine = _lrs(
        {
            "lr": 1.0,
            "warmup_style": "cosine",
            "total_training_steps": 10,
            "lr_warmup_steps_ratio": 0.2,
            "min_lr_ratio": 0.1,
        },
        11,
    )
    assert cosine[2] == pytest.approx(1.0)  # end of the 2 warm-up steps
    assert cosine[6] == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert cosine[10] == pytest.approx(0.1)
    assert all(a >= b for a, b in itertools.pairwise(cosine[2:]))  # non-increasing after the warm-up


@pytest.mark.parametrize(
    "optim, key",
    [
        ({"lr": 1.0, "warmup_style": "cosine"}, "total_training_steps"),
        ({"lr": 1.0, "lr_warmup_steps_ratio": 0.1}, "total_training_steps"),
        ({"lr": 1.0, "warmup_style": "linear"}, "warmup_style"),
        ({"lr": None}, "optim.lr"),
    ],
)
def test_bad_optim_config_names_the_key(optim, key):
    with pytest.raises(ValueError, match=key):
        _lrs(optim, 1)


def test_gradient_checkpointing_gives_the_same_gradients(tiny_model_dir):
    micro = make_batch().batch
    grads = []
    for checkpointing in (False, True):
        module = load_causal_lm(
            default_section("actor_rollout_ref.model", path=tiny_model_dir, enable_gradient_checkpointing=checkpointing)
        )
        actor = DataParallelPPOActor(default_section("actor_rollout_ref.actor", use_remove_padding=True), module)
        _, log_probs = actor._forward_micro_batch(micro, temperature=1.0)
        (log_probs * micro["response_mask"]).sum().backward()
        grads.append([p.grad for p in module.parameters()])
    for plain, checkpointed in zip(*grads):
        torch.testing.assert_close(checkpointed, plain, rtol=0, atol=1e-6)


def test_to_local_state_keeps_tied_weights_shared(tmp_path, tiny_model_dir):
    """The tied embedding is saved once: the copy keeps lm_head and embed_tokens as one tensor, other entries apart."""
    model = load_causal_lm(default_section("actor_rollout_ref.model", path=tiny_model_dir), trainable=True)
    state = to_local_state(model.state_dict())
    assert state["lm_head.weight"] is state["model.embed_tokens.weight"]
    assert state["model.norm.weight"] is not state["model.layers.0.input_layernorm.weight"]
    assert state["lm_head.weight"].data_ptr() != model.lm_head.weight.data_ptr()  # a copy, not a view of the model
    torch.save(state, tmp_path / "m.pt")
    params = sum(p.numel() * p.element_size() for p in model.parameters())  # parameters() lists a tied one once
    assert (tmp_path / "m.pt").stat().st_size < params * 1.05
