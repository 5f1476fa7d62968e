"""BFCL v4 multi-turn through the executing loop: call strings both ways, the episode on BFCL's backends, the oracle
written as text and scored by BFCL's own multi_turn_checker (100%), the other-row control (0), rows over the context
limit, state isolation between episodes, and the main_eval entry point."""

from __future__ import annotations

import json

import pytest

from agent_system.environments.bfcl_multi_turn import BFCLMultiTurnEpisode
from agent_system.multi_turn_rollout.tool_loop import LoopConfig, ScriptedGenerator, TurnRenderer, run_tool_loop
from verl.trainer.eval_bfcl_multi_turn import control_scripts, evaluate_multi_turn, oracle_scripts
from verl.trainer.main_eval import main as eval_main
from verl.utils.dataset import bfcl_multi_turn as mt
from verl.utils.reward_score.tool_formats import parse_calls

N_ROWS = 10


@pytest.fixture(scope="module")
def chat_tokenizer():
    from transformers import AutoTokenizer

    from verl.utils.model_presets import prepare_tokenizer

    return AutoTokenizer.from_pretrained(str(prepare_tokenizer()))


@pytest.fixture(scope="module")
def base_rows():
    return mt.load_multi_turn_category("multi_turn_base", N_ROWS)


def _evaluate(rows, tokenizer, scripts, **kw):
    generator = ScriptedGenerator(tokenizer, scripts)
    return evaluate_multi_turn(rows[0]["category"], tokenizer, generator, rows=rows, **kw)


# ---------------------------------------------------------------------------------------------------------------------
# Call strings both ways
# ---------------------------------------------------------------------------------------------------------------------
def test_call_string_round_trip_hand_worked():
    call = {"name": "cd", "parameters": {"folder": "document"}}
    assert mt.call_to_string(call) == "cd(folder='document')"
    assert mt.parse_call_string("cd(folder='document')") == call
    rich = {"name": "f", "parameters": {"a": 1, "b": -2.5, "c": True, "d": None, "e": ["x", 3], "g": {"k": "it's"}}}
    text = mt.call_to_string(rich)
    assert text == "f(a=1, b=-2.5, c=True, d=None, e=['x', 3], g={'k': \"it's\"})"
    assert mt.parse_call_string(text) == rich
    assert mt.call_to_string({"name": "ls", "parameters": {}}) == "ls()"
    assert mt.parse_call_string("ls()") == {"name": "ls", "parameters": {}}
    assert mt.parse_call_string("f(x=(1, 2))") == {"name": "f", "parameters": {"x": [1, 2]}}  # JSON has no tuples
    # positional arguments are named from the backend's signature
    assert mt.parse_call_string("sort('a.txt')", {"sort": ["file_name"]}) == {
        "name": "sort",
        "parameters": {"file_name": "a.txt"},
    }


@pytest.mark.parametrize(
    "text, message",
    [
        ("sort('a.txt')", "positional arguments need sort's signature"),
        ("cd(folder=x)", "argument folder is not a literal value"),
        ("cd(folder=open('f'))", "argument folder is not a literal value"),
        ("os.cd(folder='a')", "not a call of a bare function name"),
        ("cd(**{'folder': 'a'})", r"\*\*kwargs"),
        ("cd(*['a'])", "positional arguments need"),
        ("cd(folder='a'", "is not a Python call"),
        ("cd(folder='a', folder='b')", "parameter folder given twice"),
        ("42", "not a call of a bare function name"),
    ],
)
def test_parse_call_string_errors_name_the_row(text, message):
    with pytest.raises(ValueError, match=message) as info:
        mt.parse_call_string(text, where="BFCL multi_turn_base_7 turn 1 call 0")
    assert "multi_turn_base_7 turn 1" in str(info.value)


