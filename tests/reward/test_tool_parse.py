"""The shared <think>/<tool_call>/<response> parser: strict (reward) and lenient (router/RLVCR) behaviour."""

from __future__ import annotations

import json

import pytest

from verl.utils.reward_score.tool_parse import (
    ToolCallJSONError,
    ToolCallParseError,
    extract_assistant_turn,
    extract_tags,
    find_spans,
    first_block,
    first_span,
    parse_tool_calls,
    strict_tool_calls,
    tool_usage,
)

CALL_A = {"name": "search", "parameters": {"q": "x"}}
CALL_B = {"name": "calc", "parameters": {"expr": "1+1"}}


def block(*calls, sep="\n"):
    return "<tool_call>\n" + sep.join(json.dumps(c) for c in calls) + "\n</tool_call>"


def test_extract_assistant_turn():
    chat = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n  body text \n<|im_end|>"
    assert extract_assistant_turn(chat, "qwen") == "body text"
    assert extract_assistant_turn("  bare  ", "qwen") == "bare"
    assert extract_assistant_turn(chat, "none") == chat.strip()
    llama = "<|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>tail"
    assert extract_assistant_turn(llama, "llama") == "A"
    # an assistant marker inside the response moves the start (reference quirk)
    assert extract_assistant_turn("<think>x <|im_start|>assistant y</think>", "qwen") == "y</think>"
    with pytest.raises(ValueError, match="unknown chat wrapper"):
        extract_assistant_turn("x", "chatml")


def test_strict_parse_reads_only_the_first_block():
    text = "<think>t</think>\n" + block(CALL_A) + "\n" + block(CALL_B)
    assert strict_tool_calls(text) == [CALL_A]
    # without a closing tag between, the block ends at the second opening tag
    assert first_block("<tool_call>\nA\n<tool_call>\nB\n</tool_call>") == "A"
    assert strict_tool_calls("<tool_call>\n" + json.dumps(CALL_A), require_close=False) == [CALL_A]


@pytest.mark.parametrize(
    "text, error",
    [
        ("<think>t</think>", ToolCallParseError),  # no tag
        ("<tool_call>\n" + json.dumps(CALL_A), ToolCallParseError),  # no closing tag (prediction)
        (block(CALL_A, CALL_B, sep="\n\n"), ToolCallJSONError),  # blank line
        ("<tool_call>\n" + json.dumps(CALL_A, indent=2) + "\n</tool_call>", ToolCallJSONError),  # pretty-printed
        ('<tool_call>\n{"name": "a"\n</tool_call>', ToolCallJSONError),  # truncated
    ],
)
def test_strict_parse_errors(text, error):
    with pytest.raises(error):
        strict_tool_calls(text)


def test_strict_json_error_names_the_line():
    with pytest.raises(ToolCallJSONError) as info:
        strict_tool_calls(block(CALL_A, CALL_B, sep="\n\n"))
    assert info.value.line_index == 1 and info.value.line == ""
    assert "line 1" in str(info.value)


def test_lenient_parse_counts_every_call():
    text = (
        "<think>plan</think>\n"
        + block(CALL_A, CALL_B)
        + "\nobs\n"
        + "<tool_call>\n"
        + json.dumps(CALL_A, indent=2)
        + "\n</tool_call>\n"
        + "<tool_call>\n"
        + json.dumps([CALL_B, {"name": "calc", "arguments": '{"expr": "2"}'}])
        + "\n</tool_call>"
        + "<tool_call>\nnot json\n</tool_call>\n<response>done</response>"
    )
    calls = parse_tool_calls(text)
    assert [c["name"] for c in calls] == ["search", "calc", "search", "calc", "calc"]
    assert calls[4] == {"name": "calc", "parameters": {"expr": "2"}}  # OpenAI-style string arguments decoded
    usage = tool_usage(text)
    assert usage.num_blocks == 4 and usage.num_calls == 5 and usage.num_invalid == 1
    assert usage.counts == {"search": 2, "calc": 3} and usage.used_any_tool and usage.has_tool_call_tag


def test_lenient_parse_never_raises_and_skips_non_calls():
    assert parse_tool_calls("") == []
    assert parse_tool_calls("<tool_call>\n[1, 2]\n</tool_call>") == []
    assert tool_usage("<tool_call>\n[1, 2]\n</tool_call>").num_invalid == 2
    unclosed = tool_usage("<tool_call>\n" + json.dumps(CALL_A))
    assert unclosed.num_calls == 0 and unclosed.has_tool_call_tag and not unclosed.used_any_tool
    assert tool_usage("<think>a</think>\n<response>b</response>").counts == {}


def test_spans_and_tags():
    text = "<think> one </think>x<think>two</think>\n<response>r</response><think>unclosed"
    assert extract_tags(text) == {"think": ["one", "two"], "tool_call": [], "response": ["r"]}
    spans = find_spans(text, "think")
    assert [text[s.start : s.end] for s in spans] == ["<think> one </think>", "<think>two</think>"]
    assert text[spans[0].content_start : spans[0].content_end] == " one "
    assert first_span(text, "response").content == "r"
    assert first_span(text, "tool_call") is None
    assert extract_tags("<level>2</level><action>go</action>", ("level", "action")) == {
        "level": ["2"],
        "action": ["go"],
    }
