"""GiGPO advantage (../shared/specs/gigpo.md): the spec's worked example and hand-worked cases (ties, singleton groups,
zero variance, anchors revisited inside a trajectory, array and dict anchors, both modes, gamma < 1, invalid-action
penalty, string-similarity anchors), row-order invariance, the registry / trainer-style call and config validation."""

import math

import numpy as np
import pytest
import torch

from verl.trainer.config_utils import (
    ConfigError,
    default_section,
    load_default_config,
    normalize_config,
    validate_config,
)
from verl.trainer.ppo import core_algos as ca
from verl.trainer.ppo.gigpo import (
    anchor_similarity_ratio,
    canonicalize_anchor,
    compute_gigpo_components,
    compute_gigpo_outcome_advantage,
    gigpo_batch_inputs,
)

EPS = 1e-6
SQRT_HALF = math.sqrt(0.5)  # the unbiased std of two values x, y is |x - y| * SQRT_HALF


def _obj(*items):
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def _gigpo(rewards, anchors, uids, trajs, steps, width=1, mask=None, **kw):
    """Call the estimator on one-token rows (or ``mask``); returns (advantage per row [B], full [B, L] tensor)."""
    rewards = torch.tensor(rewards, dtype=torch.float64)
    mask = torch.ones(len(rewards), width) if mask is None else mask
    adv, ret = compute_gigpo_outcome_advantage(
        rewards, mask, _obj(*anchors), _obj(*uids), _obj(*trajs), np.array(steps), **kw
    )
    assert adv is ret
    return adv[:, 0], adv


# The spec's worked example: trajectory a visits s0, s1 with rewards 0, 1; b visits s0, s2 with rewards 0, 0.
WORKED = dict(
    rewards=[0.0, 1.0, 0.0, 0.0],
    anchors=["s0", "s1", "s0", "s2"],
    uids=["u"] * 4,
    trajs=["a", "a", "b", "b"],
    steps=[0, 1, 0, 1],
)


# =====================================================================================================================
# the spec's worked example, both modes
# =====================================================================================================================
def test_spec_worked_example_mean_norm():
    metrics = {}
    adv, _ = _gigpo(**WORKED, gamma=1.0, mode="mean_norm", step_advantage_w=1.0, metrics=metrics)
    # spec: A_E(a) = 0.5, A_E(b) = -0.5; s0 = {a0: G=1, b0: G=0} -> +-0.5; s1, s2 singletons -> 0
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.5, -1.0, -0.5], dtype=torch.float64))
    parts = compute_gigpo_components(
        torch.tensor(WORKED["rewards"]),
        _obj(*WORKED["anchors"]),
        _obj(*WORKED["uids"]),
        _obj(*WORKED["trajs"]),
        WORKED["steps"],
        mode="mean_norm",
    )
    assert parts.step_return.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert parts.episode_return.tolist() == [1.0, 1.0, 0.0, 0.0]
    assert parts.episode_advantage.tolist() == [0.5, 0.5, -0.5, -0.5]
    assert parts.step_advantage.tolist() == [0.5, 0.0, -0.5, 0.0]
    assert parts.step_group.tolist() == [0, 1, 0, 2]
    # 3 step groups over 4 rows; the 2 singleton rows are half the batch; |A_E| = 0.5 everywhere; |A_S| mean 1/4
    assert metrics == {
        "gigpo/num_step_groups": 3.0,
        "gigpo/mean_step_group_size": 4 / 3,
        "gigpo/frac_rows_in_singleton_step_groups": 0.5,
        "gigpo/episode_adv_abs_mean": 0.5,
        "gigpo/step_adv_abs_mean": 0.25,
        "gigpo/singleton_episode_groups": 0.0,
    }


