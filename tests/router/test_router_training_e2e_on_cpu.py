"""The router trained together with the actor through the real trainer (tiny model, real RLLA rows, CPU, Ray).

Checks: every step logs the spec's router metrics; λ follows the dual-ascent formula from the logged mean costs;
the rewritten prompts really reach generation (ANSWER rows lose the tools block and, with
``router.answer_forbids_tool_calls``, cannot open a tool call); the router head is trained and
saved with its optimizer, and λ is saved in data.pt.
"""

from __future__ import annotations

import json
import logging

import pytest
import torch

from conftest import e2e_overrides
from verl.trainer.config_utils import load_default_config

ROUTER_KEYS = (
    "router/lambda",
    "router/mean_cost",
    "router/budget",
    "router/mean_task_reward",
    "router/mean_router_reward",
    "router/frac_answer",
    "router/frac_search",
    "router/frac_calculate",
    "router/entropy",
    "router/pg_loss",
    "router/sup_loss",
    "timing_s/router",
    "timing_s/update_router",
)


@pytest.fixture(scope="module")
def router_data(small_rlla):
    from verl.router.preprocess import preprocess_dir

    preprocess_dir(small_rlla)
    return small_rlla


def test_router_grpo_two_steps(tmp_path, router_data, ray_session):
    from verl.trainer.main_ppo import run_ppo

    budget, dual_lr = 0.3, 0.5
    config = load_default_config(
        e2e_overrides(tmp_path, router_data, "train_router", "test_router")
        + [
            "algorithm.adv_estimator=grpo",
            "router.enable=true",
            f"router.budget_B={budget}",
            f"router.dual_lr={dual_lr}",
            "router.cost_weights.any_tool=1.0",
            "router.sup_coeff=1.0",
            "router.optim.lr=0.05",
            "router.answer_forbids_tool_calls=true",
        ]
    )
    trainer = run_ppo(config)
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "text" not in r and r["step"] > 0]
    assert [r["step"] for r in steps] == [1, 2]
    lam = 0.0
    for record in steps:
        for key in ROUTER_KEYS:
            assert key in record, key
        fracs = record["router/frac_answer"] + record["router/frac_search"] + record["router/frac_calculate"]
        assert fracs == pytest.approx(1.0)
        lam = min(10.0, max(0.0, lam + dual_lr * (record["router/mean_cost"] - budget)))
        assert record["router/lambda"] == pytest.approx(lam)
        assert record["router/budget"] == budget
    val = [r for r in records if "val/router/frac_answer" in r]
    assert val, "validation routes were not logged"

    last_batch = trainer.last_batch
    actions = last_batch.batch["router_action"]
    prompt_len = last_batch.batch["prompts"].shape[-1]
    tok = trainer.tokenizer
    for i in range(len(last_batch)):
        prompt = tok.decode(last_batch.batch["prompts"][i][last_batch.batch["attention_mask"][i, :prompt_len].bool()])
        original = tok.decode(
            last_batch.batch["router_input_ids"][i][last_batch.batch["router_attention_mask"][i].bool()]
        )
        assert "Available Tools" in original
        if int(actions[i]) == 0:  # ANSWER: the tools block is gone from what the LM saw, and it could not call one
            assert "Available Tools" not in prompt
            response = last_batch.batch["responses"][i][last_batch.batch["response_mask"][i].bool()]
            assert "<tool" not in tok.decode(response)

    actor_dir = tmp_path / "ckpt" / "global_step_2" / "actor"
    router_files = list(actor_dir.glob("router_world_size_1_rank_0.pt"))
    assert router_files
    state = torch.load(router_files[0], weights_only=False)
    assert "optimizer" in state and state["optimizer"]["state"], "router optimizer state missing"
    head_weights = [v for k, v in state["head"].items() if k.endswith("weight")]
    assert any(w.abs().sum() > 0 for w in head_weights[-1:]), "the zero-initialised output layer never moved"
    data_state = torch.load(tmp_path / "ckpt" / "global_step_2" / "data.pt", weights_only=False)
    assert data_state["router"]["lagrange"]["lambda"] == pytest.approx(lam)


