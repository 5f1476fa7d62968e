"""Level-format SFT rows from expert sokoban play (rlvcr/env_level_sft.py; seed 001, ../shared/specs/rlvcr.md
"Response format"): the grid model follows the real env's moves, the BFS plans are shortest and win when replayed,
the SFT prompt is token for token the prompt the RLVCR rollout loop builds, every target parses to its drawn level
and the expert move, and thinks state facts of the grid and grow with the level."""

import itertools

import numpy as np
import pytest
import torch

from agent_system.environments.sokoban_env import SOKOBAN_ACTIONS, SokobanTextEnv
from rlvcr.env_level_sft import SokobanGrid, alternative_level, collect_expert_rows, level_target, level_think, solve
from rlvcr.level_sft import draw_level
from rlvcr.prompts import AGENT_FORMAT, generation_prefix, parse_level_response
from rlvcr.rollout_phase import LevelStep, alternative_suffix

pytest.importorskip("gym")

# 0 wall, 1 floor, 2 target (room_fixed); room_state adds 4 box, 5 player
_W, _F, _T = 0, 1, 2
# player (3,3), box (2,3), target (1,1): push up, walk round (right, up), push left twice = 5 moves; pushing left first
# takes 7
ROOM_FIXED = [[0] * 6, [0, 2, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0], [0, 1, 1, 1, 1, 0], [0] * 6]
ROOM_STATE = [[0] * 6, [0, 2, 1, 1, 1, 0], [0, 1, 1, 4, 1, 0], [0, 1, 1, 5, 1, 0], [0, 1, 1, 1, 1, 0], [0] * 6]
OVERRIDES = ["data.max_prompt_length=1024", "data.max_response_length=128"]


@pytest.fixture()
def env():
    e = SokobanTextEnv()
    yield e
    e.close()


def _replay(env, actions):
    result = env.load_room(ROOM_FIXED, ROOM_STATE)
    for action in actions:
        result = env.step(action)
    return result


def test_solver_plan_is_shortest_and_wins_in_the_real_env(env):
    grid = SokobanGrid.from_text(env.load_room(ROOM_FIXED, ROOM_STATE).text)
    assert grid.player == (3, 3) and grid.boxes == {(2, 3)} and grid.targets == {(1, 1)}
    plan = solve(grid)
    assert plan == ["up", "right", "up", "left", "left"]
    final = _replay(env, plan)
    assert final.info["won"] and final.done and final.reward == pytest.approx(10.9)
    for k in range(len(plan)):  # no shorter move sequence wins in the real env
        assert not any(_replay(env, seq).info["won"] for seq in itertools.product(SOKOBAN_ACTIONS, repeat=k))
    assert solve(SokobanGrid.from_text(final.text)) == []


def test_grid_moves_match_the_env_on_random_walks(env):
    rng = np.random.default_rng(0)
    pushes = 0
    for seed in range(8):
        result = env.reset(seed)
        for action in rng.choice(SOKOBAN_ACTIONS, size=25):
            grid = SokobanGrid.from_text(result.text)
            predicted, pushed = grid.step(str(action))
            result = env.step(str(action))
            assert SokobanGrid.from_text(result.text) == predicted, (seed, action)
            assert pushed == result.info["moved_box"]
            pushes += pushed
            if result.done:
                break
    assert pushes > 5


@pytest.mark.parametrize("seed", range(6))
def test_generated_rooms_solve_and_replay_to_a_win(env, seed):
    result = env.reset(seed)
    plan = solve(SokobanGrid.from_text(result.text))
    assert plan
    for action in plan:
        assert not result.done
        result = env.step(action)
    assert result.info["won"]


def test_unsolvable_and_bad_grids_raise():
    stuck = "# # # # #\n# X _ O #\n# _ P _ #\n# # # # #"  # box in a corner, target elsewhere
    with pytest.raises(ValueError, match="no solution"):
        solve(SokobanGrid.from_text(stuck))
    with pytest.raises(ValueError, match="unknown symbol 'Q' at row 2, column 2"):
        SokobanGrid.from_text("# # #\n# Q #\n# # #")
    with pytest.raises(ValueError, match="exactly one player"):
        SokobanGrid.from_text("# # #\n# _ #\n# # #")
    with pytest.raises(ValueError, match="non-empty plan"):
        level_think(SokobanGrid.from_text("# # # #\n# P * #\n# # # #"), [], 2)


