"""Sandbox worker process: ``python -m agent_system.reward._worker SOURCE_JSON MEMORY_MB``.

Protocol (``agent_system.reward.sandbox``; spec ``reward_api.md`` "Sandboxed execution"): the worker loads the reward
named by ``SOURCE_JSON`` (a ``RewardSource``), sets its memory limit, writes one ``WorkerReply(ready=True)`` line, then
answers each ``RewardCall`` JSON line on stdin with one ``WorkerReply`` line (``results`` or ``error``) until stdin
closes. The protocol uses a private copy of the original stdout; file descriptor 1 is pointed at stderr, so whatever
the reward prints cannot corrupt the replies.
"""

from __future__ import annotations

import os
import resource
import sys

from agent_system.reward.decorator import RewardSource, resolve_source
from agent_system.reward.models import format_error
from agent_system.reward.sandbox import RewardCall, WorkerReply, execute_call


def _address_space_bytes() -> int | None:
    """Current virtual memory size of this process (Linux ``VmSize``), or None where unknown."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def limit_memory(memory_mb: float) -> None:
    """Cap the address space at its current size plus ``memory_mb`` MiB (``RLIMIT_AS``; never above the hard limit).
    No-op when ``memory_mb <= 0`` or the current size is unknown."""
    current = _address_space_bytes()
    if memory_mb <= 0 or current is None:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    soft = current + int(memory_mb * 1024 * 1024)
    if hard != resource.RLIM_INFINITY:
        soft = min(soft, hard)
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def _reply(stream, reply: WorkerReply) -> None:
    try:
        text = reply.model_dump_json()
    except Exception as err:  # noqa: BLE001 - e.g. MemoryError while serialising
        text = WorkerReply(error=f"reply could not be serialised: {format_error(err)}").model_dump_json()
    stream.write(text + "\n")
    stream.flush()


def main(argv: list[str]) -> int:
    """Serve calls until stdin closes; returns the exit status (1 when the reward cannot be loaded)."""
    protocol = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
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
