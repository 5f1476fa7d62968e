"""Tool-call formats (verl/utils/reward_score/tool_formats.py) on strings shaped as each model family emits them,
malformed ones included: a clear per-sample failure, never an exception."""
from __future__ import annotations

import pytest

from verl.utils.reward_score.tool_formats import (TOOL_FORMATS, detect_tool_format, parse_calls, render_calls,
                                                   tool_schema)

WEATHER = {"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}
TIME = {"name": "get_time", "parameters": {"tz": "CET"}}

REAL = {
    "toolrl": ('<think> I need the weather. </think>\n<tool_call>\n{"name": "get_weather", "parameters": {"city": '
               '"Paris", "unit": "celsius"}}\n{"name": "get_time", "parameters": {"tz": "CET"}}\n</tool_call>'),
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
               '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call><|im_end|>'),
    "llama3": ('<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris", "unit": "celsius"}}; '
               '{"name": "get_time", "parameters": {"tz": "CET"}}<|eom_id|>'),
    "mistral": ('[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}, '
                '{"name": "get_time", "arguments": {"tz": "CET"}}]</s>'),
}


@pytest.mark.parametrize("fmt", sorted(REAL))
def test_real_strings_parse_and_render_round_trip(fmt):
    parsed = parse_calls(REAL[fmt], fmt)
    assert parsed.calls == (WEATHER, TIME) and parsed.attempted and not parsed.parse_failed
    again = parse_calls(render_calls([WEATHER, TIME], fmt), fmt)
    assert again.calls == (WEATHER, TIME) and not again.failures


def test_other_shapes_of_the_same_formats():
    assert parse_calls('{"name": "get_time", "parameters": {"tz": "CET"}}', "llama3").calls == (TIME,)
    assert parse_calls('[TOOL_CALLS]get_time[ARGS]{"tz": "CET"}[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", '
                       '"unit": "celsius"}</s>', "mistral").calls == (TIME, WEATHER)
    # OpenAI-style JSON-encoded arguments
    assert parse_calls('<tool_call>\n{"name": "get_time", "arguments": "{\\"tz\\": \\"CET\\"}"}\n</tool_call>',
                       "hermes").calls == (TIME,)


@pytest.mark.parametrize("fmt,text,reason", [
    ("toolrl", '<tool_call>\n{"name": "get_time", "parameters": {"tz": \n</tool_call>', "not JSON"),
    ("toolrl", '<tool_call>\n{"name": "get_time", "parameters": {"tz": "CET"}}', "not closed"),
    ("hermes", '<tool_call>\n{"arguments": {"tz": "CET"}}\n</tool_call>', "not a {name, parameters|arguments}"),
    ("llama3", '<|python_tag|>{"name": "get_time", "parameters": {"tz": ', "not JSON"),
    ("mistral", '[TOOL_CALLS] [{"name": "get_time", "arguments": {"tz": "CET"}', "not JSON"),
    ("mistral", '[TOOL_CALLS]get_time[ARGS]{"tz": CET}', "arguments are not JSON"),
])
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
    rows = [{"row": 0, "data_source": "rlla", "response": '[TOOL_CALLS] [{"name": "get_time", "arguments": '
             '{"tz": "CET"}}]', "ground_truth": gt},
            {"row": 1, "data_source": "rlla", "response": '[TOOL_CALLS] [{"name": "get_time"', "ground_truth": gt}]
    path = tmp_path / "g.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main_eval.main(["--generations", str(path), "--tool-format", "mistral", "--output",
                           str(tmp_path / "s.json")]) == 0
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["tool_format"] == "mistral" and summary["exact_match"] == 0.5
    assert summary["parse_failure_count"] == 1 and summary["no_tool_call_rate"] == 0.0
