"""experiments/scripts/router_frontier.py: a stochastic routing policy scored exactly in expectation over its routes
(greedy decoding fixes each route's response), by hand on two prompts."""

from __future__ import annotations

import importlib.util

import pytest

from conftest import REPO_ROOT

_spec = importlib.util.spec_from_file_location(
    "router_frontier", REPO_ROOT / "experiments" / "scripts" / "router_frontier.py"
)
frontier = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(frontier)


def _values(score_p, score_q, cost, calls=None):
    """One route's values on prompts p (never an exact match) and q (always one); ``calls`` readable tool calls in
    each response (default: 1 where the route costs, 0 where not)."""
    calls = int(cost > 0) if calls is None else calls
    return {
        ("rlla", 0, 0): {
            "cost": cost,
            "num_calls": calls,
            "made_call": calls > 0,
            "score": score_p,
            "format": 1.0,
            "correctness": score_p - 1,
            "exact_match": 0.0,
        },
        ("rlla", 1, 0): {
            "cost": cost,
            "num_calls": calls,
            "made_call": calls > 0,
            "score": score_q,
            "format": 1.0,
            "correctness": score_q - 1,
            "exact_match": 1.0,
        },
    }


def test_expected_point_and_paired_gain_by_hand():
    # prompt p: ANSWER scores -3, the tools +3; prompt q: ANSWER 1, the tools -1 (tools cost 1, ANSWER 0)
    # SEARCH's responses make two calls, CALCULATE's one
    values = {
        "ANSWER": _values(-3.0, 1.0, 0.0),
        "SEARCH": _values(3.0, -1.0, 1.0, calls=2),
        "CALCULATE": _values(3.0, -1.0, 1.0),
    }
    needs = {("rlla", 0, 0): True, ("rlla", 1, 0): False}
    # a router that puts 0.8 on the tools for p and 0.2 for q: per prompt cost 0.8 / 0.2, score 1.8 / 0.6
    smart = {
        ("rlla", 0, 0): {"ANSWER": 0.2, "SEARCH": 0.5, "CALCULATE": 0.3},
        ("rlla", 1, 0): {"ANSWER": 0.8, "SEARCH": 0.2, "CALCULATE": 0.0},
    }
    point = frontier.expected_point(smart, values, needs)
    # the tool-cost block on expected counts: P(call) 0.8 on p (wants one), 0.2 on q (does not): TP 0.8, FN 0.2,
    # FP 0.2, TN 0.8; expected calls 0.5·2 + 0.3·1 = 1.3 on p and 0.2·2 = 0.4 on q; q is always exact, p never
    cost = point["tool_cost"]
    assert cost["rows"] == 2 and cost["tool_use_rate"] == pytest.approx(0.5)
    assert cost["calls_per_prompt"] == pytest.approx(0.85)
    assert (
        cost["decision_accuracy"],
        cost["decision_precision"],
        cost["decision_recall"],
        cost["decision_f1"],
    ) == pytest.approx((0.8, 0.8, 0.8, 0.8))
    assert cost["tool_productivity"] == pytest.approx(1.0 / 1.7)
    assert point["mean_cost"] == pytest.approx(0.5)
    assert point["score"]["mean"] == pytest.approx(1.2) and point["score"]["se"] == pytest.approx(0.6)
    assert point["ground_truth_calls_a_tool"]["tool_route_frac"] == pytest.approx(0.8)
    assert point["ground_truth_calls_no_tool"]["tool_route_frac"] == pytest.approx(0.2)
    assert point["routes"]["ANSWER"] == pytest.approx(1.0)  # expected counts: 0.2 + 0.8
    # in hindsight a tool pays on p (+3 > −3) and not on q (−1 < 1): the same split here, one prompt each
    assert point["tool_pays"] == {"rows": 1, "tool_route_frac": pytest.approx(0.8)}
    assert point["tool_does_not_pay"] == {"rows": 1, "tool_route_frac": pytest.approx(0.2)}
    # a tie (tool route scores the same as ANSWER) does not count as paying
    tie = {**values, "SEARCH": _values(-3.0, -1.0, 1.0), "CALCULATE": _values(-3.0, -1.0, 1.0)}
    assert frontier.expected_point(smart, tie, needs)["tool_pays"] == {"rows": 0, "tool_route_frac": None}
    # random routing at the same cost (rate 0.5): per prompt score 0 / 0 -> the router gains 1.8 and 0.6
    random = frontier.expected_point({k: {"ANSWER": 0.5, "SEARCH": 0.5} for k in needs}, values, needs)
    assert random["mean_cost"] == pytest.approx(0.5) and random["score"]["mean"] == pytest.approx(0.0)
    gain = frontier.paired_expected(random, point)
    assert gain["score"]["mean"] == pytest.approx(1.2) and gain["score"]["se"] == pytest.approx(0.6)
    # the same through score_in_expectation: paired against random at rate B = 0.3 and at its own cost (rate 0.5)
    random_b = frontier.expected_point({k: {"ANSWER": 0.7, "SEARCH": 0.3} for k in needs}, values, needs)
    scored, matched = frontier.score_in_expectation(smart, values, needs, random_b)
    assert matched["rate"] == pytest.approx(0.5) and "per_prompt" not in scored
    assert scored["paired_vs_random_same_cost_expected"]["score"]["mean"] == pytest.approx(1.2)
    # random at 0.3: per prompt score −1.2 / +0.4 -> gains 3.0 and 0.2
    assert scored["paired_vs_random_expected"]["score"]["mean"] == pytest.approx(1.6)
    assert "paired_vs_random_same_cost_same_split_expected_by_rows" not in scored
    # split at file row 1: the same pairs against the whole sample's random policy, one prompt in each part. The
    # policy's split is 0.7 : 0.3 SEARCH : CALCULATE, both tools cost 1, so random at its cost is rate 0.5 again:
    # per prompt score 0 / 0, gains 1.8 (row 0, tool mass 0.8) and 0.6 (row 1, tool mass 0.2); one prompt: no se
    parts = frontier.score_in_expectation(smart, values, needs, random_b, split_at_row=1)[0][
        "paired_vs_random_same_cost_same_split_expected_by_rows"
    ]
    assert set(parts) == {"rows < 1", "rows >= 1"}
    assert parts["rows < 1"]["rows"] == 1 and parts["rows < 1"]["tool_route_frac"] == pytest.approx(0.8)
    assert parts["rows < 1"]["score"]["mean"] == pytest.approx(1.8) and parts["rows < 1"]["score"]["se"] is None
    assert parts["rows >= 1"]["score"]["mean"] == pytest.approx(0.6)
    assert parts["rows >= 1"]["tool_route_frac"] == pytest.approx(0.2)
    # a split past every row leaves one part, the whole sample's gain
    whole = frontier.score_in_expectation(smart, values, needs, random_b, split_at_row=5)[0][
        "paired_vs_random_same_cost_same_split_expected_by_rows"
    ]
    assert list(whole) == ["rows < 5"] and whole["rows < 5"]["score"]["mean"] == pytest.approx(1.2)


