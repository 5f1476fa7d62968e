"""The tree passes ruff's lint and is formatted as ``ruff format`` leaves it (configuration: ``pyproject.toml``), so
CI fails on either; ``ruff check --fix .`` and ``ruff format .`` mend most of what these report."""

import subprocess
import sys

import pytest

from conftest import REPO_ROOT


def _ruff(*args: str) -> subprocess.CompletedProcess:
    try:
        import ruff  # noqa: F401 - only to say how to install it
    except ImportError:
        pytest.fail("ruff is not installed in this environment: pip install -e '.[test]' (it pins ruff)")
    return subprocess.run(
        [sys.executable, "-m", "ruff", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300
    )


def test_ruff_check_passes():
    done = _ruff("check", "--no-cache", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_ruff_format_leaves_the_tree_unchanged():
    done = _ruff("format", "--no-cache", "--check", ".")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
