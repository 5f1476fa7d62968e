"""Per-phase peak memory of a worker process, logged as ``perf/peak_rss_gb/{phase}`` (and, on CUDA,
``perf/max_memory_allocated_gb/{phase}``, verl's name for the allocator's peak).

Peak RSS within a phase uses Linux's resettable high-water mark: writing ``5`` to ``/proc/self/clear_refs`` resets
``VmHWM`` in ``/proc/self/status`` to the current RSS (Linux >= 4.0, ``Documentation/filesystems/proc.rst``). Where
that file is missing or not writable the value is the process's lifetime peak (``getrusage``'s ``ru_maxrss``), an
upper bound of the phase's peak; :func:`reset_peak_rss` says which one is in force.
"""

from __future__ import annotations

import resource
from contextlib import contextmanager
from typing import Dict, Iterator, Optional

GB = 1024**3
_CLEAR_REFS = "/proc/self/clear_refs"
_STATUS = "/proc/self/status"


def reset_peak_rss() -> bool:
    """Reset this process's peak-RSS mark to its current RSS. Returns False (and changes nothing) where the kernel
    does not offer it, in which case :func:`peak_rss_gb` keeps returning the lifetime peak."""
    try:
        with open(_CLEAR_REFS, "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def proc_kb_fields(path: str, *fields: str) -> Optional[Dict[str, int]]:
    """``{field: bytes}`` of the ``Name:   123 kB`` lines of a /proc file (``/proc/PID/status``, ``smaps_rollup``);
    a field the file lacks is left out. None when the file cannot be read (e.g. the process has exited)."""
    wanted = {f + ":": f for f in fields}
    found: Dict[str, int] = {}
    try:
        with open(path) as fh:
            for line in fh:
                name = line.split(None, 1)[0] if line.strip() else ""
                if name in wanted:
                    found[wanted[name]] = int(line.split()[1]) * 1024
    except OSError:
        return None
    return found


def peak_rss_gb() -> float:
    """This process's peak resident set size in GiB since the last successful :func:`reset_peak_rss` (``VmHWM``),
    else since it started (``ru_maxrss``, KiB on Linux)."""
    hwm = (proc_kb_fields(_STATUS, "VmHWM") or {}).get("VmHWM")
    if hwm is not None:
        return hwm / GB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB


@contextmanager
def phase_peak_memory(phase: str, metrics: Dict[str, float], device: str = "cpu") -> Iterator[None]:
    """Record the peak memory of the ``with`` block into ``metrics``: ``perf/peak_rss_gb/{phase}`` (GiB, this
    process's resident set: weights, activations, optimizer state, libraries) and, when ``device == "cuda"``,
    ``perf/max_memory_allocated_gb/{phase}`` (GiB, the CUDA caching allocator's peak). A key already in ``metrics``
    keeps the larger value, so a phase run several times per step (multi-turn generation) reports its maximum."""
    import torch

    reset_peak_rss()
    cuda = device == "cuda" and torch.cuda.is_available()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    try:
        yield
    finally:
        values = {f"perf/peak_rss_gb/{phase}": peak_rss_gb()}
        if cuda:
            values[f"perf/max_memory_allocated_gb/{phase}"] = torch.cuda.max_memory_allocated() / GB
        for key, value in values.items():
            metrics[key] = max(value, metrics.get(key, 0.0))


__all__ = ["peak_rss_gb", "phase_peak_memory", "proc_kb_fields", "reset_peak_rss"]