def test_progress_budget_phases_take_the_last_third_of_each_budget():
    spec = importlib.util.spec_from_file_location(
        "router_progress", REPO_ROOT / "experiments" / "scripts" / "router_progress.py"
    )
    progress = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(progress)
    # steps 1-6 at B = 0.3 (last third: steps 5, 6), steps 7-9 at B = 0.5 (last third: step 9)
    costs = [0.9, 0.6, 0.4, 0.3, 0.32, 0.26, 0.4, 0.45, 0.52]
    train = [
        {"step": i + 1, "router/budget": 0.3 if i < 6 else 0.5, "router/policy_cost": c} for i, c in enumerate(costs)
    ]
    first, second = progress.budget_phases(train)
    assert first["steps"] == [1, 6] and first["last_third_steps"] == [5, 6]
    assert first["last_third_cost"] == pytest.approx(0.29) and first["last_third_cost_minus_budget"] == pytest.approx(
        -0.01
    )
    assert second["budget"] == 0.5 and second["last_third_steps"] == [9, 9]
    assert second["last_third_cost"] == pytest.approx(0.52)


def test_policy_point_reports_the_decision_f1_and_tool_productivity():
    # three prompts: a tool-needing one routed to SEARCH and answered exactly with 2 calls, a tool-needing one routed
    # to ANSWER (no call), a no-call one routed to SEARCH that still called once (wrong)
    rows = [
        {"data_source": "rlla", "row": i, "sample": 0, "route": route, "ground_truth": gt}
        for i, (route, gt) in enumerate(
            [
                ("SEARCH", "<tool_call>x</tool_call>"),
                ("ANSWER", "<tool_call>y</tool_call>"),
                ("SEARCH", "<response>z</response>"),
            ]
        )
    ]
    values = {
        ("rlla", i, 0): {
            "cost": float(n > 0),
            "num_calls": n,
            "made_call": n > 0,
            "score": 0.0,
            "format": 0.0,
            "correctness": 0.0,
            "exact_match": em,
        }
        for i, (n, em) in enumerate([(2, 1.0), (0, 0.0), (1, 0.0)])
    }
    point = frontier.policy_point(rows, values)
    cost = point["tool_cost"]
    # calls on rows 0 and 2; the ground truth wants them on rows 0 and 1: tp 1, fp 1, fn 1 -> F1 = 2/4
    assert cost["decision_f1"] == pytest.approx(0.5) and cost["tool_use_rate"] == pytest.approx(2 / 3)
    assert cost["calls_per_prompt"] == pytest.approx(1.0)
    assert cost["tool_productivity"] == pytest.approx(1 / 3)  # one exact answer for three calls
    assert point["ground_truth_calls_a_tool"]["tool_route_frac"] == pytest.approx(0.5)


