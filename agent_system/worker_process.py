"""A pool of sandbox worker processes speaking JSON lines: what the reward sandbox and the tool sandbox share.

A worker is ``python -m <module> ...`` started in its own session and process group. It writes one ready line after
loading what it serves, then answers each request line on its stdin with one reply line on its stdout (its own
prints go to stderr: :func:`protocol_stream`). :class:`WorkerPool.map` sends a list of requests over the workers with
a per-request deadline; each request ends as a reply line, a crash (the worker exited; it is replaced) or a timeout
(the worker and everything it started are killed; it is replaced). The caller turns these into its own results
(``agent_system.reward.sandbox``, ``agent_system.tools.runner``).
"""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import sys
import time
import weakref
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

__all__ = [
    "Outcome",
    "WorkerDied",
    "WorkerPool",
    "WorkerProcess",
    "limit_memory",
    "project_env",
    "protocol_stream",
    "python_module_argv",
]

_PROJECT_ROOT = str(Path(__file__).resolve().parents[1])


def project_env() -> dict[str, str]:
    """This process's environment with the project root on ``PYTHONPATH`` (so ``python -m`` finds the workers)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PROJECT_ROOT, env.get("PYTHONPATH")) if p)
    return env


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


def protocol_stream():
    """In a worker: a private text stream on the original stdout for reply lines; file descriptor 1 is pointed at
    stderr, so whatever the served code prints cannot corrupt the replies."""
    stream = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    return stream


def write_reply(stream, reply, on_error: Callable[[Exception], object]) -> None:
    """In a worker: write one pydantic ``reply`` as a protocol line and flush; a reply that cannot be serialised
    (e.g. a ``MemoryError`` while dumping it) is replaced by ``on_error(err)``, a reply saying so."""
    try:
        text = reply.model_dump_json()
    except Exception as err:  # noqa: BLE001 - e.g. MemoryError while serialising
        text = on_error(err).model_dump_json()
    stream.write(text + "\n")
    stream.flush()


class WorkerDied(Exception):
    """The worker closed its output (it exited)."""


class WorkerProcess:
    """One worker process; talks JSON lines over its stdin/stdout.

    Args:
        argv: the command line.
        env: its environment.
        startup_timeout_s: how long it may take to write its ready line.
        check_ready: the ready line -> None when the worker is ready, else the reason it is not.
        start_error: the exception class raised when the worker does not start.
        what: how errors name the worker (``"reward worker"``).

    Raises:
        start_error: the worker exited, timed out or reported a reason during start.
    """

    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        startup_timeout_s: float,
        check_ready: Callable[[bytes], str | None],
        start_error: type[Exception] = RuntimeError,
        what: str = "worker",
    ) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True, close_fds=True
        )
        self._fd = self.proc.stdout.fileno()
        self._buffer = b""
        deadline = time.monotonic() + startup_timeout_s
        try:
            while True:
                line = self.poll_line(max(0.0, deadline - time.monotonic()))
                if line is not None:
                    break
                if time.monotonic() >= deadline:
                    raise start_error(f"{what} did not start within {startup_timeout_s:.0f}s")
            reason = check_ready(line)
        except WorkerDied:
            raise start_error(f"{what} exited during start ({self.exit_description()}); see its stderr above") from None
        except BaseException:
            self.kill()
            raise
        if reason is not None:
            self.kill()
            raise start_error(f"{what} failed to start: {reason}")

    def fileno(self) -> int:
        return self._fd

    def send(self, payload: bytes) -> None:
        self.proc.stdin.write(payload)
        self.proc.stdin.flush()

    def poll_line(self, timeout_s: float = 0.0) -> bytes | None:
        """A complete reply line if one is (or within ``timeout_s`` becomes) available, else None.

        Raises: WorkerDied: the worker closed its output (it exited)."""
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([self._fd], [], [], timeout_s)
            if not ready:
                return None
            chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                self.proc.wait()
                raise WorkerDied()
            self._buffer += chunk
            timeout_s = 0.0
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def exit_description(self) -> str:
        code = self.proc.poll()
        if code is None:
            return "still running"
        if code < 0:
            return f"killed by {signal.Signals(-code).name}"
        return f"exit code {code}"

    def kill(self) -> None:
        """End the worker and every process it started: the worker leads its own session and process group
        (``start_new_session``), so one ``killpg`` reaches what it forked, also after the worker itself exited (a
        process that started a session of its own is out of reach)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # nothing left in the group
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass

    def close(self, grace_s: float = 1.0) -> None:
        """Ask the worker to exit (EOF on its stdin), kill it after ``grace_s``."""
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=grace_s)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


