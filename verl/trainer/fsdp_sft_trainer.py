"""Supervised fine-tuning (the SFT warm start before RL): ``python -m verl.trainer.fsdp_sft_trainer key=value ...``.

verl's ``fsdp_sft_trainer`` rebuilt small: one code path for a single CPU process (plain PyTorch) and for
``torchrun --nproc_per_node=N`` (FSDP2 ``fully_shard`` on every decoder layer and the root; gloo on CPU, NCCL on GPU).
``model.fsdp_config.mixed_precision`` (``bf16`` | ``fp32`` | null: bf16 on CUDA, fp32 on CPU): bf16 goes through FSDP2's
``MixedPrecisionPolicy`` (float32 master weights, bf16 compute, float32 gradient reduction; one GPU too, see
``verl/utils/mixed_precision.py``).
Config: ``verl/trainer/config/sft_trainer.yaml`` (verl's key names).

What a step does:

- Rows of the epoch are shuffled with ``(trainer.seed, epoch)`` (:class:`~verl.utils.dataset.sampler.EpochSeededSampler`)
  and cut into optimizer steps of ``data.train_batch_size`` rows (the incomplete tail is dropped, as upstream). With
  several ranks each step's rows are split into token-balanced equal-size parts (Karmarkar-Karp).
- Each rank sorts its rows by length and cuts them into micro batches of ``data.micro_batch_size_per_gpu``, so a micro
  batch holds sequences of similar length (little padding; prompts are 400-2,250 tokens). Micro batches are
  left-padded (:func:`~verl.utils.dataset.sft_dataset.sft_collate_fn`), so responses end at the last position and the
  model computes logits for the last ``max(response length) + 1`` positions only (``logits_to_keep``).
- Loss: mean token cross-entropy over every response token (+ EOS) of the whole optimizer step, all ranks together
  (the sum over micro batches is divided by the global response-token count, not averaged per micro batch).
- AdamW, gradient-norm clipping (a non-finite norm skips the update with a warning), linear warmup then cosine or
  constant learning rate.

Outputs, all in ``trainer.default_local_dir`` (built in ``.<name>.partial`` beside it and renamed into place when
training ends, so a crash never leaves a half-written model that ``prepare_model`` would load):
``config.json`` + ``model.safetensors`` + tokenizer files (``AutoModelForCausalLM.from_pretrained`` loads it),
``metrics.jsonl`` (``train/loss`` per step, ``val/loss`` per epoch; :class:`~verl.utils.tracking.Tracking`) and
``sft_config.yaml`` (the resolved config).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
import time
from pathlib import Path
from typing import Any

import hydra
import torch
import torch.distributed as dist
import torch.nn.functional as F
from omegaconf import DictConfig, OmegaConf

from verl.utils.dataset.sampler import EpochSeededSampler
from verl.utils.dataset.sft_dataset import SFTDataset, sft_collate_fn
from verl.utils.model_utils import is_dtensor, wrap_with_fsdp2
from verl.utils.seqlen_balancing import get_seqlen_balanced_partitions
from verl.utils.tracking import StepProgress, Tracking

logger = logging.getLogger(__name__)

CONFIG_DIR = Path(__file__).parent / "config"
LR_SCHEDULERS = ("cosine", "constant")


def load_sft_config(overrides: list[str] | None = None) -> DictConfig:
    """Compose ``sft_trainer.yaml`` with Hydra ``key=value`` overrides (for tests and scripts).

    Raises:
        hydra.errors.ConfigCompositionException: an override names a key that does not exist.
    """
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        return typed_sft_config(compose(config_name="sft_trainer", overrides=list(overrides or [])))


def typed_sft_config(config: DictConfig) -> DictConfig:
    """``sft_trainer.yaml`` with the types of ``config_schema.SFTConfig`` (a value of the wrong type is a
    ``ConfigError`` naming its key and type)."""
    from verl.trainer.config_schema import SFTConfig
    from verl.trainer.config_utils import typed_as

    return typed_as(config, SFTConfig, "sft_trainer.yaml")


def resolve_sft_files(files: Any, split: str) -> list[str]:
    """Parquet paths for ``data.train_files`` / ``data.val_files``.

    ``None`` means the RLLA split ``{split}.parquet`` found by ``verl.utils.dataset.rlla_data.resolve_rlla_file``
    (built from the shared reference folder, ``$TOOLRL_SHARED`` or the folder ``shared`` beside the checkout, when
    missing); an empty list means none (no validation).

    Raises:
        FileNotFoundError: a named file (or the default split) does not exist.
    """
    if files is None:
        from verl.utils.dataset.rlla_data import resolve_rlla_file

        paths = [str(resolve_rlla_file(split))]
    elif isinstance(files, str):
        paths = [files]
    else:
        paths = [str(f) for f in files]
    for path in paths:
        if not Path(path).expanduser().is_file():
            raise FileNotFoundError(f"data.{'train' if split == 'train' else 'val'}_files: {path} does not exist")
    return [str(Path(p).expanduser()) for p in paths]


def build_lr_lambda(total_steps: int, warmup_steps: int, style: str, min_lr_ratio: float = 0.0):
    """LR multiplier for ``torch.optim.lr_scheduler.LambdaLR``: linear warmup ``(s+1)/warmup``, then constant or
    cosine from 1 down to ``min_lr_ratio`` at ``total_steps``.

    Raises:
        ValueError: unknown ``style`` (``optim.lr_scheduler``).
    """
    if style not in LR_SCHEDULERS:
        raise ValueError(f"optim.lr_scheduler={style!r}; expected one of {LR_SCHEDULERS}")

    def lr_lambda(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if style == "constant":
            return 1.0
        progress = min(1.0, (step - warmup_steps) / max(1, total_steps - warmup_steps))
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return lr_lambda


def plan_epoch(
    lengths, train_batch_size: int, micro_batch_size: int, seed: int, epoch: int, rank: int = 0, world_size: int = 1
) -> list[list[list[int]]]:
    """This rank's work for one epoch: per optimizer step, a list of micro batches (lists of dataset indices).

    Rows are shuffled by ``(seed, epoch)``, cut into steps of ``train_batch_size`` rows (tail dropped), split across
    ranks into token-balanced equal-size parts, sorted longest first and chunked into micro batches.

    Raises:
        ValueError: fewer rows than one batch, or ``train_batch_size`` not divisible by ``world_size``.
    """
    n = len(lengths)
    if n < train_batch_size:
        raise ValueError(f"data.train_batch_size={train_batch_size} exceeds the {n} training rows")
    if train_batch_size % world_size:
        raise ValueError(f"data.train_batch_size={train_batch_size} must be divisible by the world size {world_size}")
    order = EpochSeededSampler(n, seed=seed).order(epoch)
    plan = []
    for s in range(n // train_batch_size):
        rows = order[s * train_batch_size : (s + 1) * train_batch_size]
        if world_size > 1:
            parts = get_seqlen_balanced_partitions([int(lengths[i]) for i in rows], world_size, equal_size=True)
            rows = [rows[j] for j in parts[rank]]
        rows = sorted(rows, key=lambda i: -int(lengths[i]))
        plan.append([rows[k : k + micro_batch_size] for k in range(0, len(rows), micro_batch_size)])
    return plan


def _all_reduce_sum(value: float, device: torch.device) -> float:
    if not (dist.is_available() and dist.is_initialized()):
        return float(value)
    tensor = torch.tensor([float(value)], dtype=torch.float64, device=device)
    dist.all_reduce(tensor)
    return float(tensor.item())


class FSDPSFTTrainer:
    """Response-only SFT of a causal LM (see the module docstring for the step).

    Args:
        config: the composed ``sft_trainer.yaml``.
        model: an HF causal LM already on ``device`` (already ``fully_shard``-ed when ``world_size > 1`` or under a
            mixed-precision policy: :func:`run_sft`).
        tokenizer: its tokenizer (saved with the checkpoint; ``pad_token_id`` or else ``eos_token_id`` pads).
        train_dataset, val_dataset: :class:`SFTDataset` (``val_dataset`` may be None).
        device: where micro batches go.
        rank, world_size: this process in the default process group (0, 1 without ``torch.distributed``).
    """

    def __init__(
        self,
        config: DictConfig,
        model,
        tokenizer,
        train_dataset: SFTDataset,
        val_dataset: SFTDataset | None,
        device: torch.device,
        rank: int = 0,
        world_size: int = 1,
    ):
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        self.train_dataset = train_dataset
        self.val_dataset = val_dataset
        self.device = device
        self.rank = rank
        self.world_size = world_size
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

        data = config.data
        self.train_batch_size = int(data.train_batch_size)
        self.micro_batch_size = int(data.micro_batch_size_per_gpu)
        if self.micro_batch_size < 1:
            raise ValueError(f"data.micro_batch_size_per_gpu={self.micro_batch_size} must be >= 1")
        steps_per_epoch = len(train_dataset) // self.train_batch_size
        if steps_per_epoch == 0:
            raise ValueError(
                f"data.train_batch_size={self.train_batch_size} exceeds the {len(train_dataset)} "
                f"training rows of {train_dataset.parquet_files}"
            )
        self.steps_per_epoch = steps_per_epoch
        if config.trainer.total_training_steps:
            self.total_training_steps = int(config.trainer.total_training_steps)
            self.total_epochs = math.ceil(self.total_training_steps / steps_per_epoch)
        else:
            self.total_epochs = int(config.trainer.total_epochs)
            self.total_training_steps = self.total_epochs * steps_per_epoch

        optim = config.optim
        self.optimizer = torch.optim.AdamW(
            model.parameters(), lr=float(optim.lr), betas=tuple(optim.betas), weight_decay=float(optim.weight_decay)
        )
        warmup = int(float(optim.warmup_steps_ratio) * self.total_training_steps)
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            build_lr_lambda(self.total_training_steps, warmup, str(optim.lr_scheduler), float(optim.min_lr_ratio)),
        )

    # ------------------------------------------------------------------ steps
    def _collate(self, dataset: SFTDataset, indices: list[int]) -> dict[str, torch.Tensor]:
        batch = sft_collate_fn([dataset[i] for i in indices], self.pad_token_id)
        return {k: v.to(self.device) for k, v in batch.items()}

    def _compute_loss_and_backward(
        self, batch: dict[str, torch.Tensor], denom: float, do_backward: bool = True, scale: float = 1.0
    ) -> float:
        """Summed response-token cross-entropy of one left-padded micro batch divided by ``denom``.

        Args:
            batch: ``(B, L)`` long tensors from :func:`sft_collate_fn` (responses end at position ``L-1``).
            denom: the token count the sum is normalised by (the step's global response tokens; 1 for a raw sum).
            do_backward: backpropagate ``scale * loss`` (``scale`` = world size undoes FSDP's gradient averaging).

        Returns:
            The detached loss as a float.
        """
        input_ids, loss_mask = batch["input_ids"], batch["loss_mask"]
        length = input_ids.shape[1]
        keep = int(loss_mask.sum(dim=-1).max().item()) + 1  # the last `keep` logits predict every response token
        output = self.model(
            input_ids=input_ids,
            attention_mask=batch["attention_mask"],
            position_ids=batch["position_ids"],
            use_cache=False,
            logits_to_keep=keep,
        )
        logits = output.logits[:, :-1].float()  # (B, keep-1, V)
        targets = input_ids[:, length - keep + 1 :]
        mask = loss_mask[:, length - keep + 1 :].to(logits.dtype)
        token_ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
        loss = (token_ce.view_as(mask) * mask).sum() / denom
        if do_backward:
            (loss * scale).backward()
        return float(loss.detach().item())

    def training_step(self, micro_batches: list[list[int]]) -> dict[str, float]:
        """One optimizer step over this rank's micro batches (lists of train-dataset indices).

        Returns:
            ``train/loss`` (token-mean CE over all ranks), ``train/lr``, ``train/grad_norm``,
            ``train/response_tokens``, ``train/tokens`` (incl. prompts, without padding).
        """
        self.model.train()
        resp_len = self.train_dataset.response_lengths
        local_tokens = sum(int(resp_len[i]) for mb in micro_batches for i in mb)
        global_tokens = _all_reduce_sum(local_tokens, self.device)
        if global_tokens == 0:
            raise ValueError("a training step holds no response tokens (every response truncated away?)")
        self.optimizer.zero_grad(set_to_none=True)
        loss = 0.0
        for mb in micro_batches:
            loss += self._compute_loss_and_backward(
                self._collate(self.train_dataset, mb), global_tokens, scale=float(self.world_size)
            )
        grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), float(self.config.optim.clip_grad))
        if hasattr(grad_norm, "full_tensor"):  # DTensor under FSDP2
            grad_norm = grad_norm.full_tensor()
        grad_norm = float(grad_norm)
        lr = self.lr_scheduler.get_last_lr()[0]
        if math.isfinite(grad_norm):
            self.optimizer.step()
        else:
            logger.warning("non-finite grad norm %s: update skipped", grad_norm)
        self.lr_scheduler.step()
        tokens = _all_reduce_sum(
            sum(int(self.train_dataset.lengths[i]) for mb in micro_batches for i in mb), self.device
        )
        return {
            "train/loss": _all_reduce_sum(loss, self.device),
            "train/lr": lr,
            "train/grad_norm": grad_norm,
            "train/response_tokens": global_tokens,
            "train/tokens": tokens,
        }

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """``val/loss``: token-mean response cross-entropy over the whole validation set (all ranks)."""
        self.model.eval()
        dataset = self.val_dataset
        rows = sorted(range(self.rank, len(dataset), self.world_size), key=lambda i: -int(dataset.lengths[i]))
        micro = [(rows[k : k + self.micro_batch_size], 1.0) for k in range(0, len(rows), self.micro_batch_size)]
        # FSDP forwards are collective: every rank runs the same number, padding with weight-0 dummies.
        per_rank = math.ceil(math.ceil(len(dataset) / self.world_size) / self.micro_batch_size)
        micro += [([0], 0.0)] * (per_rank - len(micro))
        loss_sum = sum(
            weight * self._compute_loss_and_backward(self._collate(dataset, mb), 1.0, do_backward=False)
            for mb, weight in micro
        )
        tokens = sum(int(dataset.response_lengths[i]) for i in rows)
        return {"val/loss": _all_reduce_sum(loss_sum, self.device) / max(_all_reduce_sum(tokens, self.device), 1)}

    # ------------------------------------------------------------------ output
    def save_checkpoint(self, path: str | os.PathLike) -> None:
        """HF ``save_pretrained`` (safetensors) + tokenizer into ``path``; the full float32 state dict is gathered
        from the FSDP2 shards when sharded, and only rank 0 writes."""
        state_dict = None
        if any(is_dtensor(p) for p in self.model.parameters()):  # FSDP2 (several ranks, or one under bf16)
            from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

            state_dict = get_model_state_dict(
                self.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
            )
            for tied in getattr(self.model, "all_tied_weights_keys", None) or {}:  # gathered as separate copies
                state_dict.pop(tied, None)
        if self.rank == 0:
            self.model.save_pretrained(str(path), state_dict=state_dict, safe_serialization=True)
            self.tokenizer.save_pretrained(str(path))

    def fit(self, tracking: Tracking | None = None) -> list[dict]:
        """Train for ``total_training_steps`` steps, validating before (``trainer.val_before_train``) and after every
        epoch. Returns every logged metrics dict (with its ``step``)."""
        history: list[dict] = []

        def log(metrics: dict, step: int) -> None:
            history.append({"step": step, **metrics})
            if tracking is not None:
                tracking.log(metrics, step=step)

        seed = int(self.config.trainer.seed)
        if self.val_dataset is not None and self.config.trainer.val_before_train:
            log(self.validate(), step=0)
        progress = StepProgress(total=self.total_training_steps, desc="sft") if self.rank == 0 else None
        step = 0
        for epoch in range(self.total_epochs):
            plan = plan_epoch(
                self.train_dataset.lengths,
                self.train_batch_size,
                self.micro_batch_size,
                seed,
                epoch,
                self.rank,
                self.world_size,
            )
            for micro_batches in plan:
                if step >= self.total_training_steps:
                    break
                start = time.monotonic()
                metrics = self.training_step(micro_batches)
                step += 1
                elapsed = time.monotonic() - start
                metrics.update(
                    {
                        "train/epoch": epoch,
                        "timing_s/step": elapsed,
                        "perf/tokens_per_s": metrics["train/tokens"] / max(elapsed, 1e-9),
                    }
                )
                log(metrics, step=step)
                if progress is not None:
                    progress.update(metrics)
            if self.val_dataset is not None:
                val = self.validate()
                log({**val, "train/epoch": epoch}, step=step)
                logger.info(
                    "epoch %d/%d done at step %d: val/loss=%.4f", epoch + 1, self.total_epochs, step, val["val/loss"]
                )
        if progress is not None:
            progress.close()
        return history


def _init_distributed(config: DictConfig) -> tuple[torch.device, int, int]:
    """Device, rank and world size; starts the default process group under ``torchrun`` (``WORLD_SIZE > 1``)."""
    name = config.trainer.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1 and not dist.is_initialized():
        if device.type == "cuda":
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
            torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    return device, rank, world_size


def _publish(work: Path, target: Path) -> None:
    """Rename the finished ``work`` directory to ``target``, replacing an existing ``target``."""
    old = target.parent / f".{target.name}.old"
    if target.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(target, old)
    os.replace(work, target)
    shutil.rmtree(old, ignore_errors=True)


def run_sft(config: DictConfig) -> Path:
    """Build datasets, model and trainer from ``config``, train, and publish the HF checkpoint.

    Returns:
        ``trainer.default_local_dir`` (absolute) holding the checkpoint, ``metrics.jsonl`` and ``sft_config.yaml``.

    Raises:
        FileExistsError: ``default_local_dir`` already holds files and ``trainer.overwrite`` is false (checked
            before training starts).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.utils.model_presets import prepare_model

    config = typed_sft_config(config)
    target = Path(str(config.trainer.default_local_dir)).expanduser().resolve()
    if target.exists() and any(target.iterdir()) and not config.trainer.overwrite:
        raise FileExistsError(
            f"trainer.default_local_dir={target} is not empty; pass trainer.overwrite=true to replace it"
        )
    device, rank, world_size = _init_distributed(config)
    torch.manual_seed(int(config.trainer.seed))

    model_path = prepare_model(str(config.model.partial_pretrain))
    trust = bool(config.model.trust_remote_code)
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust)
    train_dataset = SFTDataset(resolve_sft_files(config.data.train_files, "train"), tokenizer, config.data)
    val_files = resolve_sft_files(config.data.val_files, "test")
    val_dataset = SFTDataset(val_files, tokenizer, config.data) if val_files else None
    logger.info(
        "SFT data: %d train rows (mean %.0f tokens, %.0f response tokens), %s val rows",
        len(train_dataset),
        train_dataset.lengths.mean(),
        train_dataset.response_lengths.mean(),
        len(val_dataset) if val_dataset is not None else "no",
    )

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32, trust_remote_code=trust)
    if config.model.enable_gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.to(device)
    # FSDP2: the shards, and/or bf16 compute over float32 master weights
    wrap_with_fsdp2(
        model, device.type, world_size, config.model.fsdp_config.mixed_precision, "model.fsdp_config.mixed_precision"
    )
    trainer = FSDPSFTTrainer(config, model, tokenizer, train_dataset, val_dataset, device, rank, world_size)

    work = target.parent / f".{target.name}.partial"
    tracking = None
    if rank == 0:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        OmegaConf.save(config, work / "sft_config.yaml", resolve=True)
        tracking = Tracking(
            str(config.trainer.project_name),
            str(config.trainer.experiment_name),
            list(config.trainer.logger),
            OmegaConf.to_container(config, resolve=True),
            run_dir=work,
        )
        logger.info(
            "SFT of %s on %s: %d epochs, %d steps of %d rows on %s x%d; metrics in %s",
            model_path,
            train_dataset.parquet_files,
            trainer.total_epochs,
            trainer.total_training_steps,
            trainer.train_batch_size,
            device,
            world_size,
            tracking.jsonl_path,
        )
    start = time.monotonic()
    history = trainer.fit(tracking)
    trainer.save_checkpoint(work)
    if rank == 0:
        tracking.finish()
        _publish(work, target)
        losses = [h["train/loss"] for h in history if "train/loss" in h]
        vals = [h["val/loss"] for h in history if "val/loss" in h]
        logger.info(
            "SFT done in %.0f s: train/loss first %.4f last %.4f min %.4f; val/loss %s; checkpoint %s",
            time.monotonic() - start,
            losses[0],
            losses[-1],
            min(losses),
            " -> ".join(f"{v:.4f}" for v in vals) or "n/a",
            target,
        )
    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
    return target


@hydra.main(config_path="config", config_name="sft_trainer", version_base=None)
def main(config: DictConfig) -> None:
    """Hydra entry point: ``python -m verl.trainer.fsdp_sft_trainer data.train_files=... trainer.total_epochs=2``."""
    run_sft(config)


if __name__ == "__main__":
    main()