def test_thinks_state_the_grid_and_grow_with_the_level(env):
    grid = SokobanGrid.from_text(env.load_room(ROOM_FIXED, ROOM_STATE).text)
    plan = solve(grid)
    thinks = [level_think(grid, plan, level) for level in range(1, 5)]
    assert thinks[0] == ""
    assert thinks[1] == "Push the box up."
    assert thinks[2] == (
        "I am at row 4, column 4. The box is at row 3, column 4 and the target at row 2, column 2. Push the box up."
    )
    assert thinks[3] == (
        "I am at row 4, column 4. The box is at row 3, column 4 and the target at row 2, column 2. "
        "The box must go 1 row up and 2 columns left to reach it. Plan: up, right, up; 5 moves left. "
        "Push the box up."
    )
    walk = SokobanGrid.from_text(_replay(env, plan[:1]).text)
    assert level_think(walk, plan[1:], 2) == "Walk right on the shortest way to the next push."
    last = SokobanGrid.from_text(_replay(env, plan[:4]).text)
    assert level_think(last, plan[4:], 2) == "Push the box left onto the target."
    for level in range(1, 5):
        step = parse_level_response(level_target(grid, plan, level), AGENT_FORMAT.action_tags)
        assert step.parseable and step.level == level and step.action == "up" and step.think == thinks[level - 1]
    assert level_target(grid, plan, 1) == "<level>1</level><action>up</action>"


@pytest.fixture(scope="module")
def expert_rows(tokenizer):
    rows, metrics = collect_expert_rows(
        tokenizer, [100, 101, 102, 103, 104, 105], seed=3, overrides=OVERRIDES, alt_frac=0.5
    )
    main = [r for r in rows if not r["extra_info"]["instruction"]]
    return main, [r for r in rows if r["extra_info"]["instruction"]], metrics


def test_alternative_level_draws():
    draws = [alternative_level(1, k, 1 + k % 4, 0.5) for k in range(400)]
    assert 150 < sum(d is not None for d in draws) < 250
    assert all(d is None or (2 <= d <= 4 and d != 1 + k % 4) for k, d in enumerate(draws))
    assert {d for k, d in enumerate(draws) if k % 4 == 1} == {None, 3, 4}  # level 2 chosen: the others
    assert all(alternative_level(1, k, 3, 0.0) is None for k in range(50))
    assert all(alternative_level(1, k, 3, 1.0) in (2, 4) for k in range(50))
    assert draws == [alternative_level(1, k, 1 + k % 4, 0.5) for k in range(400)]
    with pytest.raises(ValueError, match="alt_frac"):
        alternative_level(1, 0, 2, 1.5)


def test_rows_parse_to_the_drawn_level_and_the_expert_move(expert_rows):
    rows, alts, metrics = expert_rows
    assert metrics["env/sokoban/success_rate"] == 1.0 and len(rows) == metrics["env/sokoban/rows"] >= 6
    assert [r["extra_info"]["index"] for r in rows] == list(range(len(rows)))
    assert [r["level"] for r in rows] == [draw_level(3, k) for k in range(len(rows))]
    assert len({r["level"] for r in rows}) >= 3
    for row in rows:
        step = parse_level_response(row["level_target"], AGENT_FORMAT.action_tags, AGENT_FORMAT.num_levels)
        assert step.parseable, step.reason
        assert step.level == row["level"] and step.action == row["reward_model"]["ground_truth"]
        grid = SokobanGrid.from_text(row["extra_info"]["input"])
        assert step.action == solve(grid)[0]
        assert row["extra_info"]["input"] in row["prompt"][0]["content"]
        assert "**Thinking Level**" in row["prompt"][0]["content"]  # level_guide(fmt), the rlvcr prompt suffix
    assert 0 < len(alts) < len(rows)
    by_index = {r["extra_info"]["index"]: r for r in rows}
    for alt in alts:
        main = by_index[alt["extra_info"]["index"]]
        assert alt["level"] == alternative_level(3, alt["extra_info"]["index"], main["level"], 0.5)
        assert alt["prompt"][0]["content"] == main["prompt"][0]["content"] + alternative_suffix(
            alt["level"], AGENT_FORMAT
        )
        step = parse_level_response(alt["level_target"], AGENT_FORMAT.action_tags)
        assert step.parseable and step.level == alt["level"] and step.action == main["reward_model"]["ground_truth"]


