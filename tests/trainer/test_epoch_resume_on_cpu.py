"""Resume at an epoch boundary (and mid-epoch) neither repeats nor skips data: the real ``RayPPOTrainer.fit`` loop,
sampler, ``data.pt`` and manifest, with the model step replaced by a recorder (no workers, well under a second).

5 rows, 2 per batch, ``drop_last``: 2 steps per epoch and one row left out of each epoch (the edge a naive
"skip ``consumed × batch`` rows" resume gets wrong at the boundary). Straight: 6 steps over 3 epochs. Interrupted:
stop after step 2 (the end of epoch 0), resume to step 5 (mid-epoch 2), resume to 6. The (step, epoch, rows) sequence
must be the same."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from verl.trainer.config_utils import load_default_config
from verl.trainer.ppo.ray_resources import Role
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import checkpoint_manifest as cm


class _FakeActorGroup:
    """Stands in for the actor worker group: writes one file per checkpoint, loads nothing."""

    world_size = 1

    def save_checkpoint(self, local_path: str, global_step: int = 0) -> None:
        os.makedirs(local_path, exist_ok=True)
        Path(local_path, "model_world_size_1_rank_0.pt").write_text(str(global_step))

    def load_checkpoint(self, local_path: str) -> None:
        assert Path(local_path, "model_world_size_1_rank_0.pt").is_file()


def _run(ckpt: Path, steps: int | None, save_freq: int, states: list | None = None) -> list[tuple[int, int, list[int]]]:
    config = load_default_config(
        [
            "data.train_batch_size=2",
            "data.seed=7",
            "trainer.total_epochs=3",
            f"trainer.total_training_steps={steps or 'null'}",
            f"trainer.save_freq={save_freq}",
            "trainer.test_freq=-1",
            "trainer.val_before_train=False",
            "trainer.logger=[console]",
            f"trainer.default_local_dir={ckpt}",
            f"trainer.run_dir={ckpt}/run",
            "trainer.n_gpus_per_node=0",
        ]
    )
    trainer = RayPPOTrainer(
        config,
        tokenizer=None,
        role_worker_mapping={Role.ActorRolloutRef: object},
        resource_pool_manager=None,
        train_dataset=list(range(5)),
        val_dataset=[0],
        collate_fn=lambda rows: {"rows": list(rows)},
    )
    trainer.actor_rollout_wg, trainer.n_workers = _FakeActorGroup(), 1
    seen = []
    trainer._train_step = lambda batch, n: seen.append((trainer.global_steps, trainer.epoch, batch["rows"])) or {}
    trainer.fit()
    if states is not None:
        states.append(trainer.state)
    return seen


def test_resume_at_epoch_boundary_and_mid_epoch_replays_nothing(tmp_path):
    straight = _run(tmp_path / "a", steps=None, save_freq=-1)
    assert [(s, e) for s, e, _ in straight] == [(1, 0), (2, 0), (3, 1), (4, 1), (5, 2), (6, 2)]
    for epoch in range(3):  # each epoch: 4 distinct rows of the 5
        rows = [r for _, e, batch in straight if e == epoch for r in batch]
        assert len(set(rows)) == 4
    assert [r for _, e, b in straight if e == 0 for r in b] != [r for _, e, b in straight if e == 1 for r in b]

    first = _run(tmp_path / "b", steps=2, save_freq=1)
    boundary = cm.verify_checkpoint(tmp_path / "b" / "global_step_2")
    assert boundary["epoch"] == 0
    sampler = torch.load(tmp_path / "b" / "global_step_2" / "data.pt", weights_only=False)["sampler"]
    assert (sampler["epoch"], sampler["batches_consumed"]) == (0, 2)  # saved at the end of epoch 0
    states = []
    second = _run(tmp_path / "b", steps=5, save_freq=1, states=states)  # resumes at the boundary: epoch 1, not 0/2
    assert second[0][:2] == (3, 1)
    # the run's counters in one object: what it resumed from, the checkpoints' run id, where it ended
    run = states[0]
    assert run.resumed_from == str(tmp_path / "b" / "global_step_2")
    assert run.run_id == boundary["run_id"] and (run.global_steps, run.epoch, run.saved_step) == (5, 2, 5)
    third = _run(tmp_path / "b", steps=6, save_freq=1)  # resumes mid-epoch 2
    assert third == straight[5:]
    assert first + second + third == straight
    metrics = [json.loads(line) for line in (tmp_path / "b" / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [m["training/epoch"] for m in metrics if "training/epoch" in m] == [0, 0, 1, 1, 2, 2]


def test_only_damaged_checkpoints_stop_the_run_instead_of_a_silent_fresh_start(tmp_path):
    _run(tmp_path / "c", steps=2, save_freq=1)
    for step in (1, 2):
        data = tmp_path / "c" / f"global_step_{step}" / "data.pt"
        data.write_bytes(data.read_bytes()[:10])  # truncated
    with pytest.raises(cm.CheckpointError) as err:
        _run(tmp_path / "c", steps=3, save_freq=1)
    message = str(err.value)
    assert "global_step_2: " in message and "global_step_1: " in message and "data.pt" in message
    assert "trainer.resume_mode=disable" in message
    assert (tmp_path / "c" / "global_step_2" / "actor" / "model_world_size_1_rank_0.pt").read_text() == "2"  # intact
    # one valid checkpoint among damaged ones: resumed from it, as before
    _run(tmp_path / "d", steps=2, save_freq=1)
    data = tmp_path / "d" / "global_step_2" / "data.pt"
    data.write_bytes(data.read_bytes()[:10])
    assert _run(tmp_path / "d", steps=3, save_freq=1)[0][0] == 2  # redoes step 2 from global_step_1


@pytest.mark.parametrize("consumed, epoch_after", [(2, 1), (1, 0)])
def test_sampler_state_positions(consumed, epoch_after):
    """The sampler alone: after loading ``batches_consumed`` of epoch 0 it yields exactly the rest of that epoch."""
    from verl.utils.dataset.sampler import EpochSeededSampler

    sampler = EpochSeededSampler(5, seed=7, batch_size=2)
    resumed = EpochSeededSampler(5, seed=7, batch_size=2)
    resumed.load_state_dict(sampler.state_dict(consumed))
    rest = list(resumed)
    assert rest == sampler.order(0)[consumed * 2 :]
    assert (len(rest) // 2 == 0) == (epoch_after == 1)  # a full epoch consumed leaves no whole batch
