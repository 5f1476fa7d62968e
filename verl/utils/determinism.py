"""Bitwise-repeatable runs on CUDA: the settings ``trainer.deterministic=true`` applies in each worker process.

On a CPU, PyTorch's kernels already give the same bits for the same inputs, shapes and thread count, so a run and
its killed-and-resumed twin match without these settings (``benchmarks/kill_campaign.py``). On CUDA some kernels sum
in an order that varies from call to call (atomics in scatter/index-add backward passes, the memory-efficient
attention backward, cuBLAS split-K reductions over a shared workspace); PyTorch's reproducibility notes
(https://pytorch.org/docs/stable/notes/randomness.html) list the switches that pin them, set here:

- ``torch.use_deterministic_algorithms(True)``: every op takes its deterministic implementation, and an op that has
  none raises ``RuntimeError`` naming itself (rather than silently varying); it also fills memory from
  ``torch.empty`` with NaN, so a read of uninitialised memory shows;
- ``torch.backends.cudnn.deterministic = True`` and ``torch.backends.cudnn.benchmark = False``;
- ``CUBLAS_WORKSPACE_CONFIG=:4096:8`` (a fixed cuBLAS workspace; cuBLAS reads it when a handle is created, so it is
  set before the worker's first CUDA matmul) unless the environment already sets it.

TF32 and the mixed-precision dtypes are left as they are: they change the numbers, not their repeatability.
Deterministic kernels are slower (the attention backward most); leave it off for speed.
"""

from __future__ import annotations

import os

import torch

CUBLAS_WORKSPACE = ":4096:8"


def set_deterministic(enabled: bool) -> dict:
    """Apply (``enabled``) the settings of the module docstring in this process; ``False`` leaves PyTorch's defaults
    untouched. Returns what is in force: ``{"deterministic_algorithms", "cudnn_deterministic", "cudnn_benchmark",
    "cublas_workspace_config"}`` (the last ``None`` when unset)."""
    if enabled:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
        "cudnn_benchmark": bool(torch.backends.cudnn.benchmark),
        "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
    }