def test_sft_prompt_ids_are_the_rollout_loop_prompt_ids(expert_rows, tokenizer, tmp_path):
    """Replay the same tasks through a second, independently built RLVCR agent rollout whose generate function answers
    the rows' targets; the ids it is asked about equal SFTDataset's prompt ids of the written rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from agent_system.multi_turn_rollout.agent_rollout import AgentRollout
    from verl.trainer.config_utils import load_default_config
    from verl.utils.dataset.sft_dataset import SFTDataset
    from verl.workers.rollout.base import assemble_rollout_output

    rows, alts, _ = expert_rows
    config = load_default_config(
        [
            "env.env_name=sokoban",
            "algorithm.adv_estimator=rlvcr",
            "env.use_ray_workers=false",
            "data.train_batch_size=6",
            "actor_rollout_ref.rollout.n=1",
            "env.val_tasks=1",
            "env.max_steps=20",
            *OVERRIDES,
        ]
    )
    from rlvcr.rollout_phase import agent_level_setup

    rlvcr, suffix = agent_level_setup(config, tokenizer)  # as RayPPOTrainer hands it to the rollout
    agent = AgentRollout(config, tokenizer, rlvcr=rlvcr, prompt_suffix=suffix)
    seen = []

    def generate(gen):
        out = []
        for ids, mask in zip(gen.batch["input_ids"], gen.batch["attention_mask"]):
            seen.append(ids[mask.bool()].tolist())
            target = rows[len(seen) - 1]["level_target"]
            ids = tokenizer(target, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            out.append(torch.tensor(ids))
        padded = torch.nn.utils.rnn.pad_sequence(out, batch_first=True, padding_value=agent.pad_token_id)
        return assemble_rollout_output(gen, padded, 128, tokenizer.eos_token_id, agent.pad_token_id)

    try:
        _, metrics = agent.collector.vanilla_multi_turn_loop(agent.train_envs, generate, list(range(100, 106)))
    finally:
        agent.close()
    assert metrics["env/sokoban/success_rate"] == 1.0 and len(seen) == len(rows)
    path = tmp_path / "rows.parquet"
    pq.write_table(
        pa.Table.from_pylist([{"prompt": r["prompt"], "level_target": r["level_target"]} for r in rows]), path
    )
    data = SFTDataset(str(path), tokenizer, {"response_key": "level_target", "max_length": 1024})
    for k, ids in enumerate(seen):
        item = data[k]
        prompt = item["input_ids"][item["loss_mask"] == 0].tolist()
        assert prompt == ids, k
        assert tokenizer.decode(item["input_ids"][item["loss_mask"] == 1]) == rows[k]["level_target"] + "<|im_end|>"
    # alternative rows: their SFT prompt + the forced prefix is the prompt the RLVCR phase samples T_L from
    phase = agent.collector.rlvcr
    pq.write_table(
        pa.Table.from_pylist([{"prompt": r["prompt"], "level_target": r["level_target"]} for r in alts]), path
    )
    alt_data = SFTDataset(str(path), tokenizer, {"response_key": "level_target", "max_length": 1024})
    for k, alt in enumerate(alts):
        index = alt["extra_info"]["index"]
        step = LevelStep(0, rows[index]["level"], "action", seen[index], [], [], "", "")
        keys, prompts = phase.alternative_prompts([step])
        item = alt_data[k]
        sft_prompt = item["input_ids"][item["loss_mask"] == 0].tolist()
        assert (
            sft_prompt + tokenizer.encode(generation_prefix(alt["level"]), add_special_tokens=False)
            == prompts[keys.index((0, alt["level"]))]
        )
