"""The interface between the executing multi-turn loop and what a rollout talks to: one :class:`Episode` per sample.

The loop (:mod:`agent_system.multi_turn_rollout.tool_loop`) owns the tokens; an episode owns the semantics: the opening
messages and the tool schemas, how a turn's calls are executed, and what the user says after a turn without a call.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

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
        runner: executes the calls; its registry's schemas are the template's ``tools=`` unless ``list_tools`` is
            False (an episode whose system prompt already lists them).

    Attributes:
        answer: the decoded final answer (None until the episode ends).
        done: always False (the episode ends with its answer).
    """

    done = False

    def __init__(self, messages: list[dict], runner: ToolRunner, list_tools: bool = True) -> None:
        self.messages, self.runner = list(messages), runner
        self.tools = runner.registry.schemas() if list_tools else []
        self.answer: str | None = None

    def reset(self) -> list[dict]:
        self.answer = None
        return list(self.messages)

    def execute(self, calls: list[dict]) -> list[ToolResult]:
        return self.runner.run(calls)

    def next_turn(self, answer: str) -> list[dict] | None:
        self.answer = answer
        return None
