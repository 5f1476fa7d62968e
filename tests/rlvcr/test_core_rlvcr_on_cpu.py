"""RLVCR advantage (../shared/specs/rlvcr.md): the spec's worked example in both modes and hand-worked cases
(unparseable steps, level 1 without think, equal scores, one-level batches, mean_std_norm with zero spread, the
diversity term, steps not evaluated), the trajectory term (single- and multi-turn, against GiGPO's episode term), the
registered estimator through the trainer's calling convention, and the algorithm.rlvcr config keys."""

import math

import numpy as np
import pytest
import torch

from rlvcr.core_rlvcr import (
    RLVCRSettings,
    check_rlvcr_settings,
    compute_action_uncertainty,
    compute_level_diversity,
    compute_level_scores,
    compute_rlvcr_outcome_advantage,
    compute_thinking_advantage,
    compute_trajectory_advantage,
    parse_level_response,
    parsed_levels,
    rlvcr_active,
    rlvcr_batch_inputs,
    thinking_batch_fields,
)
from verl.trainer.config_utils import ConfigError, load_default_config, normalize_config, validate_config
from verl.trainer.ppo import core_algos as ca
from verl.trainer.ppo.gigpo import compute_gigpo_components

EPS = 1e-6
F64 = torch.float64

# spec "Worked example": one step, level 3, U = [2.0, 1.5, 1.0, 1.2], C = [0, 10, 40, 100], kappa 0.1, cost_max 100
U_SPEC = [2.0, 1.5, 1.0, 1.2]
C_SPEC = [0.0, 10.0, 40.0, 100.0]
S_SPEC = [-2.0, -1.51, -1.04, -1.30]  # S_L = -U_L - 0.1 * C_L / 100
# unbiased std of S_SPEC: deviations from -1.4625 are -0.5375, -0.0475, 0.4225, 0.1625; squares sum to 0.496075
STD_SPEC = math.sqrt(0.496075 / 3)  # 0.40664...


def _obj(*items):
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def _think(u, c, level, valid=None, **kw):
    u, c = torch.tensor(u, dtype=F64), torch.tensor(c, dtype=F64)
    valid = [True] * len(level) if valid is None else valid
    return compute_thinking_advantage(u, c, torch.tensor(level), torch.tensor(valid), **kw)


def _div(*levels):
    """Closed form of D for a batch of valid levels: -log(f_l + eps) + sum_k f_k log(f_k + eps)."""
    n = len(levels)
    freq = {k: levels.count(k) / n for k in set(levels)}
    mean_log = sum(f * math.log(f + EPS) for f in freq.values())
    return [-math.log(freq[lv] + EPS) + mean_log for lv in levels]


# =====================================================================================================================
# the spec's worked example
# =====================================================================================================================
def test_spec_worked_example_scores_and_mean_norm():
    scores = compute_level_scores(torch.tensor([U_SPEC], dtype=F64), torch.tensor([C_SPEC], dtype=F64), 0.1, 100.0)
    torch.testing.assert_close(scores, torch.tensor([S_SPEC], dtype=F64))
    assert sum(S_SPEC) / 4 == pytest.approx(-1.4625)
    adv = _think(
        [U_SPEC], [C_SPEC], [3], thinking_cost_w=0.1, cost_max=100.0, mode="mean_norm", thinking_diversity_w=0.0
    )
    assert adv.dtype == F64 and adv.shape == (1,)
    assert adv.item() == pytest.approx(0.4225, abs=1e-12)  # spec: -1.04 + 1.4625


def test_spec_worked_example_mean_std_norm():
    adv = _think(
        [U_SPEC], [C_SPEC], [3], thinking_cost_w=0.1, cost_max=100.0, mode="mean_std_norm", thinking_diversity_w=0.0
    )
    assert adv.item() == pytest.approx(0.4225 / (STD_SPEC + EPS), abs=1e-12)  # 1.03899...
    assert adv.item() == pytest.approx(1.038993, abs=1e-6)


def test_each_chosen_level_gets_its_own_deviation():
    # the same U/C under every chosen level: A = S_l - mean S = S_l + 1.4625
    adv = _think([U_SPEC] * 4, [C_SPEC] * 4, [1, 2, 3, 4], cost_max=100.0, thinking_diversity_w=0.0)
    torch.testing.assert_close(adv, torch.tensor([-0.5375, -0.0475, 0.4225, 0.1625], dtype=F64))


