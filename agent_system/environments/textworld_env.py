"""TextWorld text adventures as a text environment (``pip install -e .[textworld]``, textworld 1.7).

Games come from TextWorld's built-in challenges (``tw-coin_collector``, ``tw-treasure_hunter``, ``tw-simple``,
``tw-cooking``), generated offline, one game per (challenge, settings, seed), and cached on disk: a game is a
``<name>.z8`` story file plus its ``<name>.json`` metadata (needed for admissible commands and the world facts).
Generation takes ~0.5-3 s per game; later resets with the same seed load the cached files (~0.1 s).

Cache directory: the ``games_dir`` argument, else ``$TOOLRL_CACHE/textworld_games``, else
``~/.cache/toolrl_router/textworld_games``. Concurrent generation of the same game by several processes is safe: each
process compiles into its own temporary folder inside the cache directory and then renames the ``.json`` and then the
``.z8`` into place (``os.replace`` is atomic on one file system); a game counts as cached once its ``.z8`` exists.
The file names include the textworld version, so a different generator never reuses stale games.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import warnings
from typing import Any, Dict, Mapping, Optional

from agent_system.environments.base import StepResult, TextEnv, register_env

# Default settings of each supported challenge; ``level`` overrides the "level" entry where the challenge has one.
CHALLENGE_DEFAULTS: Dict[str, Dict[str, Any]] = {
    "tw-coin_collector": {"level": 5},  # level L in 1..100: L rooms on a chain, walk to the coin and take it
    "tw-treasure_hunter": {"level": 5},  # 1..30: 5/10/20 rooms, find and take the named object
    "tw-simple": {"rewards": "dense", "goal": "detailed", "test": False},
    "tw-cooking": {
        "recipe": 1,
        "take": 1,
        "go": 1,
        "open": False,
        "cook": False,
        "cut": False,
        "drop": False,
        "recipe_seed": 0,
        "split": "",
    },
}
# Leading lines made only of these characters form TextWorld's ASCII-art banner (and blank lines around it).
_BANNER_LINE = re.compile(r"^[\s_|\\/$<>()]*$")


def _normalise(command: str) -> str:
    return " ".join(command.lower().split())


def strip_banner(text: str) -> str:
    """Drop the leading ASCII-art banner lines of TextWorld's first observation; collapse runs of blank lines."""
    lines = text.splitlines()
    while lines and _BANNER_LINE.match(lines[0]):
        lines.pop(0)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


