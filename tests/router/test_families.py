"""Tool families: block parser and heuristic on real RLLA rows, sidecar override, per-row resolution."""

import json
import re

import pandas as pd
import pytest

from verl.router import RouterAction, ToolFamily, parse_other_as
from verl.router.families import (
    block_families,
    call_route,
    classify_tool,
    effective_route,
    load_tool_family_file,
    parse_tools_block,
    row_tool_families,
    system_text_of,
)

S, C, O = ToolFamily.SEARCH, ToolFamily.CALCULATE, ToolFamily.OTHER


@pytest.fixture(scope="module")
def test_rows(shared_dir):
    return pd.read_parquet(shared_dir / "data" / "rlla_4k" / "test.parquet")


@pytest.fixture(scope="module")
def sft_rows(shared_dir):
    return json.loads((shared_dir / "data" / "rlla_4k_raw" / "rlla_sft.json").read_text())


def test_block_parser_on_every_real_row(test_rows, sft_rows):
    systems = [r["prompt"][0]["content"] for _, r in test_rows.iterrows()] + [r["instruction"] for r in sft_rows]
    for text in systems:
        block = parse_tools_block(text)
        numbered = re.findall(r"^(\d+)\. Name: (.*)$", text, re.MULTILINE)
        assert block is not None and len(block.tools) == len(numbered) > 0
        assert [t.number for t in block.tools] == [int(n) for n, _ in numbered]
        assert block.names == [name for _, name in numbered]
        assert text[block.start :].startswith("**Available Tools**")
        assert text[block.end :].startswith("\n\n**Steps for Each Turn**")
        assert block.intro == "In your response, you can use the following tools:"
        for tool in block.tools:
            assert tool.description and tool.parameters.startswith("{")
            json.loads(tool.parameters)  # the Parameters line is a JSON object in RLLA


def test_first_test_row_parsed_exactly(test_rows):
    block = parse_tools_block(test_rows.iloc[0]["prompt"][0]["content"])
    assert block.names == ["GetPowerBINews", "SingleOffer", "Domain WHOIS Lookup API", "GetNews"]
    assert block.tools[3].description == "Retrieve Azure news articles"
    assert block.tools[3].text.startswith("Name: GetNews\nDescription: Retrieve Azure news articles\nParameters: {")


def test_no_block():
    assert parse_tools_block("You are a helpful assistant.") is None
    assert system_text_of([{"role": "user", "content": "hi"}]) == ""


@pytest.mark.parametrize(
    "name,description,family",
    [
        # real RLLA tools
        ("GetNews", "Retrieve Azure news articles", S),
        ("Domain WHOIS Lookup API", "Retrieves WHOIS information for a given domain name.", S),
        ("Get Team Form", "Retrieve the pre-game team form for a specific event.", S),
        ("/SearchPlayer", "Search for player data by player name or ID.", S),
        (
            "calculate_investment_return",
            "Calculates the return on investment based on the initial deposit amount, annual "
            "interest rate, and investment period.",
            C,
        ),
        ("x1RmY9Hmol6nj", "Computes the least common multiple (LCM) of two positive integers.", C),
        ("matrix_multiply", "Multiplies two matrices.", C),
        ("rgb_to_hsv", "Converts RGB color code to HSV color code", C),
        (
            "Body Mass Index Calculator",
            "Calculates the Body Mass Index (BMI) of a person based on their height and weight.",
            C,
        ),
        ("sendSMS", "Send a text message to a specified phone number", O),
        ("animation_create_project", "Create a new animation project in Toon Boom Harmony.", O),
        ("zzz", "", O),
    ],
)
def test_heuristic_on_real_tools(name, description, family):
    assert classify_tool(name, description) == family


def test_heuristic_distribution_on_real_tools(sft_rows):
    families = {}
    for r in sft_rows:
        for tool in parse_tools_block(r["instruction"]).tools:
            families[(tool.name, tool.description)] = classify_tool(tool.name, tool.description)
    counts = pd.Series([f.value for f in families.values()]).value_counts()
    # RLLA is mostly retrieval APIs with a sizeable block of math/algorithm helpers
    assert counts["SEARCH"] > counts["CALCULATE"] > counts["OTHER"] > 50


