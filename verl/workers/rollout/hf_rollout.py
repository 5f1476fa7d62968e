"""Rollout with HuggingFace ``generate`` on the actor's own module (the hybrid engine: no weight copy).

Batched generation with a KV cache, in micro-batches of ``rollout.micro_batch_size`` prompts, stopping at EOS.
With ``rollout.shared_prefill`` (set from ``model.use_shared_prompt``), each distinct prompt of a micro-batch is
prefilled once, whether its copies come from the trainer's ``n``-fold repeat (upstream order) or from
``meta_info['n']``: the distinct prompts minus their last token go through one forward, the KV cache rows are copied
to every row that shares them (``DynamicCache.batch_select_indices``) and ``generate`` continues from that cache, so
the decoded tokens are those of the unshared call (test: greedy and seeded sampling give identical tokens).
Under FSDP2 with several ranks every rank keeps stepping until all ranks finish (``synced_gpus``), because each
forward of a sharded module is a collective. On one rank (an FSDP2 module only for its bf16 policy) decoding runs on a
plain copy in the policy's dtype, refreshed from the actor before each call (``decode_copy.py``: the same tokens,
without FSDP2's hooks at every generated token).

``rollout.cache_implementation=static`` passes ``generate`` a fixed-size KV cache (``StaticCache``); on CUDA
transformers then decodes with a ``torch.compile``d forward (one graph per batch shape, compiled on the first call).
Greedy tokens equal the dynamic cache's (test). The shared prefill builds a dynamic cache, so it is not used with a
static one (the worker says so once at start-up); each row is prefilled. A model loaded with FlexAttention
(``model.override_config.attn_implementation``) decodes with sdpa: the switch lasts one call. Prompt rows flagged in
the optional ``forbid_tool_calls`` field ([B] bool; the router's ANSWER route with
``router.answer_forbids_tool_calls``) never generate ``"<tool"``, so they cannot open a tool call.
"""

from __future__ import annotations

import contextlib
import logging

import torch
import torch.distributed as dist

from verl.protocol import DataProto
from verl.utils.mixed_precision import dtype_from_name, param_dtype_of, unsharded_for_generation
from verl.utils.model_utils import compute_autocast
from verl.workers.rollout.base import BaseRollout, assemble_rollout_output, resolve_sampling
from verl.workers.rollout.decode_copy import decode_copy_for
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS, TOOL_CALL_TEXT, ForbidText

logger = logging.getLogger(__name__)


class SampledLogProbs:
    """A ``generate`` logits processor that records the log-probability of every sampled token under the sampling
    distribution (``rollout.calculate_log_probs``).

    Custom processors run before ``generate``'s own temperature / top-k / top-p warpers, so this one applies the same
    warpers (transformers' classes, same order) to a copy of the scores, keeps the ``log_softmax`` of the result for one
    step and reads the sampled token's entry from it at the next call (the token is then the last of ``input_ids``);
    :meth:`finish` reads the last step's. Memory: one ``[rows, vocab]`` float32 tensor.
    """

    def __init__(self, temperature: float, top_k: int | None, top_p: float | None, do_sample: bool):
        from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

        self.warpers = []
        if do_sample:
            if temperature is not None and temperature != 1.0:
                self.warpers.append(TemperatureLogitsWarper(temperature))
            if top_k is not None and top_k > 0:
                self.warpers.append(TopKLogitsWarper(top_k=top_k))
            if top_p is not None and top_p < 1.0:
                self.warpers.append(TopPLogitsWarper(top_p=top_p))
        self.previous: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.steps.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        processed = scores.float()
        for warper in self.warpers:
            processed = warper(input_ids, processed)
        self.previous = torch.log_softmax(processed, dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor, width: int) -> torch.Tensor:
        """float32 ``[rows, width]``: the recorded log-probs, the last step read from ``sequences``' last token,
        zero-padded to ``width`` columns."""
        if self.previous is not None:
            self.steps.append(self.previous.gather(-1, sequences[:, -1:]).squeeze(-1))
            self.previous = None
        out = torch.stack(self.steps, dim=1) if self.steps else sequences.new_zeros((sequences.shape[0], 0)).float()
        return torch.nn.functional.pad(out, (0, width - out.shape[1]))


def cache_keyword(module: torch.nn.Module) -> str:
    """The keyword a causal LM's ``forward`` and ``generate`` take a KV cache by: ``cache`` where the installed
    transformers has it (``past_key_values`` is deprecated there), else ``past_key_values``. A peft model answers for
    the model it wraps."""
    import inspect

    base = module.get_base_model() if hasattr(module, "get_base_model") else module
    return "cache" if "cache" in inspect.signature(type(base).forward).parameters else "past_key_values"


