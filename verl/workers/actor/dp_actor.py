"""The data-parallel PPO actor: response log-probs of a batch, and the clipped policy-gradient update.

verl's ``DataParallelPPOActor`` (``verl/workers/actor/dp_actor.py``) with three ToolRL bugs fixed
(``docs/verl_compat.md`` "Actor and critic fixes"): the KL loss is *added* (upstream #179), ``ppo_epochs`` and
``shuffle`` are honoured, and micro-batch gradients are weighted so a mini-batch's gradient does not depend on how it
is cut.

Loss of one mini-batch (every term aggregated with ``loss_agg_mode`` over ``response_mask``)::

    loss = pg_loss - entropy_coeff * entropy + kl_loss_coef * kl(log_prob, ref_log_prob)

Micro-batch weighting: a micro-batch's aggregated loss is multiplied by its share of the mini-batch's "loss units"
(response tokens for ``token-mean``, non-empty sequences for the ``seq-mean-*`` modes) counted over all
data-parallel ranks, times the number of ranks (FSDP averages gradients over ranks). The accumulated gradient is
then exactly the gradient of the loss aggregated over the whole global mini-batch, for fixed or dynamic
micro-batches and any world size.
"""

from __future__ import annotations

import logging
from typing import Optional

import torch
import torch.distributed as dist

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.utils.model_utils import clip_grad_norm
from verl.utils.packing import pack_sequences, packed_positions_of, response_predictor_mask
from verl.utils.seqlen_balancing import split_micro_batches
from verl.utils.fused_linear_logprob import (
    check_forward_logits,
    fused_head_problem,
    head_computes_logprobs,
    head_records_expected_logits,
)
from verl.utils.shared_prompt import attention_mask_for, build_shared_prompt_batch
from verl.utils.torch_functional import logprobs_and_entropy_from_logits, logprobs_from_logits

logger = logging.getLogger(__name__)

LOG_PROB_KEYS = ("responses", "input_ids", "attention_mask", "position_ids")
UPDATE_KEYS = LOG_PROB_KEYS + ("old_log_probs", "advantages", "response_mask")


def loss_units(response_mask: torch.Tensor, loss_agg_mode: str) -> torch.Tensor:
    """What ``agg_loss`` averages over: response tokens (``token-mean``) or non-empty sequences (``seq-mean-*``).

    Returns a float64 scalar tensor.
    """
    if loss_agg_mode == "token-mean":
        return response_mask.sum().to(torch.float64)
    return (response_mask.sum(dim=-1) > 0).sum().to(torch.float64)


class MiniBatchScale:
    """Weights of the micro-batches of one mini-batch (see the module docstring).

    Args:
        response_mask: ``[b, R]`` of the whole local mini-batch; loss_agg_mode: ``agg_loss`` mode.

    ``grad_scale(micro_mask)`` = ``dp_size · units(micro) / units(global mini-batch)`` multiplies a micro-batch's
    aggregated loss before ``backward`` (one all-reduce per mini-batch when ``torch.distributed`` is initialised).
    Metrics use the same weights, so the mean of a metric over the ranks (what the trainer reports) is the value of
    the whole global mini-batch.
    """

    def __init__(self, response_mask: torch.Tensor, loss_agg_mode: str):
        self.mode = loss_agg_mode
        self.global_units = loss_units(response_mask, loss_agg_mode)
        self.dp_size = 1
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            self.dp_size = dist.get_world_size()
            dist.all_reduce(self.global_units, op=dist.ReduceOp.SUM)

    def grad_scale(self, micro_mask: torch.Tensor) -> float:
        return float(self.dp_size * loss_units(micro_mask, self.mode) / self.global_units.clamp(min=1))


def forward_without_grad(
    module: torch.nn.Module, data: DataProto, keys, forward_fn, shared_prompt_length: Optional[int] = None
) -> list:
    """Run ``forward_fn(micro_batch)`` over the micro-batches of ``data`` in eval mode without gradients.

    Micro-batching follows ``data.meta_info``: ``micro_batch_size`` rows, or with ``use_dynamic_bsz`` a budget of
    ``max_token_len`` tokens (counted in the shared-prompt layout, groups kept whole, when ``shared_prompt_length``
    is given). ``forward_fn`` returns a tensor or a tuple of tensors/None with batch dim first.

    Returns:
        A list with, per output of ``forward_fn``, the concatenation over micro-batches in the original row order
        (None where ``forward_fn`` returned None).
    """
    meta = data.meta_info
    micro_batches, restore = split_micro_batches(
        data.batch.select(*keys),
        meta.get("micro_batch_size"),
        bool(meta.get("use_dynamic_bsz", False)),
        meta.get("max_token_len"),
        shared_prompt_length,
    )
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            outputs = [forward_fn(micro) for micro in micro_batches]
    finally:
        module.train(was_training)
    outputs = [out if isinstance(out, tuple) else (out,) for out in outputs]
    results = []
    for parts in zip(*outputs):
        if parts[0] is None:
            results.append(None)
            continue
        joined = torch.cat(parts, dim=0)
        results.append(joined[restore.to(joined.device)] if restore is not None else joined)
    return results


