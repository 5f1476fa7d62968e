"""SokobanTextEnv (gym-sokoban backend): determinism, rendering, validity, moves, a hand-built one-push win."""

import random

import numpy as np
import pytest

from agent_system.environments.base import make_env, split_step
from agent_system.environments.sokoban_env import SYMBOLS, SokobanTextEnv, _import_sokoban

# not pytest.importorskip("gym_sokoban"): the package's __init__ needs pkg_resources, which _import_sokoban provides
try:
    _import_sokoban()
except ImportError:
    pytest.skip("gym-sokoban not installed (pip install -e .[sokoban])", allow_module_level=True)

DIRS = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}


@pytest.fixture(scope="module")
def env():
    e = SokobanTextEnv(dim_room=(6, 6), num_boxes=1, max_steps=100)
    yield e
    e.close()


def _player(anchor):
    return next((r, c) for r, row in enumerate(anchor) for c, v in enumerate(row) if v == 5)


def test_registry_builds_instance():
    e = make_env("sokoban", dim_room=[7, 7], num_boxes=1)
    assert isinstance(e, SokobanTextEnv)
    assert e.reset(0).text.count("\n") == 6  # 7 rows


def test_same_seed_same_room_and_global_rng_untouched(env):
    random.seed(123)
    np.random.seed(123)
    expected_py, expected_np = random.random(), np.random.rand()
    random.seed(123)
    np.random.seed(123)
    first = env.reset(42)
    env.step("left")
    second = env.reset(42)
    assert (random.random(), np.random.rand()) == (expected_py, expected_np)  # reset restores the global RNGs
    assert first.text == second.text and first.anchor == second.anchor
    # and a fresh instance agrees
    third = SokobanTextEnv().reset(42)
    assert third.anchor == first.anchor
    rooms = {env.reset(s).anchor for s in range(10)}
    assert len(rooms) >= 5


def test_rendering_legend_and_shape(env):
    res = env.reset(5)
    rows = res.text.split("\n")
    assert len(rows) == 6
    assert all(len(row.split(" ")) == 6 for row in rows)
    cells = res.text.replace("\n", " ").split(" ")
    assert set(cells) <= set(SYMBOLS.values())
    assert cells.count(SYMBOLS["player"]) + cells.count(SYMBOLS["player_on_target"]) == 1
    assert cells.count(SYMBOLS["box"]) + cells.count(SYMBOLS["box_on_target"]) == 1
    for sym in SYMBOLS.values():
        assert sym in SokobanTextEnv.instruction
    assert "<action>up</action>" in SokobanTextEnv.instruction
    # text and anchor agree cell by cell
    for r, row in enumerate(rows):
        for c, sym in enumerate(row.split(" ")):
            assert (sym == SYMBOLS["wall"]) == (res.anchor[r][c] == 0)
    assert isinstance(hash(res.anchor), int)
    assert res.info["admissible_actions"] == ["up", "down", "left", "right"]
    assert res.info["is_action_valid"] and not res.done and res.reward == 0.0


@pytest.mark.parametrize("action", [None, "", "jump", "go up", "<action>up</action>", "5"])
def test_invalid_action_changes_nothing(env, action):
    start = env.reset(11)
    steps_before = env._gym.num_env_steps
    res = env.step(action)
    text, anchor, reward, done, info = split_step(res)
    assert anchor == start.anchor and text == start.text
    assert info["is_action_valid"] is False and reward == 0.0 and not done
    assert env._gym.num_env_steps == steps_before


def test_legal_move_moves_player(env):
    for seed in range(20):
        start = env.reset(seed)
        pr, pc = _player(start.anchor)
        for name, (dr, dc) in DIRS.items():
            if start.anchor[pr + dr][pc + dc] == 1:  # plain floor next to the player
                res = env.step(name.upper() if seed % 2 else name)
                assert res.info["is_action_valid"] and res.info["moved_player"] and not res.info["moved_box"]
                assert _player(res.anchor) == (pr + dr, pc + dc)
                assert res.anchor[pr][pc] in (1, 2)  # the old cell is floor or target again
                assert res.reward == pytest.approx(-0.1)
                assert env._gym.num_env_steps == 1
                return
    pytest.fail("no generated room had floor next to the player")


def test_walking_into_wall_is_valid_but_static(env):
    start = env.reset(3)
    pr, pc = _player(start.anchor)
    name = next(n for n, (dr, dc) in DIRS.items() if start.anchor[pr + dr][pc + dc] == 0)
    res = env.step(name)
    assert res.info["is_action_valid"] and not res.info["moved_player"]
    assert res.anchor == start.anchor and res.reward == pytest.approx(-0.1)


def _one_push_room(env):
    fixed = [[0, 0, 0, 0, 0], [0, 1, 1, 2, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    state = [[0, 0, 0, 0, 0], [0, 5, 4, 2, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    return env.load_room(fixed, state)


def test_hand_built_room_one_push_wins():
    env = SokobanTextEnv(dim_room=(4, 5))
    start = _one_push_room(env)
    assert start.text.split("\n")[1] == "# P X O #"
    assert not start.info["won"] and not start.done
    res = env.step("right")
    assert res.text.split("\n")[1] == "# _ P * #"
    assert res.info["won"] and res.done and res.info["moved_box"]
    assert res.reward == pytest.approx(-0.1 + 1 + 10)  # step penalty + box on target + all boxes on targets
    after = env.step("left")  # episode over: frozen
    assert after.anchor == res.anchor and after.reward == 0.0 and after.done
    # the next generated room uses the configured box count again
    assert sum(v in (3, 4) for row in env.reset(1).anchor for v in row) == 1


def test_push_box_off_target_and_max_steps():
    env = SokobanTextEnv(dim_room=(4, 5), max_steps=2)
    fixed = [[0, 0, 0, 0, 0], [0, 1, 2, 1, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    state = [[0, 0, 0, 0, 0], [0, 5, 3, 1, 0], [0, 1, 1, 1, 0], [0, 0, 0, 0, 0]]
    start = env.load_room(fixed, state)
    assert start.info["won"] and start.text.split("\n")[1] == "# P * _ #"
    res = env.step("right")  # push the box off its target
    assert res.reward == pytest.approx(-0.1 - 1) and not res.info["won"] and not res.done
    assert res.text.split("\n")[1] == "# _ S X #"
    res = env.step("down")  # second move: gym-sokoban's max_steps ends the episode
    assert res.done and not res.info["won"]


def test_bad_arguments():
    with pytest.raises(ValueError):
        SokobanTextEnv(dim_room=(2, 6))
    with pytest.raises(ValueError):
        SokobanTextEnv(num_boxes=0)
    env = SokobanTextEnv(dim_room=(4, 5))
    with pytest.raises(ValueError, match="border"):
        env.load_room([[1] * 5] * 4, [[5] + [1] * 4] + [[1] * 5] * 3)


def test_missing_package_message(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "gym_sokoban.envs.sokoban_env", None)
    with pytest.raises(ImportError, match=r"pip install -e \.\[sokoban\]"):
        SokobanTextEnv()