@pytest.mark.parametrize("loss_mode", ["pg", "value", "ridge"])
def test_stratified_routes_through_the_trainer_with_a_frozen_actor(
    tmp_path, router_data, ray_session, caplog, loss_mode
):
    """router.route_sampling=stratified, 3 copies per prompt, trainer.critic_warmup beyond the run (verl's switch: the
    actor is not updated, so its old log-probs are not computed): every prompt's copies take the three routes, λ steps
    on the policy's expected cost, the head moves, the actor does not. With router.loss_mode=value the head regresses
    the route values and the checkpoint's data.pt holds the running route means that price them."""
    from verl.trainer.main_ppo import run_ppo

    budget, dual_lr = 0.3, 0.5
    value = ["router.loss_mode=value", "router.entropy_coeff=0"] if loss_mode in ("value", "ridge") else []
    if loss_mode == "ridge":  # the head is the closed-form ridge fit, on running-normalised features
        value += ["router.value_fit=ridge", "router.input_norm=running"]
    config = load_default_config(
        e2e_overrides(tmp_path, router_data, "train_router", "test_router")
        + value
        + [
            "algorithm.adv_estimator=grpo",
            "router.enable=true",
            f"router.budget_B={budget}",
            f"router.dual_lr={dual_lr}",
            "router.route_sampling=stratified",
            "actor_rollout_ref.rollout.n=3",
            "actor_rollout_ref.actor.ppo_mini_batch_size=2",
            "router.optim.lr=0.05",
            "router.sup_coeff=0",
            "router.answer_forbids_tool_calls=true",
            "trainer.critic_warmup=100",
            "trainer.total_training_steps=1",
            "algorithm.use_kl_in_reward=False",
            "actor_rollout_ref.actor.use_kl_loss=False",
            "trainer.test_freq=1",
            "trainer.save_freq=1",
        ]
    )
    with caplog.at_level(logging.INFO, logger="verl.trainer.ppo.validation"):
        trainer = run_ppo(config)
    # validation is one long generate call: it says when it starts and how long it took
    assert "validation at step 1:" in caplog.text and "validation at step 1 done in" in caplog.text
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    (step,) = [r for r in records if "text" not in r and r["step"] > 0]
    assert step["router/lambda"] == pytest.approx(max(0.0, dual_lr * (step["router/policy_cost"] - budget)))
    assert "actor/pg_loss" not in step  # critic_warmup: no actor update
    assert "timing_s/old_log_prob" not in step  # ... and, with no reference or KL, no old log-prob pass either
    batch = trainer.last_batch
    actions = batch.batch["router_action"].reshape(-1, 3)
    assert all(sorted(row.tolist()) == [0, 1, 2] for row in actions)
    assert batch.batch["router_route_advantages"].shape == (len(batch), 3)
    state = torch.load(
        tmp_path / "ckpt" / "global_step_1" / "actor" / "router_world_size_1_rank_0.pt", weights_only=False
    )
    moved = bool(state["head"]["net.weight"].abs().sum() > 0)  # the zero-initialised output layer
    if loss_mode == "pg":
        assert moved
    if loss_mode == "value":
        assert "router/value_loss" in step and "router/value_baseline_answer" in step
        assert "router/pg_loss" not in step
        target = batch.batch["router_value_target"]
        baseline = torch.tensor([step[f"router/value_baseline_{r}"] for r in ("answer", "search", "calculate")])
        task = batch.batch["token_level_scores"].sum(-1)
        torch.testing.assert_close(target, task - baseline[batch.batch["router_action"]])
        assert moved == bool(target.abs().sum() > 0)  # it moves only towards a non-zero target
        data_state = torch.load(tmp_path / "ckpt" / "global_step_1" / "data.pt", weights_only=False)
        assert data_state["router"]["route_values"]["reward"] == pytest.approx(baseline.tolist())
    elif loss_mode == "ridge":
        from verl.router.value import RidgeRouteValues

        task = batch.batch["token_level_scores"].sum(-1)
        torch.testing.assert_close(batch.batch["router_value_target"], task)  # no running baseline subtracted
        assert step["router/value_ridge_rows"] == float(len(batch))
        ridge = RidgeRouteValues(state["head"]["net.weight"].shape[1], 1000.0)
        ridge.load_state_dict(state["ridge"])
        head = state["head"]
        scale = float(torch.sqrt((head["feature_m2"] / head["feature_count"]).mean() + 1e-6))
        weight, bias = ridge.solve(head["feature_mean"], scale)
        torch.testing.assert_close(head["net.weight"], weight.float())
        torch.testing.assert_close(head["net.bias"], bias.float())
    else:
        assert "router/pg_loss" in step and "router_value_target" not in batch.batch.keys()
