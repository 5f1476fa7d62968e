"""DAPO's dynamic sampling (algorithm.filter_groups): which groups are kept, how many generation batches are drawn,
what fills the batch when the data or the bound run out, and the config checks."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.trainer.ppo.dynamic_sampling import collect_filtered, sequence_values, varied_groups

N = 2  # responses per prompt


def _scored(prompt_ids, rewards):
    """A scored generation batch: prompt p's N rows (uid 'p<id>') with the given per-response rewards."""
    rows = [(p, r) for p, rs in zip(prompt_ids, rewards) for r in rs]
    scores = torch.zeros(len(rows), 3)
    scores[:, -1] = torch.tensor([r for _, r in rows], dtype=torch.float32)
    return DataProto.from_dict(
        {
            "token_level_scores": scores,
            "prompts": torch.ones(len(rows), 2, dtype=torch.long),
            "attention_mask": torch.ones(len(rows), 5, dtype=torch.long),
            "prompt_id": torch.tensor([p for p, _ in rows]),
        },
        non_tensors={"uid": np.array([f"p{p}" for p, _ in rows], dtype=object)},
    )


class FakeTrainer:
    """What collect_filtered uses, as the trainer's StepOps give it (``ops``: config, tokenizer, balance, step,
    next_batch counting the batches consumed), and ``_collect_batch``, passed as its `collect`."""

    def __init__(self, batches, train_batch_size=2, max_num_gen_batches=10):
        self.config = OmegaConf.create(
            {
                "data": {"train_batch_size": train_batch_size},
                "trainer": {"balance_batch": False},
                "algorithm": {
                    "filter_groups": {"enable": True, "metric": None, "max_num_gen_batches": max_num_gen_batches}
                },
            }
        )
        self.scored = {i: b for i, b in enumerate(batches)}
        self.global_steps, self.batches_consumed, self.collected = 1, 1, []
        self.tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=1)

    def _collect_batch(self, batch, n, metrics):
        index = int(batch.non_tensor_batch["index"][0])
        self.collected.append(index)
        return self.scored[index]

    def _balance_batch(self, batch, metrics):
        raise AssertionError("balance_batch is off")

    def ops(self, loader):
        def next_batch():
            batch_dict = next(loader, None)
            self.batches_consumed += batch_dict is not None
            return batch_dict

        return SimpleNamespace(
            config=self.config,
            tokenizer=self.tokenizer,
            balance=self._balance_batch,
            step=lambda: self.global_steps,
            next_batch=next_batch,
        )


def _loader(indices):
    return iter([{"index": np.array([i], dtype=object)} for i in indices])


def test_varied_groups_and_values():
    batch = _scored([0, 1, 2], [(1.0, 1.0), (0.0, 1.0), (0.5, 0.5)])
    assert sequence_values(batch, None).tolist() == [1.0, 1.0, 0.0, 1.0, 0.5, 0.5]
    assert varied_groups(batch.non_tensor_batch["uid"], sequence_values(batch, "score")) == ["p1"]
    # an invalid row does not count: p1's remaining valid row has nothing to differ from
    assert (
        varied_groups(
            batch.non_tensor_batch["uid"],
            sequence_values(batch, "score"),
            np.array([True, True, False, True, True, True]),
        )
        == []
    )
    with pytest.raises(ValueError, match="filter_groups.metric='acc'"):
        sequence_values(batch, "acc")
    with pytest.raises(KeyError, match="token_level_scores_format"):
        sequence_values(batch, "format")


def test_draws_more_batches_until_full_and_counts_them_consumed():
    first = _scored([0, 1], [(1, 1), (0, 1)])  # p1 kept
    second = _scored([2, 3], [(0, 0), (1, 1)])  # nothing kept
    third = _scored([4, 5], [(0, 1), (1, 0)])  # p4 kept (p5 too, but the batch is full)
    trainer = FakeTrainer([first, second, third])
    metrics = {}
    out = collect_filtered(trainer.ops(_loader([1, 2, 3])), first, N, metrics, trainer._collect_batch)
    assert trainer.collected == [1, 2] and trainer.batches_consumed == 3  # batches 1 and 2 drawn; 3 left unread
    assert out.non_tensor_batch["uid"].tolist() == ["p1", "p1", "p4", "p4"]
    assert out.batch["prompt_id"].tolist() == [1, 1, 4, 4] and out.meta_info["global_token_num"] == [5] * 4
    assert metrics == {
        "filter_groups/num_gen_batches": 3.0,
        "filter_groups/kept_group_frac": pytest.approx(3 / 6),
        "filter_groups/filled_groups": 0.0,
    }


