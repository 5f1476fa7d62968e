"""Per-step training metrics computed on the driver from a finished batch (verl's names).

All functions read a ``DataProto`` after the advantage step and return ``{name: float}``. Masks: ``response_mask``
[B, R] marks response tokens (first EOS included), the prompt part of ``attention_mask`` [B, P+R] marks real prompt
tokens.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager

import numpy as np
import torch

from verl.utils.torch_functional import zero_variance_group_fraction  # noqa: F401 (re-exported)

# RLLA reward components written by the reward manager (``token_level_scores_<name>``).
REWARD_COMPONENTS = ("format", "correctness", "length")


@contextmanager
def marked_timer(name: str, timing_raw: dict):
    """Add the wall time of the ``with`` block to ``timing_raw[name]`` (seconds)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        timing_raw[name] = timing_raw.get(name, 0.0) + time.perf_counter() - start


def _stats(prefix: str, values: torch.Tensor) -> dict:
    values = values.float()
    if values.numel() == 0:
        return {}
    return {
        f"{prefix}/mean": values.mean().item(),
        f"{prefix}/max": values.max().item(),
        f"{prefix}/min": values.min().item(),
    }


def _masked_stats(prefix: str, values: torch.Tensor, mask: torch.Tensor) -> dict:
    return _stats(prefix, torch.masked_select(values, mask.bool()))


def compute_data_metrics(batch, use_critic: bool = True) -> dict:
    """Reward, advantage, return, value and length statistics of one training batch.

    Keys: ``critic/score/*`` (sequence score), ``critic/<component>_score/*`` for RLLA components,
    ``critic/rewards/*`` (after the KL penalty), ``critic/advantages/*``, ``critic/returns/*``, ``critic/values/*``
    (with a critic), ``response_length/{mean,max,min,clip_ratio}``, ``prompt_length/*``,
    ``critic/zero_std_groups_frac`` (groups without reward variance), ``reward/invalid_count``.

    Score statistics (``critic/score/*``, ``critic/<component>_score/*``) are over the samples the reward scored
    (``reward_valid``): an invalid sample's placeholder 0 is not a score. With no valid sample they are not logged.
    """
    response_mask = batch.batch["response_mask"].bool()
    max_response_length = batch.batch["responses"].shape[-1]
    prompt_length = batch.batch["prompts"].shape[-1]
    prompt_mask = batch.batch["attention_mask"][:, :prompt_length].bool()
    sequence_score = batch.batch["token_level_scores"].sum(-1)
    sequence_reward = batch.batch["token_level_rewards"].sum(-1)
    response_len = response_mask.sum(-1).float()

    metrics = {}
    valid = torch.ones(len(sequence_score), dtype=torch.bool)
    if "reward_valid" in batch.non_tensor_batch:  # samples the reward could not score hold a placeholder 0
        valid = torch.as_tensor(batch.non_tensor_batch["reward_valid"].astype(bool))
    if bool(valid.any()):
        metrics.update(_stats("critic/score", sequence_score[valid]))
        for name in REWARD_COMPONENTS:
            key = f"token_level_scores_{name}"
            if key in batch.batch.keys():
                metrics.update(_stats(f"critic/{name}_score", batch.batch[key].sum(-1)[valid]))
    metrics.update(_stats("critic/rewards", sequence_reward))
    metrics.update(_masked_stats("critic/advantages", batch.batch["advantages"], response_mask))
    metrics.update(_masked_stats("critic/returns", batch.batch["returns"], response_mask))
    if use_critic and "values" in batch.batch.keys():
        metrics.update(_masked_stats("critic/values", batch.batch["values"], response_mask))
    metrics.update(_stats("response_length", response_len))
    metrics["response_length/clip_ratio"] = (response_len >= max_response_length).float().mean().item()
    metrics.update(_stats("prompt_length", prompt_mask.sum(-1).float()))
    if "uid" in batch.non_tensor_batch:
        metrics["critic/zero_std_groups_frac"] = zero_variance_group_fraction(
            sequence_score, batch.non_tensor_batch["uid"]
        )
    if "reward_valid" in batch.non_tensor_batch:
        metrics["reward/invalid_count"] = float(np.sum(~batch.non_tensor_batch["reward_valid"].astype(bool)))
    return metrics


