"""Shared pytest fixtures: the ../shared reference folder, the tiny model preset, its tokenizer, and one Ray session.

Everything here is session-scoped so the suite prepares each expensive thing once.
"""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# Keep CPU tests deterministic and light on the 2-core CI machine.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def shared_path() -> Path:
    """``../shared`` beside the checkout (or ``$TOOLRL_SHARED``); fails loudly when absent."""
    path = Path(os.environ.get("TOOLRL_SHARED", REPO_ROOT.parent / "shared"))
    if not path.is_dir():
        raise RuntimeError(f"reference folder {path} not found (set TOOLRL_SHARED to the shared/ folder)")
    return path


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    return shared_path()


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    from verl.utils.model_presets import prepare_model

    return prepare_model("tiny")


@pytest.fixture(scope="session")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def ray_session():
    """One local Ray instance (2 CPUs) shared by every test that needs Ray."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}})
    yield ray
    ray.shutdown()
