"""Async learner (verl/async_rl/learner.py): the synchronous trainer's actor worker and step on the batcher's batches.

The exactness test: the same rollouts trained by one synchronous step (``RayPPOTrainer._train_step``) and by one
async learner step (replay buffer with ``max_age=0`` -> batcher -> ``Learner.step``) give the same weights, with the KL
loss, a warm-up learning rate, REINFORCE++'s batch whitening and two mini-batches per step.
"""

from __future__ import annotations

import copy
import os

import pytest
import torch
from conftest import e2e_overrides

from verl.async_rl.batcher import Batcher
from verl.async_rl.learner import Learner, example_to_batch, pad_to_multiple
from verl.async_rl.replay_buffer import ReplayBuffer
from verl.async_rl.types import Rollout, Turn

# the step both schedules take: REINFORCE++ (batch whitening), the KL loss against the reference policy, a linear
# warm-up of the learning rate, mini-batches of one prompt (two optimizer steps on 2 prompts x 2 rollouts)
STEP = [
    "algorithm.adv_estimator=reinforce_plus_plus",
    "algorithm.use_kl_in_reward=false",
    "actor_rollout_ref.actor.use_kl_loss=true",
    "actor_rollout_ref.actor.kl_loss_coef=0.1",
    "actor_rollout_ref.actor.optim.lr_warmup_steps=2",
    "actor_rollout_ref.actor.ppo_mini_batch_size=1",
]
SHARED = [  # the keys of e2e_overrides that the learner reads
    "actor_rollout_ref.model.path=tiny",
    "actor_rollout_ref.actor.optim.lr=1e-3",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
    "actor_rollout_ref.rollout.n=2",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "trainer.total_training_steps=2",
]


def learner_config(tmp_path, extra=()):
    """The async mode's typed config (``async_trainer.yaml``) as the orchestrator hands it to the learner."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import verl.trainer
    from verl.async_rl.config import typed_async_config

    config_dir = os.path.join(os.path.dirname(verl.trainer.__file__), "config")
    overrides = [*SHARED, f"trainer.default_local_dir={tmp_path}/ckpt", "async.replay.max_age=0", *extra]
    with initialize_config_dir(config_dir=config_dir, version_base=None):
        config = compose(config_name="async_trainer", overrides=overrides)
    from verl.utils.model_presets import prepare_model

    config.actor_rollout_ref.model.path = prepare_model("tiny")
    return OmegaConf.to_container(typed_async_config(config), resolve=True)


def _rollouts_of(batch, log_probs, version=0):
    """The synchronous batch's rows as async rollouts of ``version``: one group per prompt (``uid``), in row order."""
    rollouts = []
    for i in range(len(batch)):
        prompt = batch.batch["prompts"][i][batch.batch["attention_mask"][i, : batch.batch["prompts"].shape[1]].bool()]
        keep = batch.batch["response_mask"][i].bool()
        turns = (
            Turn("q", "user", prompt.tolist()),
            Turn("a", "assistant", batch.batch["responses"][i][keep].tolist(), log_probs[i][keep].tolist(),
                 reward=float(batch.batch["token_level_scores"][i].sum())),
        )  # fmt: skip
        uid = str(batch.non_tensor_batch["uid"][i])
        rollouts.append(Rollout("rlla", uid, f"{uid}-{i}-v{version}", turns, {"policy_version": version}))
    return rollouts