def test_fills_with_the_latest_zero_variance_groups_when_data_or_bound_run_out(caplog):
    first = _scored([0, 1], [(1, 1), (0, 1)])
    second = _scored([2, 3], [(0, 0), (1, 1)])
    fake = FakeTrainer([first, second])
    out = collect_filtered(fake.ops(_loader([1])), first, N, metrics := {}, fake._collect_batch)
    assert out.non_tensor_batch["uid"].tolist() == ["p1", "p1", "p3", "p3"]  # p3: the most recent dropped group
    assert metrics["filter_groups/filled_groups"] == 1.0 and "the epoch's data ran out" in caplog.text
    trainer = FakeTrainer([first, second], max_num_gen_batches=1)
    out = collect_filtered(trainer.ops(_loader([1])), first, N, metrics := {}, trainer._collect_batch)
    assert trainer.collected == [] and out.non_tensor_batch["uid"].tolist() == ["p1", "p1", "p0", "p0"]
    assert metrics["filter_groups/num_gen_batches"] == 1.0 and "max_num_gen_batches=1" in caplog.text


def test_config_checks(tmp_path):
    from conftest import e2e_overrides
    from verl.trainer.config_utils import ConfigError, load_default_config, validate_config

    base = e2e_overrides(tmp_path, "unused") + ["algorithm.adv_estimator=grpo", "algorithm.filter_groups.enable=true"]
    validate_config(load_default_config(base), check_files=False)
    for extra, match in (
        (["algorithm.adv_estimator=gae"], "group-relative estimator"),
        (["actor_rollout_ref.rollout.n=1"], "rollout.n >= 2"),
        (["router.enable=true"], "router.enable"),
        (["algorithm.filter_groups.metric=acc"], "metric='acc'"),
        (["algorithm.filter_groups.max_num_gen_batches=-1"], "max_num_gen_batches=-1"),
    ):
        with pytest.raises(ConfigError, match=match):
            validate_config(load_default_config(base + extra), check_files=False)


def test_grpo_with_filter_groups_trains_and_counts_the_batches_it_drew(tmp_path, small_rlla):
    """Two GRPO steps of the tiny model with dynamic sampling (8 train rows = 4 batches of 2 prompts per epoch): every
    step logs the filter metrics, and the checkpoint's data position counts every generation batch drawn."""
    from conftest import e2e_overrides
    from verl.trainer.config_utils import load_default_config
    from verl.trainer.main_ppo import run_ppo

    config = load_default_config(
        e2e_overrides(tmp_path, small_rlla)
        + [
            "algorithm.adv_estimator=grpo",
            "algorithm.filter_groups.enable=true",
            "trainer.single_process=true",
            "trainer.test_freq=-1",
            "trainer.logger=[console,jsonl]",
            "actor_rollout_ref.rollout.n=4",
        ]
    )
    run_ppo(config)
    import json

    records = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "text" not in r and "filter_groups/num_gen_batches" in r]
    assert [r["step"] for r in records] == [1, 2]
    g1, g2 = (int(r["filter_groups/num_gen_batches"]) for r in records)
    for r in records:
        assert 0.0 <= r["filter_groups/kept_group_frac"] <= 1.0 and 0 <= r["filter_groups/filled_groups"] <= 2
        assert r["response_length/mean"] > 0  # a full batch was trained on
    sampler = torch.load(tmp_path / "ckpt" / "global_step_2" / "data.pt", weights_only=False)["sampler"]
    if g1 < 4:  # the epoch's data lasted past step 1: both steps drew from epoch 0
        assert (sampler["epoch"], sampler["batches_consumed"]) == (0, g1 + g2)
    else:  # step 1 used up epoch 0; step 2 drew from epoch 1
        assert (sampler["epoch"], sampler["batches_consumed"]) == (1, g2)
