"""RLVCR text side (../shared/specs/rlvcr.md "Response format"): the level parser (agent and RLLA action tags,
unparseable cases), the level-tag stripper in front of the RLLA reward (on a real RLLA test row), the templates and
the alternative-context builders."""

import pandas as pd
import pytest

from rlvcr.prompts import (
    AGENT_FORMAT,
    RLLA_FORMAT,
    LevelFormat,
    add_level_guide,
    agent_prompt,
    alternative_instruction,
    cut_alternative_think,
    generation_prefix,
    level_context,
    level_guide,
    level_scored_compute_score,
    parse_level_response,
    strip_level_tag,
)
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.rlla import RewardSwitches, compute_score

RLLA_TAGS = ("tool_call", "response")
SEED_EXAMPLE = "<level>3</level><think>I need to look around first</think><action>look around</action>"


# =====================================================================================================================
# parsing
# =====================================================================================================================
def test_parse_the_seed_example():
    step = parse_level_response(SEED_EXAMPLE)
    assert step.parseable and step.reason == ""
    assert (step.level, step.think, step.action_tag, step.action) == (
        3,
        "I need to look around first",
        "action",
        "look around",
    )
    assert SEED_EXAMPLE[: step.action_start].endswith("<action>")
    assert SEED_EXAMPLE[step.action_start : step.action_end] == "look around"
    # the original context is exactly what level_context rebuilds for the original level and think
    assert SEED_EXAMPLE[: step.action_start] == level_context(3, step.think, "action")


@pytest.mark.parametrize(
    "text",
    [
        "<level>1</level><action>go north</action>",
        "<level> 1 </level><think></think><action>go north</action>",
        "<level>1</level><think>  </think>\n<action>go north</action>",
    ],
)
def test_level1_without_or_with_an_empty_think(text):
    step = parse_level_response(text)
    assert step.parseable and step.level == 1 and step.think.strip() == "" and step.action == "go north"


@pytest.mark.parametrize(
    "text, reason",
    [
        ("<think>t</think><action>a</action>", "no <level>"),
        ("<level>x</level><think>t</think><action>a</action>", "not an integer"),
        ("<level>-1</level><think>t</think><action>a</action>", "not an integer"),
        ("<level>0</level><action>a</action>", "outside 1..4"),
        ("<level>5</level><think>t</think><action>a</action>", "outside 1..4"),
        ("<level>2</level><think>t</think>", "no complete action"),
        ("<level>2</level><think>t</think><action>cut by the length lim", "no complete action"),
        ("<level>2</level><think>t</think><action>  </action>", "empty action"),
        ("<level>1</level><think>some thought</think><action>a</action>", "level 1 with a non-empty think"),
        ("<level>3</level><action>a</action>", "level 3 without a think"),
        ("<level>2</level><think> </think><action>a</action>", "level 2 without a think"),
        # a think before the level tag is not the step's think
        ("<think>t</think><level>2</level><action>a</action>", "level 2 without a think"),
    ],
)
def test_unparseable_steps(text, reason):
    step = parse_level_response(text)
    assert not step.parseable and reason in step.reason


def test_level_outside_a_smaller_range_and_bad_inputs():
    assert not parse_level_response("<level>4</level><think>t</think><action>a</action>", num_levels=3).parseable
    with pytest.raises(TypeError):
        parse_level_response(None)
    with pytest.raises(ValueError):
        parse_level_response(SEED_EXAMPLE, action_tags=())


def test_first_spans_and_a_tag_quoted_in_the_think():
    text = (
        "<level>2</level><think>maybe <action>x</action> or y?</think><action>y</action>"
        "<level>4</level><action>z</action>"
    )
    step = parse_level_response(text)
    assert step.parseable and (step.level, step.action) == (2, "y")
    assert step.think == "maybe <action>x</action> or y?"


def test_rlla_action_tags_first_present_in_priority_order():
    call = (
        '<level>2</level><think> need news </think>\n<tool_call>\n{"name": "GetNews", "parameters": {}}\n</tool_call>'
    )
    both = call + "\n<response> Here you go </response>"
    only_response = "<level>1</level><think></think>\n<response> Hello! </response>"
    step = parse_level_response(both, RLLA_TAGS)
    assert step.parseable and step.action_tag == "tool_call"
    assert step.action == '\n{"name": "GetNews", "parameters": {}}\n'
    assert both[: step.action_start] == level_context(2, " need news ", "tool_call", RLLA_FORMAT)
    step = parse_level_response(only_response, RLLA_TAGS)
    assert step.parseable and (step.level, step.action_tag, step.action) == (1, "response", " Hello! ")
    assert only_response[: step.action_start] == level_context(1, "ignored", "response", RLLA_FORMAT)
    assert not parse_level_response(both, ("action",)).parseable


