"""``bootstrap_metric``, ``calc_maj_val`` and ``process_validation_metrics`` (upstream verl's validation statistics
over several samples per prompt) on hand-worked cases, and the names they are logged under."""

import numpy as np
import pytest

from verl.trainer.ppo.metric_utils import (
    bootstrap_metric,
    calc_maj_val,
    process_validation_metrics,
    validation_metric_names,
)


def test_bootstrap_draws_upstreams_numbers_without_touching_numpys_global_state():
    data, k, n = [3.0, 1.0, 4.0, 1.0, 5.0], 3, 200
    state = np.random.get_state()
    (mean_max, std_max), (mean_min, _) = bootstrap_metric(data, k, [np.max, np.min], n_bootstrap=n, seed=7)
    after = np.random.get_state()
    assert all(np.array_equal(a, b) if isinstance(a, np.ndarray) else a == b for a, b in zip(state, after))
    # upstream's procedure: seed the global generator, draw indices, reduce each row
    np.random.seed(7)
    idx = np.random.choice(len(data), size=(n, k), replace=True)
    maxima = np.array(data)[idx].max(axis=1)
    assert mean_max == pytest.approx(maxima.mean()) and std_max == pytest.approx(maxima.std())
    assert mean_min == pytest.approx(np.array(data)[idx].min(axis=1).mean())
    np.random.set_state(state)


def test_best_of_two_of_a_coin_is_three_quarters():
    # max of 2 draws with replacement from {0, 1}: P(1) = 3/4; 4000 draws: se = sqrt(3/16 / 4000) ~ 0.007
    [(best, _)] = bootstrap_metric([0.0, 1.0], 2, [np.max], n_bootstrap=4000, seed=0)
    assert best == pytest.approx(0.75, abs=0.03)


def test_majority_vote_takes_the_first_value_of_the_commonest_answer_and_ties_go_first_seen():
    votes = [{"pred": "A", "val": 0.9}, {"pred": "B", "val": 0.8}, {"pred": "A", "val": 0.7}]
    assert calc_maj_val(votes, vote_key="pred", val_key="val") == 0.9
    assert calc_maj_val(votes[:2], vote_key="pred", val_key="val") == 0.9  # 1-1 tie: A was seen first


def test_per_prompt_statistics_averaged_over_prompts_of_a_source():
    sources = ["s"] * 4 + ["t"] * 2
    uids = ["p", "p", "q", "q", "r", "r"]
    infos = {"reward": [1.0, 0.0, 1.0, 1.0, 0.0, 0.0], "pred": ["A", "B", "A", "A", "x", "x"], "note": ["a"] * 6}
    out = process_validation_metrics(sources, uids, infos, seed=1)
    s = out["s"]["reward"]
    assert s["mean@2"] == pytest.approx(0.75)  # prompt p: 0.5, prompt q: 1.0
    assert s["std@2"] == pytest.approx(0.25)  # p: 0.5, q: 0
    assert 0.5 < s["best@2/mean"] < 1.0 and 0.5 <= s["worst@2/mean"] < 0.75  # q is always 1
    assert "maj@2/mean" in s and "note" not in out["s"] and "pred" not in out["s"]  # strings are not variables
    assert out["t"]["reward"]["mean@2"] == 0.0 and out["t"]["reward"]["best@2/std"] == 0.0
    one = process_validation_metrics(["s"], ["p"], {"reward": [2.0]})
    assert one == {"s": {"reward": {"mean@1": 2.0}}}  # one sample: its mean only


def test_sizes_and_names_follow_upstream():
    out = process_validation_metrics(["s"] * 5, ["p"] * 5, {"reward": [0.0, 1.0, 2.0, 3.0, 4.0]})
    assert sorted({m.split("/")[0] for m in out["s"]["reward"]}) == [
        "best@2",
        "best@4",
        "best@5",
        "mean@5",
        "std@5",
        "worst@2",
        "worst@4",
        "worst@5",
    ]
    names = validation_metric_names({"s": {"reward": out["s"]["reward"], "format": {"mean@5": 1.0}}})
    assert "val-core/s/reward/mean@5" in names and "val-core/s/reward/best@5/mean" in names
    assert "val-aux/s/reward/best@2/mean" in names and "val-aux/s/reward/worst@5/mean" in names
    assert "val-aux/s/format/mean@5" in names  # not the core variable
    acc = validation_metric_names({"s": {"acc": {"mean@1": 1.0}, "reward": {"mean@1": 0.5}}})
    assert acc == {"val-core/s/acc/mean@1": 1.0, "val-aux/s/reward/mean@1": 0.5}  # acc is core when present


def test_misaligned_lists_are_refused():
    with pytest.raises(ValueError, match="reward has 1 values for 2 samples"):
        process_validation_metrics(["s", "s"], ["p", "p"], {"reward": [1.0]})


def test_rlla_samples_are_voted_on_their_tool_calls():
    """The RLLA scorer's ``pred`` (``rlla.answer_of``): equal calls written differently share an answer, so ``maj@3``
    of [right, right (other spacing and key order), wrong] is the right answer's score, while ``mean@3`` is not."""
    from verl.utils.reward_score import default_compute_score

    gt = '<think> x </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1", "n": 2}}\n</tool_call>'
    right = '<think> a </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1", "n": 2}}\n</tool_call>'
    same = '<think> b </think>\n<tool_call>\n{"parameters": {"n": 2,  "page": "1"}, "name": "GetNews"}\n</tool_call>'
    wrong = '<think> c </think>\n<tool_call>\n{"name": "GetWeather", "parameters": {"city": "Oslo"}}\n</tool_call>'
    info = {"step": 0, "wrapper": "none"}
    scored = [default_compute_score("rlla", text, gt, info) for text in (wrong, right, same)]
    assert scored[1]["pred"] == scored[2]["pred"] != scored[0]["pred"]
    assert scored[1]["score"] > scored[0]["score"]
    answer = default_compute_score("rlla", "<think> t </think>\n<response> Oslo </response>", gt, info)["pred"]
    assert answer == "response:Oslo"
    assert default_compute_score("rlla", "<tool_call>\n{not json\n</tool_call>", gt, info)["pred"] == "unreadable"
    out = process_validation_metrics(
        ["rlla"] * 3,
        ["p"] * 3,
        {"reward": [s["score"] for s in scored], "pred": [s["pred"] for s in scored]},
        seed=0,
    )["rlla"]["reward"]
    # a bootstrap draw of 3 votes wrong when it holds the wrong answer at least twice: 7 of the 27 equally likely
    # ordered draws (3 * 2 with it twice, 1 with it thrice); 1000 draws: standard error ~0.014 of the gap
    right_score, wrong_score = scored[1]["score"], scored[0]["score"]
    assert out["mean@3"] == pytest.approx((2 * right_score + wrong_score) / 3)
    expected = (20 * right_score + 7 * wrong_score) / 27
    assert out["maj@3/mean"] == pytest.approx(expected, abs=0.05 * (right_score - wrong_score))