def iterate_mini_batches(batch, mini_batch_size: int, ppo_epochs: int, shuffle: bool, key: str):
    """Yield ``ppo_epochs`` passes of mini-batches of ``mini_batch_size`` rows (a fresh permutation per pass when
    ``shuffle``, drawn from the global torch RNG, which checkpoints restore).

    Raises:
        ValueError: the batch is not divisible by ``mini_batch_size`` (``key`` names the config key).
    """
    if len(batch) % mini_batch_size != 0:
        raise ValueError(f"{len(batch)} rows are not divisible by the per-rank {key} of {mini_batch_size} rows")
    for _ in range(int(ppo_epochs)):
        order = torch.randperm(len(batch)) if shuffle else torch.arange(len(batch))
        yield from batch[order].split(mini_batch_size)


def clipped_optimizer_step(module: torch.nn.Module, optimizer: torch.optim.Optimizer, grad_clip, prefix: str):
    """Clip gradients, step unless the norm is non-finite, clear gradients.

    Returns:
        ``{prefix/grad_norm, prefix/skipped_steps (0 or 1)}``.
    """
    grad_norm = clip_grad_norm(module.parameters(), grad_clip)
    skipped = not bool(torch.isfinite(grad_norm))
    if skipped:
        logger.warning("%s: non-finite gradient norm %s, optimizer step skipped", prefix, grad_norm.item())
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {f"{prefix}/grad_norm": float(grad_norm), f"{prefix}/skipped_steps": float(skipped)}


def average_update_metrics(per_update: list[dict[str, float]], optimizer: torch.optim.Optimizer, prefix: str):
    """Mean of each metric over the optimizer updates; ``prefix/skipped_steps`` summed; ``prefix/lr`` added."""
    keys = {key for stats in per_update for key in stats}
    metrics = {key: sum(s.get(key, 0.0) for s in per_update) / max(len(per_update), 1) for key in keys}
    metrics[f"{prefix}/skipped_steps"] = sum(s.get(f"{prefix}/skipped_steps", 0.0) for s in per_update)
    metrics[f"{prefix}/lr"] = float(optimizer.param_groups[0]["lr"])
    return metrics


