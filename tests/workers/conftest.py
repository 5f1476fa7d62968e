"""Fixtures for the worker tests (helpers live in ``workers_testlib``)."""
from __future__ import annotations

import pytest
import torch

from workers_testlib import make_batch


@pytest.fixture
def batch():
    return make_batch()


@pytest.fixture(scope="module")
def causal_lm(tiny_model_dir):
    """A fresh float32 tiny causal LM per test module (tests that train must copy it)."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
