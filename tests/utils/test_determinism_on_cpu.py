"""``trainer.deterministic`` (verl/utils/determinism.py): the switches it sets, in a fresh process each (they are
process-wide); the run that reaches the worker is checked by ``benchmarks/resume_check.py`` in the GPU suite's smoke."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from conftest import REPO_ROOT

PROBE = """
import json, torch
from verl.utils.determinism import set_deterministic
before = torch.are_deterministic_algorithms_enabled()
state = set_deterministic({enabled})
print(json.dumps({{"before": before, "state": state, "empty_is_nan": bool(torch.empty(4).isnan().all())}}))
"""


def _probe(enabled: bool, **env) -> dict:
    base = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(enabled=enabled)],
        cwd=REPO_ROOT,
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return json.loads(out.splitlines()[-1])


def test_on_sets_every_switch_and_uninitialised_memory_shows():
    got = _probe(True)
    assert got["before"] is False
    assert got["state"] == {
        "deterministic_algorithms": True,
        "cudnn_deterministic": True,
        "cudnn_benchmark": False,
        "cublas_workspace_config": ":4096:8",
    }
    assert got["empty_is_nan"]  # PyTorch fills torch.empty with NaN under deterministic algorithms


def test_a_workspace_config_from_the_environment_is_kept():
    assert _probe(True, CUBLAS_WORKSPACE_CONFIG=":16:8")["state"]["cublas_workspace_config"] == ":16:8"


def test_off_leaves_pytorch_defaults():
    got = _probe(False)
    assert got["state"]["deterministic_algorithms"] is False and got["state"]["cublas_workspace_config"] is None
