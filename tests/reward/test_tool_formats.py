"""Tool-call formats (verl/utils/reward_score/tool_formats.py) on strings shaped as each model family emits them,
malformed ones included: a clear per-sample failure, never an exception."""

from __future__ import annotations

import pytest

from verl.utils.reward_score.tool_formats import (
    TOOL_FORMATS,
    detect_tool_format,
    parse_calls,
    render_calls,
    tool_schema,
)

WEATHER = {"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}
TIME = {"name": "get_time", "parameters": {"tz": "CET"}}

REAL = {
    "toolrl": (
        '<think> I need the weather. </think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": '
        '"Paris", "unit": "celsius"}}\n{"name": "get_time", "parameters": {"tz": "CET"}}\n</tool_call>'
    ),
    "hermes": (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call><|im_end|>'
    ),
    "llama3": (
        '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}; '
        '{"name": "get_time", "parameters": {"tz": "CET"}}<|eom_id|>'
    ),
    "mistral": (
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, '
        '{"name": "get_time", "arguments": {"tz": "CET"}}]</s>'
    ),
}


@pytest.mark.parametrize("fmt", sorted(REAL))
def test_real_strings_parse_and_render_round_trip(fmt):
    parsed = parse_calls(REAL[fmt], fmt)
    assert parsed.calls == (WEATHER, TIME) and parsed.attempted and not parsed.parse_failed
    again = parse_calls(render_calls([WEATHER, TIME], fmt), fmt)
    assert again.calls == (WEATHER, TIME) and not again.failures


def test_other_shapes_of_the_same_formats():
    assert parse_calls('{"name": "get_time", "parameters": {"tz": "CET"}}', "llama3").calls == (TIME,)
    assert parse_calls(
        '[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "unit": "celsius"}</s>',
        "mistral",
    ).calls == (TIME, WEATHER)
    # OpenAI-style JSON-encoded arguments
    assert parse_calls(
        '<tool_call>\n{"name": "get_time", "arguments": "{\\"tz\\": \\"CET\\"}"}\n</tool_call>', "hermes"
    ).calls == (TIME,)


@pytest.mark.parametrize(
    "fmt,text,reason",
    [
        ("toolrl", '<tool_call>\n{"name": "get_time", "parameters": {"tz": \n</tool_call>', "not JSON"),
        ("toolrl", '<tool_call>\n{"name": "get_time", "parameters": {"tz": "CET"}}', "not closed"),
        ("hermes", '<tool_call>\n{"arguments": {"tz": "CET"}}\n</tool_call>', "not a {name, parameters|arguments}"),
        ("llama3", '<|python_tag|>{"name": "get_time", "parameters": {"tz": ', "not JSON"),
        ("mistral", '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": "CET"}', "not JSON"),
        ("mistral", '[TOOL_CALLS]get_time[ARGS]{"tz": CET}', "arguments are not JSON"),
    ],
)
def test_malformed_calls_fail_per_sample_with_a_reason(fmt, text, reason):
    parsed = parse_calls(text, fmt)
    assert parsed.attempted and parsed.parse_failed
    assert any(reason in f for f in parsed.failures), parsed.failures


@pytest.mark.parametrize("fmt", sorted(REAL))
def test_plain_answers_and_garbage_never_raise(fmt):
    for text in ("The weather in Paris is sunny.", "", "<response> done </response>", None, "{{{{"):
        parsed = parse_calls(text, fmt)
        assert parsed.calls == ()
    assert not parse_calls("The weather in Paris is sunny.", fmt).attempted


def test_registry_detection_and_schemas():
    assert sorted(TOOL_FORMATS) == ["hermes", "llama3", "mistral", "toolrl"]
    with pytest.raises(ValueError, match="registered"):
        parse_calls("x", "xml")
    assert detect_tool_format("{% for tool_call in message.tool_calls %}<tool_call>\n{{ tool_call }}") == "hermes"
    assert detect_tool_format("{{- '<|python_tag|>' }} ipython") == "llama3"
    assert detect_tool_format("[TOOL_CALLS] {{ tool_calls|tojson }}") == "mistral"
    assert detect_tool_format(None) == detect_tool_format("{{ message.content }}") == "toolrl"

    def get_time(tz: str) -> str:
        """Current time in a time zone.

        Args:
            tz: the IANA or abbreviated time zone, e.g. CET.
        """
        return tz

    schema = tool_schema(get_time)
    assert schema["function"]["name"] == "get_time" and schema["function"]["parameters"]["required"] == ["tz"]
    assert schema["function"]["parameters"]["properties"]["tz"]["type"] == "string"
    assert tool_schema({"name": "f"})["function"]["parameters"] == {"type": "object", "properties": {}}
    with pytest.raises(ValueError, match="function name"):
        tool_schema({"type": "function", "function": {"description": "no name"}})
    with pytest.raises(TypeError):
        tool_schema(42)

    def untyped(x):
        """No types."""

    with pytest.raises(ValueError, match="untyped"):
        tool_schema(untyped)


def test_main_eval_scores_other_formats(tmp_path):
    import json

    from verl.trainer import main_eval

    gt = '<think> t </think>\n<tool_call>\n{"name": "get_time", "parameters": {"tz": "CET"}}\n</tool_call>'
    rows = [
        {
            "row": 0,
            "data_source": "rlla",
            "response": '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": "CET"}}]',
            "ground_truth": gt,
        },
        {"row": 1, "data_source": "rlla", "response": '[TOOL_CALLS] [{"name": "get_time"', "ground_truth": gt},
    ]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert (
        main_eval.main(["--generations", str(path), "--tool-format", "mistral", "--output", str(tmp_path / "s.json")])
        == 0
    )
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["tool_format"] == "mistral" and summary["exact_match"] == 0.5
    assert summary["parse_failure_count"] == 1 and summary["no_tool_call_rate"] == 0.0


# ---------------------------------------------------------------- data.tool_format: the reward, the cost, the metrics
GT_CALLS = (
    '<think> weather and time </think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": "Paris", '
    '"unit": "celsius"}}\n{"name": "get_time", "parameters": {"tz": "CET"}}\n</tool_call>'
)
GT_ANSWER = "<think> no tool </think>\n<response> Hello. </response>"


@pytest.mark.parametrize("fmt", sorted(REAL))
def test_the_rlla_reward_reads_each_format_like_toolrl_reads_its_own(fmt):
    """The same calls written in any format get the same reward as ToolRL's own string: format 1 (max), correctness
    3 (max: names, parameter names and values all match) — and a broken call of that format gets the minima."""
    from verl.utils.reward_score.rlla import RewardSwitches, compute_score

    sw = RewardSwitches()
    expected = compute_score(REAL["toolrl"], GT_CALLS, wrapper="none", switches=sw)
    assert expected == (4.0, 1.0, 3.0, 0.0)
    assert compute_score(REAL[fmt], GT_CALLS, wrapper="none", switches=sw, tool_format=fmt) == expected
    broken = {
        "toolrl": REAL["toolrl"].replace('"tz": "CET"}}', '"tz": "CET"}'),
        "hermes": REAL["hermes"].replace('"tz": "CET"}}', '"tz": "CET"}'),
        "llama3": REAL["llama3"].replace('"tz": "CET"}}', '"tz": "CET"}'),
        "mistral": REAL["mistral"].replace('"tz": "CET"}}]', '"tz": "CET"}]'),
    }[fmt]
    # ToolRL's format term checks the tag layout only, so its broken call keeps format 1 (the reward as released)
    minima = (-2.0, 1.0, -3.0, 0.0) if fmt == "toolrl" else (-3.0, 0.0, -3.0, 0.0)
    assert compute_score(broken, GT_CALLS, wrapper="none", switches=sw, tool_format=fmt) == minima
    # a plain answer where none is called: format max, correctness 0; a call where none is wanted: format min
    if fmt != "toolrl":
        assert compute_score("Hello.", GT_ANSWER, wrapper="none", switches=sw, tool_format=fmt) == (1.0, 1.0, 0.0, 0.0)
        assert compute_score(REAL[fmt], GT_ANSWER, wrapper="none", switches=sw, tool_format=fmt)[1] == 0.0


@pytest.mark.parametrize("fmt", sorted(REAL))
def test_router_cost_and_tool_metrics_read_the_same_format(fmt):
    from verl.router.cost import compute_costs
    from verl.utils.reward_score.tool_formats import format_tool_usage

    usage = format_tool_usage(REAL[fmt], fmt)
    assert usage.names == ("get_weather", "get_time") and usage.num_calls == 2 and not usage.parse_failed
    cost, parts = compute_costs([REAL[fmt], "Hello."], [{}, {}], tool_format=fmt)
    assert cost.tolist() == [1.0, 0.0] and parts["num_calls"].tolist() == [2.0, 0.0]
    if fmt in ("llama3", "mistral"):  # read as ToolRL's format, their calls are not seen
        toolrl_view = format_tool_usage(REAL[fmt], "toolrl")
        assert (toolrl_view.num_calls, toolrl_view.parse_failed) != (2, False)


def test_tool_format_is_checked_at_load_and_auto_follows_the_chat_template():
    from types import SimpleNamespace

    from verl.trainer.config_utils import ConfigError, load_default_config, normalize_config, validate_config
    from verl.utils.reward_score.tool_formats import resolve_tool_format

    with pytest.raises(ConfigError, match="data.tool_format='xml'"):
        validate_config(normalize_config(load_default_config(["data.tool_format=xml"])), check_files=False)
    qwen = SimpleNamespace(chat_template="{% for m in messages %}<tool_call>{{ m }}</tool_call>{% endfor %}")
    assert resolve_tool_format("auto", qwen) == "hermes" and resolve_tool_format("auto", None) == "toolrl"
    assert resolve_tool_format("mistral", qwen) == "mistral"
