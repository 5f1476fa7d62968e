"""Tool sandbox worker: ``python -m agent_system.tools._worker SPECS_JSON MEMORY_MB``.

Protocol (``agent_system.tools.runner``): the worker builds the tools of ``SPECS_JSON`` (a JSON list of ``ToolSpec``),
sets its memory limit, writes one ready line, then answers each ``{"name", "parameters"}`` line on stdin with one
result line until stdin closes. Replies go to a private copy of stdout; what the tools print goes to stderr.
"""

from __future__ import annotations

import json
import sys

from agent_system.tools.base import ToolRegistry, failed
from agent_system.tools.runner import WorkerToolReply
from agent_system.worker_process import limit_memory, protocol_stream, write_reply


def _reply(stream, reply: WorkerToolReply) -> None:
    def unserialisable(err: Exception) -> WorkerToolReply:
        return WorkerToolReply(name=reply.name, ok=False, error=f"reply could not be serialised: {err}")

    write_reply(stream, reply, unserialisable)


def main(argv: list[str]) -> int:
    """Serve calls until stdin closes; returns the exit status (1 when the tools cannot be built)."""
    protocol = protocol_stream()
    try:
        registry = ToolRegistry.from_specs(json.loads(argv[0]))
        limit_memory(float(argv[1]))
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises ToolSandboxError
        _reply(protocol, WorkerToolReply(error=f"cannot build the tools: {type(err).__name__}: {err}"))
        return 1
    _reply(protocol, WorkerToolReply(ready=True))
    for line in sys.stdin:
        try:
            call = json.loads(line)
            t = registry.get(call["name"])
            result = (
                failed(call["name"], f"unknown tool {call['name']!r}") if t is None else t.invoke(call["parameters"])
            )
        except MemoryError:
            result = failed("?", "the tool exceeded the sandbox memory limit")
        except Exception as err:  # noqa: BLE001 - a malformed request is a failed call
            result = failed("?", f"bad request to the tool worker: {type(err).__name__}: {err}")
        if not result.ok and "ran out of memory" in (result.error or ""):
            result = failed(result.name, f"{result.error} (the sandbox memory limit is {argv[1]} MiB)", result.seconds)
        _reply(
            protocol,
            WorkerToolReply(
                name=result.name, content=result.content, ok=result.ok, error=result.error, seconds=result.seconds
            ),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
