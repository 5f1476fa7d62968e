"""Validation of :class:`~verl.trainer.ppo.ray_trainer.RayPPOTrainer`: greedy rollouts over the validation set, scored
by the validation reward manager, means per data source (upstream's ``val/test_score/<source>``), and sample
generations for the tracker."""

from __future__ import annotations

import logging
import time
import uuid

import numpy as np
import torch

from verl.protocol import DataProto
from verl.trainer.ppo.metric_utils import REWARD_COMPONENTS, process_validation_metrics, validation_metric_names
from verl.trainer.ppo.rollout_dump import dump_rollouts

logger = logging.getLogger(__name__)


def validate(trainer) -> dict:
    """Rollout with ``rollout.val_kwargs`` (greedy by default) over the whole validation set; per-source mean
    scores. ``val_kwargs.n > 1`` samples that many responses per prompt (rows repeated, interleaved, as upstream)
    and the means are over all of them; samples the reward could not score (``reward_valid`` false) are left out of
    the means and counted in ``val/reward_invalid_count``."""
    metrics: dict = {}
    if trainer.agent is not None:  # multi-turn: greedy episodes on the validation tasks
        seeds = np.concatenate([b["task_seed"] for b in trainer.val_dataloader])
        return trainer.agent.validate(
            seeds, lambda gen: trainer._rollout(gen, do_sample=False, validate=True), step=trainer.global_steps
        )
    val_n = int(trainer.config.actor_rollout_ref.rollout.val_kwargs.n)  # >= 1 (config check)
    for batch_dict in trainer.val_dataloader:
        batch = DataProto.from_single_dict(batch_dict)
        start = time.perf_counter()  # one generate call over the whole set: a line before and after it
        logger.info(
            "validation at step %d: %d prompts x %d response(s), up to %d tokens each",
            trainer.global_steps,
            len(batch),
            val_n,
            int(trainer.config.data.max_response_length),
        )
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)
        if trainer.router is not None:  # router logits once per prompt, then the val_n-fold repeat (as in training)
            batch = trainer.router.expand(batch, val_n, validate=True, worker_group=trainer.actor_rollout_wg)
        elif val_n > 1:
            batch = batch.repeat(repeat_times=val_n, interleave=True)
        batch = trainer._generate(batch, validate=True)
        for key, value in batch.meta_info.pop("rollout_metrics", {}).items():  # multi-turn: val/tool_loop/*, val/tool/*
            metrics[f"val/{key}"] = value
        trainer._score(batch, trainer.val_reward_fn, trainer.global_steps)
        if trainer.config.trainer.validation_data_dir:  # verl's key: this validation's responses as <dir>/<step>.jsonl
            dump_rollouts(batch, trainer.tokenizer, trainer.global_steps, trainer.config.trainer.validation_data_dir)
        if trainer.router is not None:
            metrics.update(trainer.router.score(batch, trainer.global_steps, validate=True))
        sources = batch.non_tensor_batch.get("data_source", np.array(["unknown"] * len(batch), dtype=object))
        scores = {"score": batch.batch["token_level_scores"].sum(-1)}
        for name in REWARD_COMPONENTS:
            if f"token_level_scores_{name}" in batch.batch.keys():
                scores[name] = batch.batch[f"token_level_scores_{name}"].sum(-1)
        valid = batch.non_tensor_batch.get("reward_valid", np.ones(len(batch), dtype=bool)).astype(bool)
        for source in sorted(set(sources.tolist())):  # means over the samples the reward could score
            rows = torch.tensor([s == source and v for s, v in zip(sources.tolist(), valid.tolist())])
            if not bool(rows.any()):
                continue
            for name, values in scores.items():
                metrics[f"val/test_{name}/{source}"] = values[rows].float().mean().item()
        metrics.update(_over_samples(trainer, batch, sources, scores["score"]))
        metrics["val/response_length/mean"] = batch.batch["response_mask"].sum(-1).float().mean().item()
        if "reward_valid" in batch.non_tensor_batch:
            metrics["val/reward_invalid_count"] = float((~batch.non_tensor_batch["reward_valid"]).sum())
        log_generations(trainer, batch, scores["score"])
        logger.info(
            "validation at step %d done in %.1f s: score %.3f",
            trainer.global_steps,
            time.perf_counter() - start,
            float(scores["score"][torch.as_tensor(valid)].float().mean()) if valid.any() else float("nan"),
        )
    return metrics


# bookkeeping of the reward manager, not a quantity to average over samples
_NOT_VARIABLES = ("reward_valid", "reward_error")


def _over_samples(trainer, batch: DataProto, sources: np.ndarray, scores: torch.Tensor) -> dict:
    """Upstream verl's validation metrics over the samples of each prompt (``val-core/<source>/reward/mean@N``,
    ``best@N``, ``worst@N``, ``maj@N`` when the scorer returns a ``pred`` answer ...; ``metric_utils.
    process_validation_metrics``, seeded with ``trainer.seed``): the summed score as ``reward``, and every per-sample
    value the reward manager returned (the RLLA components, a custom scorer's extra keys). All samples count here, as
    upstream; ``val/test_score/*`` above leaves out those the reward could not score."""
    n = len(batch)
    infos = {"reward": scores.float().tolist()}
    for key, values in (trainer.reward_extra_info or {}).items():
        if key not in _NOT_VARIABLES and key != "reward" and len(values) == n:
            infos[key] = [v if isinstance(v, str) else float("nan") if v is None else v for v in values]
    seed = trainer.config.trainer.seed
    by_source = process_validation_metrics(
        [str(s) for s in sources.tolist()],
        [str(u) for u in batch.non_tensor_batch["uid"].tolist()],
        infos,
        seed=42 if seed is None else int(seed),
    )
    return validation_metric_names(by_source)


def log_generations(trainer, batch: DataProto, scores: torch.Tensor) -> None:
    """The first ``trainer.log_val_generations`` validation samples (prompt tail, response, score [B] float) as one
    text record of the tracker (TensorBoard text / wandb table), at the current step."""
    k = int(trainer.config.trainer.log_val_generations)
    if k <= 0 or not hasattr(trainer, "tracker"):
        return
    prompt_len = batch.batch["prompts"].shape[-1]
    lines = []
    for i in range(min(k, len(batch))):
        prompt_ids = batch.batch["prompts"][i][batch.batch["attention_mask"][i, :prompt_len].bool()]
        response_ids = batch.batch["responses"][i][batch.batch["response_mask"][i].bool()]
        prompt = trainer.tokenizer.decode(prompt_ids[-200:], skip_special_tokens=False)
        response = trainer.tokenizer.decode(response_ids, skip_special_tokens=False)
        lines.append(
            f"### sample {i} (score {scores[i].item():.3f})\n[prompt tail] …{prompt[-300:]}\n[response] {response}"
        )
    trainer.tracker.log_text("val/generations", "\n\n".join(lines), trainer.global_steps)