def compute_timing_metrics(batch, timing_raw: dict) -> dict:
    """``timing_s/<phase>`` for every timed phase and ``timing_per_token_ms/<phase>`` for the token-bound ones."""
    response_tokens = batch.batch["response_mask"].sum().item()
    all_tokens = batch.batch["attention_mask"].sum().item()
    per_phase_tokens = {
        "gen": response_tokens,
        "old_log_prob": all_tokens,
        "ref": all_tokens,
        "values": all_tokens,
        "update_actor": all_tokens,
        "update_critic": all_tokens,
    }
    metrics = {f"timing_s/{name}": value for name, value in timing_raw.items()}
    for name, tokens in per_phase_tokens.items():
        if name in timing_raw and tokens:
            metrics[f"timing_per_token_ms/{name}"] = timing_raw[name] * 1000.0 / tokens
    return metrics


def compute_throughput_metrics(batch, timing_raw: dict, n_workers: int) -> dict:
    """Tokens processed per second per worker over the whole step, and generated tokens per second."""
    total_tokens = int(batch.batch["attention_mask"].sum().item())
    step_time = timing_raw.get("step", float("nan"))
    metrics = {
        "perf/total_num_tokens": total_tokens,
        "perf/time_per_step": step_time,
        "perf/throughput": total_tokens / (step_time * n_workers) if step_time else float("nan"),
    }
    if timing_raw.get("gen"):
        metrics["perf/gen_tokens_per_s"] = batch.batch["response_mask"].sum().item() / timing_raw["gen"]
    return metrics


def reduce_metrics(metrics: dict) -> dict:
    """Mean of every list-valued metric (workers report lists, one value per micro-batch or rank)."""
    out = {}
    for key, value in metrics.items():
        if isinstance(value, (list, tuple, np.ndarray)):
            out[key] = float(np.mean(value)) if len(value) else float("nan")
        else:
            out[key] = value
    return out


def compute_mfu_metrics(
    batch,
    timing_raw: dict,
    model_config,
    peak_flops_per_s: float,
    n_workers: int,
    ppo_epochs: int = 1,
    shared_prompt: bool = False,
) -> dict:
    """Model FLOPs and MFU of the actor's phases of one step (issue 5's accounting).

    Counts (``verl.utils.flops_counter``, valid tokens only, so padding shows up as lost MFU): ``gen`` = one forward of
    every prompt + response with logits at the response positions (what a KV-cached decode computes in matmuls);
    ``old_log_prob`` / ``ref`` = one forward with logits at the response positions (``logits_to_keep``);
    ``update_actor`` = ``ppo_epochs`` x 3 forwards. MFU = FLOPs / phase seconds / (``peak_flops_per_s`` x
    ``n_workers``), the phases' wall times from ``timing_raw`` (seconds).

    Args:
        batch: the step's DataProto (``attention_mask`` [B, P + R], ``response_mask`` [B, R]).
        timing_raw: phase name -> seconds.
        model_config: the actor's HF config (or dict) — see :func:`verl.utils.flops_counter.forward_flops`.
        peak_flops_per_s: peak FLOP/s of ONE worker's device (GPU data-sheet bf16 peak, or a measured CPU peak).
        n_workers: data-parallel workers sharing each phase.
        ppo_epochs: passes of the update over the batch.
        shared_prompt: ``model.use_shared_prompt`` is on: count each distinct prompt of the batch once with its
            responses attending to it (``shared_prompt_forward_flops``), the work the shared layout and the shared
            prefill really do (groups split across micro-batches cost a little more than counted).

    Returns:
        ``perf/model_tflops_<phase>`` and ``perf/mfu_<phase>`` for every timed phase among the four.
    """
    from verl.utils.flops_counter import forward_flops, mfu, shared_prompt_forward_flops
    from verl.utils.shared_prompt import group_rows_by_prompt

    attention_mask = batch.batch["attention_mask"]
    response_tokens = int(batch.batch["response_mask"].sum().item())
    if shared_prompt:
        prompt_length = attention_mask.shape[1] - batch.batch["response_mask"].shape[1]
        prompt_lens = attention_mask[:, :prompt_length].sum(-1).tolist()
        response_lens = attention_mask[:, prompt_length:].sum(-1).tolist()
        groups = group_rows_by_prompt(batch.batch["input_ids"], attention_mask, prompt_length)
        forward = shared_prompt_forward_flops(
            model_config,
            [(prompt_lens[g[0]], [response_lens[r] for r in g]) for g in groups],
            logit_positions=response_tokens,
        )
    else:
        forward = forward_flops(model_config, attention_mask.sum(-1).tolist(), logit_positions=response_tokens)
    flops = {"gen": forward, "old_log_prob": forward, "ref": forward, "update_actor": 3 * forward * int(ppo_epochs)}
    metrics = {}
    for phase, count in flops.items():
        seconds = timing_raw.get(phase)
        if not seconds:
            continue
        metrics[f"perf/model_tflops_{phase}"] = count / 1e12
        metrics[f"perf/mfu_{phase}"] = mfu(count, seconds, peak_flops_per_s * max(int(n_workers), 1))
    return metrics