def prefill_once(module: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor, synced: bool = False):
    """KV cache of ``ids[:, :-1]`` ([b, P - 1], left-padded) with each distinct prompt computed once and its cache
    rows copied to every row holding it; None when no prompt repeats or P < 2 (plain ``generate`` then), except
    under ``synced`` FSDP ranks, which must all run the same forwards. ``generate(input_ids=ids, attention_mask=mask,
    **{cache_keyword(module): <this cache>})`` then decodes the tokens of the unshared call.

    Position ids follow ``generate``'s rule (cumulative mask - 1), so the cached keys equal those of the unshared
    call."""
    from transformers import DynamicCache

    from verl.utils.shared_prompt import group_rows_by_prompt

    groups = group_rows_by_prompt(ids, mask, ids.shape[1])
    if ids.shape[1] < 2 or (len(groups) == ids.shape[0] and not synced):
        return None
    heads = torch.tensor([g[0] for g in groups], device=ids.device)
    row_to_group = torch.empty(ids.shape[0], dtype=torch.long, device=ids.device)
    for index, rows in enumerate(groups):
        row_to_group[rows] = index
    position_ids = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 1)
    cache = DynamicCache(config=getattr(module, "config", None))
    module(
        input_ids=ids[heads, :-1],
        attention_mask=mask[heads, :-1],
        position_ids=position_ids[heads, :-1],
        use_cache=True,
        logits_to_keep=1,
        **{cache_keyword(module): cache},
    )
    cache.batch_select_indices(row_to_group)
    return cache