def test_spec_worked_example_mean_std_norm_is_the_default():
    adv, _ = _gigpo(**WORKED)
    # two values differing by 1: unbiased std = 1/sqrt(2); A_E(a) = 0.5 / (1/sqrt 2 + eps) = z, A_S(a0) = z too
    z = 0.5 / (SQRT_HALF + EPS)
    torch.testing.assert_close(adv, torch.tensor([2 * z, z, -2 * z, -z], dtype=torch.float64))
    assert abs(2 * z - math.sqrt(2)) < 1e-5


def test_rows_in_any_order_and_broadcast_masked():
    # the worked example given as [b1, a1, b0, a0], responses of lengths 1, 3, 2, 4 in width 4, float32 rewards
    perm = [3, 1, 2, 0]
    rewards = torch.tensor([WORKED["rewards"][i] for i in perm], dtype=torch.float32)
    mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 1, 1, 1]])
    adv, ret = compute_gigpo_outcome_advantage(
        rewards,
        mask,
        _obj(*[WORKED["anchors"][i] for i in perm]),
        _obj(*["u"] * 4),
        _obj(*[WORKED["trajs"][i] for i in perm]),
        torch.tensor([WORKED["steps"][i] for i in perm]),
        mode="mean_norm",
    )
    expected_rows = torch.tensor([-0.5, 0.5, -1.0, 1.0])
    assert adv.dtype == torch.float32 and adv.shape == (4, 4) and ret is adv
    torch.testing.assert_close(adv, expected_rows.unsqueeze(-1) * mask)


# =====================================================================================================================
# hand-worked cases
# =====================================================================================================================
def test_ties_in_episode_and_step_groups():
    # a: s0, s1 rewards 0, 1; b: the same as a (a tie); c: s0, s2 rewards 0, 0.   R = 1, 1, 0, mean 2/3.
    case = dict(
        rewards=[0.0, 1.0, 0.0, 1.0, 0.0, 0.0],
        anchors=["s0", "s1", "s0", "s1", "s0", "s2"],
        uids=["u"] * 6,
        trajs=["a", "a", "b", "b", "c", "c"],
        steps=[0, 1, 0, 1, 0, 1],
    )
    # mean_norm: A_E = 1/3, 1/3, -2/3; s0 = {G 1, 1, 0} -> 1/3, 1/3, -2/3; s1 = {1, 1} tied -> 0; s2 singleton -> 0
    adv, _ = _gigpo(**case, mode="mean_norm")
    torch.testing.assert_close(adv, torch.tensor([2 / 3, 1 / 3, 2 / 3, 1 / 3, -4 / 3, -2 / 3], dtype=torch.float64))
    # mean_std_norm: std{1, 1, 0} = sqrt((1/9 + 1/9 + 4/9) / 2) = sqrt(1/3); z1 = (1/3) / sqrt(1/3), z0 = -2 z1
    z1 = (1 / 3) / (math.sqrt(1 / 3) + EPS)
    adv, _ = _gigpo(**case)
    torch.testing.assert_close(adv, torch.tensor([2 * z1, z1, 2 * z1, z1, -4 * z1, -2 * z1], dtype=torch.float64))
    parts = compute_gigpo_components(
        torch.tensor(case["rewards"]), _obj(*case["anchors"]), _obj(*case["uids"]), _obj(*case["trajs"]), case["steps"]
    )
    assert parts.step_advantage[1].item() == 0.0 and parts.step_advantage[3].item() == 0.0  # exactly, the tie


