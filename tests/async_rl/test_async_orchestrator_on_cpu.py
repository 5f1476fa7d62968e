"""Async mode end to end on CPU (verl/async_rl/orchestrator.py): two env types, one inference server, the learner;
restarts of a killed env actor / inference server / learner; resume reloads the replay logs without loss or
duplication."""

from __future__ import annotations

import json
import os
import time

import pytest


@pytest.fixture(scope="module")
def short_rlla(tmp_path_factory, tokenizer):
    """The 4 RLLA train rows with the shortest chat-templated prompts (~470-490 tokens with the tiny tokenizer)."""
    import pandas as pd

    from verl.utils.dataset.rlla_data import resolve_rlla_data_dir

    frame = pd.read_parquet(resolve_rlla_data_dir() / "train.parquet")
    lengths = frame["prompt"].map(
        lambda m: len(tokenizer.apply_chat_template(list(m), add_generation_prompt=True, tokenize=True)["input_ids"])
    )
    out = tmp_path_factory.mktemp("rlla_short")
    frame.loc[lengths.sort_values(kind="stable").index[:4]].to_parquet(out / "train.parquet")
    return out


def async_config(tmp_path, data_dir=None, extra=()):
    """Config of a tiny CPU run: ``line_world`` alone, or with ``data_dir`` also single-turn RLLA (two env types)."""
    from hydra import compose, initialize_config_dir

    import verl.trainer

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    overrides = [
        "actor_rollout_ref.model.path=tiny",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        f"trainer.default_local_dir={tmp_path}/ckpt",
        "trainer.save_freq=1",
        "trainer.total_training_steps=2",
        "async.inference.max_tokens=6",
        "async.learner_threads=1",
    ]
    if data_dir is None:
        overrides += ["async.batcher.total_token_budget=480", "async.batcher.max_seq_len=256"]
    else:
        overrides += [
            "async.batcher.total_token_budget=1600",
            "async.batcher.max_seq_len=1024",
            "async.envs.line_world.fraction=0.3",
            f"+async.envs.rlla={{kind: rlla, data_file: {data_dir}/train.parquet, replicas: 1, fraction: 0.7, "
            "group_size: 2}",
        ]
    overrides += list(extra)
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="async_trainer", overrides=overrides)
    from verl.utils.model_presets import prepare_model

    config.actor_rollout_ref.model.path = prepare_model("tiny")
    return config


def test_two_envs_train_and_broadcast(ray_session, tmp_path, short_rlla):
    from verl.trainer.main_async import build_orchestrator

    orch = build_orchestrator(async_config(tmp_path, short_rlla))
    try:
        records = orch.run(2, timeout_s=240)
        assert [r["policy_version"] for r in records] == [1.0, 2.0]
        first = records[0]
        assert first["learner/logprob_abs_gap"] < 1e-3  # version-0 rollouts trained by version-0 weights
        for env in ("line_world", "rlla"):
            assert sum(r.get(f"batches/{env}/rollouts_used", 0) for r in records) > 0
            assert f"replays/{env}/frac_on_policy" in first
        assert first["weights/servers_updated"] == 1.0 and first["weights/broadcast_latency_s"] > 0
        assert ray_session.get(orch.servers[0].policy_version.remote()) == 2
        import torch

        for version in (1, 2):  # save_freq 1: each checkpoint holds its own version, also when the next step was
            # submitted right after the save (orchestrator/next_step_overlapped)
            step_dir = tmp_path / "ckpt" / f"global_step_{version}"
            assert json.loads((step_dir / "learner_state.json").read_text())["version"] == version
            extra = torch.load(next((step_dir / "actor").glob("extra_state_*.pt")), weights_only=False)
            assert extra["global_step"] == version and extra["lr_scheduler"]["last_epoch"] == version
    finally:
        orch.shutdown()


