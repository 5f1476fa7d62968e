"""FSDPSFTTrainer on the tiny preset with real RLLA rows: learning, loss normalisation, checkpoint round trip."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from verl.trainer.fsdp_sft_trainer import FSDPSFTTrainer, load_sft_config, run_sft
from verl.utils.dataset.sft_dataset import SFTDataset, sft_collate_fn


def _config(test_parquet, out_dir, *extra):
    return load_sft_config(
        [
            f"data.train_files={test_parquet}",
            f"data.val_files={test_parquet}",
            "data.max_length=256",
            "data.max_samples=8",
            "data.train_batch_size=4",
            "data.micro_batch_size_per_gpu=2",
            "optim.lr=1e-3",
            "optim.warmup_steps_ratio=0",
            "optim.lr_scheduler=constant",
            f"trainer.default_local_dir={out_dir}",
            "trainer.total_training_steps=6",
            *extra,
        ]
    )


@pytest.fixture()
def setup(shared_dir, tiny_model_dir, tokenizer, tmp_path):
    test_parquet = str(shared_dir / "data" / "rlla_4k" / "test.parquet")
    config = _config(test_parquet, tmp_path / "out")
    dataset = SFTDataset(test_parquet, tokenizer, config.data)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    trainer = FSDPSFTTrainer(config, model, tokenizer, dataset, dataset, torch.device("cpu"))
    return trainer, dataset, tmp_path


def _batch_loss(trainer, dataset, indices):
    batch = sft_collate_fn([dataset[i] for i in indices], trainer.pad_token_id)
    tokens = sum(int(dataset.response_lengths[i]) for i in indices)
    with torch.no_grad():
        return trainer._compute_loss_and_backward(batch, tokens, do_backward=False)


def test_loss_is_padding_and_micro_batch_invariant(setup):
    trainer, dataset, _ = setup
    rows = [0, 5, 6, 7]  # different lengths: left padding inside the micro batch
    # token-mean over the whole step == weighted mean of per-row token means
    per_row = [_batch_loss(trainer, dataset, [i]) for i in rows]
    weights = [int(dataset.response_lengths[i]) for i in rows]
    expected = sum(p * w for p, w in zip(per_row, weights)) / sum(weights)
    assert _batch_loss(trainer, dataset, rows) == pytest.approx(expected, rel=1e-5)
    # gradient accumulation over 2 micro batches gives the same loss and gradient as one batch
    state = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    one = trainer.training_step([rows])
    trainer.model.load_state_dict(state)
    trainer.optimizer = torch.optim.AdamW(trainer.model.parameters(), lr=1e-3)
    two = trainer.training_step([rows[:2], rows[2:]])
    assert one["train/loss"] == pytest.approx(expected, rel=1e-5)
    assert two["train/loss"] == pytest.approx(one["train/loss"], rel=1e-5)
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-4)
    assert one["train/response_tokens"] == sum(weights)


def test_sft_steps_reduce_the_loss_on_the_same_batch(setup):
    trainer, dataset, _ = setup
    rows = [0, 1, 2, 3]
    before = _batch_loss(trainer, dataset, rows)
    losses = [trainer.training_step([rows[:2], rows[2:]])["train/loss"] for _ in range(6)]
    after = _batch_loss(trainer, dataset, rows)
    assert losses[0] == pytest.approx(before, rel=1e-5)
    assert after < before - 1.0, (before, losses, after)


def test_saved_checkpoint_reloads_with_the_same_logits(setup, tokenizer):
    trainer, dataset, tmp_path = setup
    trainer.training_step([[0, 1], [2, 3]])
    trainer.save_checkpoint(tmp_path / "ckpt")
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ckpt"), dtype=torch.float32)
    ids = dataset[4]["input_ids"][None]
    trainer.model.eval()
    with torch.no_grad():
        expected, got = trainer.model(input_ids=ids).logits, reloaded(input_ids=ids).logits
    assert torch.allclose(expected, got, atol=1e-5)
    assert not torch.allclose(
        expected,
        AutoModelForCausalLM.from_pretrained(trainer.tokenizer.name_or_path, dtype=torch.float32)(input_ids=ids).logits,
        atol=1e-3,
    )
    assert (tmp_path / "ckpt" / "tokenizer.json").is_file()


def test_run_sft_publishes_checkpoint_and_metrics(shared_dir, tiny_model_dir, tmp_path):
    test_parquet = str(shared_dir / "data" / "rlla_4k" / "test.parquet")
    out = tmp_path / "sft"
    config = _config(test_parquet, out, "trainer.total_training_steps=2", "trainer.logger=[]")
    assert run_sft(config) == out.resolve()
    assert (out / "config.json").is_file() and (out / "model.safetensors").is_file()
    assert (out / "sft_config.yaml").is_file() and not (tmp_path / ".sft.partial").exists()
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if "train/loss" in r]
    val = [r for r in records if "val/loss" in r]
    assert [r["step"] for r in train] == [1, 2]
    assert [r["step"] for r in val] == [0, 2] and val[1]["val/loss"] < val[0]["val/loss"]
    AutoModelForCausalLM.from_pretrained(str(out))
    with pytest.raises(FileExistsError, match="trainer.overwrite=true"):
        run_sft(config)


def _sft_bf16_rank(rank, config_args, out_file):
    import torch.distributed as dist

    from verl.utils import model_utils

    torch.set_num_threads(1)
    wrapped = []
    shard = model_utils.apply_fsdp2

    def recording(model, device, fsdp_config=None, mp_policy=None):  # what run_sft wraps the model with
        wrapped.append((dist.get_world_size(), mp_policy.param_dtype if mp_policy else None))
        return shard(model, device, fsdp_config, mp_policy)

    model_utils.apply_fsdp2 = recording
    run_sft(load_sft_config(config_args))  # makes its own one-rank process group for the bf16 policy
    torch.save({"wrapped": wrapped}, out_file)


@pytest.mark.timeout(600)
def test_run_sft_bf16_trains_through_the_fsdp2_policy(shared_dir, tiny_model_dir, tmp_path):
    """``model.fsdp_config.mixed_precision=bf16`` on one CPU process: FSDP2's policy (float32 master weights) instead
    of autocast; the published checkpoint is a plain float32 model whose validation loss fell, as the float32 run's."""
    import torch.multiprocessing as mp

    test_parquet = str(shared_dir / "data" / "rlla_4k" / "test.parquet")
    runs = {}
    for precision in ("bf16", "fp32"):
        out = tmp_path / precision
        args = [
            f"data.train_files={test_parquet}",
            f"data.val_files={test_parquet}",
            "data.max_length=256",
            "data.max_samples=8",
            "data.train_batch_size=4",
            "data.micro_batch_size_per_gpu=2",
            "optim.lr=1e-3",
            "optim.warmup_steps_ratio=0",
            "optim.lr_scheduler=constant",
            f"trainer.default_local_dir={out}",
            "trainer.total_training_steps=2",
            "trainer.logger=[]",
            f"model.fsdp_config.mixed_precision={precision}",
        ]
        mp.spawn(_sft_bf16_rank, args=(args, str(tmp_path / f"{precision}.pt")), nprocs=1, join=True)
        records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        runs[precision] = [r["val/loss"] for r in records if "val/loss" in r]
        model = AutoModelForCausalLM.from_pretrained(str(out))
        assert {p.dtype for p in model.parameters()} == {torch.float32}
        assert torch.load(tmp_path / f"{precision}.pt")["wrapped"] == (
            [(1, torch.bfloat16)] if precision == "bf16" else []
        )
    assert runs["bf16"][1] < runs["bf16"][0]
    # bf16 compute: the same losses to bf16's precision (float32 runs no policy and no process group)
    assert runs["bf16"] == pytest.approx(runs["fp32"], rel=2e-2)
    assert runs["bf16"] != runs["fp32"]