@dataclass(frozen=True)
class Outcome:
    """How one request ended: its reply ``line``, or ``crashed`` (the worker's exit description), or ``timed_out``."""

    line: bytes | None = None
    crashed: str | None = None
    timed_out: bool = False


def _close_workers(workers: list[WorkerProcess]) -> None:
    for worker in workers:
        worker.close()
    workers.clear()


class WorkerPool:
    """``num_workers`` workers started on the first :meth:`map` (or :meth:`start`) and replaced when they die.

    Args:
        argv: the workers' command line (``[sys.executable, "-m", module, ...]``).
        num_workers: pool size (>= 1).
        check_ready, start_error, what, startup_timeout_s: see :class:`WorkerProcess`.

    Raises:
        ValueError: ``num_workers < 1``.
    """

    def __init__(
        self,
        argv: list[str],
        num_workers: int,
        check_ready: Callable[[bytes], str | None],
        start_error: type[Exception] = RuntimeError,
        what: str = "worker",
        startup_timeout_s: float = 120.0,
    ) -> None:
        if int(num_workers) < 1:
            raise ValueError(f"{what}s: num_workers must be >= 1, got {num_workers}")
        self.argv = list(argv)
        self.num_workers = int(num_workers)
        self._check_ready, self._start_error, self._what = check_ready, start_error, what
        self.startup_timeout_s = float(startup_timeout_s)
        self.workers: list[WorkerProcess] = []
        self._finalizer = weakref.finalize(self, _close_workers, self.workers)

    def _spawn(self) -> WorkerProcess:
        return WorkerProcess(
            self.argv, project_env(), self.startup_timeout_s, self._check_ready, self._start_error, self._what
        )

    def _replace(self, worker: WorkerProcess) -> WorkerProcess:
        worker.kill()
        fresh = self._spawn()
        self.workers[self.workers.index(worker)] = fresh
        return fresh

    def start(self) -> None:
        """Start the workers now. Raises ``start_error``."""
        while len(self.workers) < self.num_workers:
            self.workers.append(self._spawn())

    def close(self) -> None:
        """Stop every worker."""
        _close_workers(self.workers)

    def map(self, payloads: dict[int, bytes], timeout_s: float) -> dict[int, Outcome]:
        """Send each payload (one JSON line, ending in a newline) to a free worker; its outcome by the same key.

        A request is given ``timeout_s`` seconds from when it is sent; a worker that times out or dies is replaced
        before it takes the next request.
        """
        outcomes: dict[int, Outcome] = {}
        if not payloads:
            return outcomes
        self.start()
        queue, idle, busy = deque(payloads), list(self.workers), {}
        while queue or busy:
            while queue and idle:
                worker, key = idle.pop(), queue.popleft()
                try:
                    worker.send(payloads[key])
                except OSError:  # died while idle: replace it and send again
                    queue.appendleft(key)
                    idle.append(self._replace(worker))
                    continue
                busy[worker] = (key, time.monotonic() + timeout_s)
            wait_s = max(0.0, min(deadline for _, deadline in busy.values()) - time.monotonic())
            ready, _, _ = select.select(list(busy), [], [], wait_s)
            for worker in ready:
                key, _ = busy[worker]
                try:
                    line = worker.poll_line()
                except WorkerDied:
                    outcomes[key] = Outcome(crashed=worker.exit_description())
                    del busy[worker]
                    idle.append(self._replace(worker))
                    continue
                if line is None:
                    continue
                del busy[worker]
                idle.append(worker)
                outcomes[key] = Outcome(line=line)
            now = time.monotonic()
            for worker in [w for w, (_, deadline) in busy.items() if now >= deadline]:
                key, _ = busy.pop(worker)
                outcomes[key] = Outcome(timed_out=True)
                idle.append(self._replace(worker))
        return outcomes


def python_module_argv(module: str, *args: str) -> list[str]:
    """``[sys.executable, "-m", module, *args]``."""
    return [sys.executable, "-m", module, *args]