def test_bfcl_frontier_scores_routes_with_bfcl_checker_by_hand(tmp_path, monkeypatch):
    """--benchmark bfcl end to end on four BFCL rows (two simple_python, two irrelevance): the ANSWER route never calls
    (right only on irrelevance), the SEARCH route calls the oracle call on simple_python and a call on irrelevance
    (right only on simple_python), the CALCULATE route the same but no call on the second simple_python row; the
    head's policy, read from the router_probs the answer file records, puts 0.8 of its mass on SEARCH for
    simple_python and 0.1 + 0.1 on the tools for irrelevance."""
    import json
    import sys

    from verl.utils.dataset import bfcl

    rows = bfcl.bfcl_rlla_rows("simple_python,irrelevance", max_rows=2)
    entries = {e["id"]: e for c in ("simple_python", "irrelevance") for e in bfcl.load_category(c, max_rows=2)}
    some_call = "<think> x </think>\n<tool_call>\n" + json.dumps({"name": "f", "parameters": {}}) + "\n</tool_call>"

    def write(name, route, response_of):
        out = tmp_path / f"{name}.jsonl"
        with out.open("w") as f:
            for i, row in enumerate(rows):
                entry = entries[row["extra_info"]["bfcl_id"]]
                response = response_of(entry, i)
                simple = row["extra_info"]["bfcl_category"] == "simple_python"
                probs = (
                    {"ANSWER": 0.2, "SEARCH": 0.8, "CALCULATE": 0.0}
                    if simple
                    else {"ANSWER": 0.8, "SEARCH": 0.1, "CALCULATE": 0.1}
                )
                f.write(
                    json.dumps(
                        {
                            "index": i,
                            "row": i,
                            "route": route,
                            "router_probs": probs,
                            "response": response,
                            "data_source": "bfcl",
                            "ground_truth": row["reward_model"]["ground_truth"],
                            "bfcl_id": entry["id"],
                            "bfcl_category": row["extra_info"]["bfcl_category"],
                        }
                    )
                    + "\n"
                )
        return f"{name}={out}"

    answer = write("answer", "ANSWER", lambda e, i: bfcl.NO_CALL_RESPONSE)  # rows 0, 1 simple_python; 2, 3 irrelevance
    search = write("search", "SEARCH", lambda e, i: bfcl.oracle_response(e) if i < 2 else some_call)
    calculate = write(
        "calculate",
        "CALCULATE",
        lambda e, i: bfcl.oracle_response(e) if i == 0 else bfcl.NO_CALL_RESPONSE if i == 1 else some_call,
    )
    out = tmp_path / "f.json"
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "router_frontier.py",
            answer,
            search,
            calculate,
            "--budget",
            "0.3",
            "--reference",
            "answer",
            "--benchmark",
            "bfcl",
            "--expected",
            "learned",
            "--policy",
            answer.replace("answer=", "learned="),
            "--output",
            str(out),
        ],
    )
    frontier.main()
    points = json.loads(out.read_text())["points"]
    assert points["answer"]["score"]["mean"] == 0.5 and points["answer"]["mean_cost"] == 0.0  # right on irrelevance
    assert points["search"]["score"]["mean"] == 0.5 and points["search"]["mean_cost"] == 1.0  # right on simple
    assert points["calculate"]["score"]["mean"] == 0.25 and points["calculate"]["mean_cost"] == 0.75
    paired = points["search"]["paired_vs_answer"]  # +1, +1, −1, −1: BFCL's verdicts paired by BFCL id
    score = paired["metrics"]["score"]
    assert score["gain"] == 0.0 and (score["wins"], score["losses"]) == (2, 2)
    assert paired["categories"]["simple_python"]["score"]["gain"] == 1.0
    assert paired["categories"]["irrelevance"]["score"]["gain"] == -1.0
    assert points["search"]["ground_truth_calls_no_tool"] == {"rows": 2, "tool_route_frac": 1.0}
    learned = points["learned_expected"]
    # per prompt: simple 0.8 (cost 0.8), irrelevance 0.8 (cost 0.2) -> accuracy 0.8, cost 0.5
    assert learned["score"]["mean"] == pytest.approx(0.8) and learned["mean_cost"] == pytest.approx(0.5)
    assert learned["tool_pays"] == {"rows": 2, "tool_route_frac": pytest.approx(0.8)}
    assert learned["tool_route_frac_by_group"] == {
        "simple_python": pytest.approx(0.8),
        "irrelevance": pytest.approx(0.2),
    }
    assert learned["tool_does_not_pay"] == {"rows": 2, "tool_route_frac": pytest.approx(0.2)}
    # random at its own cost (rate 0.5): accuracy 0.5 everywhere -> gain +0.3 on every prompt
    assert points["random_same_cost_expected"]["rate"] == pytest.approx(0.5)
    gain = learned["paired_vs_random_same_cost_expected"]["score"]
    assert gain["mean"] == pytest.approx(0.3) and gain["se"] == pytest.approx(0.0, abs=1e-12)
    # with the head's own tool split (SEARCH 1.8 : CALCULATE 0.2 of its tool mass): mixed tool cost 0.975, rate
    # r = 0.5 / 0.975; random scores r, 0.9 r, 1 − r, 1 − r per prompt against the head's 0.8 each
    same_split = learned["paired_vs_random_same_cost_same_split_expected"]
    r = 0.5 / 0.975
    assert same_split["search_share"] == pytest.approx(0.9) and same_split["rate"] == pytest.approx(r)
    assert same_split["score"]["mean"] == pytest.approx((1.2 + 0.1 * r) / 4)
    assert set(learned) >= {"score"} and "correctness" not in learned  # BFCL's one metric
    # --calibrate: the same head re-priced so that its mean route cost c̄ over these prompts is the budget (c̄ = 0, 1,
    # 1, τ = 1, the rows' probabilities read at the checkpoint's λ = 0.5: they record no router_lambda). With u =
    # e^−(λ−0.5) the tool probability is 4u / (1 + 4u) on simple_python and u / (4 + u) on irrelevance
    import math

    import torch

    from verl.router import checkpoint
    from verl.router.value import reprice_probs

    monkeypatch.setattr(
        checkpoint, "resolve_checkpoint", lambda path: type("F", (), {"step_dir": path, "config_file": path})()
    )
    monkeypatch.setattr(checkpoint, "load_checkpoint_config", lambda path: type("C", (), {"router": None})())
    monkeypatch.setattr(
        checkpoint, "load_value_policy", lambda step, cfg: (torch.zeros(3), torch.tensor([0.0, 1.0, 1.0]), 0.5, 1.0)
    )
    monkeypatch.setattr(sys, "argv", sys.argv + ["--calibrate", "CKPT"])
    frontier.main()
    points = json.loads(out.read_text())["points"]
    calibrated = points["learned_calibrated_expected"]
    info = calibrated["calibration"]
    u = math.exp(-(info["lambda"] - 0.5))
    simple, irrelevance = 4 * u / (1 + 4 * u), u / (4 + u)
    assert (simple + irrelevance) / 2 == pytest.approx(0.3, abs=1e-5)  # the budget, spent in c̄
    assert info["checkpoint_lambda"] == 0.5 and info["calibrated_on"] == "these prompts"
    assert info["rows_without_router_lambda"] == 8  # the 4 rows, read as the table and as the calibration rows
    assert info["route_cost_spent"] == pytest.approx(0.3, abs=1e-5)
    # accuracy: SEARCH is right on simple_python, ANSWER on irrelevance (the realised cost: 0.3 as well here)
    assert calibrated["score"]["mean"] == pytest.approx((simple + (1 - irrelevance)) / 2, abs=1e-6)
    assert calibrated["mean_cost"] == pytest.approx(0.3, abs=1e-5)
    assert points["random_same_cost_as_calibrated_expected"]["rate"] == pytest.approx(0.3, abs=1e-5)
    # --calibrate_on: the price set on another file's rows — here the same prompts recorded at λ = 2 (their
    # router_lambda): the same λ, and the table (recorded at the checkpoint's 0.5) moved to it
    lines = [json.loads(line) for line in (tmp_path / "answer.jsonl").read_text().splitlines()]
    at_2 = reprice_probs(
        torch.tensor([[r["router_probs"][a] for a in ("ANSWER", "SEARCH", "CALCULATE")] for r in lines]),
        torch.tensor([0.0, 1.0, 1.0]),
        0.5,
        2.0,
        1.0,
    )
    (tmp_path / "at2.jsonl").write_text(
        "".join(
            json.dumps(
                {**r, "router_lambda": 2.0, "router_probs": dict(zip(("ANSWER", "SEARCH", "CALCULATE"), p.tolist()))}
            )
            + "\n"
            for r, p in zip(lines, at_2)
        )
    )
    argv = sys.argv
    monkeypatch.setattr(sys, "argv", argv + ["--calibrate_on", str(tmp_path / "at2.jsonl")])
    frontier.main()
    again = json.loads(out.read_text())["points"]["learned_calibrated_expected"]
    assert again["calibration"]["lambda"] == pytest.approx(info["lambda"], abs=1e-5)
    assert again["calibration"]["rows_without_router_lambda"] == 4
    assert again["calibration"]["calibrated_on"] == str(tmp_path / "at2.jsonl")
    assert again["score"]["mean"] == pytest.approx(calibrated["score"]["mean"], abs=1e-6)
    # several recorded prices in the rows it reads: refused
    (tmp_path / "mixed.jsonl").write_text(
        "".join(json.dumps({**r, "router_lambda": float(i)}) + "\n" for i, r in enumerate(lines))
    )
    monkeypatch.setattr(sys, "argv", argv + ["--calibrate_on", str(tmp_path / "mixed.jsonl")])
    with pytest.raises(SystemExit, match="several prices"):
        frontier.main()
    # a head read from another prompt set (one row fewer) is refused by name, not with a bare KeyError
    short = tmp_path / "short.jsonl"
    short.write_text("".join((tmp_path / "answer.jsonl").read_text().splitlines(keepends=True)[:3]))
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "router_frontier.py",
            answer,
            search,
            calculate,
            "--budget",
            "0.3",
            "--benchmark",
            "bfcl",
            "--expected",
            "learned",
            "--policy",
            f"learned={short}",
            "--output",
            str(tmp_path / "g.json"),
        ],
    )
    with pytest.raises(SystemExit, match="learned: its 3 rows are not the prompts of the route generations"):
        frontier.main()


