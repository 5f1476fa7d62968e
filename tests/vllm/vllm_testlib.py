"""Helpers for the vLLM tests (they run only in the vLLM virtual environment, see ``scripts/setup_vllm_cpu_env.sh``)."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

# The engine runs in-process (also required inside Ray actors); set before vllm is imported.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

SKIP_REASON = (
    "vLLM is not installed in this environment: build its venv with `bash scripts/setup_vllm_cpu_env.sh` "
    "and run `.venv-vllm/bin/python -m pytest tests/vllm`"
)

# Tolerance for vLLM's log-probs of the sampled tokens against the actor's (transformers) log-probs. float32 on both
# sides; vLLM's CPU kernels only sum in a different order than transformers' eager attention/matmuls. Measured on
# the tiny preset, 8 RLLA prompts of 529-996 tokens, 64-token responses, greedy and sampled at T=1.0/0.7 (2,560
# tokens, |log-prob| up to 11.7): max |difference| 1.9e-6, mean 4e-7. 1e-4 leaves a 50x margin; a stale weight
# or a temperature mismatch moves log-probs by > 1e-2 (asserted in the tests).
LP_ATOL = 1e-4


def require_vllm():
    """Import vllm or skip the calling test module with ``SKIP_REASON``.

    Under pytest ``tests/`` is on ``sys.path``, so without the real package ``import vllm`` would find this folder as
    a namespace package: only a regular package (a spec with a file origin) counts. With ``TOOLRL_REQUIRE_VLLM=1``
    (set by ``.ci/run``) nothing is skipped: a missing or broken vLLM fails the tests instead.
    """
    required = os.environ.get("TOOLRL_REQUIRE_VLLM") == "1"
    spec = importlib.util.find_spec("vllm")
    if spec is None or spec.origin in (None, "namespace"):
        if required:
            raise RuntimeError(f"TOOLRL_REQUIRE_VLLM=1 but {SKIP_REASON}")
        pytest.skip(SKIP_REASON, allow_module_level=True)
    if required:
        import vllm  # an import error fails the tests

        return vllm
    return pytest.importorskip("vllm", reason=SKIP_REASON)


def workers_testlib():
    """``tests/workers/workers_testlib`` (the trainer config helper), importable from this folder too."""
    path = str(Path(__file__).resolve().parents[1] / "workers")
    if path not in sys.path:
        sys.path.insert(0, path)
    import workers_testlib

    return workers_testlib


def rollout_config(prompt_length: int, response_length: int, micro_batch_size: int, **overrides):
    """The vLLM tests' ``actor_rollout_ref.rollout`` section: float32, eager, log-probs on, T=1 sampling."""
    from verl.trainer.config_utils import default_section

    base = dict(
        prompt_length=prompt_length,
        response_length=response_length,
        temperature=1.0,
        top_k=-1,
        top_p=1.0,
        do_sample=True,
        dtype="float32",
        enforce_eager=True,
        calculate_log_probs=True,
        micro_batch_size=micro_batch_size,
    )
    base.update(overrides)
    return default_section("actor_rollout_ref.rollout", **base)


def agent_testlib():
    """``tests/agent_system/tool_loop_testlib`` (the multi-turn loop test helpers), importable from this folder too."""
    path = str(Path(__file__).resolve().parents[1] / "agent_system")
    if path not in sys.path:
        sys.path.insert(0, path)
    import tool_loop_testlib

    return tool_loop_testlib


def rlla_prompts(shared_dir, tokenizer, rows: int, max_prompt_length: int):
    """The first ``rows`` prompts of the shared RLLA test split, tokenised by ``RLHFDataset`` (left-padded)."""
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    dataset = RLHFDataset(
        parquet_files=[str(shared_dir / "data" / "rlla_4k" / "test.parquet")],
        tokenizer=tokenizer,
        max_prompt_length=max_prompt_length,
        truncation="left",
    )
    batch = collate_fn([dataset[i] for i in range(rows)])
    return DataProto.from_dict(
        tensors={k: batch[k] for k in ("input_ids", "attention_mask", "position_ids")},
        non_tensors={"index": batch["index"]},
    )
