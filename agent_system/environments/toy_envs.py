"""A dependency-free environment for tests and smoke runs: a one-dimensional corridor.

``line_world``: the agent stands on cell ``pos`` of a corridor of ``length`` cells and must reach the goal cell by
moving ``left`` or ``right``. The start and goal cells are drawn from ``seed`` (different cells). Reward: 1.0 on the
step that reaches the goal (the episode ends, ``won=True``), else 0.0. Any other action is invalid and changes
nothing. ``crash_at_step`` (tests only) raises on that step number to exercise the worker's restart path.
"""

from __future__ import annotations

import random
from typing import Optional

from agent_system.environments.base import StepResult, TextEnv, register_env

LINE_WORLD_ACTIONS = ("left", "right")


@register_env("line_world")
class LineWorldEnv(TextEnv):
    """Corridor of ``length`` >= 2 cells; see the module docstring."""

    instruction = (
        "You are in a corridor. Reach the goal cell G from your cell A. Each turn answer with exactly one "
        "move inside tags: <action>left</action> or <action>right</action>."
    )

    def __init__(self, length: int = 5, crash_at_step: Optional[int] = None):
        if length < 2:
            raise ValueError(f"env.line_world.length must be >= 2, got {length}")
        self.length = int(length)
        self.crash_at_step = crash_at_step
        self.pos = self.goal = 0
        self.steps = 0

    def _render(self) -> str:
        cells = ["A" if i == self.pos else "G" if i == self.goal else "_" for i in range(self.length)]
        return "Corridor: " + " ".join(cells)

    def reset(self, seed: int) -> StepResult:
        rng = random.Random(seed)
        self.pos, self.goal = rng.sample(range(self.length), 2)
        self.steps = 0
        return StepResult(self._render(), (self.pos, self.goal), info={"admissible_actions": list(LINE_WORLD_ACTIONS)})

    def step(self, action: Optional[str]) -> StepResult:
        self.steps += 1
        if self.crash_at_step is not None and self.steps == self.crash_at_step:
            raise RuntimeError(f"line_world: deliberate crash at step {self.steps}")
        move = (action or "").strip().lower()
        valid = move in LINE_WORLD_ACTIONS
        if valid:
            self.pos = min(max(self.pos + (1 if move == "right" else -1), 0), self.length - 1)
        won = self.pos == self.goal
        return StepResult(
            self._render(),
            (self.pos, self.goal),
            reward=1.0 if won else 0.0,
            done=won,
            info={"won": won, "is_action_valid": valid, "admissible_actions": list(LINE_WORLD_ACTIONS)},
        )