# =====================================================================================================================
# hand-worked cases
# =====================================================================================================================
def test_level1_without_think_has_zero_cost():
    step = parse_level_response("<level>1</level><action>go north</action>")
    assert step.parseable and step.level == 1 and not step.has_think and step.think == ""
    # level 1: U = 0.5, C = 0 -> S = [-0.5, -1.02, -1.05, -1.10], mean -0.9175, A = 0.4175
    adv = _think([[0.5, 1.0, 1.0, 1.0]], [[0.0, 20.0, 50.0, 100.0]], [1], cost_max=100.0, thinking_diversity_w=0.0)
    assert adv.item() == pytest.approx(0.4175, abs=1e-12)


@pytest.mark.parametrize("mode", ["mean_norm", "mean_std_norm"])
def test_equal_scores_give_exactly_zero(mode):
    # identical scores (mean_std_norm: zero spread, std 0) -> exactly 0, not 0/eps noise or NaN
    adv = _think([[0.7] * 4, [1.3] * 4], [[5.0] * 4, [0.0] * 4], [2, 4], mode=mode, thinking_diversity_w=0.0)
    assert adv.tolist() == [0.0, 0.0]
    # kappa = 0: costs do not matter, equal entropies are equal scores
    adv = _think([[0.9] * 4], [[0.0, 3.0, 30.0, 300.0]], [4], mode=mode, thinking_cost_w=0.0, thinking_diversity_w=0.0)
    assert adv.tolist() == [0.0]


def test_diversity_term_hand_case():
    # levels 1, 1, 2, 3: f = 1/2, 1/4, 1/4; D(1) = -ln 2 / 2, D(2) = D(3) = +ln 2 / 2 (eps aside); batch mean 0
    d = compute_level_diversity(torch.tensor([1, 1, 2, 3]), torch.ones(4, dtype=torch.bool), 4, EPS)
    torch.testing.assert_close(d, torch.tensor(_div(1, 1, 2, 3), dtype=F64))
    torch.testing.assert_close(d, torch.tensor([-0.5, -0.5, 0.5, 0.5], dtype=F64) * math.log(2), atol=5e-6, rtol=0)
    assert abs(d.sum().item()) < 1e-12
    # added with its weight to the score part (equal scores -> score part 0)
    adv = _think([[1.0] * 4] * 4, [[0.0] * 4] * 4, [1, 1, 2, 3], thinking_diversity_w=0.5)
    torch.testing.assert_close(adv, 0.5 * d)


def test_one_level_batch_has_no_diversity_bonus():
    d = compute_level_diversity(torch.tensor([2, 2, 2]), torch.ones(3, dtype=torch.bool), 4, EPS)
    assert d.tolist() == [0.0, 0.0, 0.0]  # f = 1: -log(1 + eps) + 1 * log(1 + eps), exactly 0
    adv = _think([U_SPEC] * 3, [C_SPEC] * 3, [2, 2, 2], cost_max=100.0, thinking_diversity_w=0.5)
    assert adv.tolist() == pytest.approx([-0.0475] * 3, abs=1e-12)


def test_unparseable_steps_get_zero_and_leave_the_frequencies():
    # row 3 is unparseable (valid False; its U is NaN): A = 0, and f is over rows 0-2 only: f1 = 2/3, f2 = 1/3
    # D(1) = ln(3/2) + (2/3) ln(2/3) + (1/3) ln(1/3) = -0.231049; D(2) = ln 3 + ... = +0.462098
    u = [[1.0] * 4, [1.0] * 4, [1.0] * 4, [float("nan")] * 4]
    c = [[0.0] * 4] * 4
    adv = _think(u, c, [1, 1, 2, 0], valid=[True, True, True, False], thinking_diversity_w=1.0)
    expected = _div(1, 1, 2) + [0.0]
    torch.testing.assert_close(adv, torch.tensor(expected, dtype=F64))
    assert expected[0] == pytest.approx(-0.231049, abs=1e-5) and expected[2] == pytest.approx(0.462098, abs=1e-5)
    # no valid row at all: everything 0
    adv = _think([[1.0] * 4], [[0.0] * 4], [0], valid=[False])
    assert adv.tolist() == [0.0]


