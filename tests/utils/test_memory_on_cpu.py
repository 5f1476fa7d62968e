"""``verl.utils.memory``: per-phase peak RSS (``perf/peak_rss_gb/{phase}``)."""

from __future__ import annotations

import numpy as np
import pytest

from verl.utils.memory import GB, phase_peak_memory, proc_kb_fields, reset_peak_rss


def _current_rss_gb() -> float:
    return proc_kb_fields("/proc/self/status", "VmRSS")["VmRSS"] / GB


def test_phase_peak_sees_a_transient_allocation_and_resets():
    if not reset_peak_rss():
        pytest.skip("this kernel does not let a process reset its VmHWM (/proc/self/clear_refs)")
    metrics: dict = {}
    before = _current_rss_gb()
    with phase_peak_memory("alloc", metrics):
        block = np.ones(512 * 2**20 // 8)  # 512 MiB, every page written
        del block
    alloc = metrics["perf/peak_rss_gb/alloc"]
    assert alloc >= before + 0.45, (before, alloc)
    quiet_entry = _current_rss_gb()
    with phase_peak_memory("quiet", metrics):  # the mark was reset at entry: the freed block is not counted again
        pass
    quiet = metrics["perf/peak_rss_gb/quiet"]
    assert quiet < quiet_entry + 0.1 and quiet < alloc - 0.4, (quiet_entry, quiet, alloc)


def test_a_phase_run_twice_keeps_its_larger_peak():
    metrics = {"perf/peak_rss_gb/gen": 1e6}  # larger than any real peak
    with phase_peak_memory("gen", metrics):
        pass
    assert metrics == {"perf/peak_rss_gb/gen": 1e6}
    metrics = {"perf/peak_rss_gb/gen": 0.0}
    with phase_peak_memory("gen", metrics):
        pass
    assert 0.0 < metrics["perf/peak_rss_gb/gen"] < 1e3