def test_singleton_episode_group_and_groups_never_cross_uids():
    # uid u: the worked example. uid v: one trajectory c, anchors s0 (same string as u's), x, s0 again; gamma 0.5.
    rewards = WORKED["rewards"] + [0.0, 0.0, 1.0]
    anchors = WORKED["anchors"] + ["s0", "x", "s0"]
    uids = WORKED["uids"] + ["v"] * 3
    trajs = WORKED["trajs"] + ["c"] * 3
    steps = WORKED["steps"] + [0, 1, 2]
    metrics = {}
    adv, _ = _gigpo(rewards, anchors, uids, trajs, steps, gamma=0.5, mode="mean_norm", metrics=metrics)
    # u with gamma 0.5: G(a) = [0.5, 1], G(b) = [0, 0]; A_E(a) = 0.5 (undiscounted R); s0 = {0.5, 0} -> +-0.25
    torch.testing.assert_close(adv[:4], torch.tensor([0.75, 0.5, -0.75, -0.5], dtype=torch.float64))
    # v: one trajectory -> A_E = 0; G(c) = [0.25, 0.5, 1]; its s0 = {0.25, 1} (revisit, not u's s0) -> -0.375, +0.375
    torch.testing.assert_close(adv[4:], torch.tensor([-0.375, 0.0, 0.375], dtype=torch.float64))
    assert metrics["gigpo/singleton_episode_groups"] == 1.0
    assert metrics["gigpo/num_step_groups"] == 5.0  # u: s0, s1, s2; v: s0, x


def test_singleton_everything_is_exactly_zero():
    adv, _ = _gigpo([1.0, 2.0], ["p", "q"], ["u", "u"], ["t", "t"], [0, 1])
    assert adv.tolist() == [0.0, 0.0]


def test_zero_variance_groups_are_exactly_zero():
    # three identical trajectories (anchors s0, s1; rewards 0.3, 0.7): every group is constant -> exactly 0, no 0/0
    case = dict(
        rewards=[0.3, 0.7] * 3,
        anchors=["s0", "s1"] * 3,
        uids=["u"] * 6,
        trajs=["a", "a", "b", "b", "c", "c"],
        steps=[0, 1] * 3,
    )
    for mode in ("mean_std_norm", "mean_norm"):
        adv, _ = _gigpo(**case, gamma=0.9, mode=mode)
        assert adv.tolist() == [0.0] * 6, mode


def test_anchor_revisited_inside_a_trajectory():
    # a: s0, s1, s0 with rewards 0, 0, 1 -> G = [1, 1, 1]; b: s0, s2 with rewards 0, 0 -> G = [0, 0]
    case = dict(
        rewards=[0.0, 0.0, 1.0, 0.0, 0.0],
        anchors=["s0", "s1", "s0", "s0", "s2"],
        uids=["u"] * 5,
        trajs=["a", "a", "a", "b", "b"],
        steps=[0, 1, 2, 0, 1],
    )
    # A_E = +-0.5 (each trajectory once, not once per step); s0 = {a0: 1, a2: 1, b0: 0}, mean 2/3 -> 1/3, 1/3, -2/3
    adv, _ = _gigpo(**case, mode="mean_norm")
    torch.testing.assert_close(adv, torch.tensor([5 / 6, 0.5, 5 / 6, -7 / 6, -0.5], dtype=torch.float64))
    parts = compute_gigpo_components(
        torch.tensor(case["rewards"]),
        _obj(*case["anchors"]),
        _obj(*case["uids"]),
        _obj(*case["trajs"]),
        case["steps"],
        mode="mean_norm",
    )
    assert parts.step_group.tolist() == [0, 1, 0, 0, 2]


