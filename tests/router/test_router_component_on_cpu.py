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


def test_copies_of_a_prompt_share_one_backbone_pass_and_the_same_update():
    """A group's rollout.n copies hold the same prompt: the backbone sees each distinct prompt once, the logits and the
    router update equal those of one pass per row."""
    from tensordict import TensorDict

    from verl.router.loss import compute_router_loss

    class Backbone(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(20, 8)
            self.rows_seen = 0

        def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
            self.rows_seen += input_ids.shape[0]
            hidden = self.embed(input_ids) + 0.1 * position_ids.unsqueeze(-1).float()
            return type("Out", (), {"hidden_states": (hidden,)})()

    torch.manual_seed(0)
    prompts = torch.randint(1, 20, (3, 5))
    ids = prompts.repeat_interleave(3, dim=0)  # 3 prompts x 3 copies, as the trainer lays them out
    batch = TensorDict(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.arange(5).repeat(9, 1),
            "router_action": torch.tensor([0, 1, 2] * 3),
            "router_advantages": torch.randn(9),
            "router_route_advantages": torch.randn(3, 3).repeat_interleave(3, dim=0),
        },
        batch_size=[9],
    )
    backbone = Backbone()
    shared = _component(1e-2)
    shared.head.net.weight.data.normal_()
    logits = shared.logits(backbone, batch)
    assert backbone.rows_seen == 3
    per_row = _component(1e-2)
    per_row.head.load_state_dict(shared.head.state_dict())
    one_by_one = torch.cat([per_row.logits(backbone, batch[i : i + 1]) for i in range(9)])
    torch.testing.assert_close(logits, one_by_one)
    # the update from the shared pass equals the one whose loss is built from nine separate passes
    shared.update(backbone, batch)
    per_row.optimizer.zero_grad()
    separate = torch.cat([per_row.logits(backbone, batch[i : i + 1], grad=True) for i in range(9)])
    loss, _ = compute_router_loss(
        separate,
        batch["router_action"],
        batch["router_advantages"],
        entropy_coeff=per_row.cfg.entropy_coeff,
        sup_coeff=per_row.cfg.sup_coeff,
        route_advantages=batch["router_route_advantages"],
    )
    loss.backward()
    torch.nn.utils.clip_grad_norm_(list(per_row.head.parameters()), per_row.cfg.grad_clip)
    per_row.optimizer.step()
    for name, value in shared.head.state_dict().items():
        torch.testing.assert_close(value, per_row.head.state_dict()[name], msg=name)


def test_value_mode_update_regresses_each_copys_route_value():
    """router.loss_mode=value: the update fits the head's value of each copy's own route to router_value_target (a
    NaN target — an unscored row — is left out), and refuses a batch without targets."""
    import pytest
    from tensordict import TensorDict

    class Backbone(torch.nn.Module):
        def forward(self, input_ids, attention_mask=None, position_ids=None, **_):
            return type("Out", (), {"hidden_states": (torch.nn.functional.one_hot(input_ids, 8).float(),)})()

    cfg = default_section(
        "router",
        enable=True,
        loss_mode="value",
        route_sampling="stratified",
        entropy_coeff=0.0,
        sup_coeff=0.0,
        grad_clip=100.0,
    )
    cfg.optim.lr = 0.05
    component = RouterComponent(cfg, hidden_size=8, device="cpu")
    ids = torch.tensor([[1], [1], [1], [2], [2], [2]])  # 2 prompts x 3 copies, one per route
    target = torch.tensor([-1.0, 2.0, 0.5, 1.0, float("nan"), -2.0])
    batch = TensorDict(
        {
            "input_ids": ids,
            "attention_mask": torch.ones_like(ids),
            "position_ids": torch.zeros_like(ids),
            "router_action": torch.tensor([0, 1, 2, 0, 1, 2]),
            "router_advantages": torch.zeros(6),
            "router_value_target": target,
        },
        batch_size=[6],
    )
    for _ in range(300):
        metrics = component.update(Backbone(), batch)
    values = component.logits(Backbone(), batch)
    chosen = values.gather(-1, batch["router_action"].unsqueeze(-1)).squeeze(-1)
    known = ~torch.isnan(target)
    torch.testing.assert_close(chosen[known], target[known], atol=0.05, rtol=0)
    assert metrics["router/value_loss"] < 1e-3 and metrics["router/value_rows"] == 5.0
    del batch["router_value_target"]
    with pytest.raises(KeyError, match="router_value_target"):
        component.update(Backbone(), batch)
