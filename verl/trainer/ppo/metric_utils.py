"""Per-step training metrics computed on the driver from a finished batch (verl's names).

All functions read a ``DataProto`` after the advantage step and return ``{name: float}``. Masks: ``response_mask``
[B, R] marks response tokens (first EOS included), the prompt part of ``attention_mask`` [B, P+R] marks real prompt
tokens.
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from typing import Callable

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
    """Model FLOPs and MFU of the actor's phases of one step (the ``perf/mfu_*`` metrics).

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


# ---------------------------------------------------------------------------------------- validation over N samples
def bootstrap_metric(
    data: list,
    subset_size: int,
    reduce_fns: list[Callable[[np.ndarray], float]],
    n_bootstrap: int = 1000,
    seed: int = 42,
) -> list[tuple[float, float]]:
    """Bootstrap estimate of statistics of a subset: ``n_bootstrap`` subsets of ``subset_size`` items drawn from
    ``data`` with replacement, each ``reduce_fn`` applied to every subset; returns ``[(mean, std), ...]`` over the
    subsets, one pair per function (``std`` the population standard deviation, NumPy's default).

    Upstream verl's function and semantics: the draw is ``RandomState(seed).choice(len(data), (n_bootstrap,
    subset_size))``, the same numbers upstream draws after ``np.random.seed(seed)`` — from a generator of its own here,
    so NumPy's global random state (which a resumed run restores exactly) is left alone. E.g. ``best@4`` is
    ``bootstrap_metric(scores, 4, [np.max])``: the expected best of 4 samples (Efron & Tibshirani 1993, ch. 6).

    Raises:
        ValueError: ``data`` is empty or ``subset_size`` / ``n_bootstrap`` is not positive.
    """
    if len(data) == 0 or subset_size < 1 or n_bootstrap < 1:
        raise ValueError(
            f"bootstrap_metric: needs data (got {len(data)} items), subset_size >= 1 (got {subset_size}) and "
            f"n_bootstrap >= 1 (got {n_bootstrap})"
        )
    items = np.empty(len(data), dtype=object)
    items[:] = list(data)
    draws = np.random.RandomState(seed).choice(len(items), size=(n_bootstrap, subset_size), replace=True)
    out = []
    for fn in reduce_fns:
        values = np.array([fn(items[row]) for row in draws], dtype=np.float64)
        out.append((float(values.mean()), float(values.std())))
    return out


def calc_maj_val(data: list[dict], vote_key: str, val_key: str) -> float:
    """The ``val_key`` of the first item whose ``vote_key`` is the most common one (upstream verl's majority vote:
    ties go to the answer seen first). ``maj@N`` votes over a prompt's sampled answers (``vote_key="pred"``)."""
    votes: dict = {}
    for item in data:
        votes.setdefault(item[vote_key], []).append(item[val_key])
    winner = max(votes, key=lambda answer: len(votes[answer]))
    return votes[winner][0]


def _subset_sizes(n: int) -> list[int]:
    """Bootstrap subset sizes for ``n`` samples per prompt: 2, 4, 8, ... below ``n``, then ``n`` (none for n = 1)."""
    if n <= 1:
        return []
    sizes, k = [], 2
    while k < n:
        sizes.append(k)
        k *= 2
    return sizes + [n]


def process_validation_metrics(
    data_sources: list[str], sample_uids: list[str], infos_dict: dict[str, list], seed: int = 42
) -> dict[str, dict[str, dict[str, float]]]:
    """Validation statistics over several samples per prompt, upstream verl's ``{data_source: {variable: {metric:
    value}}}``: for every prompt (``sample_uids``) and numeric variable of ``infos_dict`` (lists aligned with the
    samples; string-valued ones are skipped), ``mean@N`` and ``std@N`` over its N samples and, for each bootstrap size
    n (:func:`_subset_sizes`), ``best@n/mean``, ``best@n/std``, ``worst@n/mean``, ``worst@n/std`` and, when
    ``infos_dict`` has a ``pred`` answer per sample, ``maj@n/mean`` / ``maj@n/std`` (:func:`calc_maj_val`, by
    :func:`bootstrap_metric` with ``seed``); each metric is then averaged over the prompts of a data source.

    Raises:
        ValueError: a list of ``infos_dict`` or ``sample_uids`` is not as long as ``data_sources``.
    """
    n_samples = len(data_sources)
    for name, values in [("sample_uids", sample_uids), *infos_dict.items()]:
        if len(values) != n_samples:
            raise ValueError(f"process_validation_metrics: {name} has {len(values)} values for {n_samples} samples")
    grouped: dict = {}  # source -> uid -> variable -> values, in sample order
    for i, (source, uid) in enumerate(zip(data_sources, sample_uids)):
        per_uid = grouped.setdefault(source, {}).setdefault(uid, {})
        for name, values in infos_dict.items():
            per_uid.setdefault(name, []).append(values[i])
    out: dict = {}
    for source, by_uid in grouped.items():
        collected: dict = {}  # variable -> metric -> per-prompt values
        for var2vals in by_uid.values():
            preds = var2vals.get("pred")
            for name, values in var2vals.items():
                if not values or isinstance(values[0], str):
                    continue
                n = len(values)
                metric = {f"mean@{n}": float(np.mean(values))}
                if n > 1:
                    metric[f"std@{n}"] = float(np.std(values))
                for k in _subset_sizes(n):
                    (best, best_sd), (worst, worst_sd) = bootstrap_metric(values, k, [np.max, np.min], seed=seed)
                    metric.update({f"best@{k}/mean": best, f"best@{k}/std": best_sd})
                    metric.update({f"worst@{k}/mean": worst, f"worst@{k}/std": worst_sd})
                    if preds is not None:
                        votes = [{"val": v, "pred": p} for v, p in zip(values, preds)]
                        vote = functools.partial(calc_maj_val, vote_key="pred", val_key="val")
                        [(maj, maj_sd)] = bootstrap_metric(votes, k, [vote], seed=seed)
                        metric.update({f"maj@{k}/mean": maj, f"maj@{k}/std": maj_sd})
                for metric_name, value in metric.items():
                    collected.setdefault(name, {}).setdefault(metric_name, []).append(value)
        out[source] = {
            name: {metric_name: float(np.mean(vals)) for metric_name, vals in metrics.items()}
            for name, metrics in collected.items()
        }
    return out


def validation_metric_names(by_source: dict[str, dict[str, dict[str, float]]]) -> dict[str, float]:
    """Upstream verl's logged names for :func:`process_validation_metrics`' result: ``val-core/<source>/<var>/<metric>``
    for the core variable (``acc`` when present, else ``reward``) and its ``mean`` / ``maj`` / ``best`` metrics at the
    largest N, ``val-aux/...`` for every other one."""
    flat = {}
    for source, variables in by_source.items():
        core = "acc" if "acc" in variables else "reward"
        for name, metrics in variables.items():
            n_max = max(int(m.split("@")[-1].split("/")[0]) for m in metrics)
            for metric_name, value in metrics.items():
                is_core = (
                    name == core and metric_name.startswith(("mean", "maj", "best")) and f"@{n_max}" in metric_name
                )
                flat[f"{'val-core' if is_core else 'val-aux'}/{source}/{name}/{metric_name}"] = value
    return flat
