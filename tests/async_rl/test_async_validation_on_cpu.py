"""Validation of the async mode (verl/async_rl/validation.py): sampling from ``val_kwargs``, the per-source means of
the RLLA reward over canned server answers (hand-computed), unscorable samples, the version check, rows spread over
the servers, the dump, and the rows read as the synchronous trainer reads them."""

from __future__ import annotations

import json

import pandas as pd
import pytest

GT = '<think> x </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1"}}\n</tool_call>'
RIGHT = '<think> news </think>\n<tool_call>\n{"name": "GetNews", "parameters": {"page": "1"}}\n</tool_call>'
WRONG = '<think> news </think>\n<tool_call>\n{"name": "GetWeather", "parameters": {"city": "Oslo"}}\n</tool_call>'
NO_FORMAT = "just text"


def test_validation_sampling():
    from verl.async_rl.validation import validation_sampling

    base = {"do_sample": False, "temperature": 0.7, "top_k": 50, "top_p": 0.9, "n": 1}
    assert validation_sampling(base) == {"temperature": 0.0, "n": 1}  # greedy: the cut does not matter
    assert validation_sampling({**base, "do_sample": True, "top_k": -1, "top_p": 1.0, "n": 3}) == {
        "temperature": 0.7,
        "n": 3,
    }
    with pytest.raises(ValueError, match="val_kwargs.top_k=50"):
        validation_sampling({**base, "do_sample": True, "top_p": 1.0})
    with pytest.raises(ValueError, match="val_kwargs.top_p=0.9"):
        validation_sampling({**base, "do_sample": True, "top_k": 0})
    with pytest.raises(ValueError, match="val_kwargs.n must be >= 1"):
        validation_sampling({**base, "n": 0})


class _Validator:
    """An AsyncValidator whose server answers are canned: row ``index`` -> list of response texts."""

    def __new__(cls, tokenizer, texts, version_of=lambda url: 3, dump_dir=None):
        from verl.async_rl.validation import AsyncValidator

        rows = [
            {
                "index": i,
                "data_source": "rlla" if i < 2 else "rlla_other",
                "prompt_ids": [1, 2, 3],
                "reward_model": {"ground_truth": GT if i != 3 else "<tool_call>\n{not json\n</tool_call>"},
                "extra_info": {},
            }
            for i in range(len(texts))
        ]
        validator = AsyncValidator(
            rows, tokenizer, _manager(tokenizer), max_tokens=8, n=len(texts[0]), dump_dir=dump_dir
        )
        validator.calls = []

        def answer(url, row):
            validator.calls.append((url, row["index"]))
            return {
                "policy_version": version_of(url),
                "choices": [{"token_ids": tokenizer.encode(t, add_special_tokens=False)} for t in texts[row["index"]]],
            }

        validator._answer = answer
        return validator


def _manager(tokenizer):
    """main_ppo's validation reward manager at the async config's defaults (the built-in RLLA manager)."""
    from omegaconf import OmegaConf

    from verl.trainer.main_async import make_reward_manager

    return make_reward_manager(OmegaConf.to_container(_compose([]), resolve=True), tokenizer, validation=True)


def _score(text):
    from verl.utils.reward_score import default_compute_score

    return default_compute_score("rlla", text, GT, extra_info={"step": 3, "wrapper": "none"})


def test_means_per_source_hand_computed(tokenizer, tmp_path):
    texts = [[RIGHT, WRONG], [NO_FORMAT, RIGHT], [WRONG, WRONG]]
    validator = _Validator(tokenizer, texts, dump_dir=str(tmp_path / "val"))
    metrics = validator.run(["http://a/v1", "http://b/v1"], version=3)
    right, wrong, none = _score(RIGHT), _score(WRONG), _score(NO_FORMAT)
    assert right["correctness"] > wrong["correctness"] and right["format"] > none["format"]  # the cases differ
    for name in ("score", "format", "correctness", "length"):
        assert metrics[f"val/test_{name}/rlla"] == pytest.approx(
            (right[name] + wrong[name] + none[name] + right[name]) / 4
        )
        assert metrics[f"val/test_{name}/rlla_other"] == pytest.approx(wrong[name])
    lengths = [len(tokenizer.encode(t, add_special_tokens=False)) for pair in texts for t in pair]
    assert metrics["val/response_length/mean"] == pytest.approx(sum(lengths) / 6)
    assert metrics["val/policy_version"] == 3.0 and "val/reward_invalid_count" not in metrics
    assert sorted(validator.calls) == [("http://a/v1", 0), ("http://a/v1", 2), ("http://b/v1", 1)]
    lines = [json.loads(x) for x in (tmp_path / "val" / "3.jsonl").read_text().splitlines()]
    assert [(x["row"], x["step"]) for x in lines] == [(0, 3), (0, 3), (1, 3), (1, 3), (2, 3), (2, 3)]
    assert lines[1]["score"] == pytest.approx(wrong["score"]) and lines[2]["output"] == NO_FORMAT