def test_call_to_string_refuses_what_is_no_call():
    for call, message in [
        ({"name": "os.system", "parameters": {}}, "not a Python identifier"),
        ({"name": "import", "parameters": {}}, "not a Python identifier"),
        ({"name": "f", "parameters": {"a b": 1}}, "parameter name 'a b'"),
        ({"name": "f", "parameters": {"a": {1, 2}}}, "not a JSON value"),
        ({"name": "f", "parameters": ["a"]}, "expected an object"),
    ]:
        with pytest.raises(ValueError, match=message):
            mt.call_to_string(call, where="row x")


def test_every_base_ground_truth_call_round_trips():
    rows = mt.load_multi_turn_category("multi_turn_base")
    assert len(rows) == 200
    for row in rows:
        signatures = mt.backend_signatures(row["involved_classes"])
        for turn in mt.ground_truth_calls(row):
            for call in turn:
                assert call["name"] in signatures
                assert mt.parse_call_string(mt.call_to_string(call)) == call


# ---------------------------------------------------------------------------------------------------------------------
# The episode on BFCL's backends
# ---------------------------------------------------------------------------------------------------------------------
def test_episode_executes_records_and_refuses(base_rows):
    row = base_rows[0]  # GorillaFileSystem + TwitterAPI, starting in workspace/ with document/ and archive/
    episode = BFCLMultiTurnEpisode(row)
    try:
        system, user = episode.reset()
        assert (
            system["role"] == "system"
            and "Name: cd\n" in system["content"]
            and "Name: post_tweet\n" in system["content"]
        )
        assert user["content"].startswith("**Dialogue Records History**\n<user> Move 'final_report.pdf'")
        results = episode.execute(
            [
                {"name": "cd", "parameters": {"folder": "document"}},
                {"name": "cd", "parameters": {"folder": "nowhere"}},
                {"name": "open", "parameters": {"file": "/etc/passwd"}},
                {"name": "mkdir", "parameters": {"bad key": "x"}},
            ]
        )
        assert [r.ok for r in results] == [True, False, False, False]
        assert json.loads(results[0].content) == {"current_working_directory": "document"}
        assert "No such file" in results[1].error and "no function 'open'" in results[2].content
        # only the executed calls are recorded (for the checker), as one step of turn 0
        assert episode.steps == [[["cd(folder='document')", "cd(folder='nowhere')"]]]
        assert episode.next_turn("done")[0]["content"].startswith("Perform a detailed search")
        assert episode.turn == 1 and episode.steps == [[["cd(folder='document')", "cd(folder='nowhere')"]], []]
        for _ in range(episode.turns - 2):
            assert episode.next_turn("done") is not None
        assert episode.next_turn("done") is None and episode.finished
    finally:
        episode.close()


def test_episodes_of_one_row_do_not_share_state(base_rows):
    row = base_rows[0]
    first, second = BFCLMultiTurnEpisode(row), BFCLMultiTurnEpisode(row)
    try:
        make = [{"name": "mkdir", "parameters": {"dir_name": "fresh"}}]
        assert first.execute(make)[0].ok
        assert not first.execute(make)[0].ok  # exists now, in this episode's file system
        assert second.execute(make)[0].ok  # ... and not in the other's
    finally:
        first.close()
        second.close()
    store = vars(mt.multi_turn_api().utils_module)
    assert not [k for k in store if first.model_name in k or second.model_name in k]


def test_miss_func_shows_the_held_out_functions_at_their_turn():
    row = mt.load_multi_turn_category("multi_turn_miss_func", 1)[0]
    held = next(iter(row["missed_function"]))
    names = [f["name"] for f in row["missed_function"][held]]
    episode = BFCLMultiTurnEpisode(row)
    try:
        system = episode.reset()[0]["content"]
        assert all(f"Name: {name}\n" not in system for name in names)
        for _ in range(held - 1):
            episode.next_turn("done")
        message = episode.next_turn("done")[0]["content"]
        assert all(f"Name: {name}\n" in message for name in names)
        assert message.endswith(mt.multi_turn_api().added_functions_prompt)
    finally:
        episode.close()