# =====================================================================================================================
# stripping the level tag before the RLLA reward
# =====================================================================================================================
def test_strip_level_tag_cases():
    assert strip_level_tag("<level>2</level>\n<think>t</think>") == "<think>t</think>"
    assert strip_level_tag("  <level>2</level><think>t</think>") == "  <think>t</think>"
    assert strip_level_tag("<think>t</think><level>2</level>") == "<think>t</think><level>2</level>"  # misplaced: kept
    assert strip_level_tag("no tag") == "no tag"
    chat = (
        "<|im_start|>system\nWrite <level>N</level> first.<|im_end|>\n<|im_start|>assistant\n"
        "<level>3</level><think>t</think>\n<response>r</response><|im_end|>"
    )
    assert strip_level_tag(chat) == chat.replace("<level>3</level>", "")  # the prompt's quoted tag stays
    llama = "<|start_header_id|>assistant<|end_header_id|>\n\n<level>1</level>\n<think></think>"
    assert strip_level_tag(llama) == "<|start_header_id|>assistant<|end_header_id|>\n\n<think></think>"


@pytest.fixture(scope="module")
def rlla_row(shared_dir):
    row = pd.read_parquet(shared_dir / "data" / "rlla_4k" / "test.parquet").iloc[0]
    return [dict(m) for m in row["prompt"]], row["reward_model"]["ground_truth"]


def test_rlla_reward_scores_the_stripped_response(rlla_row):
    _, truth = rlla_row
    switches = RewardSwitches()
    assert truth.startswith("<think>") and "<tool_call>" in truth
    level_response = "<level>2</level>" + truth  # the ground truth answered at level 2
    best = compute_score(truth, truth, wrapper="none", switches=switches)
    raw = compute_score(level_response, truth, wrapper="none", switches=switches)
    stripped = compute_score(strip_level_tag(level_response), truth, wrapper="none", switches=switches)
    assert stripped == best and best[1] == 1.0  # format max, ToolRL's rules unchanged
    assert raw[1] == 0.0 and raw[0] < best[0]  # the tag left in fails the format check
    scorer = level_scored_compute_score(default_compute_score)
    out = scorer(
        "rlla",
        "<|im_start|>assistant\n" + level_response + "<|im_end|>",
        truth,
        extra_info={"wrapper": "qwen", "reward_switches": switches},
    )
    assert out["score"] == best[0] and out["format"] == 1.0
    # level 1 in RLLA writes an empty think, which ToolRL's format accepts
    empty = "<level>1</level><think></think>" + truth[truth.index("</think>") + len("</think>") :]
    assert parse_level_response(empty, RLLA_TAGS).parseable
    assert compute_score(strip_level_tag(empty), truth, wrapper="none", switches=switches)[1] == 1.0


# =====================================================================================================================
# templates and contexts
# =====================================================================================================================
def test_level_guide_and_agent_prompt():
    guide = level_guide(AGENT_FORMAT)
    for n in (1, 2, 3, 4):
        assert f"Level {n}:" in guide
    assert "Level 5:" not in guide and "leave out the think block" in guide
    assert "<level>N</level><think>your reasoning</think><action>your action</action>" in guide
    assert "<think></think>" in level_guide(RLLA_FORMAT) and "<tool_call>" in level_guide(RLLA_FORMAT)
    assert "Level 6:" in level_guide(LevelFormat(num_levels=6))
    prompt = agent_prompt("Find the key.", "You are in a hall.", history="> look")
    assert prompt.startswith("Task: Find the key.") and "History:\n> look" in prompt and prompt.endswith(guide)
    assert "History" not in agent_prompt("t", "o")


def test_add_level_guide_to_rlla_messages(rlla_row):
    messages, _ = rlla_row
    out = add_level_guide(messages)
    assert out[0]["content"].startswith(messages[0]["content"].rstrip())
    assert out[0]["content"].endswith(level_guide(RLLA_FORMAT)) and out[1] == messages[1]
    assert messages[0]["content"] != out[0]["content"]  # the input is not modified
    no_system = add_level_guide([{"role": "user", "content": "hi"}])
    assert no_system[0] == {"role": "system", "content": level_guide(RLLA_FORMAT)} and len(no_system) == 2


def test_alternative_generation_and_contexts():
    assert generation_prefix(4) == "<level>4</level><think>"
    assert cut_alternative_think("Check state</think><action>x") == "Check state"
    assert cut_alternative_think("budget ran out") == "budget ran out"
    # seed 001's four contexts for the original action "look around"
    assert level_context(1, "", "action") == "<level>1</level><action>"
    assert level_context(2, "Check state", "action") == "<level>2</level><think>Check state</think><action>"
    assert level_context(1, "", "tool_call", RLLA_FORMAT) == "<level>1</level><think></think>\n<tool_call>"
    assert "level 3" in alternative_instruction(3)
    for bad in (
        lambda: generation_prefix(1),
        lambda: alternative_instruction(1),
        lambda: level_context(5, "", "action"),
        lambda: level_context(2, "t", "tool_call"),
        lambda: LevelFormat(num_levels=1),
        lambda: LevelFormat(action_tags=("level",)),
    ):
        with pytest.raises(ValueError):
            bad()
