"""Running reward functions: in the trainer process, or sandboxed in a pool of worker processes.

Reference: ``docs/reward_api.md`` "Sandboxed execution". User reward code runs out of the trainer process: a pool of
worker processes (``python -m agent_system.reward._worker``), data passed as JSON lines (pydantic ``model_dump_json`` /
``model_validate_json``), with

- a per-call timeout: a call that runs past it is killed with its worker (and the worker's process group);
- a memory limit: ``RLIMIT_AS`` in the worker, set after the reward is loaded to what the worker then uses plus
  ``memory_mb`` MiB, so an allocation past it raises ``MemoryError`` inside the reward;
- crash isolation: a worker that dies (segfault, ``os._exit``, the OOM killer) fails only its current call and is
  replaced.

Each such failure -- and a reward that raises or returns something that cannot be coerced -- yields an
:class:`~agent_system.reward.models.EvaluateResult` with ``is_score_valid=False`` and the reason;
:meth:`RunReport.metrics` counts them (``reward/invalid_frac``, ``reward/timeouts``). The step goes on.
``reward.sandbox: none`` uses :class:`InProcessRunner` instead (exceptions still become invalid results, but no
timeout, memory limit or isolation).

Pointwise rewards are called once per rollout, the calls spread over the workers; a batch reward is called once with
all rollouts and its timeout covers that call. Per-rollout keywords reach a batch reward as lists aligned with the
rollouts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent_system.reward.decorator import RewardFunction
from agent_system.reward.models import EvaluateResult, Message, format_error, invalid_result
from agent_system.worker_process import WorkerPool, python_module_argv

__all__ = [
    "DEFAULT_MEMORY_MB",
    "DEFAULT_TIMEOUT_S",
    "SANDBOX_MODES",
    "InProcessRunner",
    "ProcessSandbox",
    "RewardCall",
    "RewardRequest",
    "RewardRunner",
    "RewardSandboxError",
    "RunReport",
    "WorkerReply",
    "execute_call",
    "make_runner",
]

SANDBOX_MODES = ("none", "process")
DEFAULT_TIMEOUT_S = 30.0
DEFAULT_MEMORY_MB = 2048


class RewardSandboxError(RuntimeError):
    """A sandbox worker could not start (the reward does not load there, or the start timed out)."""


class RewardRequest(BaseModel):
    """One rollout to score: its messages, ground truth and per-rollout keywords (e.g. ``data_source``)."""

    messages: list[Message]
    ground_truth: Any = None
    kwargs: dict[str, Any] = Field(default_factory=dict)


class RewardCall(BaseModel):
    """One invocation of the reward: ``pointwise`` (one rollout) or ``batch`` (all of them); the wire format."""

    mode: Literal["pointwise", "batch"]
    rollouts: list[list[Message]]
    ground_truths: list[Any]
    kwargs: dict[str, Any] = Field(default_factory=dict)


class WorkerReply(BaseModel):
    """A worker's answer line: ``ready`` once after start, then ``results`` or ``error`` per call."""

    ready: bool = False
    results: list[EvaluateResult] | None = None
    error: str | None = None


@dataclass
class RunReport:
    """Results of :meth:`RewardRunner.run`, one per request in order, and the failure counters."""

    results: list[EvaluateResult] = field(default_factory=list)
    timeouts: int = 0
    crashes: int = 0

    @property
    def invalid_count(self) -> int:
        return sum(not r.is_score_valid for r in self.results)

    def metrics(self) -> dict[str, float]:
        """``reward/invalid_count``, ``reward/invalid_frac``, ``reward/timeouts``, ``reward/crashes``."""
        n = len(self.results)
        return {
            "reward/invalid_count": float(self.invalid_count),
            "reward/invalid_frac": self.invalid_count / n if n else 0.0,
            "reward/timeouts": float(self.timeouts),
            "reward/crashes": float(self.crashes),
        }


