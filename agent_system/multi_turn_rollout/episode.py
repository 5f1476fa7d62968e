"""The interface between the executing multi-turn loop and what a rollout talks to: one :class:`Episode` per sample.

The loop (:mod:`agent_system.multi_turn_rollout.tool_loop`) owns the tokens; an episode owns the semantics: the opening
messages and the tool schemas, how a turn's calls are executed, and what the user says after a turn without a call.
"""

from __future__ import annotations

from typing import Protocol, Sequence, runtime_checkable

from agent_system.tools.result import ToolResult
from agent_system.tools.runner import ToolRunner

__all__ = ["Episode", "ToolEpisode"]


@runtime_checkable
class Episode(Protocol):
    """One sample's conversation with tools.

    Attributes:
        tools: OpenAI function schemas (``{"type": "function", "function": {...}}``) passed to the chat template as
            ``tools=`` (templates without tool support ignore them; an episode whose prompt lists its tools in the
            system message may leave this empty).
        done: optional; True once the episode has ended itself after executing a turn's calls (a step limit such as
            BFCL's): the loop then stops it with ``stop_reason`` ``"done"`` instead of generating again. An episode
            without the attribute never ends itself.
        forbid_tool_calls: optional; True: the episode's generations cannot open a ToolRL ``<tool_call>`` block
            (``verl.workers.rollout.forbid_text``; the rollout applies it). Without the attribute: False.
    """

    tools: list[dict]
    done: bool

    def reset(self) -> list[dict]:
        """The opening chat messages (``{"role", "content"}``: system and user), rendered as the prompt."""
        ...

    def execute(self, calls: list[dict]) -> list[ToolResult]:
        """Execute one assistant turn's calls (each ``{"name": str, "parameters": dict}``, in order); one result per
        call. Never raises for a bad call: a failure is a result with ``ok=False``."""
        ...

    def next_turn(self, answer: str) -> list[dict] | None:
        """After an assistant turn without a call (its decoded text ``answer``): the next user messages, or None when
        the episode is over."""
        ...


class ToolEpisode:
    """A single-question episode with executable tools: the opening ``messages``, calls run by ``runner`` (in or out
    of process, ``agent_system.tools.runner``), over after the first assistant turn without a call.

    Args:
        messages: the opening chat messages.
        runner: executes the calls; the schemas of the tools offered are the template's ``tools=`` unless
            ``list_tools`` is False (an episode whose system prompt already lists them).
        offered: the tool names this episode may call (a router's route: ANSWER offers none); a call to another
            registered tool fails without running (``tool/refused``). None: every tool of the runner's registry.
        forbid_tool_calls: generations of this episode cannot open a ToolRL ``<tool_call>`` block (the router's
            ANSWER route under ``router.answer_forbids_tool_calls``; the rollout applies it, see
            ``verl.workers.rollout.forbid_text``).

    Attributes:
        answer: the decoded final answer (None until the episode ends).
        done: always False (the episode ends with its answer).
    """

    done = False

    def __init__(
        self,
        messages: list[dict],
        runner: ToolRunner,
        list_tools: bool = True,
        offered: Sequence[str] | None = None,
        forbid_tool_calls: bool = False,
    ) -> None:
        self.messages, self.runner = list(messages), runner
        self.offered = None if offered is None else list(offered)
        tools = [t for t in runner.registry if self.offered is None or t.name in self.offered]
        self.tools = [t.schema() for t in tools] if list_tools else []
        self.forbid_tool_calls = bool(forbid_tool_calls)
        self.answer: str | None = None

    def reset(self) -> list[dict]:
        self.answer = None
        return list(self.messages)

    def execute(self, calls: list[dict]) -> list[ToolResult]:
        return self.runner.run(calls, offered=self.offered)

    def next_turn(self, answer: str) -> list[dict] | None:
        self.answer = answer
        return None
