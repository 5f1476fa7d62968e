"""The data-parallel PPO critic: per-token values and the clipped value-loss update.

verl's ``DataParallelPPOCritic`` (``verl/workers/critic/dp_critic.py``). Fixes a ToolRL bug: values and the value loss
are masked with ``response_mask`` (upstream), not with ToolRL's ``attention_mask[:, -R-1:-1]``, which is shifted by
one token. ``ppo_epochs`` and ``shuffle`` are honoured; micro-batch gradients are weighted as in the actor
(``MiniBatchScale``) so a mini-batch's gradient does not depend on how it is cut.

The value of response token ``t`` is read at the position that predicts it (``S - R - 1 + t``), as upstream:
it is the value of the state before the token is generated.
"""

from __future__ import annotations

import logging

import torch

from verl.protocol import DataProto
from verl.trainer.ppo import core_algos
from verl.utils.packing import pack_sequences, unpack_sequences
from verl.utils.seqlen_balancing import split_micro_batches
from verl.utils.torch_functional import masked_mean
from verl.workers.actor.dp_actor import (
    LOG_PROB_KEYS,
    MiniBatchScale,
    average_update_metrics,
    clipped_optimizer_step,
    forward_without_grad,
    iterate_mini_batches,
)

logger = logging.getLogger(__name__)

UPDATE_KEYS = LOG_PROB_KEYS + ("values", "returns", "response_mask")


class DataParallelPPOCritic:
    """PPO critic over a token-classification value model (``logits [B, S, 1]``).

    Args:
        config: the ``critic`` config, normalised by the worker (``ppo_mini_batch_size``,
            ``ppo_micro_batch_size_per_gpu``, ``forward_micro_batch_size_per_gpu`` in rows per rank;
            ``use_dynamic_bsz``, ``ppo_max_token_len_per_gpu``, ``forward_max_token_len_per_gpu``, ``ppo_epochs``,
            ``shuffle``, ``grad_clip``, ``cliprange_value``, ``loss_agg_mode``, ``use_remove_padding`` copied from
            ``model.use_remove_padding``). The forward runs in the module's own precision (float32, or bf16 under the
            worker's FSDP2 mixed-precision policy); values are returned in float32.
        critic_module: the value model.
        critic_optimizer: its optimizer.
    """

    def __init__(self, config, critic_module: torch.nn.Module, critic_optimizer: torch.optim.Optimizer):
        self.config = config
        self.critic_module = critic_module
        self.critic_optimizer = critic_optimizer
        self.use_remove_padding = bool(config.use_remove_padding)

    def _forward_micro_batch(self, micro_batch) -> torch.Tensor:
        """Values ``[b, R]`` float32 of one micro-batch (unmasked; differentiable)."""
        input_ids = micro_batch["input_ids"]
        attention_mask = micro_batch["attention_mask"]
        position_ids = micro_batch["position_ids"]
        batch_size, seqlen = input_ids.shape
        response_length = micro_batch["responses"].shape[1]
        if self.use_remove_padding:
            packed = pack_sequences(input_ids, attention_mask, position_ids)
            output = self.critic_module(
                input_ids=packed.input_ids, position_ids=packed.position_ids, attention_mask=None, use_cache=False
            )
            values = unpack_sequences(output.logits[0, :, 0], packed.flat_index, batch_size, seqlen)
        else:
            output = self.critic_module(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            )
            values = output.logits[..., 0]
        return values[:, -response_length - 1 : -1].float()

    def compute_values(self, data: DataProto) -> torch.Tensor:
        """Values of the response tokens without gradients, zero outside ``response_mask``.

        Args:
            data: batch keys ``responses, input_ids, attention_mask, position_ids, response_mask``; meta_info
                ``micro_batch_size``, ``use_dynamic_bsz``, ``max_token_len``.

        Returns:
            ``values [B, R]`` float32 in the original row order.
        """
        (values,) = forward_without_grad(self.critic_module, data, LOG_PROB_KEYS, self._forward_micro_batch)
        return values * data.batch["response_mask"].to(values.dtype)

    def update_critic(self, data: DataProto) -> dict[str, float]:
        """Clipped value-loss regression of the values onto ``returns``.

        Args:
            data: batch keys ``responses, input_ids, attention_mask, position_ids, values, returns, response_mask``.

        Returns:
            Metrics averaged over mini-batches: ``critic/vf_loss``, ``critic/vf_clipfrac``, ``critic/vpred_mean``,
            ``critic/grad_norm``, ``critic/lr``, ``critic/skipped_steps``.

        Raises:
            ValueError: the batch is not divisible into mini-batches of ``ppo_mini_batch_size`` rows.
        """
        cfg = self.config
        batch = data.batch.select(*UPDATE_KEYS)
        self.critic_module.train()
        per_update = [
            self._update_mini_batch(mini_batch)
            for mini_batch in iterate_mini_batches(
                batch, int(cfg.ppo_mini_batch_size), cfg.ppo_epochs, bool(cfg.shuffle), "critic.ppo_mini_batch_size"
            )
        ]
        return average_update_metrics(per_update, self.critic_optimizer, "critic")

    def _update_mini_batch(self, mini_batch) -> dict[str, float]:
        """One optimizer step on one mini-batch; returns its metrics (weighted means over its micro-batches)."""
        cfg = self.config
        loss_agg_mode = cfg.loss_agg_mode
        cliprange_value = float(cfg.cliprange_value)
        scale = MiniBatchScale(mini_batch["response_mask"], loss_agg_mode)
        micro_batches, _ = split_micro_batches(
            mini_batch, cfg.ppo_micro_batch_size_per_gpu, bool(cfg.use_dynamic_bsz), cfg.ppo_max_token_len_per_gpu
        )
        self.critic_optimizer.zero_grad(set_to_none=True)
        stats: dict[str, float] = {}
        for micro in micro_batches:
            response_mask = micro["response_mask"]
            vpreds = self._forward_micro_batch(micro)
            # clipped value loss (PPO2): 0.5 * max((V - R)^2, (clip(V, V_old ± c) - R)^2), aggregated over the mask
            vf_loss, vf_clipfrac = core_algos.compute_value_loss(
                vpreds, micro["returns"], micro["values"], response_mask, cliprange_value, loss_agg_mode
            )
            (vf_loss * scale.grad_scale(response_mask)).backward()
            weight = scale.grad_scale(response_mask)
            for key, value in (
                ("critic/vf_loss", vf_loss),
                ("critic/vf_clipfrac", vf_clipfrac),
                ("critic/vpred_mean", masked_mean(vpreds, response_mask)),
            ):
                stats[key] = stats.get(key, 0.0) + float(value.detach()) * weight
        stats.update(clipped_optimizer_step(self.critic_module, self.critic_optimizer, cfg.grad_clip, "critic"))
        return stats


__all__ = ["DataParallelPPOCritic"]