def test_steps_not_evaluated_keep_only_the_diversity_term():
    # only_positive_episodes: row 1 was not scored (NaN U); it still counts in f and gets its D, but no score part
    u = torch.tensor([U_SPEC, [float("nan")] * 4], dtype=F64)
    c = torch.tensor([C_SPEC, [float("nan")] * 4], dtype=F64)
    adv = compute_thinking_advantage(
        u,
        c,
        torch.tensor([3, 1]),
        torch.tensor([True, True]),
        cost_max=100.0,
        thinking_diversity_w=0.5,
        evaluated=torch.tensor([True, False]),
    )
    d = _div(3, 1)  # f = 1/2 each: D = 0
    torch.testing.assert_close(adv, torch.tensor([0.4225 + 0.5 * d[0], 0.5 * d[1]], dtype=F64))


def test_dtype_and_input_kinds():
    adv = compute_thinking_advantage(
        np.array([U_SPEC], dtype=np.float32), [C_SPEC], _obj(3), [True], cost_max=100.0, thinking_diversity_w=0.0
    )
    assert adv.dtype == torch.float32 and adv.item() == pytest.approx(0.4225, abs=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(mode="std"), "mode"),
        (dict(cost_max=0.0), "cost_max"),
        (dict(level=[5]), "chosen_level in 1..4"),
        (dict(u=[[1.0, float("nan"), 1.0, 1.0]]), "finite"),
        (dict(c=[[0.0, -1.0, 0.0, 0.0]]), "finite"),
        (dict(u=[[1.0, 1.0, 1.0]]), r"\[B, N\]"),
        (dict(level=[1, 2]), "entries"),
    ],
)
def test_thinking_advantage_errors(kwargs, match):
    u, c, level = kwargs.pop("u", [U_SPEC]), kwargs.pop("c", [C_SPEC]), kwargs.pop("level", [3])
    with pytest.raises(ValueError, match=match):
        compute_thinking_advantage(
            torch.tensor(u), torch.tensor(c), torch.tensor(level), torch.ones(len(level), dtype=torch.bool), **kwargs
        )


def test_action_uncertainty_is_the_masked_token_mean():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 4.0, 4.0, 4.0]])
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 0, 0]])  # row 0: tokens 1-2 (2 + 3) / 2; row 1: no action token
    u = compute_action_uncertainty(entropy, mask)
    assert u[0].item() == 2.5 and math.isnan(u[1].item())
    with pytest.raises(ValueError):
        compute_action_uncertainty(entropy, mask[:, :3])


def test_parsed_levels():
    steps = [
        parse_level_response(t)
        for t in ("<level>2</level><think>x</think><action>a</action>", "no tags", "<level>1</level><action>b</action>")
    ]
    level, valid = parsed_levels(steps)
    assert level.tolist() == [2, 0, 1] and valid.tolist() == [True, False, True]


# =====================================================================================================================
# trajectory term
# =====================================================================================================================
def test_trajectory_advantage_single_turn_is_grpo_with_singletons_zero():
    adv = compute_trajectory_advantage(torch.tensor([1.0, 0.0, 5.0]), _obj("u", "u", "v"))
    half = 0.5 / (math.sqrt(0.5) + EPS)  # (1 - 0.5) / (unbiased std sqrt(0.5) + eps)
    torch.testing.assert_close(adv, torch.tensor([half, -half, 0.0], dtype=F64))
    adv = compute_trajectory_advantage(torch.tensor([1.0, 0.0]), _obj("u", "u"), norm_by_std=False)
    assert adv.tolist() == [0.5, -0.5]


def test_trajectory_advantage_counts_each_trajectory_once_like_gigpo():
    # trajectory a: steps with rewards 0, 1 (R = 1); b: one step, 0 (R = 0). Per trajectory: +-0.5 / (sqrt(.5) + eps);
    # a per-row normalisation would use the mean 1/3 instead
    rewards = torch.tensor([0.0, 1.0, 0.0])
    uids, trajs = _obj("u", "u", "u"), _obj("a", "a", "b")
    adv = compute_trajectory_advantage(rewards, uids, trajs)
    half = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(adv, torch.tensor([half, half, -half], dtype=F64))
    parts = compute_gigpo_components(rewards, _obj("s0", "s1", "s0"), uids, trajs, [0, 1, 0])
    torch.testing.assert_close(adv, parts.episode_advantage)
    with pytest.raises(ValueError, match="more than one uid"):
        compute_trajectory_advantage(rewards, _obj("u", "v", "u"), trajs)