def execute_call(fn: RewardFunction, call: RewardCall) -> list[EvaluateResult]:
    """Run ``call`` with ``fn`` in this process; one result per rollout. Raises whatever ``fn`` raises."""
    if call.mode != fn.mode:
        raise ValueError(f"reward {fn.name!r} is declared {fn.mode}, called as {call.mode}")
    if call.mode == "pointwise":
        return [fn(call.rollouts[0], call.ground_truths[0], **call.kwargs)]
    return fn(call.rollouts, call.ground_truths, **call.kwargs)


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON-serialisable")


class RewardRunner:
    """Scores requests with one reward function; subclasses decide where the calls run.

    Args:
        fn: the reward (see ``agent_system.reward.decorator``).
    """

    def __init__(self, fn: RewardFunction) -> None:
        if not isinstance(fn, RewardFunction):
            raise TypeError(f"expected a RewardFunction, got {type(fn).__name__}")
        self.fn = fn

    def build_calls(self, requests: list[RewardRequest], shared_kwargs: dict[str, Any]) -> list[RewardCall]:
        """Pointwise: one call per request with ``{**shared_kwargs, **request.kwargs}``. Batch: one call whose
        per-request keywords are lists aligned with the rollouts (None where a request lacks the key)."""
        if not requests:
            return []
        if self.fn.mode == "pointwise":
            return [
                RewardCall(
                    mode="pointwise",
                    rollouts=[r.messages],
                    ground_truths=[r.ground_truth],
                    kwargs={**shared_kwargs, **r.kwargs},
                )
                for r in requests
            ]
        keys = dict.fromkeys(k for r in requests for k in r.kwargs)
        per_rollout = {k: [r.kwargs.get(k) for r in requests] for k in keys}
        return [
            RewardCall(
                mode="batch",
                rollouts=[r.messages for r in requests],
                ground_truths=[r.ground_truth for r in requests],
                kwargs={**shared_kwargs, **per_rollout},
            )
        ]

    def run(self, requests: list[RewardRequest], shared_kwargs: dict[str, Any] | None = None) -> RunReport:
        """Score ``requests``; never raises for a failing reward (failures are invalid results with the reason)."""
        report = RunReport()
        for outcome in self._execute(self.build_calls(list(requests), dict(shared_kwargs or {})), report):
            report.results.extend(outcome)
        return report

    def _execute(self, calls: list[RewardCall], report: RunReport) -> list[list[EvaluateResult]]:
        raise NotImplementedError

    def close(self) -> None:
        """Release workers (no-op here)."""

    def __enter__(self) -> "RewardRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class InProcessRunner(RewardRunner):
    """``reward.sandbox: none``: calls the reward in this process; an exception becomes invalid results."""

    def _execute(self, calls: list[RewardCall], report: RunReport) -> list[list[EvaluateResult]]:
        outcomes = []
        for call in calls:
            try:
                outcomes.append(execute_call(self.fn, call))
            except Exception as err:  # noqa: BLE001 - a failing reward marks its samples invalid (docs/reward_api.md)
                outcomes.append([invalid_result(format_error(err))] * len(call.rollouts))
        return outcomes


