"""SFT warm start for the RLVCR level format on the ``sokoban`` agent environment (``docs/rlvcr.md``,
sections "Level SFT" and "Response format and parsing"): the agent-env counterpart of :mod:`rlvcr.level_sft`, so that a
tiny model writes ``<level>N</level><think>…</think><action>up</action>`` and RLVCR has model-chosen levels to train.

Rows come from expert episodes played through the real rollout loop: an
:class:`~agent_system.multi_turn_rollout.agent_rollout.AgentRollout` built from the trainer config (``env.*``,
``adv_estimator=rlvcr``: level guide as the prompt suffix) runs its collector's ``vanilla_multi_turn_loop`` with an
expert ``generate_fn``. For every prompt the loop asks about, the expert parses the grid from the observation,
solves the room exactly (:func:`solve`, BFS over ``(player, boxes)``) and answers the first move of a shortest plan in
the level format. The prompt text stored is the env manager's own ``prompt_text`` (checked token for token against
the ids the loop built), so the SFT prompt is the RL prompt by construction.

One row per expert step (columns of :mod:`rlvcr.level_sft`'s parquet plus ``task_seed`` and ``turn``):
``prompt`` = ``[{"role": "user", "content": prompt text}]``; ``level_target`` = :func:`level_target`, the level drawn
by :func:`rlvcr.level_sft.draw_level` from ``(seed, expert step index)``; ``reward_model.ground_truth`` = the expert move.
Thinks are templated from the grid (true statements, never copied text) and grow with the level: 2: the move;
3: where the player, box and target are, then the move; 4: also the box's way to the target, the next moves of the
plan and how many remain.

Alternative rows (``--alt-frac``): RLVCR samples the other levels' thinks from the same prompt with a level
instruction ending the user turn (``rollout_phase.alternative_suffix``). A tiny model SFT'd without such prompts
answers them with EOS at once (measured: empty alternative thinks); these rows teach it that prompt too.

CLI: ``python -m rlvcr.env_level_sft --out PATH.parquet --tasks N [--first-seed S] [--seed 1] [--split train|test]
[--alt-frac F] [--tokenizer tiny] [key=value trainer overrides, e.g. env.history_length=2]``.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, FrozenSet, List, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from agent_system.environments.sokoban_env import _PUSH_IDS, SOKOBAN_ACTIONS, SYMBOLS, _import_sokoban
from rlvcr.level_sft import draw_level, level_sft_schema
from rlvcr.prompts import AGENT_FORMAT, LevelFormat, level_context
from rlvcr.rollout_phase import alternative_suffix
from verl.utils.dataset.rlla_data import write_parquet_atomic
from verl.utils.reward_score.tool_parse import close_tag

__all__ = [
    "SokobanGrid",
    "alternative_level",
    "build_env_level_sft_file",
    "collect_expert_rows",
    "level_target",
    "level_think",
    "main",
    "move_deltas",
    "solve",
]

Cell = Tuple[int, int]
_CELLS = {v: k for k, v in SYMBOLS.items()}


@functools.cache
def move_deltas() -> Dict[str, Cell]:
    """``{action: (d_row, d_col)}`` from gym-sokoban's own tables: the env's push id of each text action
    (``sokoban_env._PUSH_IDS``) through gym's ``CHANGE_COORDINATES[(id - 1) % 4]``, as ``SokobanEnv._push`` does.
    Cached: do not mutate the returned dict. Raises ImportError: gym-sokoban missing."""
    table = sys.modules[_import_sokoban().__module__].CHANGE_COORDINATES
    return {a: tuple(int(x) for x in table[(_PUSH_IDS[a] - 1) % 4]) for a in SOKOBAN_ACTIONS}


@dataclass(frozen=True)
class SokobanGrid:
    """One Sokoban state: ``walls``/``targets``/``boxes`` (frozensets of 0-based ``(row, col)``), ``player``."""

    walls: FrozenSet[Cell]
    targets: FrozenSet[Cell]
    boxes: FrozenSet[Cell]
    player: Cell

    @classmethod
    def from_text(cls, text: str) -> "SokobanGrid":
        """Parse ``SokobanTextEnv.render`` output (rows of space-separated :data:`SYMBOLS`; it shows every target,
        under a box or the player too). Raises ValueError: an unknown symbol, ragged rows, or not exactly one
        player."""
        walls, targets, boxes, players = set(), set(), set(), []
        rows = [line.split(" ") for line in text.strip().split("\n")]
        if len({len(r) for r in rows}) != 1:
            raise ValueError(f"sokoban grid rows differ in length: {text!r}")
        for r, row in enumerate(rows):
            for c, sym in enumerate(row):
                kind = _CELLS.get(sym)
                if kind is None:
                    raise ValueError(f"sokoban grid: unknown symbol {sym!r} at row {r + 1}, column {c + 1}")
                if kind == "wall":
                    walls.add((r, c))
                if kind in ("target", "box_on_target", "player_on_target"):
                    targets.add((r, c))
                if kind in ("box", "box_on_target"):
                    boxes.add((r, c))
                if kind in ("player", "player_on_target"):
                    players.append((r, c))
        if len(players) != 1:
            raise ValueError(f"sokoban grid needs exactly one player, found {len(players)}")
        return cls(frozenset(walls), frozenset(targets), frozenset(boxes), players[0])

    @property
    def solved(self) -> bool:
        """All targets covered by boxes (``SokobanEnv._check_if_all_boxes_on_target``)."""
        return self.targets <= self.boxes

    def step(self, action: str) -> Tuple["SokobanGrid", bool]:
        """``(next grid, pushed)`` after a push-id move (``SokobanEnv._push``): a box ahead moves on when the cell
        behind it is floor or target, else the player walks when the cell ahead is free; otherwise nothing changes.
        Raises KeyError: ``action`` not one of ``SOKOBAN_ACTIONS``."""
        dr, dc = move_deltas()[action]
        ahead = (self.player[0] + dr, self.player[1] + dc)
        behind = (ahead[0] + dr, ahead[1] + dc)
        if ahead in self.boxes:
            if behind in self.walls or behind in self.boxes:
                return self, False
            return SokobanGrid(self.walls, self.targets, (self.boxes - {ahead}) | {behind}, ahead), True
        if ahead in self.walls:
            return self, False
        return SokobanGrid(self.walls, self.targets, self.boxes, ahead), False


def solve(grid: SokobanGrid, max_states: int = 200_000) -> List[str]:
    """A shortest move list that solves ``grid`` (breadth-first over ``(player, boxes)``; ties broken by the order
    of ``SOKOBAN_ACTIONS``); ``[]`` when already solved. Raises ValueError: unsolvable, or more than
    ``max_states`` states visited."""
    start = (grid.player, grid.boxes)
    parent: Dict[tuple, Optional[Tuple[tuple, str]]] = {start: None}
    queue = deque([grid])
    while queue:
        state = queue.popleft()
        if state.solved:
            plan, key = [], (state.player, state.boxes)
            while parent[key] is not None:
                key, action = parent[key]
                plan.append(action)
            return plan[::-1]
        for action in SOKOBAN_ACTIONS:
            nxt, _ = state.step(action)
            key = (nxt.player, nxt.boxes)
            if key not in parent:
                parent[key] = ((state.player, state.boxes), action)
                queue.append(nxt)
        if len(parent) > max_states:
            raise ValueError(f"sokoban solver: more than {max_states} states, giving up")
    raise ValueError("sokoban room has no solution")


def _at(cell: Cell) -> str:
    return f"row {cell[0] + 1}, column {cell[1] + 1}"


def _offset(src: Cell, dst: Cell) -> str:
    dr, dc = dst[0] - src[0], dst[1] - src[1]
    parts = [f"{abs(dr)} row{'s' * (abs(dr) != 1)} {'down' if dr > 0 else 'up'}"] if dr else []
    parts += [f"{abs(dc)} column{'s' * (abs(dc) != 1)} {'right' if dc > 0 else 'left'}"] if dc else []
    return " and ".join(parts)


def level_think(grid: SokobanGrid, plan: Sequence[str], level: int, fmt: LevelFormat = AGENT_FORMAT) -> str:
    """The think of ``level`` for the state ``grid`` whose shortest plan is ``plan`` (non-empty; ``plan[0]`` is
    the move taken): ``""`` at level 1; level 2: one sentence on the move (a push, onto a target or not, or a walk);
    level 3: the player's, boxes' and free targets' cells, then that sentence; level ``fmt.num_levels`` (and any
    level above 3): also, with one box off target, the way it must travel, then the next (up to 3) moves of the plan
    and how many remain. Every statement is read off ``grid``/``plan``.
    Raises ValueError: empty ``plan`` or ``level`` outside ``1..fmt.num_levels``."""
    if not plan:
        raise ValueError("level_think needs a non-empty plan (the grid is already solved)")
    if not 1 <= level <= fmt.num_levels:
        raise ValueError(f"level must be in 1..{fmt.num_levels}, got {level}")
    if level == 1:
        return ""
    after, pushed = grid.step(plan[0])
    if not pushed:
        move = f"Walk {plan[0]} on the shortest way to the next push."
    elif after.boxes - grid.boxes <= grid.targets:
        move = f"Push the box {plan[0]} onto the target."
    else:
        move = f"Push the box {plan[0]}."
    if level == 2:
        return move
    off, free = sorted(grid.boxes - grid.targets), sorted(grid.targets - grid.boxes)
    if len(off) == 1 and len(free) == 1:
        where = f"The box is at {_at(off[0])} and the target at {_at(free[0])}."
    else:
        where = f"Boxes off target: {'; '.join(map(_at, off))}. Free targets: {'; '.join(map(_at, free))}."
    sentences = [f"I am at {_at(grid.player)}.", where]
    if level > 3:
        if len(off) == 1 and len(free) == 1:
            sentences.append(f"The box must go {_offset(off[0], free[0])} to reach it.")
        sentences.append(f"Plan: {', '.join(plan[:3])}; {len(plan)} move{'s' * (len(plan) != 1)} left.")
    return " ".join(sentences + [move])


def level_target(grid: SokobanGrid, plan: Sequence[str], level: int, fmt: LevelFormat = AGENT_FORMAT) -> str:
    """The SFT target: :func:`rlvcr.prompts.level_context` of ``level`` with :func:`level_think`, then ``plan[0]``
    and the closing action tag (``<level>2</level><think>…</think><action>up</action>``).
    Raises ValueError: as :func:`level_think`."""
    tag = fmt.action_tags[0]
    return level_context(level, level_think(grid, plan, level, fmt), tag, fmt) + plan[0] + close_tag(tag)


def alternative_level(
    seed: int, index: int, level: int, alt_frac: float, fmt: LevelFormat = AGENT_FORMAT
) -> Optional[int]:
    """The level of the alternative row of expert step ``index`` (chosen level ``level``), or None (no such row):
    with probability ``alt_frac`` a level drawn uniformly from ``2..num_levels`` minus ``level`` (the levels RLVCR
    samples alternative thinks for), from a NumPy generator seeded with ``(seed, index, 1)`` (independent of
    :func:`rlvcr.level_sft.draw_level`'s ``(seed, index)``). Raises ValueError: ``alt_frac`` outside [0, 1]."""
    if not 0.0 <= float(alt_frac) <= 1.0:
        raise ValueError(f"alt_frac must be in [0, 1], got {alt_frac}")
    rng = np.random.default_rng([int(seed), int(index), 1])
    others = [k for k in range(2, fmt.num_levels + 1) if k != level]
    if rng.random() >= float(alt_frac):
        return None
    return others[int(rng.integers(len(others)))]


def collect_expert_rows(
    tokenizer,
    task_seeds: Sequence[int],
    seed: int = 1,
    overrides: Sequence[str] = (),
    split: str = "train",
    start_index: int = 0,
    alt_frac: float = 0.0,
) -> Tuple[List[dict], Dict[str, float]]:
    """Play one expert episode per task seed through the rollout loop of a trainer config and return its rows.

    The config is ``ppo_trainer.yaml`` + ``env.env_name=sokoban``, ``algorithm.adv_estimator=rlvcr``, in-process
    env workers, one copy per task, 100 turns, ``data.max_prompt_length=1024`` + ``overrides`` (the RL run's
    ``env.*``/``data.*`` keys, so that prompts match). ``tokenizer``: the actor's (HF). Expert step ``k`` gets level
    ``draw_level(seed, start_index + k)`` (its ``extra_info.index``). ``alt_frac``: share of steps that also get an
    *alternative* row (after all step rows): the prompt RLVCR's phase samples an alternative think from
    (``rollout_phase.alternative_suffix`` ending the user turn, also in ``extra_info.instruction``) with the target
    at :func:`alternative_level`. Returns ``(rows, rollout metrics)``.

    Raises RuntimeError: a prompt the loop built differs from the chat-templated prompt text (truncated), a target
    longer than ``data.max_response_length``, or an expert episode not won.
    """
    import torch

    from agent_system.multi_turn_rollout.agent_rollout import AgentRollout
    from rlvcr.rollout_phase import agent_level_setup
    from verl.protocol import DataProto
    from verl.trainer.config_utils import load_default_config
    from verl.workers.rollout.base import assemble_rollout_output

    config = load_default_config(
        [
            "env.env_name=sokoban",
            "algorithm.adv_estimator=rlvcr",
            "env.val_tasks=1",
            "env.use_ray_workers=false",
            "env.num_workers=1",
            "env.max_steps=100",
            "data.max_prompt_length=1024",  # run_agent.sh's; 512 cuts history prompts
            f"data.train_batch_size={len(task_seeds)}",
            "actor_rollout_ref.rollout.n=1",
            *overrides,
        ]
    )
    rlvcr, suffix = agent_level_setup(config, tokenizer)
    agent = AgentRollout(config, tokenizer, rlvcr=rlvcr, prompt_suffix=suffix)
    envs, fmt = agent.train_envs, agent.collector.rlvcr.fmt
    width = int(config.data.max_response_length)  # every rollout output has exactly this many response columns
    seed_of = np.repeat(np.asarray(task_seeds, dtype=np.int64), envs.group_n)  # instance -> its task's seed
    rows: List[dict] = []
    alt_rows: List[dict] = []

    def encode(row: dict, task_seed: int) -> List[int]:
        ids = tokenizer(row["level_target"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        if len(ids) > width:
            raise RuntimeError(
                f"task seed {task_seed}: a {len(ids)}-token level-{row['level']} target exceeds "
                f"data.max_response_length={width}"
            )
        return ids

    def expert(gen: DataProto) -> DataProto:
        responses = []
        for i, ids, mask in zip(np.flatnonzero(envs.active), gen.batch["input_ids"], gen.batch["attention_mask"]):
            text = envs.prompt_text(int(i))
            chat = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], tokenize=False, add_generation_prompt=True
            )
            if tokenizer(chat, add_special_tokens=False)["input_ids"] != ids[mask.bool()].tolist():
                raise RuntimeError(
                    f"task seed {seed_of[i]}: the loop's prompt ids differ from the prompt text "
                    "(truncated? raise env.max_prompt_length)"
                )
            grid = SokobanGrid.from_text(envs.last_text[int(i)])
            plan = solve(grid)
            index = start_index + len(rows)  # the expert step's position (alternative rows not counted)
            level = draw_level(seed, index, fmt.num_levels)
            target = level_target(grid, plan, level, fmt)
            row = {
                "data_source": envs.env_name,
                "prompt": [{"content": text, "role": "user"}],
                "ability": "agent",
                "reward_model": {"ground_truth": plan[0], "style": "rule"},
                "extra_info": {
                    "index": index,
                    "input": envs.last_text[int(i)],
                    "instruction": "",
                    "output": plan[0],
                    "split": split,
                },
                "level_target": target,
                "level": level,
                "task_seed": int(seed_of[i]),
                "turn": int(envs.step_count),
            }
            rows.append(row)
            alt = alternative_level(seed, index, level, alt_frac, fmt)
            if alt is not None:  # the prompt RLVCR samples T_alt from, answered at that level
                suffix = alternative_suffix(alt, fmt)
                alt_rows.append(
                    {
                        **row,
                        "prompt": [{"content": text + suffix, "role": "user"}],
                        "extra_info": {**row["extra_info"], "instruction": suffix},
                        "level_target": level_target(grid, plan, alt, fmt),
                        "level": alt,
                    }
                )
                encode(alt_rows[-1], seed_of[i])  # its length check
            responses.append(torch.tensor(encode(row, seed_of[i])))
        padded = torch.nn.utils.rnn.pad_sequence(responses, batch_first=True, padding_value=agent.pad_token_id)
        return assemble_rollout_output(gen, padded, width, tokenizer.eos_token_id, agent.pad_token_id)

    try:
        batch, metrics = agent.collector.vanilla_multi_turn_loop(envs, expert, [int(s) for s in task_seeds])
    finally:
        agent.close()
    lost = sorted(
        {int(seed_of[i]) for i, w in zip(batch.non_tensor_batch["instance"], batch.non_tensor_batch["won"]) if not w}
    )
    if lost:
        raise RuntimeError(f"expert episodes not won for task seeds {lost[:10]} (env.max_steps too small?)")
    return rows + alt_rows, metrics


def build_env_level_sft_file(
    out: str | os.PathLike,
    tokenizer,
    num_tasks: int,
    first_seed: int = 2_000_000,
    seed: int = 1,
    split: str = "train",
    overrides: Sequence[str] = (),
    alt_frac: float = 0.0,
) -> Tuple[Path, Counter, Dict[str, float]]:
    """Write the rows of ``num_tasks`` expert episodes (task seeds ``first_seed + i``) to ``out`` atomically, in
    :mod:`rlvcr.level_sft`'s schema plus ``task_seed``/``turn`` (int64). Returns ``(path, level counts, rollout
    metrics)``. Raises ValueError: ``num_tasks`` < 1; RuntimeError: as :func:`collect_expert_rows`."""
    if int(num_tasks) < 1:
        raise ValueError(f"num_tasks must be >= 1, got {num_tasks}")
    rows, metrics = collect_expert_rows(
        tokenizer, [first_seed + i for i in range(int(num_tasks))], seed, overrides, split, alt_frac=alt_frac
    )
    schema = level_sft_schema().append(pa.field("task_seed", pa.int64())).append(pa.field("turn", pa.int64()))
    path = write_parquet_atomic(pa.Table.from_pylist(rows, schema=schema), out)
    return path, Counter(r["level"] for r in rows), metrics


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI (see the module docstring): write the parquet, print the row, level and episode counts."""
    parser = argparse.ArgumentParser(description="Build the RLVCR level-format SFT parquet from expert sokoban play.")
    parser.add_argument("--out", required=True, help="output parquet path")
    parser.add_argument("--tasks", type=int, required=True, help="expert episodes (one room each)")
    parser.add_argument("--first-seed", type=int, default=2_000_000, help="room seed of the first task")
    parser.add_argument("--seed", type=int, default=1, help="level draw seed (default 1)")
    parser.add_argument("--split", default="train", help="extra_info.split of the rows")
    parser.add_argument(
        "--alt-frac",
        type=float,
        default=0.0,
        help="share of expert steps that also get an alternative-think row (default 0)",
    )
    parser.add_argument("--tokenizer", default="tiny", help="model preset or directory whose tokenizer to use")
    parser.add_argument("overrides", nargs="*", help="trainer config overrides (key=value), e.g. env.history_length=2")
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer

    from verl.utils.model_presets import prepare_model

    tokenizer = AutoTokenizer.from_pretrained(prepare_model(args.tokenizer))
    path, levels, metrics = build_env_level_sft_file(
        args.out, tokenizer, args.tasks, args.first_seed, args.seed, args.split, args.overrides, args.alt_frac
    )
    print(f"wrote {sum(levels.values())} rows ({args.tasks} episodes, alternative rows included) to {path}")
    print("levels: " + ", ".join(f"{k}={levels.get(k, 0)}" for k in sorted(levels)))
    print("episodes: " + ", ".join(f"{k}={v:.3g}" for k, v in sorted(metrics.items()) if k.startswith("env/")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