def _trained_uids(log_path, version):
    """Rollout uids of the log trained into the weights of ``version`` (consumed at a version < ``version``, in the
    lineage that survived every reload), and all accepted rollout records ``{uid: policy_version}``."""
    consumed, accepted = {}, {}
    for line in open(log_path):
        record = json.loads(line)
        if record["type"] == "rollout":
            accepted[record["rollout"]["rollout_uid"]] = record["rollout"]["metadata"]["policy_version"]
        elif record["type"] == "consumed":
            for uid in record["rollout_uids"]:
                consumed[uid] = record["learner_version"]
        elif record["type"] == "reload":
            consumed = {u: v for u, v in consumed.items() if v < record["learner_version"]}
    return {u for u, v in consumed.items() if v < version}, accepted


def test_killed_env_actor_and_server_are_restarted(ray_session, tmp_path):
    from verl.trainer.main_async import build_orchestrator

    ray = ray_session
    orch = build_orchestrator(async_config(tmp_path))
    try:
        orch.run(1, timeout_s=120)
        ray.kill(orch.env_actors[("line_world", 0)])
        ray.kill(orch.servers[0])
        records = orch.run(2, timeout_s=120)
        assert orch.restarts["env_actor"] >= 1 and orch.restarts["inference_server"] >= 1
        assert records[-1]["policy_version"] == 3.0
        assert records[-1]["orchestrator/restarts/inference_server"] >= 1
        assert ray.get(orch.servers[0].policy_version.remote()) == 3  # the new server got the learner's weights
    finally:
        orch.shutdown()


def _fill_buffers(ray, orch, timeout_s: float = 120.0) -> None:
    """Take env results, without a learner step, until every buffer holds an untrained rollout: a learner as fast as
    the envs may have trained everything generated so far, which would make the reload checks vacuous."""
    deadline = time.monotonic() + timeout_s
    while not all(any(g.rollouts for g in b._groups.values()) for b in orch.buffers.values()):
        assert time.monotonic() < deadline, "the env actors delivered no rollout"
        orch._submit_envs()
        ready, _ = ray.wait(list(orch._inflight), num_returns=1, timeout=1.0)
        for ref in ready:
            orch._on_env_result(ref)


def test_killed_learner_resumes_and_replay_logs_reload(ray_session, tmp_path):
    from verl.trainer.main_async import build_orchestrator

    ray = ray_session
    config = async_config(tmp_path, extra=["async.replay.max_age=2"])
    orch = build_orchestrator(config)
    try:
        orch.run(2, timeout_s=120)
        ray.kill(orch.learner)
        orch.run(1, timeout_s=120)
        assert orch.restarts["learner"] == 1 and orch.version == 3
        _fill_buffers(ray, orch)
    finally:
        orch.shutdown()

    # a new driver resumes from the last checkpoint (version 3) and reloads the replay logs
    orch = build_orchestrator(config)
    try:
        assert orch.version == 3
        for buffer in orch.buffers.values():
            pool = [r.rollout_uid for g in buffer._groups.values() for r in g.rollouts]
            assert len(pool) == len(set(pool))  # nothing duplicated
            trained, accepted = _trained_uids(buffer.log_path, 3)
            assert not set(pool) & trained  # nothing trained into the checkpoint comes back
            expected = {u for u, v in accepted.items() if u not in trained and 3 - 2 <= v <= 3}
            assert set(pool) == expected  # nothing accepted and untrained is lost
            assert pool  # the envs kept generating: the check above is not vacuous
        assert orch.run(1, timeout_s=120)[-1]["policy_version"] == 4.0
    finally:
        orch.shutdown()


