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
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            ignore_reinit_error=True,
            log_to_driver=False,
            runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}},
        )
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def small_rlla(tmp_path_factory, tokenizer):
    """8 train and 4 validation RLLA rows with the shortest chat-templated prompts (keeps CPU steps short)."""
    import pandas as pd

    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    data_dir = resolve_rlla_data_dir()
    out = tmp_path_factory.mktemp("rlla_small")
    for split, n in (("train", 8), ("test", 4)):
        df = pd.read_parquet(data_dir / f"{split}.parquet")
        lengths = df["prompt"].map(
            lambda m: len(
                tokenizer(tokenizer.apply_chat_template(list(m), tokenize=False, add_generation_prompt=True))[
                    "input_ids"
                ]
            )
        )
        df.loc[lengths.sort_values(kind="stable").index[:n]].to_parquet(out / f"{split}.parquet")
    return out


def e2e_overrides(tmp_path, data_dir, train="train", val="test") -> list[str]:
    """Hydra overrides for a 2-step CPU run of the tiny model on ``small_rlla`` (GRPO-sized: 2 prompts x 2 copies)."""
    return [
        f"data.train_files={data_dir}/{train}.parquet",
        f"data.val_files={data_dir}/{val}.parquet",
        "data.train_batch_size=2",
        "data.max_prompt_length=1024",
        "data.max_response_length=12",
        "data.filter_overlong_prompts=True",
        "actor_rollout_ref.model.path=tiny",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.rollout.micro_batch_size=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=0",
        "trainer.cpus_per_worker=0.5",
        "trainer.logger=[console]",
        "trainer.total_training_steps=2",
        "trainer.test_freq=2",
        "trainer.save_freq=2",
        f"trainer.default_local_dir={tmp_path}/ckpt",
        f"trainer.run_dir={tmp_path}/run",
        "trainer.project_name=test",
        "trainer.experiment_name=e2e",
        "trainer.log_val_generations=2",
    ]


# e2e_overrides' keys that only the single-turn trainer reads: agent mode refuses them when set (key table)
SINGLE_TURN_ONLY = ("data.filter_overlong_prompts", "trainer.log_val_generations")


def agent_e2e_overrides(tmp_path) -> list[str]:
    """:func:`e2e_overrides` for agent mode (``env.env_name`` set by the caller): without :data:`SINGLE_TURN_ONLY`
    and with no data files."""
    keep = [o for o in e2e_overrides(tmp_path, "unused") if o.split("=", 1)[0] not in SINGLE_TURN_ONLY]
    return keep + ["data.train_files=null", "data.val_files=null"]


@pytest.fixture
def make_rollout():
    """Async-RL core tests: ``make_rollout(env, problem_id, version, reward, prompt=3, gen=2, tool=0, ...)`` -> Rollout.

    Layout: user turn (``prompt`` tokens), assistant turn (``gen`` tokens, log-probs ``-0.01 * k``, carrying the
    reward), then optionally a tool turn (``tool`` tokens) and a second assistant turn (``gen`` tokens). Token ids
    are unique across the rollouts a test makes (``1000 * n + position``), so a packed row shows whose token it is.
    """
    import itertools

    from verl.async_rl.types import Rollout, Turn

    counter = itertools.count(1)

    def factory(
        env="a",
        problem_id="p0",
        version=0,
        reward=0.0,
        prompt=3,
        gen=2,
        tool=0,
        uid=None,
        truncated=False,
        rewards=None,
    ):
        n = next(counter)
        ids = iter(range(1000 * n, 1000 * n + 999))
        take = lambda k: tuple(next(ids) for _ in range(k))  # noqa: E731
        gen_tokens = take(gen)
        turns = [
            Turn("question", "user", take(prompt)),
            Turn("answer", "assistant", gen_tokens, tuple(-0.01 * (i + 1) for i in range(gen)), reward=reward),
        ]
        if tool:
            turns.append(Turn("tool output", "tool", take(tool)))
            turns.append(Turn("final", "assistant", take(gen), tuple(-0.5 for _ in range(gen))))
        metadata = {"policy_version": version, "truncated": truncated}
        if rewards is not None:
            metadata["rewards"] = rewards
        return Rollout(env, problem_id, uid or f"{env}-{problem_id}-v{version}-{n}", turns, metadata)

    return factory


@pytest.fixture
def batch():
    """Worker tests: the small synthetic actor/critic batch of ``tests/workers/workers_testlib.py``."""
    from workers_testlib import make_batch  # tests/workers is on sys.path while its modules run

    return make_batch()