@contextlib.contextmanager
def _quiet_jericho():
    """Silence jericho's UnsupportedGameWarning: jericho does not "fully support" TextWorld's story files, so it
    warns on every load and on every state read (``get_valid_actions`` returns []); TextWorld computes the admissible
    commands itself from the game logic, so nothing is lost."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r".*(is not fully supported|in an unsupported game)")
        yield


def default_games_dir() -> str:
    """``$TOOLRL_CACHE/textworld_games`` if TOOLRL_CACHE is set, else ``~/.cache/toolrl_router/textworld_games``."""
    root = os.environ.get("TOOLRL_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "toolrl_router")
    return os.path.join(root, "textworld_games")


@register_env("textworld")
class TextWorldEnv(TextEnv):
    """One TextWorld game per seed, played through ``textworld.start``.

    Args:
        challenge: one of :data:`CHALLENGE_DEFAULTS`.
        level: difficulty of the level-based challenges (coin_collector 1..100, treasure_hunter 1..30); None keeps
            the default of :data:`CHALLENGE_DEFAULTS`.
        settings: other challenge settings overriding the defaults (e.g. ``{"rewards": "sparse"}`` for tw-simple).
        games_dir: cache directory of generated games (see the module docstring).
        max_steps: after this many actions played in the game the episode ends (``done=True``); invalid actions do
            not count. The trainer applies its own turn limit as well.

    ``reset(seed)``/``step(action)`` return a :class:`StepResult`:

    * ``text``: the game's feedback to the last command (for ``reset`` the goal statement and first room, without the
      ASCII banner), then a line ``Admissible actions: a, b, ...``.
    * ``anchor``: the exact world state, as a string: TextWorld's world facts (``at(P, kitchen: r)``,
      ``open(wooden door: d)``, ``in(old key: k, I)`` ...), sorted, one per line. Equal strings = equal states of
      the same game, including things the player cannot currently see.
    * ``reward``: the increase of the game score on this step (points; 0.0 for ``reset`` and invalid actions).
    * ``done``: won, lost, the game ended, or ``max_steps`` actions played.
    * ``info``: ``won``, ``lost``, ``is_action_valid``, ``admissible_actions`` (list of commands for the next turn),
      ``score``/``max_score`` (points), ``policy_commands`` (a winning command sequence from the current state).

    Raises:
        ImportError: textworld missing. ValueError: unknown challenge. RuntimeError: ``step`` before ``reset``.
    """

    instruction = (
        "You are playing a text adventure game. Each turn you read what happened and the list of admissible actions, "
        "then type one command to act in the world, e.g. move with go north / go south / go east / go west, take an "
        "object, open a container or door, unlock a door with a key, put an object on a supporter. Follow the goal "
        "given at the start of the game; you win when it is completed. Only the admissible actions listed each turn "
        "are accepted. Answer with exactly one command inside tags, e.g. <action>go north</action>."
    )

    def __init__(
        self,
        challenge: str = "tw-coin_collector",
        level: Optional[int] = None,
        settings: Optional[Mapping[str, Any]] = None,
        games_dir: Optional[str] = None,
        max_steps: int = 50,
    ):
        if challenge not in CHALLENGE_DEFAULTS:
            raise ValueError(f"env.textworld.challenge={challenge!r}; expected one of {sorted(CHALLENGE_DEFAULTS)}")
        try:
            import textworld
            import textworld.challenges  # noqa: F401  (registers the challenges)
        except ImportError as exc:
            raise ImportError(
                "env.env_name=textworld needs the textworld package: pip install -e .[textworld]"
            ) from exc
        self._tw = textworld
        self.challenge = challenge
        self.settings = dict(CHALLENGE_DEFAULTS[challenge])
        self.settings.update(settings or {})
        if level is not None:
            if "level" not in self.settings:
                raise ValueError(f"{challenge} has no level setting; use settings= instead")
            self.settings["level"] = int(level)
        self.games_dir = os.path.abspath(os.path.expanduser(games_dir or default_games_dir()))
        self.max_steps = int(max_steps)
        self._infos = textworld.EnvInfos(
            admissible_commands=True, won=True, lost=True, score=True, max_score=True, facts=True, policy_commands=True
        )
        self._env = None
        self._game_file: Optional[str] = None
        self._state = None
        self._done = False
        self._steps = 0

    # ------------------------------------------------------------------ game files
    def game_name(self, seed: int) -> str:
        """File stem of the game for ``seed``: challenge, sorted settings, seed and textworld version."""
        parts = [f"{k}={v}" for k, v in sorted(self.settings.items())]
        stem = "-".join([self.challenge, *parts, f"seed{seed}", f"tw{self._tw.__version__}"])
        return re.sub(r"[^A-Za-z0-9_.=+-]", "_", stem)

    def game_file(self, seed: int) -> str:
        """Path of the ``.z8`` game for ``seed``, generating (and caching) it first when missing."""
        seed = int(seed) % 2**31  # GameOptions seeds go to numpy RandomState
        name = self.game_name(seed)
        path = os.path.join(self.games_dir, name + ".z8")
        if os.path.isfile(path) and os.path.isfile(os.path.join(self.games_dir, name + ".json")):
            return path
        os.makedirs(self.games_dir, exist_ok=True)
        tmp_dir = tempfile.mkdtemp(prefix=".gen-", dir=self.games_dir)
        try:
            options = self._tw.GameOptions()
            options.seeds = seed
            options.path = os.path.join(tmp_dir, name + ".z8")
            options.file_ext = ".z8"
            _, make_game, _ = self._tw.challenges.CHALLENGES[self.challenge]
            with _quiet_jericho():
                game = make_game(settings=dict(self.settings), options=options)
                self._tw.generator.compile_game(game, options)
            # json first: once the .z8 is visible, its .json is complete
            os.replace(os.path.join(tmp_dir, name + ".json"), os.path.join(self.games_dir, name + ".json"))
            os.replace(os.path.join(tmp_dir, name + ".z8"), path)
        finally:
            shutil.rmtree(tmp_dir, ignore_errors=True)
        return path

    # ------------------------------------------------------------------ TextEnv API
    def _result(self, text: str, reward: float, valid: bool) -> StepResult:
        st = self._state
        admissible = sorted(st["admissible_commands"] or [])
        text = f"{text}\n\nAdmissible actions: {', '.join(admissible)}" if admissible else text
        anchor = "\n".join(sorted(str(fact) for fact in (st["facts"] or [])))
        info = {
            "won": bool(st["won"]),
            "lost": bool(st["lost"]),
            "is_action_valid": valid,
            "admissible_actions": admissible,
            "score": st["score"],
            "max_score": st["max_score"],
            "policy_commands": list(st["policy_commands"] or []),
        }
        return StepResult(text, anchor, reward=float(reward), done=self._done, info=info)

    def reset(self, seed: int) -> StepResult:
        """Build or load the game for ``seed`` and start it (same seed -> same game and first observation)."""
        path = self.game_file(seed)
        if path != self._game_file:
            self.close()
            with _quiet_jericho():
                self._env = self._tw.start(path, request_infos=self._infos)
            self._game_file = path
        with _quiet_jericho():
            self._state = self._env.reset()
        self._done = bool(self._state["won"] or self._state["lost"])
        self._steps = 0
        return self._result(strip_banner(self._state.feedback), 0.0, True)

    def step(self, action: Optional[str]) -> StepResult:
        """Play ``action`` if it is one of the admissible commands (case and whitespace are ignored); otherwise (or
        for None) the step is invalid: reward 0.0, nothing is sent to the game. After the episode ended the state
        is frozen (reward 0.0, ``done`` stays True)."""
        if self._state is None:
            raise RuntimeError("TextWorldEnv.step called before reset")
        by_norm = {_normalise(c): c for c in (self._state["admissible_commands"] or [])}
        command = by_norm.get(_normalise(action or ""))
        if command is None:
            return self._result("That action is not admissible here; nothing happened.", 0.0, False)
        if self._done:
            return self._result("The game is over.", 0.0, True)
        before = self._state["score"] or 0
        with _quiet_jericho():
            self._state, _, game_done = self._env.step(command)
        self._steps += 1
        self._done = bool(game_done or self._state["won"] or self._state["lost"] or self._steps >= self.max_steps)
        reward = (self._state["score"] or 0) - before
        return self._result(strip_banner(self._state.feedback), reward, True)

    def close(self) -> None:
        """Release the game interpreter (the next ``reset`` starts a new one)."""
        if self._env is not None:
            self._env.close()
        self._env = None
        self._game_file = None
