"""What one executed tool call returns: its observation text, whether it succeeded, and what it cost.

Every path that runs a tool (a typed Python tool in the sandbox, an MCP server's tool, a BFCL backend) returns a
:class:`ToolResult`; the multi-turn loop turns ``content`` into the observation turn's tokens and counts ``ok``,
``seconds`` and the observation's tokens into the rollout's tool-cost metrics (``docs/tools.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ToolResult"]


@dataclass(frozen=True)
class ToolResult:
    """One executed call.

    Attributes:
        name: the called tool's name, as the policy wrote it.
        content: the observation text the policy reads next (for a failure, the error message it is shown).
        ok: False when the call failed: unknown tool, bad arguments, the tool raised, timed out, ran out of memory,
            crashed its worker or returned something that is not text or JSON-serialisable.
        error: the failure's reason (None when ``ok``).
        seconds: wall-clock seconds the call took, as measured around the execution (float, >= 0).
    """

    name: str
    content: str
    ok: bool = True
    error: str | None = None
    seconds: float = 0.0
