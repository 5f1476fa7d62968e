"""Level-format SFT rows (rlvcr/level_sft.py; seed 001, ../shared/specs/rlvcr.md "Response format") on real RLLA
rows: every target parses at its level, ToolRL's reward scores the stripped target as the ground truth, the think
lengths per level, seeded uniform levels, and the prompt the RL rollout sees."""

from collections import Counter

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from rlvcr.level_sft import (
    build_level_sft_file,
    build_level_sft_rows,
    draw_level,
    level_sft_row,
    level_think,
    sentence_ends,
)
from rlvcr.prompts import RLLA_FORMAT, add_level_guide, parse_level_response, strip_level_tag
from verl.utils.dataset.rlla_data import RLLA_ARROW_SCHEMA, resolve_rlla_file
from verl.utils.reward_score.rlla import RewardSwitches, compute_score

TAGS = RLLA_FORMAT.action_tags


@pytest.fixture(scope="module")
def rlla_rows():
    return pq.read_table(resolve_rlla_file("sft_full")).to_pylist()


def _think(ground_truth):
    return parse_level_response("<level>4</level>" + ground_truth, TAGS).think


def _score(text, truth):
    return compute_score(text, truth, wrapper="none", switches=RewardSwitches())


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_targets_parse_and_score_like_the_ground_truth(rlla_rows, level):
    checked = 0
    for row in rlla_rows[:12]:
        truth = row["reward_model"]["ground_truth"]
        made, reason = level_sft_row(row["prompt"], truth, level)
        if made is None:
            assert reason == "think quotes an action tag"
            continue
        prompt, target = made
        step = parse_level_response(target, TAGS)
        assert step.parseable and step.level == level, step.reason
        stripped = strip_level_tag(target)
        assert stripped.startswith("<think>") and "</think>\n<" in stripped
        assert _score(stripped, truth) == _score(truth, truth)  # format and correctness as ToolRL scores the GT
        assert _score(stripped, truth)[1] == 1.0
        assert step.think == level_think(_think(truth), level)
        assert prompt == add_level_guide(row["prompt"], RLLA_FORMAT)
        checked += 1
    assert checked >= 10


def test_think_lengths_per_level(rlla_rows):
    for row in rlla_rows[:20]:
        truth = row["reward_model"]["ground_truth"]
        thinks = {}
        for level in range(1, 5):
            made, _ = level_sft_row(row["prompt"], truth, level)
            if made is None:
                break
            thinks[level] = parse_level_response(made[1], TAGS).think
        if not thinks:
            continue
        assert thinks[1] == "" and "<think></think>\n" in level_sft_row(row["prompt"], truth, 1)[0][1]
        assert thinks[4] == _think(truth)
        assert thinks[3].strip().startswith(thinks[2].strip()) and thinks[4].strip().startswith(thinks[3].strip())
        if len(sentence_ends(thinks[4].strip())) > 3:
            assert len(thinks[2]) < len(thinks[3]) < len(thinks[4])


def test_capped_top_level(rlla_rows):
    """``max_top_sentences``: the level-4 think is its first K sentences (the whole think when shorter), still longer
    than level 3's; levels 1-3 unchanged; a cap not above level 3's count is rejected."""
    capped = 0
    for row in rlla_rows[:20]:
        truth = row["reward_model"]["ground_truth"]
        made, _ = level_sft_row(row["prompt"], truth, 4, max_top_sentences=5)
        if made is None:
            continue
        think, full = parse_level_response(made[1], TAGS).think, _think(truth)
        body = full.strip()
        ends = sentence_ends(body)
        expected = full if len(ends) <= 5 or ends[4] >= len(body) else body[: ends[4]]
        assert think.strip() == expected.strip()
        assert think.strip().startswith(level_think(full, 3).strip())
        assert level_sft_row(row["prompt"], truth, 3, max_top_sentences=5) == level_sft_row(row["prompt"], truth, 3)
        capped += len(think) < len(full)
    assert capped >= 5  # most RLLA thinks have more than five sentences
    with pytest.raises(ValueError, match="must exceed"):
        level_think("One. Two. Three. Four.", 4, max_top_sentences=3)