def test_unscorable_sample_is_counted_and_left_out(tokenizer):
    validator = _Validator(tokenizer, [[RIGHT], [WRONG], [WRONG], [RIGHT]])  # row 3's ground truth: bad JSON
    metrics = validator.run(["http://a/v1"], version=3)
    assert metrics["val/reward_invalid_count"] == 1.0
    assert metrics["val/test_score/rlla_other"] == pytest.approx(_score(WRONG)["score"])  # row 2 alone


def test_answer_from_another_version_raises(tokenizer):
    validator = _Validator(tokenizer, [[RIGHT]], version_of=lambda url: 2)
    with pytest.raises(RuntimeError, match="policy version 2"):
        validator.run(["http://a/v1"], version=3)


def _compose(overrides):
    import os

    from hydra import compose, initialize_config_dir

    import verl.trainer
    from verl.async_rl.config import typed_async_config

    with initialize_config_dir(
        config_dir=os.path.join(os.path.dirname(verl.trainer.__file__), "config"), version_base=None
    ):
        return typed_async_config(compose(config_name="async_trainer", overrides=list(overrides)))


def _config(files, **data):
    return _compose(
        [
            f"data.val_files={files}",
            "data.max_prompt_length=1024",
            "trainer.val_before_train=true",
            *[f"data.{k}={v}" for k, v in data.items()],
        ]
    )


def test_rows_read_as_the_synchronous_trainer(tokenizer, small_rlla, tmp_path):
    from verl.async_rl.validation import AsyncValidator
    from verl.utils.dataset.rl_dataset import RLHFDataset

    frame = pd.read_parquet(small_rlla / "test.parquet").reset_index(drop=True)
    long = frame.iloc[:1].copy()
    long.at[long.index[0], "prompt"] = [{"role": "user", "content": "word " * 1200}]
    path = tmp_path / "val.parquet"
    pd.concat([frame, long], ignore_index=True).to_parquet(path)
    config = _config(path, filter_overlong_prompts=True, max_response_length=7)
    validator = AsyncValidator.from_config(config, tokenizer, _manager(tokenizer))
    assert [r["index"] for r in validator.rows] == [0, 1, 2, 3]  # the 1,200-word prompt filtered, file rows kept
    assert validator.max_tokens == 7 and validator.temperature == 0.0 and validator.n == 1
    dataset = RLHFDataset(
        data_files=str(small_rlla / "test.parquet"),
        tokenizer=tokenizer,
        config={"max_prompt_length": 1024, "truncation": "left"},
    )
    item = dataset[2]
    assert validator.rows[2]["prompt_ids"] == item["input_ids"][item["attention_mask"].bool()].tolist()
    assert validator.rows[2]["reward_model"]["ground_truth"] == frame.iloc[2]["reward_model"]["ground_truth"]


def test_async_config_refuses_what_validation_cannot_do():
    from verl.trainer.config_utils import ConfigError

    assert _compose(["trainer.test_freq=2"]).trainer.test_freq == 2  # greedy validation: accepted
    with pytest.raises(ConfigError, match="val_kwargs.top_k=50"):
        _compose(
            [
                "trainer.test_freq=2",
                "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
                "actor_rollout_ref.rollout.val_kwargs.top_k=50",
            ]
        )
    with pytest.raises(ConfigError, match="trainer.val_only=true: not in the async mode"):
        _compose(["trainer.val_only=true"])


