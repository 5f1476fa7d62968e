"""experiments/scripts/router_ridge_refit.py and router_value_shift.py: the offline refit of a ridge router head
equals the trainer's own update on the same observations, and the ridge's confidence width, by hand."""

from __future__ import annotations

import copy
import importlib.util
import math

import pytest
import torch

from conftest import REPO_ROOT
from verl.router import RouterAction
from verl.router.value import RidgeRouteValues

from test_ridge_route_values import _Backbone, _batch, _ridge_component


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "experiments" / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


refit_script = _load("router_ridge_refit")
shift_script = _load("router_value_shift")


def test_offline_refit_equals_the_trainers_next_ridge_update():
    torch.manual_seed(0)
    backbone = _Backbone()
    trainer = _ridge_component()
    trainer.update(
        backbone, _batch([1, 1, 1, 2, 2, 2, 3, 3, 3], [0, 1, 2] * 3, [-3.0, 1.0, 0.5, -3.0, 4.0, 2.0, 1.0, 0.0, 0.0])
    )
    offline = copy.deepcopy(trainer.head)
    ridge = copy.deepcopy(trainer.ridge)
    # two new prompts (tokens 4 and 5, file positions 7 and 9), one observation per route; CALCULATE of token 5 could
    # not be scored: the refit leaves it out, as the trainer leaves out a NaN target
    rewards = {
        RouterAction.ANSWER: {7: -3.0, 9: 1.0},
        RouterAction.SEARCH: {7: 2.5, 9: -1.0},
        RouterAction.CALCULATE: {7: 0.5},
    }
    features = backbone.embed(torch.tensor([4, 5])).detach().double()
    added = refit_script.refit(offline, ridge, features, [7, 9], rewards)
    assert {k: v["rows"] for k, v in added.items()} == {"ANSWER": 2, "SEARCH": 2, "CALCULATE": 1}
    assert added["SEARCH"]["mean_reward"] == pytest.approx(0.75)
    trainer.update(backbone, _batch([4, 4, 4, 5, 5, 5], [0, 1, 2, 0, 1, 2], [-3.0, 2.5, 0.5, 1.0, -1.0, float("nan")]))
    torch.testing.assert_close(offline.net.weight, trainer.head.net.weight, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(offline.net.bias, trainer.head.net.bias, rtol=1e-6, atol=1e-6)
    assert ridge.count.tolist() == trainer.ridge.count.tolist() == [5.0, 5.0, 4.0]


def test_ridge_width_by_hand():
    # route 0 sees x = 0 and 2 (n = 2), normalised by μ = 1, s = 1: z̄ = 0, C = 2, α = 1, A = 3.
    # At x = 1 (z = 0): sqrt(0 + 1/2); at x = 4 (z = 3): sqrt(9/3 + 1/2) = sqrt(3.5)
    ridge = RidgeRouteValues(hidden_size=1, alpha=1.0)
    empty = RidgeRouteValues(hidden_size=1, alpha=1.0)
    empty.add(
        RidgeRouteValues.increments(
            torch.tensor([[0.0], [2.0], [5.0]]), torch.tensor([0, 0, 1]), torch.tensor([0.0, 1.0, 3.0])
        )
    )
    with pytest.raises(ValueError, match="route CALCULATE has no observation"):
        shift_script.ridge_widths(empty, torch.tensor([1.0], dtype=torch.float64), 1.0, 1.0)
    ridge.add(
        RidgeRouteValues.increments(
            torch.tensor([[0.0], [2.0], [5.0], [1.0]]), torch.tensor([0, 0, 1, 2]), torch.tensor([0.0, 1.0, 3.0, 0.0])
        )
    )
    widths = shift_script.ridge_widths(ridge, torch.tensor([1.0], dtype=torch.float64), 1.0, 1.0)
    got = widths(torch.tensor([[1.0], [4.0]], dtype=torch.float64).numpy(), 0)
    assert got.tolist() == pytest.approx([math.sqrt(0.5), math.sqrt(3.5)])
    # route 1's single point has no spread: only the intercept's 1/n and the penalised distance, sqrt(d²/α + 1)
    assert widths(torch.tensor([[7.0]], dtype=torch.float64).numpy(), 1).tolist() == pytest.approx([math.sqrt(5.0)])


def test_checked_position_refuses_generations_of_another_prompts_file():
    prompts = {0: types_row(11), 1: types_row(12)}
    assert refit_script.checked_position({"row": 1, "index": 12, "_where": "g.jsonl:2"}, prompts, "p.parquet") == 1
    for bad in ({"row": 1, "index": 40, "_where": "g.jsonl:2"}, {"row": 5, "index": 12, "_where": "g.jsonl:2"}):
        with pytest.raises(SystemExit, match="g.jsonl:2: .*not a prompt of p.parquet"):
            refit_script.checked_position(bad, prompts, "p.parquet")


def types_row(index: int):
    """A stand-in for a PromptRow: only its ``index`` is read."""
    return type("Row", (), {"index": index})()


def test_named_paths_refuses_a_repeated_or_malformed_name():
    assert shift_script.named_paths(["a=x.parquet", "b=y:z"], "--prompts") == {"a": "x.parquet", "b": "y:z"}
    for bad in (["a=x", "a=y"], ["x.parquet"], ["=x"]):
        with pytest.raises(SystemExit, match="NAME=PATH"):
            shift_script.named_paths(bad, "--prompts")