def test_gamma_below_one_both_modes_and_step_weight():
    # a: s0, s1, s2 rewards 0, 0, 1; b: s0, s1, s3 rewards 0, 1, 0; gamma 0.5
    case = dict(
        rewards=[0.0, 0.0, 1.0, 0.0, 1.0, 0.0],
        anchors=["s0", "s1", "s2", "s0", "s1", "s3"],
        uids=["u"] * 6,
        trajs=["a", "a", "a", "b", "b", "b"],
        steps=[0, 1, 2, 0, 1, 2],
    )
    parts = compute_gigpo_components(
        torch.tensor(case["rewards"]),
        _obj(*case["anchors"]),
        _obj(*case["uids"]),
        _obj(*case["trajs"]),
        case["steps"],
        gamma=0.5,
        mode="mean_norm",
    )
    # G(a) = [0.25, 0.5, 1], G(b) = [0.5, 1, 0]; R(a) = R(b) = 1 (undiscounted) -> A_E = 0
    assert parts.step_return.tolist() == [0.25, 0.5, 1.0, 0.5, 1.0, 0.0]
    assert parts.episode_advantage.tolist() == [0.0] * 6
    # mean_norm: s0 = {0.25, 0.5} -> -+0.125; s1 = {0.5, 1} -> -+0.25; s2, s3 singletons; omega = 0.5 halves them
    adv, _ = _gigpo(**case, gamma=0.5, mode="mean_norm", step_advantage_w=0.5)
    torch.testing.assert_close(adv, torch.tensor([-0.0625, -0.125, 0.0, 0.0625, 0.125, 0.0], dtype=torch.float64))
    # mean_std_norm: std{0.25, 0.5} = 0.25 / sqrt 2, std{0.5, 1} = 0.5 / sqrt 2
    z0 = 0.125 / (0.25 * SQRT_HALF + EPS)
    z1 = 0.25 / (0.5 * SQRT_HALF + EPS)
    adv, _ = _gigpo(**case, gamma=0.5)
    torch.testing.assert_close(adv, torch.tensor([-z0, -z1, 0.0, z0, z1, 0.0], dtype=torch.float64))


def test_invalid_action_penalty():
    # the worked example with b1 invalid, penalty 0.1: r(b) = [0, -0.1], R = 1, -0.1 (mean 0.45) -> A_E = +-0.55;
    # G(b) = [-0.1, -0.1]; s0 = {1, -0.1} -> +-0.55
    valid = np.array([True, True, True, False])
    adv, _ = _gigpo(**WORKED, mode="mean_norm", is_action_valid=valid, invalid_action_penalty=0.1)
    torch.testing.assert_close(adv, torch.tensor([1.1, 0.55, -1.1, -0.55], dtype=torch.float64))
    # the function's default penalty is 0 (the trainer's yaml sets 0.1)
    adv, _ = _gigpo(**WORKED, mode="mean_norm", is_action_valid=valid)
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.5, -1.0, -0.5], dtype=torch.float64))


# =====================================================================================================================
# anchors: arrays, dicts, canonicalisation, similarity
# =====================================================================================================================
def test_array_anchors():
    grid = np.array([[0, 1], [1, 0]])
    # b0 is an equal grid (another object, float dtype): same anchor; b1 has the same items in another shape: not
    anchors = [grid, np.array([[1, 1], [0, 0]]), grid.astype(np.float32).copy(), np.array([0, 1, 1, 0])]
    adv, _ = _gigpo(WORKED["rewards"], anchors, WORKED["uids"], WORKED["trajs"], WORKED["steps"], mode="mean_norm")
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.5, -1.0, -0.5], dtype=torch.float64))
    assert canonicalize_anchor(grid) == ((2, 2), (0, 1, 1, 0))
    assert canonicalize_anchor(np.array(["a", "b"])) == ((2,), ("a", "b"))


def test_dict_anchors():
    # key order, list vs tuple and numpy vs Python scalars do not matter
    anchors = [{"room": 1, "inv": ["key"]}, {"room": 2, "inv": []}, {"inv": ("key",), "room": np.int64(1)}, {"room": 3}]
    adv, _ = _gigpo(WORKED["rewards"], anchors, WORKED["uids"], WORKED["trajs"], WORKED["steps"], mode="mean_norm")
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.5, -1.0, -0.5], dtype=torch.float64))
    assert canonicalize_anchor(anchors[0]) == (("inv", ("key",)), ("room", 1))
    assert canonicalize_anchor({1: "a", "b": 2}) == ((1, "a"), ("b", 2))  # unorderable keys: by (type name, repr)


def test_canonicalisation_scalars_and_errors():
    assert canonicalize_anchor(np.float32(0.5)) == 0.5 and type(canonicalize_anchor(np.float32(0.5))) is float
    assert canonicalize_anchor([1, (2, "x")]) == (1, (2, "x"))
    assert canonicalize_anchor(float("nan")) is canonicalize_anchor(np.float64("nan"))  # one NaN: groups together
    for bad, name in ((None, "NoneType"), ({1, 2}, "set"), (b"x", "bytes"), ([1, object()], "object")):
        with pytest.raises(TypeError, match=name):
            canonicalize_anchor(bad)
    with pytest.raises(TypeError, match="NoneType"):
        _gigpo(WORKED["rewards"], ["s0", None, "s0", "s2"], WORKED["uids"], WORKED["trajs"], WORKED["steps"])