class HFRollout(BaseRollout):
    """``BaseRollout`` backed by ``module.generate``.

    Args:
        module: a ``transformers`` causal LM (plain or FSDP2-sharded), shared with the actor.
        config: the ``rollout`` config (``response_length``, ``temperature``, ``top_k``, ``top_p``, ``do_sample``,
            ``micro_batch_size``, ``val_kwargs``, ``dtype``, ``shared_prefill``, ``calculate_log_probs``: also return
            ``rollout_log_probs [B, R]`` float32, :class:`SampledLogProbs`). ``ignore_eos`` must be false:
            ``generate`` always stops a row at its EOS (vLLM's engine can decode past it: ``rollout.name=vllm``).
        tokenizer: supplies the default EOS/pad ids when ``meta_info`` has none.

    Raises:
        ValueError: ``rollout.response_length`` missing or < 1, ``rollout.micro_batch_size`` < 1, a
            ``rollout.dtype`` other than the compute dtype of a module under a mixed-precision policy, or
            ``rollout.ignore_eos=true``.
    """

    def __init__(self, module: torch.nn.Module, config, tokenizer=None):
        self.module = module
        self.config = config
        self.tokenizer = tokenizer
        self.response_length = int(config.response_length or 0)
        if self.response_length < 1:
            raise ValueError(f"rollout.response_length must be >= 1, got {config.get('response_length')!r}")
        self.micro_batch_size = config.micro_batch_size
        if self.micro_batch_size is not None and int(self.micro_batch_size) < 1:
            raise ValueError(f"rollout.micro_batch_size must be >= 1, got {self.micro_batch_size}")
        if config.ignore_eos:
            raise ValueError(
                "actor_rollout_ref.rollout.ignore_eos=true: the HF rollout cannot decode past EOS "
                "(transformers' generate stops a row there); set rollout.name=vllm, or false"
            )
        # under the actor's FSDP2 mixed-precision policy the module already computes in its dtype: no autocast on top
        self.policy_dtype = param_dtype_of(module)
        if self.policy_dtype is not None and dtype_from_name(config.dtype, "rollout.dtype") != self.policy_dtype:
            raise ValueError(
                f"actor_rollout_ref.rollout.dtype={config.dtype!r}, but the HF rollout runs the actor's "
                f"module, which computes in {self.policy_dtype} "
                "(actor_rollout_ref.actor.fsdp_config.mixed_precision.param_dtype): set them equal"
            )

    def _special_ids(self, meta_info: dict):
        eos = meta_info.get("eos_token_id", getattr(self.tokenizer, "eos_token_id", None))
        pad = meta_info.get("pad_token_id", getattr(self.tokenizer, "pad_token_id", None))
        if eos is None:
            raise ValueError("HFRollout needs meta_info['eos_token_id'] or a tokenizer with an eos_token_id")
        if pad is None:
            pad = eos if isinstance(eos, int) else eos[0]
        return eos, int(pad)

    def _prefill_once(self, ids: torch.Tensor, mask: torch.Tensor, synced: bool = False):
        """:func:`prefill_once` on the module decoding (this rollout's module, or its decoding copy during a call)."""
        return prefill_once(getattr(self, "_decoding", None) or self.module, ids, mask, synced)

    def _decode_module(self, synced: bool) -> tuple[torch.nn.Module, bool]:
        """``(module to decode with, whether it is the FSDP2 actor itself)``: on one rank the plain copy
        (:class:`~verl.workers.rollout.decode_copy.DecodeCopy`, built on first use), refreshed from the actor."""
        if not hasattr(self, "decode_copy"):
            self.decode_copy = decode_copy_for(self.module, 2 if synced else 1)
        if self.decode_copy is None:
            return self.module, True
        return self.decode_copy.refreshed(), False

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate ``n`` (``meta_info['n']``, default 1) responses per prompt row; see ``BaseRollout``.

        ``meta_info['max_new_tokens']`` / ``['stop']`` (``resolve_sampling``): a shorter budget (the response width
        is then that budget) and stop strings (``generate``'s ``stop_strings``; the stop string stays in the
        output)."""
        from transformers import GenerationConfig, LogitsProcessorList

        meta = prompts.meta_info
        sampling = resolve_sampling(self.config, meta)
        eos, pad = self._special_ids(meta)
        n = sampling["n"]
        length = sampling["max_new_tokens"] or self.response_length
        stop = sampling["stop"] or None
        cache = self.config.cache_implementation
        # a static cache is allocated by generate itself, so the shared prefill (a dynamic cache) is not used with it
        shared_prefill = bool(self.config.shared_prefill) and cache != "static"
        gen_config = GenerationConfig(
            do_sample=sampling["do_sample"],
            temperature=sampling["temperature"] if sampling["do_sample"] else None,
            top_k=sampling["top_k"] if sampling["do_sample"] else None,
            top_p=sampling["top_p"] if sampling["do_sample"] else None,
            max_new_tokens=length,
            stop_strings=stop,
            eos_token_id=eos,
            pad_token_id=pad,
            num_return_sequences=1 if shared_prefill else n,
            use_cache=True,
            **({"cache_implementation": "static"} if cache == "static" else {}),  # dynamic: generate's default
        )
        record = bool(self.config.calculate_log_probs)
        device = next(self.module.parameters()).device
        synced = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        module, is_actor = self._decode_module(synced)
        self._decoding = module
        batch = prompts.batch
        size = len(prompts)
        step = int(self.micro_batch_size or size)
        was_training = module.training
        module.eval()
        # FlexAttention is the training layouts' kernel; decoding with a KV cache runs sdpa (exact, and no
        # block-mask compile per step)
        attention = getattr(getattr(module, "config", None), "_attn_implementation", None)
        if attention == "flex_attention":
            module.set_attn_implementation("sdpa")
        chunks, log_prob_chunks = [], []
        gathered = contextlib.ExitStack()  # FSDP2: gather the parameters once for all decoding steps
        if is_actor:
            gathered.enter_context(unsharded_for_generation(module))
        try:
            for start in range(0, size, step):
                ids = batch["input_ids"][start : start + step].to(device)
                mask = batch["attention_mask"][start : start + step].to(device)
                extra = {}
                processors = []
                if FORBID_TOOL_CALLS in batch.keys():  # rows that must not start a tool call (the router's ANSWER)
                    rows = batch[FORBID_TOOL_CALLS][start : start + step].bool().repeat_interleave(n)
                    if bool(rows.any()):
                        processors.append(ForbidText(self.tokenizer, TOOL_CALL_TEXT, rows, ids.shape[1]))
                recorder = None
                if record:  # after the constraint: it records the distribution the tokens are drawn from
                    recorder = SampledLogProbs(
                        sampling["temperature"], sampling["top_k"], sampling["top_p"], sampling["do_sample"]
                    )
                    processors.append(recorder)
                if processors:
                    extra["logits_processor"] = LogitsProcessorList(processors)
                # under a mixed-precision policy the module already computes in its dtype: no autocast on top
                with (
                    compute_autocast(device.type, self.config.dtype)
                    if self.policy_dtype is None
                    else contextlib.nullcontext()
                ):
                    if shared_prefill:
                        ids, mask = ids.repeat_interleave(n, dim=0), mask.repeat_interleave(n, dim=0)
                        extra[cache_keyword(module)] = self._prefill_once(ids, mask, synced)
                    out = module.generate(
                        input_ids=ids,
                        attention_mask=mask,
                        generation_config=gen_config,
                        synced_gpus=synced,
                        tokenizer=self.tokenizer if stop else None,
                        **extra,
                    )
                response = out[:, ids.shape[1] :]
                chunks.append(torch.nn.functional.pad(response, (0, length - response.shape[1]), value=pad))
                if recorder is not None:
                    log_prob_chunks.append(recorder.finish(out, length).cpu())
        finally:
            gathered.close()
            self._decoding = None
            module.train(was_training)
            if attention == "flex_attention":
                module.set_attn_implementation("flex_attention")
        responses = torch.cat(chunks, dim=0)
        if stop:  # a row ended by a stop string is followed by pad ids: the pad id ends its response mask too
            eos = [*(eos if isinstance(eos, (list, tuple)) else [eos]), pad]
        output = assemble_rollout_output(prompts, responses, length, eos, pad, n=n)
        if record:  # the sampling distribution's log-prob of each response token, 0 after the response ends
            mask = output.batch["response_mask"]
            output.batch["rollout_log_probs"] = torch.cat(log_prob_chunks).to(mask.device) * mask
        return output
