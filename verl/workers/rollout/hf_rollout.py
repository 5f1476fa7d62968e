"""Rollout with HuggingFace ``generate`` on the actor's own module (the hybrid engine: no weight copy).

Batched generation with a KV cache, in micro-batches of ``rollout.micro_batch_size`` prompts, stopping at EOS.
Under FSDP2 with several ranks every rank keeps stepping until all ranks finish (``synced_gpus``), because each
forward of a sharded module is a collective.
"""
from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from verl.protocol import DataProto
from verl.utils.model_utils import compute_autocast
from verl.workers.rollout.base import BaseRollout, assemble_rollout_output, resolve_sampling

logger = logging.getLogger(__name__)


class HFRollout(BaseRollout):
    """``BaseRollout`` backed by ``module.generate``.

    Args:
        module: a ``transformers`` causal LM (plain or FSDP2-sharded), shared with the actor.
        config: the ``rollout`` config (``response_length``, ``temperature``, ``top_k``, ``top_p``, ``do_sample``,
            ``micro_batch_size``, ``val_kwargs``, ``dtype``).
        tokenizer: supplies the default EOS/pad ids when ``meta_info`` has none.

    Raises:
        ValueError: ``rollout.response_length`` missing or < 1, or ``rollout.micro_batch_size`` < 1.
    """

    def __init__(self, module: torch.nn.Module, config, tokenizer=None):
        self.module = module
        self.config = config
        self.tokenizer = tokenizer
        self.response_length = int(config.get("response_length") or 0)
        if self.response_length < 1:
            raise ValueError(f"rollout.response_length must be >= 1, got {config.get('response_length')!r}")
        self.micro_batch_size = config.get("micro_batch_size", None)
        if self.micro_batch_size is not None and int(self.micro_batch_size) < 1:
            raise ValueError(f"rollout.micro_batch_size must be >= 1, got {self.micro_batch_size}")

    def _special_ids(self, meta_info: dict):
        eos = meta_info.get("eos_token_id", getattr(self.tokenizer, "eos_token_id", None))
        pad = meta_info.get("pad_token_id", getattr(self.tokenizer, "pad_token_id", None))
        if eos is None:
            raise ValueError("HFRollout needs meta_info['eos_token_id'] or a tokenizer with an eos_token_id")
        if pad is None:
            pad = eos if isinstance(eos, int) else eos[0]
        return eos, int(pad)

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate ``n`` (``meta_info['n']``, default 1) responses per prompt row; see ``BaseRollout``.

        ``meta_info['max_new_tokens']`` / ``['stop']`` (``resolve_sampling``): a shorter budget (the response width
        is then that budget) and stop strings (``generate``'s ``stop_strings``; the stop string stays in the
        output)."""
        from transformers import GenerationConfig

        meta = prompts.meta_info
        sampling = resolve_sampling(self.config, meta)
        eos, pad = self._special_ids(meta)
        n = sampling["n"]
        length = sampling["max_new_tokens"] or self.response_length
        stop = sampling["stop"] or None
        gen_config = GenerationConfig(
            do_sample=sampling["do_sample"],
            temperature=sampling["temperature"] if sampling["do_sample"] else None,
            top_k=sampling["top_k"] if sampling["do_sample"] else None,
            top_p=sampling["top_p"] if sampling["do_sample"] else None,
            max_new_tokens=length,
            stop_strings=stop,
            eos_token_id=eos,
            pad_token_id=pad,
            num_return_sequences=n,
            use_cache=True,
        )
        device = next(self.module.parameters()).device
        synced = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        batch = prompts.batch
        size = len(prompts)
        step = int(self.micro_batch_size or size)
        was_training = self.module.training
        self.module.eval()
        chunks = []
        try:
            for start in range(0, size, step):
                ids = batch["input_ids"][start:start + step].to(device)
                mask = batch["attention_mask"][start:start + step].to(device)
                with compute_autocast(device.type, self.config.get("dtype", "bfloat16")):
                    out = self.module.generate(input_ids=ids, attention_mask=mask, generation_config=gen_config,
                                               synced_gpus=synced, tokenizer=self.tokenizer if stop else None)
                response = out[:, ids.shape[1]:]
                chunks.append(torch.nn.functional.pad(response, (0, length - response.shape[1]), value=pad))
        finally:
            self.module.train(was_training)
        responses = torch.cat(chunks, dim=0)
        if stop:  # a row ended by a stop string is followed by pad ids: the pad id ends its response mask too
            eos = [*(eos if isinstance(eos, (list, tuple)) else [eos]), pad]
        return assemble_rollout_output(prompts, responses, length, eos, pad, n=n)