def test_sidecar_overrides_heuristic(tmp_path, test_rows):
    side = tmp_path / "families.json"
    side.write_text(json.dumps({"GetNews": "calculate", "SingleOffer": "OTHER", "unused_tool": "SEARCH"}))
    overrides = load_tool_family_file(side)
    assert overrides == {"GetNews": C, "SingleOffer": O, "unused_tool": S}
    messages = list(test_rows.iloc[0]["prompt"])
    fam = row_tool_families(messages, overrides=overrides)
    assert fam == {"GetPowerBINews": S, "SingleOffer": O, "Domain WHOIS Lookup API": S, "GetNews": C}
    assert block_families(parse_tools_block(messages[0]["content"]), overrides) == fam


def test_sidecar_errors_name_file_and_tool(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"GetNews": "SEARCH", "Calc": "MATH"}))
    with pytest.raises(ValueError, match=r"bad\.json: tool 'Calc'.*'MATH'"):
        load_tool_family_file(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"bad\.json: expected a JSON object"):
        load_tool_family_file(bad)
    bad.write_text("{not json")
    with pytest.raises(ValueError, match=r"bad\.json, line 1: not valid JSON"):
        load_tool_family_file(bad)
    bad.write_bytes(b'{"Calc": "CALCULATE",\n "T\xff": "SEARCH"}')
    with pytest.raises(ValueError, match=r"bad\.json, line 2: not valid UTF-8"):
        load_tool_family_file(bad)
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_tool_family_file(tmp_path / "missing.json")


def test_row_families_priority(test_rows):
    messages = list(test_rows.iloc[0]["prompt"])
    stored = {"GetNews": "CALCULATE", "SingleOffer": "SEARCH"}
    extra = {"index": 0, "tool_families": json.dumps(stored)}
    assert row_tool_families(messages, extra) == {"GetNews": C, "SingleOffer": S}  # stored beats heuristic
    assert row_tool_families(messages, extra, {"GetNews": O}) == {"GetNews": O, "SingleOffer": S}  # sidecar beats all
    with pytest.raises(ValueError, match=r"tool_families: tool 'GetNews'"):
        row_tool_families(messages, {"tool_families": {"GetNews": "nope"}})


def test_other_routing():
    assert effective_route(S) == RouterAction.SEARCH and effective_route(C) == RouterAction.CALCULATE
    assert effective_route(O) == RouterAction.SEARCH  # search-like unless configured
    assert effective_route(O, RouterAction.CALCULATE) == RouterAction.CALCULATE
    assert effective_route(O, None) is None
    # unlisted (hallucinated) names are classified from the name alone
    assert call_route("calculate_tax", {}) == RouterAction.CALCULATE
    assert call_route("mystery", {}, None) is None
    assert parse_other_as("none") is None and parse_other_as("Calculate") == RouterAction.CALCULATE
    with pytest.raises(ValueError, match="other_as"):
        parse_other_as("answer")


def test_offered_tools_by_route():
    from verl.router.families import offered_tools

    families = {"calc": "calculate", "wiki": "search", "mail": "other", "docs": "SEARCH"}
    assert offered_tools(RouterAction.ANSWER, families) == []
    assert offered_tools(RouterAction.SEARCH, families) == ["wiki", "mail", "docs"]  # other_as defaults to SEARCH
    assert offered_tools(RouterAction.CALCULATE, families) == ["calc"]
    assert offered_tools(RouterAction.CALCULATE, families, RouterAction.CALCULATE) == ["calc", "mail"]
    assert offered_tools(RouterAction.SEARCH, families, None) == ["wiki", "docs"]
    with pytest.raises(ValueError, match="'x': family 'plot'"):
        offered_tools(RouterAction.SEARCH, {"x": "plot"})
