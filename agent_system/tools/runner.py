"""Executing tool calls: in this process, or in sandbox worker processes with a time and memory limit.

Reference: ``docs/tools.md``. A runner takes one assistant turn's calls (``{"name", "parameters"}``, as the tool-call
parsers return them) and gives one :class:`~agent_system.tools.result.ToolResult` per call, in order. An unknown tool
or arguments that do not validate fail in the trainer process, before anything runs. In the process sandbox
(``sandbox="process"``) a pool of ``python -m agent_system.tools._worker`` processes builds the same tools from their
:class:`~agent_system.tools.base.ToolSpec` and runs the calls: a call past ``timeout_s`` is killed with its worker
(which is replaced), a worker that dies (segfault, ``os._exit``, the OOM killer) fails only its call, and an allocation
past ``memory_mb`` raises ``MemoryError`` inside the tool. Remote tools (an MCP server's) are called from this process
in both modes. Every failure is an error observation and a counted failure, never an exception into the rollout.

:meth:`ToolRunner.metrics` reports the counters: ``tool/calls``, ``tool/failures``, ``tool/failure_rate``,
``tool/timeouts``, ``tool/crashes``, ``tool/refused`` (calls to a tool the episode does not offer),
``tool/seconds_per_call`` and ``tool/calls_<family>``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Collection

from pydantic import BaseModel

from agent_system.tools.base import Tool, ToolRegistry, failed
from agent_system.tools.result import ToolResult
from agent_system.worker_process import WorkerPool, python_module_argv

__all__ = [
    "SANDBOX_MODES",
    "InProcessToolRunner",
    "ProcessToolRunner",
    "ToolRunner",
    "ToolSandboxError",
    "make_tool_runner",
]

SANDBOX_MODES = ("none", "process")


class ToolSandboxError(RuntimeError):
    """A tool worker could not start (a tool does not load there, or the start timed out)."""


class WorkerToolReply(BaseModel):
    """A tool worker's line: ``ready`` once after start (or ``error`` when it cannot load), then one result per
    call."""

    ready: bool = False
    error: str | None = None
    name: str = ""
    content: str = ""
    ok: bool = True
    seconds: float = 0.0


class ToolRunner:
    """Runs calls against ``registry``; subclasses decide where (the module doc)."""

    def __init__(self, registry: ToolRegistry) -> None:
        if not isinstance(registry, ToolRegistry):
            raise TypeError(f"expected a ToolRegistry, got {type(registry).__name__}")
        self.registry = registry
        self.counts: Counter = Counter()
        self.seconds = 0.0

    def run(self, calls: list[dict], offered: Collection[str] | None = None) -> list[ToolResult]:
        """One result per call, in order (never raises for a call's failure).

        Args:
            offered: the names this episode may call (a router's route offers one family); a registered tool outside
                them fails without running, counted under ``tool/refused``. None: every registered tool.
        """
        results: list[ToolResult | None] = [None] * len(calls)
        todo: dict[int, tuple[Tool, dict]] = {}
        names = self.registry.names if offered is None else [n for n in self.registry.names if n in set(offered)]
        for i, call in enumerate(calls):
            name = call.get("name") if isinstance(call, dict) else None
            t = self.registry.get(name) if isinstance(name, str) else None
            if t is None:
                results[i] = failed(str(name), f"unknown tool {name!r}; available: {', '.join(names) or 'none'}")
                continue
            if t.name not in names:
                results[i] = failed(
                    t.name, f"tool {t.name!r} is not offered here; offered: {', '.join(names) or 'none'}"
                )
                self.counts["refused"] += 1
                continue
            try:
                todo[i] = (t, t.validate(call.get("parameters", {})))
            except ValueError as err:
                results[i] = failed(t.name, str(err))
        for i, result in self._execute(todo).items():
            results[i] = result
        for i, result in enumerate(results):
            t = self.registry.get(result.name)
            self.counts["calls"] += 1
            self.counts[f"calls_{t.family if t else 'unknown'}"] += 1
            self.counts["failures"] += not result.ok
            self.seconds += result.seconds
        return results

    def _execute(self, todo: dict[int, tuple[Tool, dict]]) -> dict[int, ToolResult]:
        return {i: t.invoke(args) for i, (t, args) in todo.items()}

    def metrics(self, prefix: str = "tool") -> dict[str, float]:
        """The counters since the last :meth:`reset_metrics` (module doc)."""
        calls = self.counts["calls"]
        out = {f"{prefix}/{k}": float(v) for k, v in sorted(self.counts.items()) if k.startswith("calls_")}
        out.update(
            {
                f"{prefix}/calls": float(calls),
                f"{prefix}/failures": float(self.counts["failures"]),
                f"{prefix}/failure_rate": self.counts["failures"] / calls if calls else 0.0,
                f"{prefix}/timeouts": float(self.counts["timeouts"]),
                f"{prefix}/crashes": float(self.counts["crashes"]),
                f"{prefix}/refused": float(self.counts["refused"]),
                f"{prefix}/seconds_per_call": self.seconds / calls if calls else 0.0,
            }
        )
        return out

    def reset_metrics(self) -> None:
        self.counts.clear()
        self.seconds = 0.0

    def close(self) -> None:
        """Release workers (no-op here)."""

    def __enter__(self) -> "ToolRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessToolRunner(ToolRunner):
    """``sandbox="none"``: every call in this process (a raising tool is still an error observation; no timeout,
    memory limit or crash isolation)."""


def _check_ready(line: bytes) -> str | None:
    reply = WorkerToolReply.model_validate_json(line)
    return None if reply.ready else reply.error


class ProcessToolRunner(ToolRunner):
    """``sandbox="process"``: calls run in a pool of worker processes (module doc).

    Args:
        registry: the tools; each non-remote tool must have a ``source`` (loaded by :func:`load_tools`).
        num_workers: pool size (>= 1); workers start on the first call.
        timeout_s: per-call wall-clock limit (seconds, > 0).
        memory_mb: address space a worker may add after loading the tools (MiB); <= 0: no limit.

    Raises:
        ValueError: a tool that is neither remote nor loaded from a spec (a worker could not build it), or bad limits.
    """

    def __init__(
        self,
        registry: ToolRegistry,
        num_workers: int = 1,
        timeout_s: float = 10.0,
        memory_mb: float = 1024.0,
        startup_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(registry)
        if not timeout_s or timeout_s <= 0:
            raise ValueError(f"tool sandbox: timeout_s must be > 0, got {timeout_s}")
        specs = []
        for t in registry:
            if t.remote:
                continue
            if t.source is None:
                raise ValueError(
                    f"tool {t.name!r} cannot run in the process sandbox: it was not loaded from a reference "
                    "('module:attr'; ToolRegistry.from_specs), so a worker cannot build it (or use sandbox='none')"
                )
            if t.source not in specs:
                specs.append(t.source)
        self.timeout_s, self.memory_mb = float(timeout_s), float(memory_mb or 0.0)
        argv = python_module_argv(
            "agent_system.tools._worker", json.dumps([s.model_dump() for s in specs]), str(self.memory_mb)
        )
        self.pool = WorkerPool(argv, num_workers, _check_ready, ToolSandboxError, "tool worker", startup_timeout_s)

    def _execute(self, todo: dict[int, tuple[Tool, dict]]) -> dict[int, ToolResult]:
        results = {i: t.invoke(args) for i, (t, args) in todo.items() if t.remote}
        payloads = {}
        for i, (t, args) in todo.items():
            if not t.remote:
                try:
                    payloads[i] = (json.dumps({"name": t.name, "parameters": args}) + "\n").encode()
                except (TypeError, ValueError) as err:
                    results[i] = failed(t.name, f"arguments cannot be sent to the tool sandbox: {err}")
        started = time.perf_counter()
        for i, outcome in self.pool.map(payloads, self.timeout_s).items():
            name = todo[i][0].name
            if outcome.crashed is not None:
                self.counts["crashes"] += 1
                reason = f"{name} crashed its worker ({outcome.crashed}); the worker was replaced"
                results[i] = failed(name, reason, time.perf_counter() - started)
            elif outcome.timed_out:
                self.counts["timeouts"] += 1
                reason = f"{name} timed out after {self.timeout_s:g}s; the worker was killed and replaced"
                results[i] = failed(name, reason, self.timeout_s)
            else:
                try:
                    reply = WorkerToolReply.model_validate_json(outcome.line)
                except ValueError as err:
                    results[i] = failed(name, f"unreadable reply from the tool worker: {err}")
                    continue
                results[i] = ToolResult(
                    name=name, content=reply.content, ok=reply.ok, error=reply.error, seconds=reply.seconds
                )
        return results

    def start(self) -> None:
        """Start the workers now (otherwise the first call does). Raises ToolSandboxError."""
        self.pool.start()

    def close(self) -> None:
        """Stop every worker."""
        self.pool.close()


def make_tool_runner(
    registry: ToolRegistry,
    sandbox: str = "process",
    num_workers: int = 1,
    timeout_s: float = 10.0,
    memory_mb: float = 1024.0,
) -> ToolRunner:
    """The runner for ``sandbox`` (``"none"`` or ``"process"``).

    Raises:
        ValueError: unknown ``sandbox``; see :class:`ProcessToolRunner`.
    """
    if sandbox == "none":
        return InProcessToolRunner(registry)
    if sandbox == "process":
        return ProcessToolRunner(registry, num_workers=num_workers, timeout_s=timeout_s, memory_mb=memory_mb)
    raise ValueError(f"tool sandbox={sandbox!r}: expected one of {SANDBOX_MODES}")
