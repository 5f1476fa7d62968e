"""The RLLA tool-use dialogue as a multi-turn environment (``env.env_name=rlla_multiturn``).

A task is one RLLA row (``seed % rows`` of the split; training tasks use ``split='train'``, validation tasks
``split='test'``). The row's system prompt (tools and output format) is the instruction and its dialogue history
the first observation. The model answers in ToolRL's format (``<think>…</think>`` then ``<tool_call>…</tool_call>``
and/or ``<response>…</response>``); the whole output is the action (no ``<action>`` tags).

- Turn 0 is scored with the RLLA reward (``verl.utils.reward_score.rlla.compute_score``, ``wrapper='none'``)
  against the row's ground truth at the trainer's global step (``TextEnv.training_step``, so ToolRL's scheduled
  switches such as ``SCHEDULEREWARD`` advance): exactly ToolRL's single-turn reward, range [-3, 4] by default.
- An answer with tool calls and no ``<response>`` continues the episode: each call gets an observation, the
  recorded ``<obs>`` of the same call (same name and parameters) in the row's dialogue history when there is one,
  else a "tool unavailable" observation. Later turns have no ground truth and get reward 0; the episode ends at the
  first ``<response>`` (``won`` = turn 0's correctness component is at its maximum) or at ``env.max_steps``.
- The anchor is ``"<row index>|<turn>|<last observation>"``, so GiGPO groups the copies of a task turn by turn.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Dict, List, Optional, Tuple

from agent_system.environments.base import StepResult, TextEnv, register_env

SPLITS = ("train", "test")


@lru_cache(maxsize=4)
def _rows(split: str, data_dir: Optional[str]) -> Tuple[dict, ...]:
    import pandas as pd

    from verl.utils.dataset.rlla_data import resolve_rlla_file

    frame = pd.read_parquet(resolve_rlla_file(split, data_dir) if data_dir else resolve_rlla_file(split))
    rows = []
    for i, row in frame.iterrows():
        messages = [dict(m) for m in row["prompt"]]
        system = next((m["content"] for m in messages if m["role"] == "system"), "")
        user = next((m["content"] for m in messages if m["role"] == "user"), "")
        rows.append(
            {"index": int(i), "system": system, "user": user, "ground_truth": str(row["reward_model"]["ground_truth"])}
        )
    if not rows:
        raise ValueError(f"rlla_multiturn: the RLLA {split} split is empty")
    return tuple(rows)


def _call_key(call: dict) -> str:
    return json.dumps({"name": call.get("name"), "parameters": call.get("parameters", {})}, sort_keys=True)


def recorded_observations(history: str) -> Dict[str, str]:
    """``{canonical call: obs text}`` for every ``<tool_call>`` block of a dialogue history followed by ``<obs>``
    (a block with several calls maps each of them to the same observation)."""
    from verl.utils.reward_score.tool_parse import parse_tool_calls

    found: Dict[str, str] = {}
    for chunk in history.split("<tool_call>")[1:]:
        if "</tool_call>" not in chunk:
            continue
        block, rest = chunk.split("</tool_call>", 1)
        head = rest.split("<tool_call>")[0]
        if "<obs>" not in head or "</obs>" not in head:
            continue
        obs = head.split("<obs>", 1)[1].split("</obs>", 1)[0].strip()
        try:
            calls = parse_tool_calls(f"<tool_call>{block}</tool_call>")
        except ValueError:
            continue
        for call in calls:
            found.setdefault(_call_key(call), obs)
    return found


@register_env("rlla_multiturn")
class RLLAMultiTurnEnv(TextEnv):
    """See the module docstring. kwargs: ``split`` (train | test), ``data_dir`` (None: RLLA data discovery).

    Raises ValueError: unknown split; FileNotFoundError (from discovery): no RLLA data found.
    """

    instruction = ""  # per task: the row's system prompt, passed as info['instruction']
    raw_text_actions = True  # the action is the whole model output
    has_splits = True  # validation environments are built with split='test'

    def __init__(self, split: str = "train", data_dir: Optional[str] = None):
        if split not in SPLITS:
            raise ValueError(f"rlla_multiturn: split must be one of {SPLITS}, got {split!r}")
        self.split, self.data_dir = split, data_dir
        self.row: dict = {}
        self.turn = 0
        self.first_turn_won = False
        self.observations: Dict[str, str] = {}

    def reset(self, seed: int) -> StepResult:
        rows = _rows(self.split, self.data_dir)
        self.row = rows[int(seed) % len(rows)]
        self.turn = 0
        self.first_turn_won = False
        self.observations = recorded_observations(self.row["user"])
        return StepResult(
            self.row["user"],
            self._anchor(self.row["user"]),
            info={"instruction": self.row["system"], "row_index": self.row["index"]},
        )

    def _anchor(self, text: str) -> str:
        return f"{self.row['index']}|{self.turn}|{text}"

    def step(self, action: Optional[str]) -> StepResult:
        from verl.utils.reward_score.rlla import RewardSwitches, compute_score, correctness_range
        from verl.utils.reward_score.tool_parse import extract_tags, parse_tool_calls

        text = action or ""
        reward, won, info = 0.0, False, {}
        if self.turn == 0:
            switches = RewardSwitches.from_env()  # ToolRL's switches, read as its reward reads them
            score, fmt, correct, length = compute_score(
                text, self.row["ground_truth"], step=self.training_step, wrapper="none", switches=switches
            )
            reward = float(score)
            info.update({"format": fmt, "correctness": correct, "length": length})
            best, _ = correctness_range(self.training_step, switches)  # 3 by default; a schedule moves it
            won = correct >= best - 1e-9
            self.first_turn_won = won
        tags = extract_tags(text)
        try:
            calls = parse_tool_calls(text) if tags.get("tool_call") else []
        except ValueError:
            calls = []
        valid = bool(tags.get("response") or calls)
        self.turn += 1
        if tags.get("response") or not calls:
            return StepResult(
                "", self._anchor(""), reward, True, {**info, "won": self.first_turn_won, "is_action_valid": valid}
            )
        observations: List[str] = []
        for call in calls:
            obs = self.observations.get(_call_key(call))
            observations.append(
                obs
                if obs is not None
                else f'[{{"name": {json.dumps(call.get("name"))}, "results": "tool unavailable in this environment"}}]'
            )
        obs_text = "<obs> " + " ".join(observations) + " </obs>"
        return StepResult(
            obs_text, self._anchor(obs_text), reward, False, {**info, "won": won, "is_action_valid": valid}
        )