def _reuse_layout(tmp_path, same_weights: bool):
    """A copy of router_frontier.sh in an empty tree, two checkpoints, an earlier frontier folder, and a stub
    interpreter that runs ``-c`` snippets for real and records the router-infer and scoring calls."""
    import shutil
    import sys

    script = tmp_path / "experiments" / "scripts" / "router_frontier.sh"
    script.parent.mkdir(parents=True)
    shutil.copy(REPO_ROOT / "experiments" / "scripts" / "router_frontier.sh", script)
    for name, weights in (("old", b"actor"), ("new", b"actor" if same_weights else b"other")):
        hf = tmp_path / name / "actor" / "huggingface"
        hf.mkdir(parents=True)
        (hf / "model.safetensors").write_bytes(weights)
        (tmp_path / name / "actor" / "router_world_size_1_rank_0.pt").write_bytes(b"")
        (tmp_path / name / "config.yaml").write_text("{}\n")
    earlier = tmp_path / "outputs" / "eval" / "old_frontier"
    earlier.mkdir(parents=True)
    for tag in ("random_0.3", "learned", "answer", "search", "calculate"):
        (earlier / f"{tag}.jsonl").write_text(f'{{"route": "{tag}"}}\n')
    calls = tmp_path / "calls.txt"
    stub = tmp_path / "python"
    stub.write_text(
        "#!/usr/bin/env bash\n"
        f'if [ "$1" = "-c" ]; then PYTHONPATH={REPO_ROOT} exec {sys.executable} "$@"; fi\n'
        f'echo "$*" >> {calls}\n'
        'if [ "$1" = "-m" ]; then while [ $# -gt 0 ]; do [ "$1" = "--output" ] && echo "{}" > "$2"; '
        "shift; done; fi\n"
    )
    stub.chmod(0o755)
    return script, calls


