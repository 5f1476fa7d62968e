"""route_qa's composition: SFT traces with executed tools (rendered as the loop renders them), the routing policies
scored from a played table, the bag-of-words baseline, and the table's play."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from verl.trainer.route_qa import policies
from verl.trainer.route_qa.evaluate import SETTINGS, load_rows
from verl.utils.dataset.route_qa import write_task


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    out = tmp_path_factory.mktemp("route_qa")
    write_task(out, train=60, val=6, test=12)
    return out


def test_traces_cover_each_setting_and_render_as_the_loop_does(task, tokenizer):
    from agent_system.multi_turn_rollout.tool_loop import TurnRenderer
    from verl.trainer.route_qa.traces import write_traces

    import pandas as pd

    rows = load_rows(task / "train.parquet")
    traces = pd.read_parquet(write_traces(task)).to_dict("records")
    by_question: dict[int, list] = {}
    for t in traces:
        by_question.setdefault(int(t["extra_info"]["index"]), []).append(t)
    assert len(by_question) == len(rows)
    for row in rows:
        extra, answer = row["extra_info"], row["reward_model"]["ground_truth"]
        turns = by_question[int(extra["index"])]
        settings = [(t["extra_info"]["setting"], int(t["extra_info"]["turn"])) for t in turns]
        if extra["needs_tool"]:  # its route: call + answer; both tools: call + answer
            assert settings == [("own_route", 0), ("own_route", 1), ("both_tools", 0), ("both_tools", 1)]
        else:  # ANSWER at once; a tool route calls anyway; both tools: call + answer
            assert settings == [
                ("own_route", 0),
                ("tool_route", 0),
                ("tool_route", 1),
                ("both_tools", 0),
                ("both_tools", 1),
            ]
        for t in turns:
            if t["extra_info"]["turn"] == 1:
                observation = t["prompt"][-1]
                assert observation["role"] == "tool" and answer in observation["content"]  # the tool really ran
            assert t["response"].startswith("<tool_call>") or t["response"] == f"<response> {answer}</response>"
        own = [t for t in turns if t["extra_info"]["setting"] == "own_route"]
        system = own[0]["prompt"][0]["content"]
        assert ("**Available Tools**" in system) is bool(extra["needs_tool"])  # ANSWER's rewrite drops the tools
    # an answer turn's prompt is exactly what the loop feeds the policy after the call turn
    call_turn, answer_turn = next((a, b) for a, b in itertools.pairwise(traces) if b["extra_info"]["turn"] == 1)

    def render(messages):
        out = tokenizer.apply_chat_template([dict(m) for m in messages], tokenize=True, add_generation_prompt=True)
        return list(out["input_ids"] if isinstance(out, dict) or hasattr(out, "input_ids") else out)

    loop = render(call_turn["prompt"]) + tokenizer.encode(call_turn["response"], add_special_tokens=False)
    loop += [tokenizer.eos_token_id] + TurnRenderer(tokenizer).ids([dict(answer_turn["prompt"][-1])])
    assert render(answer_turn["prompt"]) == loop


def test_trace_mix_repeats_answer_turns_and_adds_the_one_digit_table(task):
    import collections

    import pandas as pd

    from verl.trainer.route_qa.traces import TraceMix, write_traces
    from verl.utils.dataset.route_qa import one_digit_problems

    def groups(mix):
        rows = pd.read_parquet(write_traces(task, task / "mix.parquet", mix=mix)).to_dict("records")
        count = collections.Counter()
        for r in rows:
            e = r["extra_info"]
            answer_at_once = "**Available Tools**" not in r["prompt"][0]["content"]
            key = (
                "table"
                if e["setting"] == "table"
                else "after_call"
                if e["turn"] == 1
                else "direct"
                if answer_at_once
                else "call"
            )
            count[key] += 1
        return rows, count

    _, plain = groups(TraceMix())
    rows, mixed = groups(TraceMix(answer_after_call=3, direct_answer=2, table=2))
    assert plain["table"] == 0
    assert mixed["after_call"] == 3 * plain["after_call"] and mixed["direct"] == 2 * plain["direct"]
    assert mixed["call"] == plain["call"] > 0
    problems = one_digit_problems()
    assert mixed["table"] == 2 * len(problems) == 2 * (81 * 2 + 45 + 81)  # plus has two phrasings; minus a >= b
    assert ("7 times 8", "56") in problems and ("3 minus 5", "-2") not in problems
    table = [r for r in rows if r["extra_info"]["setting"] == "table"]
    for r in table:  # under ANSWER (no tools offered), in a training template, answered at once
        assert "**Available Tools**" not in r["prompt"][0]["content"] and r["prompt"][-1]["role"] == "user"
        assert r["response"].startswith("<response>") and not r["prompt"][-1]["content"].startswith("I need to know")
    with pytest.raises(ValueError, match="answer_after_call"):
        TraceMix(answer_after_call=0)


def _table():
    """Three questions (arithmetic, fact, direct): each right under its own route and under BOTH, wrong elsewhere;
    every tool route and BOTH use a tool."""
    correct = {"ANSWER": [0, 0, 1], "SEARCH": [0, 1, 1], "CALCULATE": [1, 0, 1], "BOTH": [1, 1, 1]}
    used = {"ANSWER": [0, 0, 0], "SEARCH": [1, 1, 1], "CALCULATE": [1, 1, 1], "BOTH": [1, 1, 1]}
    return {
        s: {
            "correct": np.array(correct[s], dtype=bool),
            "used_tool": np.array(used[s], dtype=bool),
            "calls": np.array(used[s]) * (2 if s == "BOTH" else 1),
            "obs_tokens": np.array(used[s]) * 10,
            "seconds": np.array(used[s]) * 0.5,
        }
        for s in SETTINGS
    }


ROWS = [
    {"extra_info": {"kind": "arithmetic", "needs_tool": True}},
    {"extra_info": {"kind": "fact", "needs_tool": True}},
    {"extra_info": {"kind": "direct", "needs_tool": False}},
]


def test_policies_are_scored_from_the_table_by_hand():
    table = _table()
    oracle = policies.policy_summary(table, policies.oracle(ROWS), ROWS)
    assert (
        oracle["accuracy"] == 1.0 and oracle["cost"] == pytest.approx(2 / 3) and oracle["calls"] == pytest.approx(2 / 3)
    )
    assert oracle["tool_use_on_needed"] == 1.0 and oracle["decision_f1"] == 1.0
    assert oracle["route_shares"]["direct"]["ANSWER"] == 1.0 and oracle["tool_productivity"] == pytest.approx(3 / 2)
    both = policies.policy_summary(table, policies.always("BOTH", 3), ROWS)
    assert both["accuracy"] == 1.0 and both["calls"] == 2.0 and both["tool_use_on_needed"] == pytest.approx(2 / 3)
    # random at B = 1/3: each tool route with q = B / (1 + 1) = 1/6, ANSWER 2/3
    rand = policies.random_at_budget(table, 1 / 3)
    assert rand[0].tolist() == pytest.approx([2 / 3, 1 / 6, 1 / 6, 0.0])
    summary = policies.policy_summary(table, rand, ROWS)
    assert summary["cost"] == pytest.approx(1 / 3)
    assert summary["accuracy"] == pytest.approx((1 / 6 + 1 / 6 + 1) / 3)  # right on its own route only, direct always
    per_q = policies.expected(table, rand, "correct")
    assert policies.paired_se(per_q, per_q) == 0.0
    assert policies.paired_se(np.array([1.0, 0.0, 1.0]), np.zeros(3)) == pytest.approx(
        np.std([1, 0, 1], ddof=1) / 3**0.5
    )
    with pytest.raises(ValueError, match="cannot spend B=1.5"):
        policies.random_at_budget(table, 1.5)


def test_bag_of_words_learns_the_kinds_and_is_deterministic(task):
    train, test = load_rows(task / "train.parquet"), load_rows(task / "test.parquet")
    bow = policies.BagOfWords().fit(train)
    predicted = bow.predict(train)
    assert np.mean([p == r["extra_info"]["kind"] for p, r in zip(predicted, train)]) >= 0.95
    assert policies.BagOfWords().fit(train).predict(test) == bow.predict(test)
    shares = policies.kind_shares(bow.routes(test), test)
    assert set(shares) == {"arithmetic", "fact", "direct"}
    assert all(sum(d.values()) == pytest.approx(1.0) for d in shares.values())


def test_play_table_runs_every_setting_with_the_tools(task):
    from verl.trainer.route_qa.evaluate import play_table

    rows = load_rows(task / "test.parquet")[:3]
    table = play_table("tiny", rows, task / "corpus.jsonl", batch_size=3, response_length=24)
    assert list(table) == list(SETTINGS)
    for cols in table.values():
        assert {len(v) for v in cols.values()} == {3}
        assert cols["correct"].dtype == bool and cols["seconds"].dtype == np.float64
    assert not table["ANSWER"]["used_tool"].any() and table["ANSWER"]["calls"].sum() == 0  # nothing offered, forbidden
    with pytest.raises(ValueError, match="unknown settings"):
        play_table("tiny", rows, task / "corpus.jsonl", settings=["NONE"])


def test_report_criteria_on_a_hand_worked_table(task):
    from verl.trainer.route_qa.report import criteria

    rows, train = load_rows(task / "test.parquet"), load_rows(task / "train.parquet")
    kinds = [r["extra_info"]["kind"] for r in rows]
    assert sorted(set(kinds)) == ["arithmetic", "direct", "fact"] and len(rows) == 12
    own = {"arithmetic": "CALCULATE", "fact": "SEARCH", "direct": "ANSWER"}
    table = {}
    for s in SETTINGS:  # each route right on its own kind only, BOTH right everywhere; every tool route calls once
        used = np.full(len(rows), s != "ANSWER")
        table[s] = {
            "correct": np.array([s == "BOTH" or own[k] == s for k in kinds]),
            "used_tool": used,
            "calls": used.astype(np.int64),
            "obs_tokens": used.astype(np.int64) * 5,
            "seconds": used * 0.01,
        }
    routes = [own[k] for k in kinds]
    tight = criteria(table, rows, routes, train, budget=1 / 3, policy_cost_last_third=1 / 3 + 0.04)
    assert tight["route_shares"]["router"] == {"arithmetic": 1.0, "fact": 1.0, "direct": 1.0}
    # random at B = 1/3: each tool route with q = 1/6, ANSWER 2/3: right with 1/6 on arithmetic and facts, 2/3 direct
    d = np.array([5 / 6 if k != "direct" else 1 / 3 for k in kinds])
    assert tight["payoff"]["difference"] == pytest.approx(d.mean())
    assert tight["payoff"]["paired_se"] == pytest.approx(d.std(ddof=1) / np.sqrt(len(d)))
    assert tight["payoff"]["holds"] and tight["loose_budget"]["holds"] is None
    # the oracle spends 2/3, every tool use on a question that needs one; the logged cost is within 0.05 of B
    assert tight["budget"] == {
        "policy_cost_last_third": pytest.approx(1 / 3 + 0.04),
        "tool_use_on_needed": 1.0,
        "holds": True,
    }
    loose = criteria(table, rows, routes, train, budget=2 / 3, policy_cost_last_third=0.5)
    assert loose["loose_budget"]["calls_cut_against_always_tools"] == pytest.approx(-1 / 3)
    assert loose["loose_budget"]["holds"] and loose["budget"]["holds"] is False
    wrong = criteria(table, rows, ["ANSWER"] * len(rows), train, budget=2 / 3)
    assert wrong["route_shares"]["router"]["arithmetic"] == 0.0 and not wrong["route_shares"]["holds"]
    assert wrong["budget"]["holds"] is None


def test_last_third_of_the_training_steps(tmp_path):
    import json

    from verl.trainer.route_qa.report import last_third_mean

    lines = [{"step": s, "router/policy_cost": float(s)} for s in range(1, 10)] + [{"step": 9, "val/score": 1.0}]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert last_third_mean(path) == pytest.approx((7 + 8 + 9) / 3)
    with pytest.raises(ValueError, match="no step logs router/lambda"):
        last_third_mean(path, "router/lambda")