@functools.cache
def _measured_cpu_peak(threads: int) -> float:
    """:func:`verl.utils.flops_counter.measure_matmul_peak` with ``threads`` torch threads, measured once per process
    and thread count (every trainer built in one process, e.g. the test suite, shares it)."""
    from verl.utils.flops_counter import measure_matmul_peak

    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return measure_matmul_peak()
    finally:
        torch.set_num_threads(previous)


class MfuMeter:
    """``perf/mfu_*`` for every step: holds the actor's model config and the per-worker peak FLOP/s.

    The peak is ``trainer.peak_flops_per_s`` when set; else, on a GPU run, the data-sheet dense bf16 peak of the
    driver's visible GPU (:func:`verl.utils.flops_counter.gpu_bf16_peak_flops`); else a float32 matmul peak measured
    once (0.5 s) with ``threads`` torch threads, the thread count each CPU worker gets. ``trainer.log_mfu=false`` or
    an unknown GPU / unreadable model config turns the metrics off with one warning (they are diagnostics).
    """

    def __init__(self, model_config, peak_flops_per_s: float, shared_prompt: bool = False):
        self.model_config, self.peak_flops_per_s = model_config, float(peak_flops_per_s)
        self.shared_prompt = bool(shared_prompt)

    @classmethod
    def from_config(cls, config, threads: int = 1):
        """Build from the trainer config (``actor_rollout_ref.model.path``, ``trainer.*``); None when disabled."""
        import logging

        from verl.utils.flops_counter import gpu_bf16_peak_flops

        trainer = config.trainer
        if not trainer.log_mfu:
            return None
        try:
            from verl.utils.model_utils import load_hf_config

            _, model_config = load_hf_config(config.actor_rollout_ref.model)  # override_config applied, as in workers
            peak = trainer.peak_flops_per_s
            if not peak and trainer.device == "cuda" and torch.cuda.is_available():
                peak = gpu_bf16_peak_flops(torch.cuda.get_device_name())
            if not peak:
                peak = _measured_cpu_peak(max(int(threads), 1))
        except (OSError, KeyError, ValueError) as err:
            logging.getLogger(__name__).warning("perf/mfu_* metrics off: %s", err)
            return None
        return cls(model_config, float(peak), bool(config.actor_rollout_ref.model.use_shared_prompt))

    def __call__(self, batch, timing_raw: dict, n_workers: int, ppo_epochs: int = 1) -> dict:
        metrics = compute_mfu_metrics(
            batch, timing_raw, self.model_config, self.peak_flops_per_s, n_workers, ppo_epochs, self.shared_prompt
        )
        metrics["perf/peak_tflops_per_worker"] = self.peak_flops_per_s / 1e12
        return metrics