def test_async_learner_step_equals_the_synchronous_step(tmp_path, small_rlla):
    from verl.trainer.main_ppo import build_local_trainer

    trainer = build_local_trainer(e2e_overrides(tmp_path / "sync", small_rlla) + STEP)
    try:
        trainer.global_steps = 1
        batch_dict = next(iter(trainer.train_dataloader))
        from verl.protocol import DataProto

        scored = trainer.batch_source.collect(DataProto.from_single_dict(batch_dict), 2, {})
        # distinct rewards on the last response token, so the whitened advantages are not all zero
        scores = torch.zeros_like(scored.batch["token_level_scores"])
        last = scored.batch["response_mask"].sum(-1) - 1
        scores[torch.arange(len(scored)), last] = torch.tensor([1.0, 0.0, 0.25, 0.75])
        scored.batch["token_level_scores"] = scores
        behaviour = trainer.actor_rollout_wg.compute_log_prob(scored).batch["old_log_probs"]  # the "server's"
        rollouts = [_rollouts_of(scored, behaviour, version) for version in (0, 1)]
        trainer.batch_source.collect = lambda *args: copy.deepcopy(scored)
        sync_metrics = []
        for step in (1, 2):  # the same rollouts twice: the warm-up's lr is 0 at the first step
            trainer.global_steps = step
            sync_metrics.append(trainer._train_step(batch_dict, 2))
        sync_weights = trainer.actor_rollout_wg.get_state_dict()[0]
    finally:
        trainer.shutdown()

    buffer = ReplayBuffer("rlla", tmp_path / "replay", max_age=0, min_group_size=2)
    batcher = Batcher(100_000, {"rlla": 1.0}, 2048, max_groups=2)
    learner = Learner(learner_config(tmp_path, STEP), checkpoint_dir=str(tmp_path / "ckpt"))
    before = {k: v.clone() for k, v in learner.weights().items()}  # on CPU the live tensors themselves
    for version, expected in enumerate(sync_metrics):
        buffer.set_version(version)
        assert all(buffer.add_many(rollouts[version], learner_version=version))
        made = batcher.make_batch({"rlla": buffer})
        stats = learner.step(made.example, made.segment_groups())
        assert learner.version == version + 1 and stats["learner/rows"] == 4.0 and stats["learner/pad_rows"] == 0
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/lr", "actor/grad_norm", "actor/entropy"):
            assert stats[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-7), key
    after = learner.weights()
    assert [m["actor/lr"] for m in sync_metrics] == pytest.approx([0.0, 0.5e-3])  # linear warm-up over 2 steps
    assert stats["learner/logprob_abs_gap"] < 1e-5  # lr 0 at step 1: the learner still has the behaviour policy
    moved = max(float((after[k] - before[k]).abs().max()) for k in after)
    assert moved > 1e-5  # the step changed the weights ...
    for key, value in after.items():  # ... exactly as the synchronous step did
        torch.testing.assert_close(value, sync_weights[key], atol=1e-6, rtol=0, msg=key)

    # checkpoint round trip: a new learner resumes the version, the weights and the schedule
    learner.save_checkpoint({"trainer": {"x": 1}})
    again = Learner(learner_config(tmp_path, STEP), checkpoint_dir=str(tmp_path / "ckpt"))
    assert again.resume() == 2
    for key, value in again.weights().items():
        assert torch.equal(value, after[key])
    assert again.worker_group.worker.actor_lr_scheduler.last_epoch == 2


def test_rows_padding_and_segments(make_rollout, tmp_path):
    """Unpacking: prompt left-padded, response right-padded, observation tokens inside the response with
    ``response_mask`` 0, the reward on the last generated token; inert padding rows change nothing."""
    buffer = ReplayBuffer("a", tmp_path, min_group_size=2)
    buffer.add_many([make_rollout(problem_id="p", tool=2, reward=1.0), make_rollout(problem_id="p", reward=0.0)])
    made = Batcher(10_000, {"a": 1.0}, 64, spillover="fill").make_batch({"a": buffer})
    rows = example_to_batch(made.example, made.segment_groups(), pad_token_id=0)
    first, second = made.groups[0].rollouts
    assert rows.batch["prompts"].shape == (2, 3) and rows.batch["responses"].shape == (2, 2 + 2 + 2)
    assert rows.batch["response_mask"][0].tolist() == [1, 1, 0, 0, 1, 1]  # gen, tool, gen
    assert rows.batch["response_mask"][1].tolist() == [1, 1, 0, 0, 0, 0]
    assert rows.batch["responses"][0].tolist() == [t for turn in first.turns[1:] for t in turn.tokens]
    assert rows.batch["token_level_scores"][0].tolist() == [0, 0, 0, 0, 0, 1.0]
    assert rows.batch["token_level_scores"][1].sum() == 0.0
    assert rows.batch["rollout_log_probs"][1, :2].tolist() == pytest.approx(list(second.turns[1].logprobs))
    assert rows.batch["position_ids"][1].tolist() == [0, 1, 2, 3, 4, 4, 4, 4, 4]
    assert len(set(rows.non_tensor_batch["uid"])) == 1
    padded, added = pad_to_multiple(rows, 4)
    assert added == 2 and len(padded) == 4
    assert padded.batch["response_mask"][2:].sum() == 0 and padded.batch["token_level_scores"][2:].sum() == 0
    assert len(set(padded.non_tensor_batch["uid"])) == 3  # each inert row is a group of its own


