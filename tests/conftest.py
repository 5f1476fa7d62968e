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
        ray.init(address="local", num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False,
                 runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}})
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
        lengths = df["prompt"].map(lambda m: len(tokenizer(tokenizer.apply_chat_template(
            list(m), tokenize=False, add_generation_prompt=True))["input_ids"]))
        df.loc[lengths.sort_values(kind="stable").index[:n]].to_parquet(out / f"{split}.parquet")
    return out


def e2e_overrides(tmp_path, data_dir, train="train", val="test") -> list[str]:
    """Hydra overrides for a 2-step CPU run of the tiny model on ``small_rlla`` (GRPO-sized: 2 prompts x 2 copies)."""
    return [
        f"data.train_files={data_dir}/{train}.parquet", f"data.val_files={data_dir}/{val}.parquet",
        "data.train_batch_size=2", "data.max_prompt_length=1024", "data.max_response_length=12",
        "data.filter_overlong_prompts=True",
        "actor_rollout_ref.model.path=tiny", "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=2", "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
        "actor_rollout_ref.rollout.n=2", "actor_rollout_ref.rollout.micro_batch_size=8",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
        "critic.ppo_micro_batch_size_per_gpu=2",
        "trainer.n_gpus_per_node=0", "trainer.cpus_per_worker=0.5", "trainer.logger=[console]",
        "trainer.total_training_steps=2", "trainer.test_freq=2", "trainer.save_freq=2",
        f"trainer.default_local_dir={tmp_path}/ckpt", f"trainer.run_dir={tmp_path}/run",
        "trainer.project_name=test", "trainer.experiment_name=e2e", "trainer.log_val_generations=2",
    ]


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

    def factory(env="a", problem_id="p0", version=0, reward=0.0, prompt=3, gen=2, tool=0, uid=None,
                truncated=False, rewards=None):
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