def test_string_anchor_similarity():
    # "abcd" vs "abce": 3 matching characters, ratio 2 * 3 / 8 = 0.75
    assert anchor_similarity_ratio("abcd", "abce") == 0.75
    anchors = ["abcd", "s1", "abce", "s2"]
    exact, _ = _gigpo(WORKED["rewards"], anchors, WORKED["uids"], WORKED["trajs"], WORKED["steps"], mode="mean_norm")
    torch.testing.assert_close(exact, torch.tensor([0.5, 0.5, -0.5, -0.5], dtype=torch.float64))  # A_E only
    merged, _ = _gigpo(
        WORKED["rewards"],
        anchors,
        WORKED["uids"],
        WORKED["trajs"],
        WORKED["steps"],
        mode="mean_norm",
        anchor_similarity=0.75,
    )
    torch.testing.assert_close(merged, torch.tensor([1.0, 0.5, -1.0, -0.5], dtype=torch.float64))
    strict, _ = _gigpo(
        WORKED["rewards"],
        anchors,
        WORKED["uids"],
        WORKED["trajs"],
        WORKED["steps"],
        mode="mean_norm",
        anchor_similarity=0.8,
    )
    torch.testing.assert_close(strict, exact)
    # clusters in sorted order: aaaa starts one; aaab (ratio 0.75 to aaaa) joins it; aabb (0.5 to aaaa) starts another
    parts = compute_gigpo_components(
        torch.zeros(3),
        _obj("aabb", "aaab", "aaaa"),
        _obj("u", "u", "u"),
        _obj("t0", "t1", "t2"),
        [0, 0, 0],
        anchor_similarity=0.75,
    )
    assert parts.step_group.tolist() == [0, 1, 1]


# =====================================================================================================================
# invariants
# =====================================================================================================================
def _random_batch(seed):
    rng = np.random.default_rng(seed)
    rewards, anchors, uids, trajs, steps, valid = [], [], [], [], [], []
    for u in range(3):
        for t in range(4):
            for s in range(int(rng.integers(1, 5))):
                rewards.append(float(rng.normal()))
                anchors.append(str(rng.choice(["room a", "room b", "room c", "hall"])))
                uids.append(f"u{u}")
                trajs.append(f"u{u}-t{t}")
                steps.append(s)
                valid.append(bool(rng.random() > 0.2))
    return rewards, anchors, uids, trajs, steps, np.array(valid)


@pytest.mark.parametrize("mode", ["mean_std_norm", "mean_norm"])
@pytest.mark.parametrize("similarity", [1.0, 0.8])
def test_permuting_rows_permutes_advantages(mode, similarity):
    rewards, anchors, uids, trajs, steps, valid = _random_batch(7)
    kw = dict(gamma=0.9, mode=mode, step_advantage_w=0.7, invalid_action_penalty=0.1, anchor_similarity=similarity)
    adv, _ = _gigpo(rewards, anchors, uids, trajs, steps, is_action_valid=valid, **kw)
    perm = np.random.default_rng(1).permutation(len(rewards))
    pick = lambda xs: [xs[i] for i in perm]  # noqa: E731
    adv_p, _ = _gigpo(
        pick(rewards), pick(anchors), pick(uids), pick(trajs), pick(steps), is_action_valid=valid[perm], **kw
    )
    torch.testing.assert_close(adv_p, adv[torch.from_numpy(perm)], rtol=1e-12, atol=1e-12)
    assert torch.isfinite(adv).all() and adv.abs().sum() > 0