# =====================================================================================================================
# the estimator
# =====================================================================================================================
def _batch():
    """Rows: r0 uid u, reward 1, level 3 (the spec's U/C); r1 uid u, reward 0, level 1 (the level-1 case above);
    r2 uid v (singleton), reward 5, level 3, equal scores; r3 uid w (singleton), reward 2 on its one response token,
    unparseable (level 0, no U/C)."""
    rewards = torch.zeros(4, 3)
    rewards[:, -1] = torch.tensor([1.0, 0.0, 5.0, 2.0])
    mask = torch.ones(4, 3)
    mask[3, 1:] = 0
    rewards[3, 0], rewards[3, -1] = 2.0, 0.0
    fields = dict(
        thinking_level=np.array([3, 1, 3, 0]),
        thinking_level_action_entropy=_obj(U_SPEC, [0.5, 1.0, 1.0, 1.0], [1.0] * 4, None),
        thinking_level_think_cost=_obj(C_SPEC, [0.0, 20.0, 50.0, 100.0], [0.0] * 4, None),
    )
    return rewards, mask, _obj("u", "u", "v", "w"), fields


def _expected_batch(diversity_w=0.5, step_w=1.0):
    half = 0.5 / (math.sqrt(0.5) + EPS)
    d3, d1, _ = _div(3, 1, 3)  # valid levels 3, 1, 3: f3 = 2/3, f1 = 1/3 -> D(3) = -0.231049, D(1) = 0.462098
    think = [0.4225 + diversity_w * d3, 0.4175 + diversity_w * d1, diversity_w * d3, 0.0]
    return [t + step_w * a for t, a in zip([half, -half, 0.0, 0.0], think)], think


def test_estimator_hand_case_with_metrics():
    rewards, mask, uids, fields = _batch()
    metrics = {}
    cfg = {"rlvcr": {"cost_max": 100, "thinking_diversity_w": 0.5}}
    adv, ret = compute_rlvcr_outcome_advantage(
        rewards, mask, uids, config=cfg, metrics=metrics, **rlvcr_batch_inputs(fields)
    )
    assert adv is ret and adv.dtype == torch.float32 and adv.shape == (4, 3)
    total, think = _expected_batch()
    torch.testing.assert_close(adv[:, 0], torch.tensor(total, dtype=torch.float32))
    assert torch.all(adv[3, 1:] == 0) and torch.all(adv[:3] == adv[:3, :1])  # broadcast over the mask only
    assert metrics["rlvcr/unparseable_frac"] == 0.25
    assert metrics["rlvcr/level_frac_1"] == pytest.approx(1 / 3) and metrics["rlvcr/level_frac_3"] == pytest.approx(
        2 / 3
    )
    assert metrics["rlvcr/level_frac_2"] == metrics["rlvcr/level_frac_4"] == 0.0
    assert metrics["rlvcr/action_entropy_level_1"] == pytest.approx((2.0 + 0.5 + 1.0) / 3)
    assert metrics["rlvcr/think_tokens_level_2"] == pytest.approx((10 + 20 + 0) / 3)
    # each row's own think at the level it chose: r0 level 3 (40 tokens), r2 level 3 (0), r1 level 1 (0)
    assert metrics["rlvcr/chosen_think_tokens_level_3"] == pytest.approx(20.0)
    assert metrics["rlvcr/chosen_think_tokens_level_1"] == 0.0
    assert "rlvcr/chosen_think_tokens_level_2" not in metrics and "rlvcr/chosen_think_tokens_level_4" not in metrics
    assert metrics["rlvcr/thinking_adv_mean"] == pytest.approx(sum(think) / 4)
    assert metrics["rlvcr/thinking_adv_abs_mean"] == pytest.approx(sum(map(abs, think)) / 4)
    # explicit arguments win over the config; step_advantage_w scales only A_think
    adv, _ = compute_rlvcr_outcome_advantage(
        rewards, mask, uids, config=cfg, step_advantage_w=2.0, thinking_diversity_w=0.0, **rlvcr_batch_inputs(fields)
    )
    torch.testing.assert_close(adv[:, 0], torch.tensor(_expected_batch(0.0, 2.0)[0], dtype=torch.float32))


