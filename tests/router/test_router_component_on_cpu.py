"""RouterComponent's state on resume: head weights and AdamW moments come back from the checkpoint, the learning rate
from the config (a changed ``router.optim.lr`` is applied, not silently replaced by the saved one)."""
from __future__ import annotations

import torch

from verl.router.component import RouterComponent
from verl.trainer.config_utils import default_section


def _component(lr: float) -> RouterComponent:
    cfg = default_section("router", enable=True)
    cfg.optim.lr = lr
    return RouterComponent(cfg, hidden_size=8, device="cpu")


def test_resume_keeps_moments_and_applies_the_configured_lr():
    torch.manual_seed(0)
    first = _component(1e-4)
    first.head(torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.long)).sum().backward()
    first.optimizer.step()
    state = first.state_dict()
    resumed = _component(1e-3)
    resumed.load_state_dict(state)
    assert [g["lr"] for g in resumed.optimizer.param_groups] == [1e-3]
    for name, value in resumed.head.state_dict().items():
        assert torch.equal(value, first.head.state_dict()[name]), name
    saved = first.optimizer.state_dict()["state"]
    for key, moments in resumed.optimizer.state_dict()["state"].items():
        assert torch.equal(moments["exp_avg"], saved[key]["exp_avg"])
        assert torch.equal(moments["exp_avg_sq"], saved[key]["exp_avg_sq"])
    same = _component(1e-4)
    same.load_state_dict(state)
    assert [g["lr"] for g in same.optimizer.param_groups] == [1e-4]