def test_sentences():
    text = 'Use e.g. the tool. The domain is site.org. Then U.S. law applies! 1. Check it? Done "here."'
    assert [text[:i] for i in sentence_ends(text)][:3] == [
        "Use e.g. the tool.",
        "Use e.g. the tool. The domain is site.org.",
        "Use e.g. the tool. The domain is site.org. Then U.S. law applies!",
    ]
    assert sentence_ends(text)[-2:] == [text.index("?") + 1, len(text)]
    assert level_think(" Ab cd. Ef gh ", 2) == " Ab cd. " and level_think(" Ab cd. Ef gh ", 3) == " Ab cd. Ef gh "
    assert level_think(" Ab cd. ", 2) == level_think(" Ab cd. ", 4) == " Ab cd. " and level_think("Ab.", 1) == ""
    with pytest.raises(ValueError):
        level_think("x", 5)


def test_skipped_rows():
    call = '<tool_call>\n{"name": "f", "parameters": {}}\n</tool_call>'
    cases = {
        "<think></think>\n" + call: "unparseable",
        "<think> x </think>": "unparseable",
        "<think> use <tool_call> tags </think>\n" + call: "think quotes an action tag",
        "<think> x </think>\n\n" + call: "layout",
        "Sure. <think> x </think>\n" + call: "layout",
    }
    rows = [{"prompt": [{"role": "user", "content": "q"}], "reward_model": {"ground_truth": gt}} for gt in cases]
    kept, skipped = build_level_sft_rows(rows)
    assert kept == [] and sum(skipped.values()) == len(cases)
    for gt, reason in cases.items():
        assert level_sft_row([], gt, 2)[1].startswith(reason)


def test_levels_seeded_and_uniform(rlla_rows):
    rows = rlla_rows[:200]
    kept, skipped = build_level_sft_rows(rows, seed=3)
    again, _ = build_level_sft_rows(rows, seed=3)
    other, _ = build_level_sft_rows(rows, seed=4)
    assert [r["level"] for r in kept] == [r["level"] for r in again] != [r["level"] for r in other]
    counts = Counter(draw_level(3, i) for i in range(200))
    assert set(counts) == {1, 2, 3, 4} and all(30 <= n <= 70 for n in counts.values()), counts
    assert len(kept) + sum(skipped.values()) == 200 and set(skipped) <= {"think quotes an action tag"}
    by_index = {r["extra_info"]["index"]: r for r in rows}
    for r in kept:
        assert r["level"] == draw_level(3, r["extra_info"]["index"])  # a row's level does not depend on the others
        original = by_index[r["extra_info"]["index"]]
        assert r["reward_model"] == original["reward_model"] and r["extra_info"] == original["extra_info"]


def test_file_and_prompt_as_the_rollout_sees_it(tmp_path, tokenizer):
    from rlvcr.rollout_phase import rlla_level_setup
    from verl.utils.dataset.sft_dataset import SFTDataset

    path, levels, skipped = build_level_sft_file(tmp_path / "level_test.parquet", seed=1, split="test")
    table = pq.read_table(path)
    assert table.schema.names == RLLA_ARROW_SCHEMA.names + ["level_target", "level"]
    assert sum(levels.values()) == table.num_rows == 80 and not skipped
    originals = pq.read_table(resolve_rlla_file("test")).to_pylist()
    rows = table.to_pylist()
    assert [r["reward_model"] for r in rows] == [r["reward_model"] for r in originals]

    config = OmegaConf.create({"algorithm": {"adv_estimator": "rlvcr", "rlvcr": {"action_tags": list(TAGS)}}})
    template, _ = rlla_level_setup(config, tokenizer)
    small = tmp_path / "small.parquet"
    pq.write_table(table.slice(0, 3), small)
    data = SFTDataset(str(small), tokenizer, {"response_key": "level_target", "max_length": 100_000})
    for i in range(3):
        ids, mask = data[i]["input_ids"].tolist(), data[i]["loss_mask"].tolist()
        start = mask.index(1)
        assert ids[:start] == tokenizer(template(originals[i]["prompt"]), add_special_tokens=False)["input_ids"]
        assert ids[start:] == tokenizer(rows[i]["level_target"], add_special_tokens=False)["input_ids"] + [
            tokenizer.eos_token_id
        ]