# =====================================================================================================================
# registry, trainer-style call, valid-row filter, config
# =====================================================================================================================
def test_registered_and_exported():
    assert ca.get_adv_estimator_fn("gigpo") is compute_gigpo_outcome_advantage
    assert ca.get_adv_estimator_fn(ca.AdvantageEstimator.GIGPO) is ca.compute_gigpo_outcome_advantage


def _trainer_inputs(config, non_tensor_batch):
    """What ``ray_trainer.compute_advantage`` passes, plus the GiGPO batch fields."""
    # step rewards on the last token of responses of lengths 2, 1, 3, 2
    lengths = [2, 1, 3, 2]
    rewards = torch.zeros(4, 3)
    mask = torch.zeros(4, 3)
    for i, (r, n) in enumerate(zip(WORKED["rewards"], lengths)):
        rewards[i, n - 1] = r
        mask[i, :n] = 1
    inputs = dict(
        token_level_rewards=rewards,
        response_mask=mask,
        index=non_tensor_batch["uid"],
        gamma=config.gamma,
        lam=config.lam,
        norm_adv_by_std_in_grpo=True,
        config=config,
        values=None,
    )
    inputs.update(gigpo_batch_inputs(non_tensor_batch))
    return inputs, mask


def test_trainer_style_call_reads_config():
    config = load_default_config(["algorithm.adv_estimator=gigpo", "algorithm.gigpo.mode=mean_norm"]).algorithm
    batch = {
        "uid": _obj(*WORKED["uids"]),
        "traj_uid": _obj(*WORKED["trajs"]),
        "step_index": np.array(WORKED["steps"]),
        "anchor_obs": _obj(*WORKED["anchors"]),
        "raw_prompt": _obj(*["p"] * 4),
    }
    fn = ca.get_adv_estimator_fn(config.adv_estimator)
    inputs, mask = _trainer_inputs(config, batch)
    assert set(gigpo_batch_inputs(batch)) == {"traj_index", "step_index", "anchor_obs"}
    metrics = {}
    adv, _ = fn(**inputs, metrics=metrics)
    torch.testing.assert_close(adv, torch.tensor([1.0, 0.5, -1.0, -0.5]).unsqueeze(-1) * mask)
    assert metrics["gigpo/num_step_groups"] == 3.0
    # the yaml's penalty (0.1) applies once is_action_valid is in the batch: the invalid_action_penalty case
    batch["is_action_valid"] = np.array([True, True, True, False])
    inputs, mask = _trainer_inputs(config, batch)
    adv, _ = fn(**inputs)
    torch.testing.assert_close(adv, torch.tensor([1.1, 0.55, -1.1, -0.55]).unsqueeze(-1) * mask)
    # explicit step rewards win over token_level_rewards (whose dtype, float32, the result keeps)
    batch["step_reward"] = np.array([0.0, 0.0, 0.0, 0.0])
    inputs, _ = _trainer_inputs(config, batch)
    adv, _ = fn(**inputs)  # b1 still pays the penalty: R = 0, -0.1 -> A_E = +-0.05, s0 = {0, -0.1} -> +-0.05
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.1, 0.05, -0.1, -0.05]))
    # without the agent fields (single-turn batch) the error names them
    with pytest.raises(ValueError, match="anchor_obs.*traj_index.*step_index"):
        fn(**_trainer_inputs(config, {"uid": batch["uid"]})[0])


def test_invalid_reward_rows_left_out():
    # the worked example plus a trajectory c (anchor s0, reward 5) whose reward is invalid: it must not move u's stats
    rewards = torch.tensor([[0.0], [1.0], [0.0], [0.0], [5.0]])
    inputs = dict(
        token_level_rewards=rewards,
        response_mask=torch.ones(5, 1),
        index=_obj(*["u"] * 5),
        anchor_obs=_obj("s0", "s1", "s0", "s2", "s0"),
        traj_index=_obj("a", "a", "b", "b", "c"),
        step_index=np.array([0, 1, 0, 1, 0]),
        mode="mean_norm",
    )
    adv, _ = ca.compute_advantage_on_valid_rows(ca.get_adv_estimator_fn("gigpo"), [True] * 4 + [False], **inputs)
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.0, 0.5, -1.0, -0.5, 0.0]))