def test_async_config_reads_the_actor_keys_as_main_ppo():
    """The async learner is main_ppo's actor worker: its schedule, epochs, mini-batches, offload, mixed precision and
    KL loss are accepted (and typed as there); what the trainer refuses stays refused."""
    from verl.trainer.config_utils import ConfigError

    config = _compose(
        [
            "actor_rollout_ref.actor.optim.warmup_style=cosine",
            "actor_rollout_ref.actor.ppo_epochs=2",
            "actor_rollout_ref.actor.ppo_mini_batch_size=4",
            "actor_rollout_ref.actor.fsdp_config.param_offload=true",
            "actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype=bf16",
            "actor_rollout_ref.actor.use_kl_loss=true",
            "actor_rollout_ref.model.lora_rank=8",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "trainer.total_training_steps=3",
        ]
    )
    actor = config.actor_rollout_ref.actor
    assert (actor.ppo_epochs, actor.optim.warmup_style, actor.use_kl_loss) == (2, "cosine", True)
    assert actor.optim.total_training_steps == config.trainer.total_training_steps  # the schedule's horizon
    for override, why in (
        ("strategy=megatron", "Megatron is not implemented"),
        ("ulysses_sequence_parallel_size=2", "sequence parallelism is not implemented"),
    ):
        with pytest.raises(ConfigError, match=f"actor_rollout_ref.actor.{override.split('=')[0]}=.*{why}"):
            _compose([f"actor_rollout_ref.actor.{override}"])


def test_failed_validation_pass_restarts_dead_servers_and_training_goes_on():
    """Orchestrator._validate: a pass that raises gives ``val/failed`` (no exception), restarts the servers that do not
    answer a ping, and still counts its time."""
    from verl.async_rl.orchestrator import Orchestrator

    class Failing:
        def run(self, urls, version):
            assert urls == ["u0", "u1"] and version == 5
            raise RuntimeError("server 1 died")

    orch = object.__new__(Orchestrator)
    orch.validator, orch.version, orch._validation_s = Failing(), 5, 0.0
    orch.urls, orch.servers = {1: "u1", 0: "u0"}, {0: "s0", 1: "s1"}
    restarted = []
    orch._server_alive = lambda index: index == 0
    orch._restart_server = restarted.append
    assert orch._validate() == {"val/failed": 1.0}
    assert restarted == [1] and orch._validation_s > 0


def test_async_validation_equals_the_synchronous_trainers(ray_session, tmp_path, small_rlla):
    """Same weights, same rows, greedy: the async pass on an inference server gives the synchronous trainer's
    validation (the same response tokens per row, the same scores and means)."""
    from conftest import e2e_overrides

    from verl.async_rl.inference_server import start_inference_server
    from verl.async_rl.validation import AsyncValidator
    from verl.trainer.main_ppo import build_local_trainer
    from verl.utils.model_presets import prepare_model

    data = [
        f"data.val_files={small_rlla}/test.parquet",
        "data.max_prompt_length=1024",
        "data.max_response_length=6",
        "data.filter_overlong_prompts=True",
    ]
    trainer = build_local_trainer(
        e2e_overrides(tmp_path, small_rlla) + data + [f"trainer.validation_data_dir={tmp_path}/sync"]
    )
    try:
        sync_metrics = trainer._validate()
    finally:
        trainer.shutdown()
    config = _compose([*data, "trainer.test_freq=1", f"trainer.validation_data_dir={tmp_path}/async"])
    validator = AsyncValidator.from_config(config, trainer.tokenizer, _manager(trainer.tokenizer))
    server = start_inference_server(prepare_model("tiny"), num_threads=1)
    try:
        async_metrics = validator.run([ray_session.get(server.url.remote())], version=0)
    finally:
        ray_session.kill(server)
    sync_rows = [json.loads(x) for x in (tmp_path / "sync" / "0.jsonl").read_text().splitlines()]
    async_rows = [json.loads(x) for x in (tmp_path / "async" / "0.jsonl").read_text().splitlines()]
    assert len(sync_rows) == len(async_rows) == 4
    for s, a in zip(sync_rows, async_rows):
        assert a["output"] == s["output"] and a["input"] == s["input"]
        assert a["score"] == pytest.approx(s["score"])
    for name in ("score", "format", "correctness"):
        assert async_metrics[f"val/test_{name}/rlla"] == pytest.approx(sync_metrics[f"val/test_{name}/rlla"])