def test_main_async_entry_runs_validates_and_resumes(ray_session, tmp_path, small_rlla):
    from verl.trainer.main_async import run_async

    # save_freq 5 > the steps run: the learner's checkpoint after the last step is what the second launch resumes;
    # validation (greedy, 4 RLLA rows): before training at version 0 and after each launch's last step (test_freq 5);
    # async.batcher.max_groups=1: every batch is one group (line_world's group_size 2) although more would fit
    extra = [
        "trainer.total_training_steps=1",
        "async.batcher.max_groups=1",
        "trainer.logger=[console]",
        f"trainer.run_dir={tmp_path}/run",
        "async.max_buffer_rollouts=4",
        "trainer.save_freq=5",
        "trainer.val_before_train=true",
        "trainer.test_freq=5",
        f"data.val_files={small_rlla}/test.parquet",
        "data.max_response_length=6",
        f"trainer.validation_data_dir={tmp_path}/val",
    ]
    records = run_async(async_config(tmp_path, extra=extra))
    assert [r["policy_version"] for r in records] == [1.0]
    # a second launch with a higher step target resumes from global_step_1 and trains one more step (no validation
    # before training: the run is past version 0)
    records = run_async(async_config(tmp_path, extra=extra[1:] + ["trainer.total_training_steps=2"]))
    assert [r["policy_version"] for r in records] == [2.0]
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [line["step"] for line in lines] == [0, 1, 2] and "learner/logprob_gap" in lines[1]
    assert [line["batches/rollouts"] for line in lines[1:]] == [2.0, 2.0]
    for line in lines:
        assert line["val/policy_version"] == line["step"]
        dumped = [json.loads(x) for x in (tmp_path / "val" / f"{line['step']}.jsonl").read_text().splitlines()]
        assert [d["row"] for d in dumped] == [0, 1, 2, 3] and all(d["step"] == line["step"] for d in dumped)
        assert line["val/test_score/rlla"] == pytest.approx(sum(d["score"] for d in dumped) / 4)
        assert 0 < line["val/response_length/mean"] <= 6
    assert lines[2]["orchestrator/validation_s"] > 0
    # the run's config.yaml, as main_ppo writes it: the resolved config and the RLLA switches on (none here)
    from omegaconf import OmegaConf

    record = OmegaConf.to_container(OmegaConf.load(tmp_path / "run" / "config.yaml"))
    assert record["reward_switches_on"] == [] and record["trainer"]["total_training_steps"] == 2


def test_rlla_run_with_kl_loss_warmup_reinforce_plus_plus_and_a_reward_file(ray_session, tmp_path, short_rlla):
    """main_async with main_ppo's keys: rows from data.train_files, data.train_batch_size problems per batch, the KL
    loss, a linear warm-up, REINFORCE++, and a reward file scored in the reward API's process sandbox inside the env
    actor. It trains: the warm-up's lr per step, the KL term once the policy moved, every reward the file's."""
    from verl.trainer.main_async import run_async

    reward = tmp_path / "reward.py"
    reward.write_text(
        "def compute_score(data_source, solution_str, ground_truth, extra_info):\n"
        "    return float(len(solution_str) % 5)\n"
    )
    extra = [
        "~async.envs.line_world",
        "+async.envs.rlla={kind: rlla, fraction: 1.0, group_size: 2}",
        f"data.train_files={short_rlla}/train.parquet",
        "data.max_prompt_length=1024",
        "data.train_batch_size=2",
        "async.batcher.total_token_budget=4096",  # a ceiling above 2 groups of ~500-token rollouts
        "async.batcher.max_seq_len=1024",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "algorithm.adv_estimator=reinforce_plus_plus",
        "actor_rollout_ref.actor.use_kl_loss=true",
        "actor_rollout_ref.actor.kl_loss_coef=0.1",
        "actor_rollout_ref.actor.optim.lr_warmup_steps=2",
        f"custom_reward_function.path={reward}",
        "trainer.total_training_steps=3",
        "trainer.save_freq=5",
        "trainer.logger=[console]",
        f"trainer.run_dir={tmp_path}/run",
    ]
    records = run_async(async_config(tmp_path, extra=extra))
    assert [r["policy_version"] for r in records] == [1.0, 2.0, 3.0]
    assert [r["actor/lr"] for r in records] == pytest.approx([0.0, 0.5e-3, 1e-3])  # lr 1e-3 warmed up over 2 steps
    assert records[0]["actor/kl_loss"] == pytest.approx(0.0, abs=1e-6)  # the policy is still the reference
    assert records[2]["actor/kl_loss"] > 0  # step 2 moved it
    assert all(r["batches/rollouts"] == 4.0 for r in records)  # 2 problems x group_size 2
    rollouts = [
        json.loads(line)["rollout"]
        for path in (tmp_path / "ckpt" / "replay").glob("*.jsonl")
        for line in open(path)
        if json.loads(line)["type"] == "rollout"
    ]
    assert rollouts
    for rollout in rollouts:
        answer = rollout["turns"][-1]
        assert answer["reward"] == float(len(answer["message"]) % 5) and rollout["metadata"]["reward_valid"]