def test_estimator_through_registry_trainer_inputs_and_invalid_rows():
    rewards, mask, uids, fields = _batch()
    from omegaconf import OmegaConf

    algo = load_default_config(["algorithm.adv_estimator=rlvcr", "algorithm.rlvcr.cost_max=100"]).algorithm
    inputs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=uids,
        gamma=1.0,
        lam=1.0,
        norm_adv_by_std_in_grpo=True,
        config=algo,
        values=torch.randn(4, 3),
    )
    inputs.update(rlvcr_batch_inputs(fields, batch={"unrelated": torch.zeros(4)}))
    fn = ca.get_adv_estimator_fn("rlvcr")
    assert fn is compute_rlvcr_outcome_advantage and rlvcr_active(algo)
    adv, _ = fn(**inputs)
    torch.testing.assert_close(adv[:, 0], torch.tensor(_expected_batch()[0], dtype=torch.float32))
    # a reward-invalid row is cut before the estimator: row 2 leaves both its uid group and the level frequencies
    adv, _ = ca.compute_advantage_on_valid_rows(fn, np.array([True, True, False, True]), **inputs)
    half = 0.5 / (math.sqrt(0.5) + EPS)
    d3, d1 = _div(3, 1)  # f = 1/2 each: D = 0
    torch.testing.assert_close(
        adv[:, 0], torch.tensor([half + 0.4225 + 0.5 * d3, -half + 0.4175 + 0.5 * d1, 0, 0], dtype=torch.float32)
    )
    assert not rlvcr_active(OmegaConf.create({"adv_estimator": "grpo", "rlvcr": {"enable": True}}))


def test_estimator_multi_turn_rows():
    # trajectory a (2 steps, rewards 0 then 1) and b (1 step, 0) of uid u; all levels 2 with equal scores: A = A_traj
    rewards = torch.tensor([[0.0], [1.0], [0.0]])
    out, _ = compute_rlvcr_outcome_advantage(
        rewards,
        torch.ones(3, 1),
        _obj("u", "u", "u"),
        traj_index=_obj("a", "a", "b"),
        chosen_level=[2, 2, 2],
        action_entropy=np.ones((3, 4)),
        think_cost=np.zeros((3, 4)),
    )
    half = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(out[:, 0], torch.tensor([half, half, -half]))


def test_estimator_reads_precomputed_thinking_advantage_and_disable():
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    fields = thinking_batch_fields(torch.tensor([0.25, -1.0]), torch.tensor([12.0, 0.0]), mask)
    assert fields["thinking_level_entropies"].tolist() == [[0.25, 0.25], [-1.0, 0.0]]
    assert fields["thinking_token_costs"].tolist() == [[12.0, 12.0], [0.0, 0.0]]
    inputs = rlvcr_batch_inputs({}, fields)
    assert set(inputs) == {"thinking_level_entropies"}
    adv, _ = compute_rlvcr_outcome_advantage(rewards, mask, _obj("u", "u"), step_advantage_w=2.0, **inputs)
    half = 0.5 / (math.sqrt(0.5) + EPS)
    torch.testing.assert_close(adv, torch.tensor([[half + 0.5, half + 0.5], [-half - 2.0, 0.0]]))
    # enable false: trajectory term only, no thinking field needed
    adv, _ = compute_rlvcr_outcome_advantage(rewards, mask, _obj("u", "u"), config={"rlvcr": {"enable": False}})
    torch.testing.assert_close(adv, torch.tensor([[half, half], [-half, 0.0]]))
    with pytest.raises(ValueError, match="thinking fields"):
        compute_rlvcr_outcome_advantage(rewards, mask, _obj("u", "u"))
    with pytest.raises(ValueError, match="missing"):
        compute_rlvcr_outcome_advantage(rewards, mask, _obj("u", "u"), chosen_level=[1, 2])
    with pytest.raises(ValueError, match="row 1 has 3 values"):
        compute_rlvcr_outcome_advantage(
            rewards,
            mask,
            _obj("u", "u"),
            chosen_level=[1, 2],
            action_entropy=_obj([1.0] * 4, [1.0] * 3),
            think_cost=np.zeros((2, 4)),
        )


