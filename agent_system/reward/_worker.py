"""Sandbox worker process: ``python -m agent_system.reward._worker SOURCE_JSON MEMORY_MB``.

Protocol (``agent_system.reward.sandbox``; spec ``reward_api.md`` "Sandboxed execution"): the worker loads the reward
named by ``SOURCE_JSON`` (a ``RewardSource``), sets its memory limit, writes one ``WorkerReply(ready=True)`` line, then
answers each ``RewardCall`` JSON line on stdin with one ``WorkerReply`` line (``results`` or ``error``) until stdin
closes. The protocol uses a private copy of the original stdout; file descriptor 1 is pointed at stderr, so whatever
the reward prints cannot corrupt the replies.
"""

from __future__ import annotations

import sys

from agent_system.reward.decorator import RewardSource, resolve_source
from agent_system.reward.models import format_error
from agent_system.reward.sandbox import RewardCall, WorkerReply, execute_call
from agent_system.worker_process import limit_memory, protocol_stream, write_reply


def _reply(stream, reply: WorkerReply) -> None:
    write_reply(stream, reply, lambda err: WorkerReply(error=f"reply could not be serialised: {format_error(err)}"))


def main(argv: list[str]) -> int:
    """Serve calls until stdin closes; returns the exit status (1 when the reward cannot be loaded)."""
    protocol = protocol_stream()
    try:
        fn = resolve_source(RewardSource.model_validate_json(argv[0]))
        limit_memory(float(argv[1]))
    except Exception as err:  # noqa: BLE001 - reported to the parent, which raises RewardSandboxError
        _reply(protocol, WorkerReply(error=f"cannot load the reward: {format_error(err)}"))
        return 1
    _reply(protocol, WorkerReply(ready=True))
    for line in sys.stdin:
        try:
            results = execute_call(fn, RewardCall.model_validate_json(line))
            reply = WorkerReply(results=results)
        except MemoryError as err:
            reply = WorkerReply(
                error=f"{format_error(err)} the reward exceeded the sandbox memory limit "
                f"({argv[1]} MiB above the worker's size at start; reward.memory_mb)"
            )
        except (Exception, SystemExit) as err:  # noqa: BLE001 - every failure is an invalid result, not a crash
            reply = WorkerReply(error=format_error(err))
        _reply(protocol, reply)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
