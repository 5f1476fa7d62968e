"""experiments/scripts/does_it_learn_summary.py: the decision F1 of a routing policy in expectation, which gain it
reads, the budget phase a head was trained in, and that the committed result files it lists give experiments/results.md's
figures."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import REPO_ROOT
from verl.trainer.tool_cost import tool_cost_metrics

_spec = importlib.util.spec_from_file_location(
    "does_it_learn_summary", REPO_ROOT / "experiments" / "scripts" / "does_it_learn_summary.py"
)
summary_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(summary_script)


def _point(n_call, f_call, n_no_call, f_no_call):
    return {
        "ground_truth_calls_a_tool": {"rows": n_call, "tool_route_frac": f_call},
        "ground_truth_calls_no_tool": {"rows": n_no_call, "tool_route_frac": f_no_call},
    }


def test_expected_decision_f1_by_hand():
    # 4 prompts want a call, half the mass on tool routes: TP 2, FN 2; 2 want none, a quarter: FP 0.5.
    # Random routing at the same overall rate r = (2 + 0.5)/6: TP 4r, FN 4(1 − r), FP 2r
    r = 2.5 / 6
    ours, random_f1 = summary_script.expected_decision_f1(_point(4, 0.5, 2, 0.25))
    assert ours == pytest.approx(4 / 6.5) and random_f1 == pytest.approx(8 * r / (8 * r + 2 * r + 4 * (1 - r)))
    # no tool route where a call is wanted: F1 0; nothing to decide: None
    assert summary_script.expected_decision_f1(_point(3, 0.0, 1, 1.0))[0] == 0.0
    assert summary_script.expected_decision_f1(_point(0, None, 5, 0.0)) == (None, None)


def test_expected_decision_f1_equals_the_evaluations_on_a_deterministic_policy():
    # 5 prompts want a call (3 routed to a tool), 3 want none (1 routed to a tool)
    wants = [True] * 5 + [False] * 3
    made = [True, True, True, False, False, True, False, False]
    ours = summary_script.expected_decision_f1(_point(5, 3 / 5, 3, 1 / 3))[0]
    theirs = tool_cost_metrics([int(m) for m in made], wants, [False] * 8)["decision_f1"]
    assert ours == pytest.approx(theirs)


def test_head_gain_prefers_the_heads_own_tool_split_and_names_the_file():
    same_cost = {"score": {"mean": 0.2, "se": 0.1}}
    same_split = {"score": {"mean": 0.3, "se": 0.0}}
    gain = summary_script.head_gain(
        {summary_script.SEARCH_ONLY: same_cost, summary_script.OWN_SPLIT: same_split}, "f.json:p"
    )
    assert (gain["mean"], gain["t"], gain["versus"]) == (0.3, None, "paired_vs_random_same_cost_same_split_expected")
    gain = summary_script.head_gain({summary_script.SEARCH_ONLY: same_cost}, "f.json:p")
    assert gain["t"] == pytest.approx(2.0) and gain["versus"] == summary_script.SEARCH_ONLY
    with pytest.raises(KeyError, match="f.json:p"):
        summary_script.head_gain({}, "f.json:p")


def test_last_third_reads_the_budget_phase_and_its_final_lambda():
    progress = {
        "budget_phases": [
            {"budget": 0.3, "steps": [1, 3], "last_third_cost": 0.31},
            {"budget": 0.5, "steps": [4, 5], "last_third_cost": 0.49},
        ],
        "train_steps": [{"step": s, "router/lambda": float(s), "timing_s/step": 60.0 * s} for s in range(1, 6)],
    }
    assert summary_script.last_third(progress, 0) == {
        "budget": 0.3,
        "policy_cost_last_third": 0.31,
        "last_step": 3,
        "final_lambda": 3.0,
        "steps": 3,
        "median_step_s": 120.0,
        "step_hours": 360.0 / 3600,
    }
    second = summary_script.last_third(progress, 1)
    assert (second["final_lambda"], second["steps"], second["median_step_s"]) == (5.0, 2, 270.0)
    with pytest.raises(KeyError, match="p.json has 2 budget phase"):
        summary_script.last_third(progress, 2, "p.json")
    # one phase, no budget_phases: the policy's cost, never the stratified copies' mean_cost
    single = {
        "last_third": {"steps": [2, 3], "budget": 0.3, "mean_cost": 0.66, "policy_cost": 0.29},
        "train_steps": progress["train_steps"],
    }
    assert summary_script.last_third(single)["policy_cost_last_third"] == 0.29
    del single["last_third"]["policy_cost"]
    with pytest.raises(KeyError, match="policy_cost"):
        summary_script.last_third(single, 0, "q.json")
    single["last_third"]["policy_cost"], single["train_steps"] = 0.29, []
    with pytest.raises(KeyError, match="q.json logs no router/lambda at step 3"):
        summary_script.last_third(single, 0, "q.json")


def test_the_committed_results_give_the_readmes_figures(tmp_path):
    summary = summary_script.summarise()
    heads = {h["item"]: h for h in summary["heads"]}
    # item 7: item 6's run resumed at B = 0.5 (experiments/notebook.md, item 7: 0.489 against 0.5, trained λ 4.13)
    assert heads["7"]["training"]["budget"] == 0.5
    assert heads["7"]["training"]["policy_cost_last_third"] == pytest.approx(0.4888)
    assert heads["7"]["training"]["final_lambda"] == pytest.approx(4.13, abs=5e-3)
    assert heads["6"]["training"]["final_lambda"] == pytest.approx(4.42, abs=5e-3)
    # item 12 re-priced on BFCL rows 31-60: +0.101 ± 0.017, 6.1 standard errors (its pre-registered test)
    bfcl = next(s for s in heads["12"]["samples"] if s["sample"] == "BFCL rows 31-60, re-priced")
    assert bfcl["gain_vs_random_same_cost"]["mean"] == pytest.approx(0.101, abs=5e-4)
    assert bfcl["gain_vs_random_same_cost"]["t"] == pytest.approx(6.1, abs=0.05)
    seed2 = {(r["decoding"], r["metric"]): r for r in summary["grpo"] if r["run"] == "16x4 seed 2, step 20"}
    sampled, bfcl20 = seed2[("sampled at 0.5", "correctness")], seed2[("greedy", "bfcl_accuracy")]
    assert sampled["gain"] == pytest.approx(0.26, abs=5e-3) and sampled["t"] == pytest.approx(2.13, abs=5e-3)
    assert (bfcl20["before"], bfcl20["after"], bfcl20["prompts"]) == (
        pytest.approx(0.217, abs=5e-4),
        pytest.approx(0.189, abs=5e-4),
        212,
    )
    # the committed summary is what the committed files give now
    committed = json.loads((REPO_ROOT / "experiments" / "runs" / "summary" / "does_it_learn.json").read_text())
    committed.pop("command")
    assert committed == json.loads(json.dumps(summary))
    # the markdown table has a row per sample and per GRPO comparison
    table = summary_script.markdown(summary)
    rows = 2 * 2 + sum(len(h["samples"]) for h in summary["heads"]) + len(summary["grpo"])
    assert sum(line.startswith("|") for line in table.splitlines()) == rows
    # a listed file that is missing is named
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        summary_script.summarise(tmp_path)