# =====================================================================================================================
# config
# =====================================================================================================================
def test_yaml_defaults_match_the_settings_and_validate():
    config = load_default_config(["algorithm.adv_estimator=rlvcr", "actor_rollout_ref.rollout.n=2"])
    assert check_rlvcr_settings(config.algorithm.rlvcr) == RLVCRSettings()
    assert RLVCRSettings() == RLVCRSettings(
        True, 1.0, 0.5, "mean_norm", 0.1, 256.0, 4, ("action",), 0.7, 0.9, 256, False, 1e-6
    )
    validate_config(normalize_config(config), check_files=False)
    tools = load_default_config(["algorithm.adv_estimator=rlvcr", "algorithm.rlvcr.action_tags=[tool_call,response]"])
    assert check_rlvcr_settings(tools.algorithm.rlvcr).action_tags == ("tool_call", "response")


@pytest.mark.parametrize(
    "override, match",
    [
        ("algorithm.rlvcr.mode=std_norm", "algorithm.rlvcr.mode"),
        ("algorithm.rlvcr.cost_max=0", "algorithm.rlvcr.cost_max"),
        ("algorithm.rlvcr.num_levels=1", "algorithm.rlvcr.num_levels"),
        ("algorithm.rlvcr.alt_top_p=1.5", "algorithm.rlvcr.alt_top_p"),
        ("algorithm.rlvcr.thinking_diversity_w=-0.1", "algorithm.rlvcr.thinking_diversity_w"),
        ("algorithm.rlvcr.action_tags=[think]", "algorithm.rlvcr.action_tags"),
        ("algorithm.rlvcr.action_tags=[]", "algorithm.rlvcr.action_tags"),
        ("algorithm.rlvcr.num_levels=2.5", "algorithm.rlvcr.num_levels must be of type int"),
        ("algorithm.rlvcr.enable=maybe", "algorithm.rlvcr.enable must be of type bool"),
    ],
)
def test_validate_config_rejects_bad_rlvcr_settings(override, match):
    with pytest.raises(ConfigError, match=match):  # a value of the wrong type already fails at load (typed config)
        config = normalize_config(load_default_config(["algorithm.adv_estimator=rlvcr", override]))
        validate_config(config, check_files=False)


def test_trainer_compute_advantage_reads_the_rlvcr_fields():
    """`ray_trainer.compute_advantage(..., "rlvcr", ...)` takes the per-level fields from the batch (same numbers as
    the registry call above)."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, uids, fields = _batch()
    algo = load_default_config(["algorithm.adv_estimator=rlvcr", "algorithm.rlvcr.cost_max=100"]).algorithm
    non_tensors = {"uid": np.asarray(uids, dtype=object)}
    for key, value in fields.items():
        non_tensors[key] = np.empty(len(uids), dtype=object)
        non_tensors[key][:] = list(value)
    data = DataProto.from_dict({"token_level_rewards": rewards, "response_mask": mask}, non_tensors)
    advantages = compute_advantage(data, "rlvcr", algo).batch["advantages"]
    torch.testing.assert_close(advantages[:, 0], torch.tensor(_expected_batch()[0], dtype=torch.float32))
    # the spec's batch tensors: A_think and the chosen level's think cost, broadcast over each response mask
    out = data.batch
    torch.testing.assert_close(
        out["thinking_level_entropies"][:, 0], torch.tensor(_expected_batch()[1], dtype=torch.float32)
    )
    torch.testing.assert_close(out["thinking_token_costs"][:, 0], torch.tensor([40.0, 0.0, 0.0, 0.0]))
    assert torch.all(out["thinking_level_entropies"][3, 1:] == 0) and out["thinking_token_costs"].shape == (4, 3)


def test_thinking_batch_tensors_leave_invalid_rows_at_zero():
    """Rows with reward_valid False are cut before the estimator; their batch tensors are 0."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask, uids, fields = _batch()
    algo = load_default_config(["algorithm.adv_estimator=rlvcr", "algorithm.rlvcr.cost_max=100"]).algorithm
    non_tensors = {"uid": np.asarray(uids, dtype=object), "reward_valid": np.array([True, True, False, True])}
    for key, value in fields.items():
        non_tensors[key] = np.empty(len(uids), dtype=object)
        non_tensors[key][:] = list(value)
    out = compute_advantage(
        DataProto.from_dict({"token_level_rewards": rewards, "response_mask": mask}, non_tensors), "rlvcr", algo
    ).batch
    assert torch.all(out["thinking_level_entropies"][2] == 0) and torch.all(out["advantages"][2] == 0)
    assert out["thinking_token_costs"][0, 0] == 40.0 and out["thinking_level_entropies"][0, 0] != 0
