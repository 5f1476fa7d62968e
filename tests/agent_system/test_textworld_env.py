"""TextWorldEnv: game generation and caching, determinism, admissible/invalid actions, winning walkthroughs."""

import os

import pytest

pytest.importorskip("textworld", reason="textworld not installed (pip install -e .[textworld])")

from agent_system.environments.base import make_env, split_step  # noqa: E402
from agent_system.environments.textworld_env import TextWorldEnv, strip_banner  # noqa: E402


@pytest.fixture(scope="module")
def games_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("tw_games"))


@pytest.fixture(scope="module")
def env(games_dir):
    e = TextWorldEnv(challenge="tw-coin_collector", level=3, games_dir=games_dir, max_steps=50)
    yield e
    e.close()


def test_registry_and_cache_dir_default(games_dir, monkeypatch, tmp_path):
    e = make_env("textworld", challenge="tw-coin_collector", level=2, games_dir=games_dir)
    assert isinstance(e, TextWorldEnv) and e.games_dir == games_dir
    monkeypatch.setenv("TOOLRL_CACHE", str(tmp_path))
    assert TextWorldEnv().games_dir == os.path.join(str(tmp_path), "textworld_games")
    with pytest.raises(ValueError, match="challenge"):
        TextWorldEnv(challenge="tw-nonsense")
    with pytest.raises(ValueError, match="level"):
        TextWorldEnv(challenge="tw-simple", level=3)


def test_first_observation(env):
    res = env.reset(1)
    text, anchor, reward, done, info = split_step(res)
    assert info["admissible_actions"] and "go" in " ".join(info["admissible_actions"])
    assert text.rstrip().endswith("Admissible actions: " + ", ".join(info["admissible_actions"]))
    assert "$$" not in text and "-= " in text  # banner stripped, room title kept
    assert isinstance(anchor, str) and "at(P, " in anchor
    assert reward == 0.0 and not done and not info["won"] and info["is_action_valid"]
    assert info["max_score"] == 1 and len(info["policy_commands"]) == 3  # level 3: two moves + take coin


@pytest.mark.parametrize("action", [None, "", "dance wildly", "go up", "take the moon"])
def test_invalid_action_changes_nothing(env, action):
    start = env.reset(1)
    res = env.step(action)
    assert res.info["is_action_valid"] is False and res.reward == 0.0 and not res.done
    assert res.anchor == start.anchor
    assert res.info["admissible_actions"] == start.info["admissible_actions"]
    assert res.info["policy_commands"] == start.info["policy_commands"]
    assert env._steps == 0


def test_admissible_action_is_valid_and_moves(env):
    start = env.reset(1)
    first = start.info["policy_commands"][0]
    assert first.startswith("go ")
    res = env.step("  " + first.upper().replace(" ", "   ") + " ")  # case and whitespace are normalised
    assert res.info["is_action_valid"] and res.anchor != start.anchor and res.reward == 0.0
    assert len(res.info["policy_commands"]) == len(start.info["policy_commands"]) - 1


def test_walkthrough_wins_with_positive_reward(env):
    res = env.reset(1)
    plan = list(res.info["policy_commands"])
    env.step("xyzzy")  # an invalid step in between does not disturb the game
    total = 0.0
    for i, command in enumerate(plan):
        res = env.step(command)
        assert res.info["is_action_valid"]
        total += res.reward
        assert res.done == (i == len(plan) - 1)
    assert res.info["won"] and res.done and not res.info["lost"]
    assert total == pytest.approx(res.info["max_score"]) and total > 0
    frozen = env.step(plan[-1] if plan[-1] in res.info["admissible_actions"] else res.info["admissible_actions"][0])
    assert frozen.done and frozen.reward == 0.0 and frozen.anchor == res.anchor


def test_same_seed_same_game_even_regenerated(env, games_dir, tmp_path):
    a = env.reset(4)
    b = env.reset(4)
    assert (a.text, a.anchor) == (b.text, b.anchor)
    other = TextWorldEnv(challenge="tw-coin_collector", level=3, games_dir=str(tmp_path))  # generates anew
    c = other.reset(4)
    other.close()
    assert (c.text, c.anchor) == (a.text, a.anchor)
    assert env.reset(1).anchor != a.anchor  # a different map


def test_game_file_is_cached_and_reused(games_dir):
    e1 = TextWorldEnv(challenge="tw-coin_collector", level=2, games_dir=games_dir)
    e1.reset(9)
    name = e1.game_name(9)
    z8, js = (os.path.join(games_dir, name + ext) for ext in (".z8", ".json"))
    assert os.path.isfile(z8) and os.path.isfile(js)
    mtimes = (os.stat(z8).st_mtime_ns, os.stat(js).st_mtime_ns)
    e2 = TextWorldEnv(challenge="tw-coin_collector", level=2, games_dir=games_dir)
    e2.reset(9)
    e1.reset(9)
    assert (os.stat(z8).st_mtime_ns, os.stat(js).st_mtime_ns) == mtimes
    assert not [f for f in os.listdir(games_dir) if f.startswith(".gen-")]  # temp folders cleaned up
    # a half-written cache entry (json without z8, e.g. a killed process) is regenerated
    os.remove(z8)
    res = e2.reset(9)
    assert os.path.isfile(z8) and res.info["admissible_actions"]
    e1.close()
    e2.close()


def test_max_steps_ends_episode(games_dir):
    e = TextWorldEnv(challenge="tw-coin_collector", level=3, games_dir=games_dir, max_steps=2)
    e.reset(1)
    assert not e.step("look").done
    assert e.step("nonsense").info["is_action_valid"] is False
    res = e.step("look")
    assert res.done and not res.info["won"]
    e.close()


@pytest.mark.parametrize(
    "challenge,kwargs", [("tw-treasure_hunter", {"level": 1}), ("tw-simple", {"settings": {"goal": "brief"}})]
)
def test_other_challenges_walkthrough(games_dir, challenge, kwargs):
    e = TextWorldEnv(challenge=challenge, games_dir=games_dir, **kwargs)
    res = e.reset(3)
    assert "goal=brief" in e.game_name(3) or challenge != "tw-simple"
    total, rewarded_steps = 0.0, 0
    for command in res.info["policy_commands"]:
        res = e.step(command)
        total += res.reward
        rewarded_steps += res.reward > 0
    if challenge == "tw-simple":  # dense rewards: several scoring steps, each worth the score increase only
        assert rewarded_steps > 1
    assert res.info["won"] and res.done and total == pytest.approx(res.info["max_score"]) and total > 0
    e.close()


def test_strip_banner():
    raw = "\n\n   ____  __\n  |  \\| $$ \\$$\n  /  $$<>\n\nWelcome! Go north.\n\n\n\n-= Hall =-\nA hall.\n"
    assert strip_banner(raw) == "Welcome! Go north.\n\n-= Hall =-\nA hall."
    assert strip_banner("You take the key.\n") == "You take the key."


def test_missing_package_message(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "textworld", None)
    with pytest.raises(ImportError, match=r"pip install -e \.\[textworld\]"):
        TextWorldEnv()