# ---------------------------------------------------------------------------------------------------------------------
# Oracle, control, context limit, isolation
# ---------------------------------------------------------------------------------------------------------------------
def test_oracle_written_as_text_scores_one(base_rows, chat_tokenizer):
    scripts = oracle_scripts(base_rows)
    calls = [c for texts in scripts for t in texts for c in parse_calls(t, "toolrl").calls]
    assert calls and all(t.startswith("<think>") for texts in scripts for t in texts)
    summary = _evaluate(base_rows, chat_tokenizer, scripts)
    assert summary["accuracy"] == 1.0 and summary["rows"] == summary["correct"] == N_ROWS, summary["failed"]
    assert summary["over_context"] == 0 and summary["stop_reasons"] == {"answer": N_ROWS}
    # every ground-truth call was parsed from the text and executed by the loop
    assert summary["tool_loop"]["tool_loop/calls_per_episode"] * N_ROWS == len(calls)


def test_oracle_in_another_tool_format(base_rows, chat_tokenizer):
    rows = base_rows[:3]
    summary = _evaluate(rows, chat_tokenizer, oracle_scripts(rows, "hermes"), tool_format="hermes")
    assert summary["accuracy"] == 1.0, summary["failed"]


def test_other_row_control_scores_zero(base_rows, chat_tokenizer):
    summary = _evaluate(base_rows, chat_tokenizer, control_scripts(oracle_scripts(base_rows)))
    assert summary["accuracy"] == 0.0 and summary["rows"] == N_ROWS
    assert set(summary["error_types"]) <= {
        "multi_turn:instance_state_mismatch",
        "multi_turn:execution_response_mismatch",
        "multi_turn:empty_turn_model_response",
    }


def test_rows_over_max_model_len_fail_and_are_counted(base_rows, chat_tokenizer):
    rows = base_rows[:3]
    renderer = TurnRenderer(chat_tokenizer)
    prompts = [len(renderer.prompt(BFCLMultiTurnEpisode(r).reset())) for r in rows]
    limit = max(prompts)  # the longest prompt does not fit (prompt >= max_model_len), the others do
    summary = _evaluate(rows, chat_tokenizer, oracle_scripts(rows), max_model_len=limit)
    too_long = sum(p >= limit for p in prompts)
    assert summary["prompt_over_context"] == summary["error_types"]["over_context"] == too_long < len(rows)
    assert summary["correct"] <= len(rows) - too_long and summary["over_context"] >= too_long
    none_fit = _evaluate(rows, chat_tokenizer, oracle_scripts(rows), max_model_len=min(prompts))
    assert none_fit["accuracy"] == 0.0 and none_fit["prompt_over_context"] == len(rows) == none_fit["over_context"]


def test_same_row_twice_and_again_gives_the_same_verdict(base_rows, chat_tokenizer):
    rows = [base_rows[0], base_rows[0], base_rows[1]]
    scripts = oracle_scripts(rows)
    first = _evaluate(rows, chat_tokenizer, scripts)
    again = _evaluate(rows, chat_tokenizer, scripts)
    assert first["accuracy"] == again["accuracy"] == 1.0
    # a wrong script for a row does not leak into the next evaluation of it
    wrong = _evaluate(rows[:1], chat_tokenizer, [scripts[2]])
    assert wrong["accuracy"] == 0.0
    assert _evaluate(rows[:1], chat_tokenizer, scripts[:1])["accuracy"] == 1.0