@pytest.fixture(scope="module")
def causal_lm(tiny_model_dir):
    """Worker tests: a fresh float32 tiny causal LM per test module (tests that train must copy it)."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


# ----------------------------------------------------------------------------------------------- test tiers
# Every test gets one tier marker from its file (tests/README.md): ``e2e`` for the files below, which run a trainer, a
# launch script or a benchmark, start processes, Ray or a process group, or build whole models or environments;
# ``evidence`` for the tests of the research record (experiments/: its study scripts and index); ``unit`` for the rest
# (in-process tests of one component). A file with any end-to-end test is e2e as a whole. ``bash run_tests.sh
# --fast`` runs the unit tier.
E2E_FILES = {
    "test_benchmarks_smoke_on_cpu.py",
    "test_cli_errors_on_cpu.py",
    "test_first_run_on_cpu.py",
    "test_gpu_suite_on_cpu.py",
    "test_launch_scripts_on_cpu.py",
    "test_protocol_on_cpu.py",
    "agent_system/test_agent_training_e2e_on_cpu.py",
    "agent_system/test_textworld_env.py",
    "async_rl/test_async_inference_server_on_cpu.py",
    "async_rl/test_async_engine_slices_on_cpu.py",
    "async_rl/test_async_orchestrator_on_cpu.py",
    "async_rl/test_async_validation_on_cpu.py",
    "data/test_bfcl_multi_turn_on_cpu.py",
    "data/test_bfcl_on_cpu.py",
    "reward/test_reward_dry_run.py",
    "rlvcr/test_rollout_phase_on_cpu.py",
    "router/test_router_infer_on_cpu.py",
    "router/test_router_main_job_on_cpu.py",
    "router/test_router_tools_on_cpu.py",
    "router/test_router_training_e2e_on_cpu.py",
    "sft/test_sft_trainer_on_cpu.py",
    "single_controller/test_local_worker_group_on_cpu.py",
    "single_controller/test_multinode_on_cpu.py",
    "single_controller/test_worker_group_on_cpu.py",
    "trainer/ppo/test_dynamic_sampling_on_cpu.py",
    "trainer/ppo/test_rollout_corr_on_cpu.py",
    "trainer/test_config_on_cpu.py",
    "trainer/test_disk_faults_on_cpu.py",
    "trainer/test_generation_on_cpu.py",
    "trainer/test_init_ray_on_cpu.py",
    "trainer/test_kill_campaign_on_cpu.py",
    "trainer/test_kill_resume_on_cpu.py",
    "trainer/test_main_async_errors_on_cpu.py",
    "trainer/test_ppo_trainer_e2e_on_cpu.py",
    "trainer/test_recipes_golden_on_cpu.py",
    "trainer/test_recipes_gpu_branch_on_cpu.py",
    "trainer/test_resume_equivalence_on_cpu.py",
    "trainer/test_run_errors_on_cpu.py",
    "trainer/test_single_process_without_ray_on_cpu.py",
    "utils/test_determinism_on_cpu.py",
    "utils/test_model_presets_on_cpu.py",
    "utils/test_run_lock_on_cpu.py",
    "vllm/test_vllm_inference_server_on_cpu.py",
    "vllm/test_vllm_rollout_on_cpu.py",
    "vllm/test_vllm_worker_on_cpu.py",
    "workers/test_decode_copy_on_cpu.py",
    "workers/test_fsdp_workers_ray_on_cpu.py",
    "workers/test_fused_head_fsdp2_on_cpu.py",
    "workers/test_mixed_precision_on_cpu.py",
}
EVIDENCE_FILES = {
    "router/test_does_it_learn_summary_on_cpu.py",
    "router/test_router_frontier_on_cpu.py",
    "router/test_router_ridge_refit_on_cpu.py",
    "trainer/test_calls_vs_ground_truth_on_cpu.py",
    "test_experiments_index_on_cpu.py",
}
TIERS = {
    "unit": "in-process tests of one component (the fast lane: bash run_tests.sh --fast)",
    "e2e": "whole runs: trainers, launch scripts, benchmarks' smoke sizes, processes, Ray",
    "evidence": "the research record (experiments/): its study scripts and index of runs",
}


def tier_of(path: Path) -> str:
    """The tier of a test file (``path`` absolute, or relative to the working directory); a file outside ``tests/``
    (collected by a direct ``pytest some/file.py``) is ``unit`` unless listed."""
    resolved, tests = Path(path).resolve(), Path(__file__).resolve().parent
    rel = resolved.relative_to(tests).as_posix() if resolved.is_relative_to(tests) else resolved.name
    return "evidence" if rel in EVIDENCE_FILES else "e2e" if rel in E2E_FILES else "unit"


def pytest_configure(config):
    for name, what in TIERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")


def pytest_collection_modifyitems(config, items):
    for item in items:
        item.add_marker(getattr(pytest.mark, tier_of(item.path)))


def close_tool_loop_turns(monkeypatch) -> None:
    """Make the tool loop's rollout turns end: a turn that used its whole token budget gets EOS as its last id (the
    tiny model is random and rarely samples EOS), so a test can drive a real rollout through several turns."""
    from agent_system.multi_turn_rollout import tool_loop

    original = tool_loop.RolloutGenerator.generate

    def generate(self, requests):
        out = original(self, requests)
        for g in out:
            if g.ids and g.ids[-1] != self.tokenizer.eos_token_id:
                g.ids[-1] = self.tokenizer.eos_token_id
        return out

    monkeypatch.setattr(tool_loop.RolloutGenerator, "generate", generate)