def test_input_errors():
    base = dict(WORKED)
    with pytest.raises(ValueError, match="step_index 1"):
        _gigpo(**{**base, "steps": [0, 1, 1, 1]})  # trajectory b has two rows at step 1
    with pytest.raises(ValueError, match="more than one uid"):
        _gigpo(**{**base, "uids": ["u", "v", "u", "u"]})
    with pytest.raises(ValueError, match="3 entries for a batch of 4"):
        _gigpo(**{**base, "anchors": ["s0", "s1", "s0"]})
    with pytest.raises(ValueError, match="algorithm.gigpo.mode"):
        _gigpo(**base, mode="z_score")
    with pytest.raises(ValueError, match="algorithm.gigpo.anchor_similarity"):
        _gigpo(**base, anchor_similarity=0.0)
    with pytest.raises(ValueError, match="algorithm.gigpo.epsilon"):
        _gigpo(**base, epsilon=0.0)
    with pytest.raises(ValueError, match="empty batch"):
        _gigpo([], [], [], [], [])


def test_config_accepts_gigpo_and_names_bad_keys():
    base = [
        "trainer.device=cpu",
        "trainer.n_gpus_per_node=1",
        "data.train_batch_size=8",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",
        "algorithm.adv_estimator=gigpo",
        "env.env_name=line_world",  # GiGPO groups agent steps: agent mode only
    ]
    cfg = normalize_config(load_default_config(base))
    validate_config(cfg, check_files=False)
    assert cfg.critic.enable is False
    assert dict(cfg.algorithm.gigpo) == {
        "step_advantage_w": 1.0,
        "mode": "mean_std_norm",
        "epsilon": 1e-6,
        "invalid_action_penalty": 0.1,
        "anchor_similarity": 1.0,
        "default_step_reward": 0.0,
    }
    for override, key in (
        ("algorithm.gigpo.mode=zscore", "algorithm.gigpo.mode"),
        ("algorithm.gigpo.anchor_similarity=1.5", "algorithm.gigpo.anchor_similarity"),
        ("algorithm.gigpo.invalid_action_penalty=-1", "algorithm.gigpo.invalid_action_penalty"),
    ):
        cfg = normalize_config(load_default_config(base + [override]))
        with pytest.raises(ConfigError, match=key):
            validate_config(cfg, check_files=False)


def test_trainer_compute_advantage_passes_the_step_fields():
    """`ray_trainer.compute_advantage(..., "gigpo", ...)` reads traj_uid / step_index / anchor_obs from the batch and
    reproduces the spec's worked example (mean_norm, γ = 1, ω = 1, no penalty): a0=1, a1=0.5, b0=-1, b1=-0.5."""

    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    rewards, mask = torch.zeros(4, 3), torch.ones(4, 3)
    rewards[1, -1] = 1.0  # trajectory a ends with reward 1, trajectory b with 0
    data = DataProto.from_dict(
        {"token_level_rewards": rewards, "response_mask": mask},
        {
            "uid": np.array(["u"] * 4, dtype=object),
            "traj_uid": np.array(["a", "a", "b", "b"], dtype=object),
            "step_index": np.array([0, 1, 0, 1]),
            "anchor_obs": np.array(["s0", "s1", "s0", "s2"], dtype=object),
        },
    )
    algo = default_section(
        "algorithm",
        gamma=1.0,
        lam=1.0,
        gigpo={
            "mode": "mean_norm",
            "step_advantage_w": 1.0,
            "invalid_action_penalty": 0.0,
            "epsilon": 1e-6,
            "anchor_similarity": 1.0,
        },
    )
    advantages = compute_advantage(data, "gigpo", algo).batch["advantages"]
    torch.testing.assert_close(advantages[:, 0], torch.tensor([1.0, 0.5, -1.0, -0.5]))
