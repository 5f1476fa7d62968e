"""One BFCL multi-turn row as an :class:`~agent_system.multi_turn_rollout.episode.Episode` of the executing loop: the
policy's calls run on the row's own BFCL backends (``bfcl-eval``'s ``execute_multi_turn_func_call``) and the episode
records them per user turn and step, in the shape BFCL's ``multi_turn_checker`` reads.

- ``reset()``: the RLLA system prompt (:func:`verl.utils.dataset.rlla_prompt.render_system`, the prompt single-turn
  BFCL is asked with) listing the row's function documents, plus a note on how turns end; then the first user turn
  as the RLLA dialogue history.
- ``execute(calls)``: each call becomes BFCL's call string (:func:`~verl.utils.dataset.bfcl_multi_turn.
  call_to_string`) and runs on this episode's backend instances; its output is the observation. A call of a name
  that is no method of the row's backends, or whose arguments cannot be written as a call string, is answered with
  an error and neither executed nor recorded (BFCL's executor would ``eval`` it; the checker's verdict only differs
  when such a call is a turn's only one). ``ok`` is False when BFCL reports ``Error during execution: ...`` or the
  backend answers with an ``{"error": ...}`` object.
- ``next_turn(answer)``: an assistant turn without a call ends the user turn; the next turn's user messages follow,
  and for a ``miss_func`` turn without a message, the held-out documents (rendered as the system prompt's tool
  entries, numbered on) and BFCL's own follow-up question. None after the last turn.

Every episode executes under its own model name (``toolrl_episode_<hex>``), so two episodes of the same row never
share backend state, nor with the checker's replays; :meth:`BFCLMultiTurnEpisode.close` frees the instances.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Mapping

from agent_system.tools.result import ToolResult
from verl.utils.dataset.bfcl_multi_turn import (
    backend_signatures,
    call_to_string,
    drop_backend_instances,
    multi_turn_api,
)
from verl.utils.dataset.rlla_prompt import render_history, render_system, render_tool

__all__ = ["ERROR_PREFIX", "TURN_NOTE", "BFCLMultiTurnEpisode", "tool_entries"]

ERROR_PREFIX = "Error during execution"  # how BFCL's executor reports a call that raised
TURN_NOTE = (
    "This is a multi-turn conversation with tools that act on a live environment. Within one user turn you may call "
    "tools over several rounds: each round's `<obs>` results come back before you continue. When the user's request "
    "is fulfilled (or cannot be), answer with a `<response>` and no `<tool_call>`: that ends the turn."
)


def tool_entries(functions: list[Mapping]) -> list[tuple[str, str, dict]]:
    """BFCL function documents → ``(name, description, properties)`` triples for the RLLA tool list (the RLLA format
    shows each parameter's schema, not the ``required`` list, as single-turn BFCL does)."""
    return [(f["name"], f.get("description", ""), (f.get("parameters") or {}).get("properties", {})) for f in functions]


class BFCLMultiTurnEpisode:
    """One row of :func:`verl.utils.dataset.bfcl_multi_turn.load_multi_turn_category` played through the loop.

    Attributes:
        tools: empty: the tools are listed in the system prompt (RLLA format).
        row: the row.
        model_name: the name BFCL's executor keys this episode's backend instances by.
        turn: the index of the current user turn.
        steps: per user turn so far, the executed steps, each the list of call strings of one assistant turn (the
            checker's ``multi_turn_model_result_list_decoded``; steps without a recorded call are left out, as BFCL's
            evaluation drops steps that decode to nothing).
        step_counts: per user turn, the assistant turns that made calls (BFCL quits a row when one turn takes more
            than ``MAXIMUM_STEP_LIMIT``).
        finished: ``next_turn`` was called after the last user turn.
        done: :attr:`force_quit` (the loop stops the row there).
    """

    def __init__(self, row: Mapping, model_name: str | None = None):
        self.row = row
        self.tools: list[dict] = []
        self.model_name = model_name or f"toolrl_episode_{uuid.uuid4().hex}"
        self._mt = multi_turn_api()
        self._methods = set(backend_signatures(row["involved_classes"]))
        self._shown = len(row["functions"])
        self.turn = 0
        self.steps: list[list[list[str]]] = [[]]
        self.step_counts: list[int] = [0]
        self.finished = False

    @property
    def turns(self) -> int:
        """The row's number of user turns."""
        return len(self.row["question"])

    def _turn_messages(self, index: int) -> list[dict]:
        turn = self.row["question"][index]
        added = self.row["missed_function"].get(index)
        if not turn and added:
            entries = [render_tool(self._shown + k, *t) for k, t in enumerate(tool_entries(added), start=1)]
            self._shown += len(added)
            text = "New tools are available:\n" + "\n".join(entries) + "\n\n" + self._mt.added_functions_prompt
            return [{"role": "user", "content": text}]
        if not turn:
            raise ValueError(f"BFCL {self.row['id']}: turn {index} has no user message and no held-out functions")
        out = []
        for k, message in enumerate(turn):
            if message.get("role") != "user" or not isinstance(message.get("content"), str):
                raise ValueError(
                    f"BFCL {self.row['id']}: turn {index} message {k}: expected a user message with string content, "
                    f"got role {message.get('role')!r}"
                )
            out.append({"role": "user", "content": message["content"].strip()})
        return out

    def reset(self) -> list[dict]:
        """``[system, user]``: the RLLA system prompt with the row's tools and :data:`TURN_NOTE`, and the first user
        turn as the RLLA dialogue history (its system messages, if any, appended to the system prompt).

        Raises:
            ValueError: the first turn has no user message or a role the history cannot render (row named).
        """
        first = list(self.row["question"][0])
        extra = "\n\n".join([TURN_NOTE] + [str(m.get("content", "")) for m in first if m.get("role") == "system"])
        users = [m for m in first if m.get("role") != "system"]
        if not users:
            raise ValueError(f"BFCL {self.row['id']}: turn 0 has no user message")
        try:
            history = render_history(users)
        except ValueError as err:
            raise ValueError(f"BFCL {self.row['id']}: turn 0: {err}") from err
        system = render_system(tool_entries(self.row["functions"]), extra)
        return [{"role": "system", "content": system}, {"role": "user", "content": history}]

    def _run(self, call_string: str) -> str:
        results, _ = self._mt.execute(
            [call_string],
            self.row["initial_config"],
            self.row["involved_classes"],
            self.model_name,
            self.row["id"],
            long_context=bool(self.row.get("long_context")),
            is_evaL_run=False,
        )
        return str(results[0])

    def execute(self, calls: list[dict]) -> list[ToolResult]:
        """Run one assistant turn's calls in order on this episode's backends; one :class:`ToolResult` per call
        (never raises for a bad call). The executed calls' strings become one step of the current turn."""
        results, step = [], []
        for k, call in enumerate(calls):
            name = str(call.get("name"))
            start = time.perf_counter()
            if name not in self._methods:
                content = f"{ERROR_PREFIX}: no function {name!r} among the available tools"
                results.append(ToolResult(name, content, ok=False, error=content, seconds=0.0))
                continue
            try:
                call_string = call_to_string(call, where=f"call {k}")
            except ValueError as err:
                content = f"{ERROR_PREFIX}: {err}"
                results.append(ToolResult(name, content, ok=False, error=content, seconds=0.0))
                continue
            content = self._run(call_string)
            seconds = time.perf_counter() - start
            step.append(call_string)
            error = _error_of(content)
            results.append(ToolResult(name, content, ok=error is None, error=error, seconds=seconds))
        self.step_counts[self.turn] += 1
        if step:
            self.steps[self.turn].append(step)
        return results

    def next_turn(self, answer: str) -> list[dict] | None:
        """The next user turn's messages, or None after the last (``finished`` is then True)."""
        if self.finished:
            return None
        if self.turn + 1 >= self.turns:
            self.finished = True
            return None
        self.turn += 1
        self.steps.append([])
        self.step_counts.append(0)
        return self._turn_messages(self.turn)

    @property
    def force_quit(self) -> bool:
        """Some user turn took more calling steps than BFCL allows (``MAXIMUM_STEP_LIMIT``): BFCL fails the row."""
        return any(n > self._mt.max_steps for n in self.step_counts)

    @property
    def done(self) -> bool:
        """The loop stops the episode once BFCL would have quit it (:attr:`force_quit`): nothing after can pass."""
        return self.force_quit

    def close(self) -> None:
        """Free this episode's backend instances (BFCL's executor keeps them in module globals)."""
        drop_backend_instances(self.model_name)


def _error_of(content: str) -> str | None:
    """The failure a backend's output reports: BFCL's ``Error during execution: ...`` string, or a JSON object with
    an ``error`` key (how the backends answer a bad request); None otherwise."""
    if content.startswith(ERROR_PREFIX):
        return content
    if content.startswith("{") and '"error"' in content:
        try:
            value = json.loads(content)
        except json.JSONDecodeError:
            return None
        if isinstance(value, dict) and "error" in value:
            return str(value["error"])
    return None