def test_frontier_reuses_routes_only_from_the_same_actor(tmp_path):
    """ROUTES_FROM: the fixed routes' generations of a checkpoint with byte-equal actor weights are copied, the new
    head is read from one router forward per prompt (head.jsonl, a --policy), and its greedy 'learned' point is not
    made; with other actor weights the script stops before any work."""
    import os
    import subprocess

    script, calls = _reuse_layout(tmp_path, same_weights=True)
    env = dict(
        os.environ,
        PYTHON=str(tmp_path / "python"),
        ROUTES_FROM="outputs/eval/old_frontier",
        ROUTES_CKPT=str(tmp_path / "old"),
        PROMPTS="prompts.parquet",
    )
    done = subprocess.run(
        ["bash", str(script), str(tmp_path / "new"), "new_frontier", "0.3"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    out = tmp_path / "outputs" / "eval" / "results" / "new_frontier"  # under the results folder's name
    assert sorted(p.name for p in out.iterdir()) == [
        "answer.jsonl",
        "calculate.jsonl",
        "head.jsonl",
        "random_0.3.jsonl",
        "search.jsonl",
    ]
    assert (out / "search.jsonl").read_text() == '{"route": "search"}\n'
    infer, score = calls.read_text().splitlines()
    assert infer.startswith(f"-m verl.router.infer --checkpoint {tmp_path / 'new'} --prompts prompts.parquet")
    assert "--output outputs/eval/results/new_frontier/head.jsonl --routes learned --max_new_tokens 1" in infer
    assert "--policy learned=outputs/eval/results/new_frontier/head.jsonl" in score
    assert "learned=outputs/eval/results/new_frontier/learned.jsonl" not in score and "--expected learned" in score
    assert "ROUTES_FROM=outputs/eval/old_frontier ROUTES_CKPT=" in score  # recorded in the result's command

    calls.unlink()
    script, calls = _reuse_layout(tmp_path / "other", same_weights=False)
    env.update(PYTHON=str(tmp_path / "other" / "python"), ROUTES_CKPT=str(tmp_path / "other" / "old"))
    refused = subprocess.run(
        ["bash", str(script), str(tmp_path / "other" / "new"), "new_frontier", "0.3"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 2 and "actor weights" in refused.stderr and "differ" in refused.stderr
    assert not calls.exists()  # nothing generated, nothing scored
    env.update(ROUTES_CKPT=str(tmp_path / "nowhere"))  # a checkpoint that cannot be read: its own error, no "differ"
    unreadable = subprocess.run(
        ["bash", str(script), str(tmp_path / "other" / "new"), "x", "0.3"], env=env, capture_output=True, text=True
    )
    assert unreadable.returncode != 0 and "not a directory" in unreadable.stderr
    assert "differ" not in unreadable.stderr and not calls.exists()
    env.pop("ROUTES_CKPT")
    missing = subprocess.run(
        ["bash", str(script), str(tmp_path / "other" / "new"), "x", "0.3"], env=env, capture_output=True, text=True
    )
    assert missing.returncode == 2 and "ROUTES_CKPT" in missing.stderr


def test_tool_route_gap_between_no_call_and_call_prompts_by_hand():
    """tool_route_frac_gap: mean P(tool route) on no-call prompts minus on call prompts, Welch's se."""
    keys = [("rlla", i, 0) for i in range(5)]
    values = {
        a: {
            k: {"cost": float(a != "ANSWER"), "num_calls": int(a != "ANSWER"), "made_call": a != "ANSWER", "score": 0.0}
            for k in keys
        }
        for a in frontier.ROUTES
    }
    tool_p = [0.1, 0.3, 0.8, 0.6, 1.0]  # two no-call prompts, then three call prompts
    probs = {k: {"ANSWER": 1 - p, "SEARCH": p} for k, p in zip(keys, tool_p)}
    needs = dict(zip(keys, [False, False, True, True, True]))
    gap = frontier.expected_point(probs, values, needs, ("score",))["tool_route_frac_gap"]
    # means 0.2 and 0.8; sample variances 0.02 and 0.04: se = sqrt(0.02/2 + 0.04/3)
    assert gap["no_call_minus_call"] == pytest.approx(-0.6)
    assert gap["se"] == pytest.approx((0.02 / 2 + 0.04 / 3) ** 0.5)
    one = frontier.expected_point({k: probs[k] for k in keys[1:]}, values, {k: needs[k] for k in keys[1:]}, ("score",))[
        "tool_route_frac_gap"
    ]
    assert one["no_call_minus_call"] == pytest.approx(-0.5) and one["se"] is None  # one no-call prompt: no se


def test_pooling_frontiers_of_disjoint_samples_by_hand(tmp_path):
    """pool_frontiers.py: the gain pooled with prompt weights; the tool-route groups pooled exactly (the same as
    computing them on the concatenated prompts)."""
    import json
    import statistics

    spec = importlib.util.spec_from_file_location(
        "pool_frontiers", REPO_ROOT / "experiments" / "scripts" / "pool_frontiers.py"
    )
    pool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pool)
    no_call_a, call_a, no_call_b, call_b = [0.1, 0.3], [0.9, 0.7, 0.8], [0.2], [0.4, 1.0]

    def point(rows, gain_mean, gain_se, cost, no_call, call):
        return {
            "rows": rows,
            "mean_cost": cost,
            pool.GAIN: {"score": {"mean": gain_mean, "se": gain_se}},
            "tool_route_frac_gap": frontier.gap(frontier.group_stats(no_call), frontier.group_stats(call)),
        }

    files = []
    samples = (("a", point(5, 2.0, 1.0, 0.3, no_call_a, call_a)), ("b", point(3, 1.0, 1.0, 0.5, no_call_b, call_b)))
    for name, p in samples:
        files.append(tmp_path / f"{name}.json")
        files[-1].write_text(json.dumps({"points": {"learned_expected": p}}))
    out = tmp_path / "pooled.json"
    assert pool.main([*map(str, files), "--points", "learned_expected", "--output", str(out)]) == 0
    pooled = json.loads(out.read_text())["points"]["learned_expected"]
    assert pooled["rows"] == 8 and pooled["mean_cost"] == pytest.approx((5 * 0.3 + 3 * 0.5) / 8)
    assert pooled[pool.GAIN]["score"]["mean"] == pytest.approx((5 * 2.0 + 3 * 1.0) / 8)
    assert pooled[pool.GAIN]["score"]["se"] == pytest.approx((25 + 9) ** 0.5 / 8)
    gap = pooled["tool_route_frac_gap"]
    no_call, call = no_call_a + no_call_b, call_a + call_b
    assert gap["no_call"]["var"] == pytest.approx(statistics.variance(no_call))
    assert gap["call"]["var"] == pytest.approx(statistics.variance(call))
    assert gap["no_call_minus_call"] == pytest.approx(statistics.mean(no_call) - statistics.mean(call))
    assert gap["se"] == pytest.approx((statistics.variance(no_call) / 3 + statistics.variance(call) / 5) ** 0.5)
    with pytest.raises(SystemExit, match="missing"):
        pool.main([*map(str, files), "--points", "learned_calibrated_expected", "--output", str(out)])
    # a one-prompt sample has no se: pooling it would understate the pooled se, so it is refused, naming the files
    files[1].write_text(json.dumps({"points": {"learned_expected": point(1, 1.0, None, 0.5, [], [0.4])}}))
    with pytest.raises(SystemExit, match=r"sample 1 \(1 prompt\(s\)\).*no standard error") as refused:
        pool.main([*map(str, files), "--points", "learned_expected", "--output", str(out)])
    assert str(files[1]) in str(refused.value)


def test_label_offsets_keep_labels_apart():
    # three points at the same display height, the first two close together: identity display transform
    places = {(0.0, 0.0): ["answer"], (10.0, 0.0): ["learned_expected"], (300.0, 0.0): ["search = calculate"]}
    out = frontier.label_offsets(places, lambda xy: xy, 1.0, height=10.0, char_width=5.0)
    offsets = {text: offset for _, text, offset in out}
    assert offsets["answer"] == (5.0, 5.0) and offsets["search = calculate"] == (5.0, 5.0)  # nothing in the way
    assert offsets["learned_expected"] == (5.0, -5.0)  # the line below the first label's
    boxes = [(x + dx, y + dy, 5.0 * len(text)) for (x, y), text, (dx, dy) in out]
    for i, (l1, b1, w1) in enumerate(boxes):
        for l2, b2, w2 in boxes[i + 1 :]:
            assert not (l1 < l2 + w2 and l2 < l1 + w1 and abs(b1 - b2) < 10.0)