def test_step_limit_and_unfinished_rows_are_force_terminated(base_rows, chat_tokenizer):
    row = base_rows[1]
    limit = mt.multi_turn_api().max_steps
    stubborn = [oracle_scripts([row])[0][0]] * (limit + 1) + oracle_scripts([row])[0][1:]
    summary = _evaluate([row], chat_tokenizer, [stubborn])
    assert summary["force_terminated"] == 1 and "more than" in summary["failed"][0]["error_message"]
    episode = BFCLMultiTurnEpisode(row)
    [out] = run_tool_loop(
        [episode], ScriptedGenerator(chat_tokenizer, [stubborn]), chat_tokenizer, LoopConfig(max_turns=100)
    )
    episode.close()
    # the loop stops the row at BFCL's limit rather than generating on to max_turns
    assert out.stop_reason == "done" and out.turns == limit + 1 and episode.force_quit
    episode = BFCLMultiTurnEpisode(row)
    [out] = run_tool_loop(
        [episode], ScriptedGenerator(chat_tokenizer, [stubborn]), chat_tokenizer, LoopConfig(max_turns=2)
    )
    episode.close()
    assert out.stop_reason == "max_turns" and not episode.finished


@pytest.mark.parametrize("category", ["multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"])
def test_oracle_on_the_other_multi_turn_categories(category, chat_tokenizer):
    rows = mt.load_multi_turn_category(category, 3)
    summary = _evaluate(rows, chat_tokenizer, oracle_scripts(rows))
    assert summary["accuracy"] == 1.0, summary["failed"]


# ---------------------------------------------------------------------------------------------------------------------
# main_eval
# ---------------------------------------------------------------------------------------------------------------------
def test_main_eval_multi_turn_oracle_and_control(tmp_path, capsys):
    out = tmp_path / "s.json"
    args = ["--dataset", "bfcl", "--categories", "multi_turn_base", "--oracle", "--max-rows", "4", "--output", str(out)]
    assert eval_main(args) == 0
    summary = json.loads(out.read_text())
    assert summary["categories"]["multi_turn_base"]["accuracy"] == 1.0
    assert summary["categories"]["multi_turn_base"]["rows"] == 4 and summary["max_model_len"] == 32768
    assert eval_main([*args, "--oracle-control", "other-row"]) == 0
    assert json.loads(out.read_text())["categories"]["multi_turn_base"]["accuracy"] < 0.05
    capsys.readouterr()
    for bad, message in [
        (["--categories", "multi_turn_base,simple_python"], "evaluate them in separate runs"),
        (["--categories", "simple_python", "--oracle-control", "other-row"], "only with multi-turn BFCL"),
    ]:
        with pytest.raises(SystemExit) as info:
            eval_main(["--dataset", "bfcl", "--oracle", "--output", str(out), *bad])
        assert info.value.code == 2 and message in capsys.readouterr().err
    for bad, message in [
        (["--oracle", "--model", "tiny"], "exactly one of --oracle or --model"),
        (["--model", "tiny", "--oracle-control", "other-row"], "--oracle-control: only with --oracle"),
        (["--generations", str(out)], "--oracle or --model"),
        (["--oracle", "--max-tokens-per-turn", "0"], "--max-tokens-per-turn must be >= 1"),
    ]:
        with pytest.raises(SystemExit) as info:
            eval_main(["--dataset", "bfcl", "--categories", "multi_turn_base", "--output", str(out), *bad])
        assert info.value.code == 2 and message in capsys.readouterr().err


def test_main_eval_multi_turn_with_a_model(tmp_path, capsys):
    """A model plays the rows through the loop (the tiny random model: it writes no call, and its 4,096-token context
    leaves the second row's prompt out, counted as a failure)."""
    out = tmp_path / "model.json"
    args = ["--dataset", "bfcl", "--categories", "multi_turn_base", "--model", "tiny", "--max-rows", "2"]
    assert eval_main([*args, "--max-tokens-per-turn", "4", "--output", str(out)]) == 0
    summary = json.loads(out.read_text())
    result = summary["categories"]["multi_turn_base"]
    assert summary["model"] == "tiny" and summary["max_model_len"] == 4096 and summary["max_tokens_per_turn"] == 4
    assert result["rows"] == 2 and result["accuracy"] == 0.0 and result["prompt_over_context"] == 1
    assert result["stop_reasons"] == {"length": 1, "context": 1}
    assert result["tool_loop"]["tool_loop/calls_per_episode"] == 0.0
    capsys.readouterr()