class DataParallelPPOActor:
    """PPO actor over a (plain or FSDP2-sharded) HF causal LM.

    Args:
        config: the ``actor`` config, already normalised by the worker: ``ppo_mini_batch_size`` and
            ``ppo_micro_batch_size_per_gpu`` in rows per rank; ``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``,
            ``ppo_epochs``, ``shuffle``, ``grad_clip``, ``clip_ratio*``, ``policy_loss``, ``loss_agg_mode``,
            ``entropy_coeff``, ``use_kl_loss``, ``kl_loss_coef``, ``kl_loss_type``, ``use_remove_padding`` and
            ``use_shared_prompt`` (copied from ``model.*``; shared-prompt packing computes each distinct prompt of a
            micro-batch once, see ``verl/utils/shared_prompt.py``, and takes precedence over remove-padding) and
            ``use_fused_kernels`` (from ``model.*``: log-probs/entropies straight from the final hidden states,
            ``verl/utils/fused_linear_logprob.py``, computed inside the model's forward so that an FSDP2-sharded
            head works too; ignored with a warning when the LM head is not a plain linear map, see
            ``fused_head_problem``). The forward runs in the module's own precision: float32, or bf16 under the
            FSDP2 mixed-precision policy the worker applies (``verl/utils/mixed_precision.py``); log-probs and
            entropies are computed in float32 either way.
        actor_module: the causal LM (its forward takes ``logits_to_keep``, as every transformers 5 causal LM).
        actor_optimizer: None for a log-prob-only actor (the reference policy).
    """

    def __init__(self, config, actor_module: torch.nn.Module, actor_optimizer: Optional[torch.optim.Optimizer] = None):
        self.config = config
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer
        self.use_remove_padding = bool(config.use_remove_padding)
        self.use_shared_prompt = bool(config.use_shared_prompt)
        self.use_fused_kernels = bool(config.use_fused_kernels)
        problem = fused_head_problem(actor_module) if self.use_fused_kernels else None
        if problem:
            logger.warning("model.use_fused_kernels ignored: %s; log-probs come from materialised logits", problem)
            self.use_fused_kernels = False
        self._fused_head_checked = False
        self.policy_loss_fn = core_algos.get_policy_loss_fn(core_algos.policy_loss_mode(config))

    # ------------------------------------------------------------------------------------------------- forward
    def _forward_micro_batch(self, micro_batch, temperature: float, calculate_entropy: bool = False):
        """Log-probs (and optionally entropies) of the response tokens of one micro-batch.

        Args:
            micro_batch: TensorDict with ``responses [b, R]``, ``input_ids``/``attention_mask``/``position_ids``
                ``[b, P + R]`` (response last).
            temperature: logits are divided by it (the sampling temperature, as verl).
            calculate_entropy: also return per-token entropies.

        Returns:
            ``(entropy [b, R] float32 or None, log_probs [b, R] float32)``; differentiable. Logits are only computed
            at the positions that predict response tokens; with remove-padding or shared-prompt packing, positions
            whose target is padding get 0 (they are outside ``response_mask``).
        """
        responses = micro_batch["responses"]
        input_ids = micro_batch["input_ids"]
        attention_mask = micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        batch_size, response_length = responses.shape
        # per layout: the forward's inputs (logits only where a response token is predicted), ``select`` mapping what
        # the head sees at the kept positions ([b, K, V or H]) to one row per scored token, and those tokens
        if self.use_shared_prompt:
            # each distinct prompt once (a row per group), its responses attending to it (exact: same keys and
            # positions per token)
            shared = build_shared_prompt_batch(input_ids, attention_mask, position_ids, response_length)
            inputs = dict(
                input_ids=shared.input_ids,
                position_ids=shared.position_ids,
                logits_to_keep=shared.keep,
                attention_mask=attention_mask_for(self.actor_module, shared.attention_mask),
            )

            def select(kept):  # [G, K, .] -> [N, .]: one per valid response token
                return kept.flatten(0, 1)[shared.target_index]

            labels = responses[shared.in_response]  # [N]
            in_response = shared.in_response  # [b, R]
        elif self.use_remove_padding:
            # one packed row of valid tokens; logits only where the next token is a valid response token
            packed = pack_sequences(input_ids, attention_mask, position_ids)
            predictors = response_predictor_mask(attention_mask, response_length)  # [b, S]
            keep = packed_positions_of(attention_mask, predictors)  # [K]
            inputs = dict(
                input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=None, logits_to_keep=keep
            )

            def select(kept):  # [1, K, .] -> [K, .]
                return kept[0]

            labels = input_ids[:, 1:][predictors[:, :-1]]  # [K]
            in_response = predictors[:, -response_length - 1 : -1]  # [b, R]
        else:
            inputs = dict(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                logits_to_keep=response_length + 1,
            )

            def select(kept):  # position t predicts response token t: [b, R + 1, .] -> [b * R, .]
                return kept[:, :-1].flatten(0, 1)

            labels = responses.flatten()  # [b * R]
            in_response = None
        if self.use_fused_kernels:
            # the head computes log-probs/entropies inside the forward (the gathered weight under FSDP2)
            if not self._fused_head_checked:  # once: the head really is a linear map of the last hidden state
                self._check_fused_head(inputs)
            with head_computes_logprobs(self.actor_module, select, labels, temperature, calculate_entropy):
                scored = self.actor_module(**inputs, use_cache=False).logits  # [N, 2]
            log_probs = scored[:, 0]
            entropy = scored[:, 1] if calculate_entropy else None
        else:
            # in the model's dtype: the chunked functions upcast and divide by the temperature a chunk at a time, so
            # the [N, V] logits never exist whole in float32 (bf16 on a GPU: 2x less memory traffic, same bits)
            logits = select(self.actor_module(**inputs, use_cache=False).logits)
            if calculate_entropy:  # one pass, the two gradients summed in float32
                log_probs, entropy = logprobs_and_entropy_from_logits(logits, labels, temperature=temperature)
            else:
                log_probs, entropy = logprobs_from_logits(logits, labels, temperature=temperature), None
        if in_response is None:  # padded: back to [b, R]
            log_probs = log_probs.view(batch_size, response_length)
            entropy = entropy.view(batch_size, response_length) if entropy is not None else None
        if in_response is not None:  # scatter the packed values back to [b, R]
            log_probs = _scatter(log_probs, in_response)
            entropy = _scatter(entropy, in_response) if entropy is not None else None
        return entropy, log_probs

    def _check_fused_head(self, inputs: dict) -> None:
        """One no-grad forward with ``logits_to_keep=1``: the model's final logits must be its LM head applied to the
        last hidden state (``fused_linear_logprob.check_fused_head``), else the fused log-probs would be wrong."""
        record: dict = {}
        with torch.no_grad(), head_records_expected_logits(self.actor_module, record):
            logits = self.actor_module(**{**inputs, "logits_to_keep": 1}, use_cache=False).logits
        check_forward_logits(logits[:, -1], record)
        self._fused_head_checked = True

    def _shared_prompt_length(self, batch) -> Optional[int]:
        """P (prompt columns) when shared-prompt packing is on, so token-budget micro-batches keep groups whole."""
        if not self.use_shared_prompt:
            return None
        return batch["input_ids"].shape[1] - batch["responses"].shape[1]

    # ------------------------------------------------------------------------------------------- compute_log_prob
    def compute_log_prob(self, data: DataProto, calculate_entropy: bool = False):
        """Response log-probs of ``data`` without gradients, in micro-batches.

        Args:
            data: batch keys ``responses, input_ids, attention_mask, position_ids``; meta_info ``micro_batch_size``
                (rows per micro-batch), ``temperature``, ``use_dynamic_bsz`` and ``max_token_len`` (token budget).
            calculate_entropy: also return per-token entropies.

        Returns:
            ``(log_probs [B, R] float32, entropys [B, R] float32 or None)`` in the rows' original order.

        Raises:
            KeyError: a required batch key or ``meta_info['temperature']`` is missing.
        """
        temperature = float(data.meta_info["temperature"])
        entropys, log_probs = forward_without_grad(
            self.actor_module,
            data,
            LOG_PROB_KEYS,
            lambda micro: self._forward_micro_batch(micro, temperature, calculate_entropy),
            self._shared_prompt_length(data.batch),
        )
        return log_probs, entropys

    # ----------------------------------------------------------------------------------------------- update_policy
    def update_policy(self, data: DataProto) -> dict[str, float]:
        """PPO update: ``ppo_epochs`` passes over mini-batches of ``ppo_mini_batch_size`` rows (shuffled each pass
        when ``shuffle``), gradient accumulation over micro-batches, gradient clipping, one optimizer step per
        mini-batch (skipped when the gradient norm is not finite).

        Args:
            data: batch keys ``responses, input_ids, attention_mask, position_ids, old_log_probs, advantages,
                response_mask`` (+ ``ref_log_prob`` when ``use_kl_loss``); meta_info ``temperature`` and, optionally,
                ``ppo_mini_batch_size`` (rows per mini-batch for this update instead of the config's: the
                asynchronous learner's batches of fewer rows than a mini-batch are one).

        Returns:
            Metrics averaged over mini-batches (each a mini-batch-level mean; under data parallelism the mean over
            ranks is the global mini-batch's value, see ``MiniBatchScale``): ``actor/pg_loss``,
            ``actor/pg_clipfrac``, ``actor/pg_clipfrac_lower``, ``actor/ppo_kl``, ``actor/entropy`` (only with a
            non-zero ``entropy_coeff``: otherwise the entropy is not computed in the update, and the trainer reports
            the old-log-prob pass's),
            ``actor/kl_loss`` and ``actor/kl_coef`` (when ``use_kl_loss``), ``actor/grad_norm``, ``actor/lr``,
            ``actor/skipped_steps`` (mini-batches whose gradient norm was not finite).

        Raises:
            RuntimeError: the actor has no optimizer. KeyError: a required key is missing.
            ValueError: the batch is not divisible into mini-batches of ``ppo_mini_batch_size`` rows.
        """
        if self.actor_optimizer is None:
            raise RuntimeError("update_policy called on an actor without an optimizer (reference policy?)")
        cfg = self.config
        temperature = float(data.meta_info["temperature"])
        use_kl_loss = bool(cfg.use_kl_loss)
        entropy_coeff = float(cfg.entropy_coeff)
        kl_loss_coef = float(cfg.kl_loss_coef)
        loss_agg_mode = cfg.loss_agg_mode
        keys = UPDATE_KEYS + (("ref_log_prob",) if use_kl_loss else ())
        if "rollout_is_weights" in data.batch.keys():  # rollout correction (verl/trainer/ppo/rollout_corr.py)
            keys += ("rollout_is_weights",)
        batch = data.batch.select(*keys)
        self.actor_module.train()
        per_update = [
            self._update_mini_batch(mini_batch, temperature, loss_agg_mode, entropy_coeff, use_kl_loss, kl_loss_coef)
            for mini_batch in iterate_mini_batches(
                batch,
                int(data.meta_info.get("ppo_mini_batch_size", cfg.ppo_mini_batch_size)),
                cfg.ppo_epochs,
                bool(cfg.shuffle),
                "actor.ppo_mini_batch_size",
            )
        ]
        return average_update_metrics(per_update, self.actor_optimizer, "actor")

    def _update_mini_batch(self, mini_batch, temperature, loss_agg_mode, entropy_coeff, use_kl_loss, kl_loss_coef):
        """One optimizer step on one mini-batch; returns its metrics (weighted means over its micro-batches)."""
        cfg = self.config
        scale = MiniBatchScale(mini_batch["response_mask"], loss_agg_mode)
        micro_batches, _ = split_micro_batches(
            mini_batch,
            cfg.ppo_micro_batch_size_per_gpu,
            bool(cfg.use_dynamic_bsz),
            cfg.ppo_max_token_len_per_gpu,
            self._shared_prompt_length(mini_batch),
        )
        self.actor_optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = {}

        def record(key, value, weight):
            stats[key] = stats.get(key, 0.0) + float(value) * weight

        for micro in micro_batches:
            response_mask = micro["response_mask"]
            old_log_prob = micro["old_log_probs"]
            advantages = micro["advantages"]
            # the entropy (a log-softmax-sized pass over the vocabulary) only when its bonus is in the loss; with
            # coefficient 0 the trainer reports actor/entropy from the old-log-prob pass, as upstream verl
            with_entropy = entropy_coeff != 0
            entropy, log_prob = self._forward_micro_batch(micro, temperature, calculate_entropy=with_entropy)

            # policy-gradient term (clipped surrogate, core_algos registry)
            pg_loss, pg_metrics = self.policy_loss_fn(
                old_log_prob,
                log_prob,
                advantages,
                response_mask,
                loss_agg_mode,
                cfg,
                rollout_is_weights=micro.get("rollout_is_weights", None),
            )
            loss = pg_loss

            # entropy bonus: subtracted (higher entropy lowers the loss)
            if with_entropy:
                entropy_loss = core_algos.agg_loss(entropy, response_mask, loss_agg_mode)
                loss = loss - entropy_coeff * entropy_loss

            # KL to the reference policy: ADDED (ToolRL subtracted it; upstream verl #179 fixed the sign)
            if use_kl_loss:
                kld = core_algos.kl_penalty(log_prob, micro["ref_log_prob"], cfg.kl_loss_type)
                kl_loss = core_algos.agg_loss(kld, response_mask, loss_agg_mode)
                loss = loss + kl_loss_coef * kl_loss

            (loss * scale.grad_scale(response_mask)).backward()

            weight = scale.grad_scale(response_mask)
            record("actor/pg_loss", pg_loss.detach(), weight)
            if with_entropy:
                record("actor/entropy", entropy_loss.detach(), weight)
            for key, value in pg_metrics.items():
                record(key, value, weight)
            if use_kl_loss:
                record("actor/kl_loss", kl_loss.detach(), weight)

        stats.update(clipped_optimizer_step(self.actor_module, self.actor_optimizer, cfg.grad_clip, "actor"))
        if use_kl_loss:
            stats["actor/kl_coef"] = kl_loss_coef
        return stats


def _scatter(packed_values: torch.Tensor, where: torch.Tensor) -> torch.Tensor:
    """Place ``[K]`` values at the True positions of ``where`` ``[b, R]`` (row-major), zeros elsewhere."""
    out = packed_values.new_zeros(where.shape)
    out[where] = packed_values
    return out


__all__ = [
    "DataParallelPPOActor",
    "MiniBatchScale",
    "average_update_metrics",
    "clipped_optimizer_step",
    "forward_without_grad",
    "iterate_mini_batches",
    "loss_units",
]