@pytest.mark.parametrize(
    "key, message",
    [
        ("algorithm.adv_estimator=gae", "critic values"),
        ("algorithm.adv_estimator=remax", "greedy baseline"),
        ("router.enable=true", "router.enable"),
        ("reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.enable"),
    ],
)
def test_keys_the_async_schedule_cannot_mean_are_refused(tmp_path, key, message):
    from verl.trainer.config_utils import ConfigError

    with pytest.raises(ConfigError, match=message):
        learner_config(tmp_path, [key])


def test_overlong_shaping_and_truncation_mask_act_on_the_rows(make_rollout, tmp_path):
    """DAPO in the async learner, as main_ppo's: completions of 2, 3 and 4 tokens under L_max = max_tokens = 4 and
    a 2-token buffer are penalised 0, -0.5 and -1 on their last token; the one that stopped at the limit (truncated)
    is masked out of the loss. Both refused with a multi-turn env, the buffer longer than L_max refused."""
    from verl.trainer.config_utils import ConfigError

    rlla = ["~async.envs.line_world", "+async.envs.rlla={kind: rlla, fraction: 1.0}", "async.inference.max_tokens=4"]
    dapo = ["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=2"]
    learner = Learner(learner_config(tmp_path, rlla + dapo + ["actor_rollout_ref.actor.mask_truncated=true"]))
    buffer = ReplayBuffer("rlla", tmp_path / "replay", max_age=0, min_group_size=3)
    rollouts = [make_rollout(env="rlla", problem_id="p", gen=n, reward=1.0, truncated=n == 4) for n in (2, 3, 4)]
    buffer.add_many(rollouts)
    made = Batcher(10_000, {"rlla": 1.0}, 64, spillover="fill").make_batch({"rlla": buffer})
    assert made.segment_truncated() == [False, False, True]
    seen = {}
    update = learner.worker_group.update_actor
    learner.worker_group.update_actor = lambda batch: seen.setdefault("batch", batch) and update(batch)
    stats = learner.step(made.example, made.segment_groups(), made.segment_valid(), made.segment_truncated())
    assert stats["response/overlong_penalty/mean"] == pytest.approx(-0.5)
    assert stats["response/truncated_frac"] == pytest.approx(1 / 3)
    batch = seen["batch"]
    assert batch.batch["token_level_scores"].sum(-1).tolist() == pytest.approx([1.0, 0.5, 0.0])
    assert batch.batch["response_mask"].sum(-1).tolist() == [2, 3, 0]  # the truncated completion: no gradient
    for overrides, message in (
        (dapo, "overlong_buffer.enable=true: main_async applies it to the single-turn rlla envs"),
        (["actor_rollout_ref.actor.mask_truncated=true"], "mask_truncated=true: main_async applies it"),
        (rlla + ["reward_model.overlong_buffer.enable=true", "reward_model.overlong_buffer.len=5"],
         r"overlong_buffer.len=5: expected 1..async.inference.max_tokens \(4\)"),
    ):  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            learner_config(tmp_path, overrides)


def test_learner_checkpoint_on_a_full_disk_is_one_clear_error(tmp_path, make_rollout, monkeypatch):
    """The async learner's save has main_ppo's disk handling: ENOSPC where a file is written removes the partial
    folder, keeps the previous checkpoint and raises one CheckpointError saying "no space left"."""
    import errno

    from verl.utils import checkpoint_manifest as cm
    from verl.utils.checkpoint_manifest import CheckpointError

    rlla = ["~async.envs.line_world", "+async.envs.rlla={kind: rlla, fraction: 1.0}"]
    learner = Learner(learner_config(tmp_path, rlla), checkpoint_dir=str(tmp_path / "ckpt"))
    first = learner.save_checkpoint()
    learner.version = 2
    real = torch.save

    def full(obj, f, *args, **kwargs):
        if f"{cm.TMP_PREFIX}2." in str(f):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(CheckpointError, match=r"no space left on .*ckpt while writing the step-2 checkpoint"):
        learner.save_checkpoint()
    root = tmp_path / "ckpt"
    assert [str(p) for p in cm.step_dirs(root)] == [first] and not list(root.glob(cm.TMP_PREFIX + "*"))