class ProcessSandbox(RewardRunner):
    """``reward.sandbox: process``: a pool of worker processes with a timeout, a memory limit and crash isolation.

    Args:
        fn: the reward; it must have a ``source`` (defined in a file given by path, or in an importable module).
        num_workers: pool size (>= 1). Workers start on the first :meth:`run` and are replaced when they die.
        timeout_s: per-call limit; None: ``fn.timeout_s``, else ``DEFAULT_TIMEOUT_S``.
        memory_mb: address space a worker may add after loading the reward (MiB); None or <= 0: no limit.
        startup_timeout_s: how long a worker may take to import the reward.

    Raises:
        ValueError: ``fn`` has no source (defined in ``__main__`` or inside a function), or ``num_workers < 1``.
    """

    def __init__(
        self,
        fn: RewardFunction,
        num_workers: int = 2,
        timeout_s: float | None = None,
        memory_mb: float | None = DEFAULT_MEMORY_MB,
        startup_timeout_s: float = 120.0,
    ) -> None:
        super().__init__(fn)
        if fn.source is None:
            raise ValueError(
                f"reward {fn.name!r} cannot run in the process sandbox: it is not defined in a file or an "
                "importable module (put it in a .py file and use custom_reward_function.path/name, or "
                "set reward.sandbox=none)"
            )
        if int(num_workers) < 1:
            raise ValueError(f"reward sandbox: num_workers must be >= 1, got {num_workers}")
        self.timeout_s = float(timeout_s or fn.timeout_s or DEFAULT_TIMEOUT_S)
        self.memory_mb = float(memory_mb) if memory_mb and memory_mb > 0 else 0.0
        self.pool = WorkerPool(
            python_module_argv("agent_system.reward._worker", fn.source.model_dump_json(), str(self.memory_mb)),
            num_workers,
            check_ready=_check_ready,
            start_error=RewardSandboxError,
            what="reward worker",
            startup_timeout_s=startup_timeout_s,
        )

    @property
    def num_workers(self) -> int:
        return self.pool.num_workers

    def start(self) -> None:
        """Start the workers now (otherwise the first :meth:`run` does). Raises RewardSandboxError."""
        self.pool.start()

    def close(self) -> None:
        """Stop every worker."""
        self.pool.close()

    def _execute(self, calls: list[RewardCall], report: RunReport) -> list[list[EvaluateResult]]:
        outcomes: list[list[EvaluateResult] | None] = [None] * len(calls)
        payloads: dict[int, bytes] = {}
        for i, call in enumerate(calls):
            try:
                payloads[i] = (json.dumps(call.model_dump(mode="python"), default=_json_default) + "\n").encode()
            except (TypeError, ValueError) as err:
                outcomes[i] = [invalid_result(f"inputs cannot be sent to the sandbox: {format_error(err)}")] * len(
                    call.rollouts
                )
        for i, outcome in self.pool.map(payloads, self.timeout_s).items():
            n = len(calls[i].rollouts)
            if outcome.crashed is not None:
                report.crashes += 1
                reason = f"reward worker crashed ({outcome.crashed}) during the call; the worker was replaced"
                outcomes[i] = [invalid_result(reason)] * n
            elif outcome.timed_out:
                report.timeouts += 1
                reason = (
                    f"reward {self.fn.name!r} timed out after {self.timeout_s:g}s; the worker was killed and replaced"
                )
                outcomes[i] = [invalid_result(reason)] * n
            else:
                outcomes[i] = self._parse_reply(outcome.line, n)
        return outcomes

    def _parse_reply(self, line: bytes, n: int) -> list[EvaluateResult]:
        try:
            reply = WorkerReply.model_validate_json(line)
        except ValueError as err:
            return [invalid_result(f"unreadable reply from the reward worker: {format_error(err)}")] * n
        if reply.error is not None:
            return [invalid_result(reply.error)] * n
        if reply.results is None or len(reply.results) != n:
            got = None if reply.results is None else len(reply.results)
            return [invalid_result(f"reward worker returned {got} results for {n} rollouts")] * n
        return reply.results


def _check_ready(line: bytes) -> str | None:
    reply = WorkerReply.model_validate_json(line)
    return None if reply.ready else reply.error


def make_runner(
    fn: RewardFunction,
    sandbox: str = "process",
    num_workers: int = 2,
    timeout_s: float | None = None,
    memory_mb: float | None = DEFAULT_MEMORY_MB,
) -> RewardRunner:
    """The runner for ``reward.sandbox`` (``"none"`` or ``"process"``).

    Raises: ValueError: unknown ``sandbox``; see :class:`ProcessSandbox`.
    """
    if sandbox == "none":
        return InProcessRunner(fn)
    if sandbox == "process":
        return ProcessSandbox(fn, num_workers=num_workers, timeout_s=timeout_s, memory_mb=memory_mb)
    raise ValueError(f"reward.sandbox={sandbox!r}: expected one of {SANDBOX_MODES}")
