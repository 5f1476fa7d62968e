"""The HF generation engine of the asynchronous mode's inference server: a ``transformers`` causal LM decoding the
queued requests a slice of tokens at a time.

One scheduler thread owns the model. Requests (one per HTTP thread, :meth:`PolicyEngine.submit`) wait in a queue;
the scheduler groups the queued ones with the same ``max_tokens``, ``temperature`` and ``top_p`` into a *job* (one
batched ``generate``: prompts left-padded, each distinct prompt prefilled once for its ``n`` copies), and advances
the jobs in turn by at most ``slice_tokens`` new tokens each, new jobs first. A short request therefore waits for at
most one slice of a long one instead of the whole of it, and a streaming request sees its tokens after every slice.

Slicing never changes what is generated: a slice continues the previous one from its KV cache and its sequences
(rows that ended keep their padding, as inside one ``generate`` call), so the tokens and log-probs equal those of one
unsliced call (``tests/async_rl/test_async_engine_slices_on_cpu.py``). A seeded request is a job of its own with its
own copy of torch's CPU RNG state, so other jobs' sampling in between does not change its samples.

Weight updates wait for the running jobs to finish and hold back new ones meanwhile, so every choice of an answer
comes from one policy version.
"""

from __future__ import annotations

import collections
import logging
import os
import queue
import threading
from typing import Any, Deque, Dict, List, Mapping, Optional, Sequence, Union

import torch

from verl.async_rl.engine_utils import check_generate_args, check_version, eos_token_ids, load_weights
from verl.utils.prompt_batch import left_pad_prompts
from verl.utils.torch_functional import logprobs_from_logits
from verl.workers.rollout.hf_rollout import cache_keyword, prefill_once

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_SLICE_TOKENS", "GenerationRequest", "PolicyEngine"]

DEFAULT_SLICE_TOKENS = 32  # new tokens a job decodes before the scheduler turns to the next job


class GenerationRequest:
    """One request in the engine: ``n`` completions of ``prompt_ids``.

    ``updates`` receives, after every slice that advanced it, the choices so far (a list of ``{"token_ids",
    "logprobs", "finish_reason"}``, ``finish_reason`` None while the choice is still being decoded); then ``result``
    or ``error`` is set and ``done`` fires.
    """

    def __init__(self, prompt_ids: List[int], max_tokens: int, temperature: float, n: int, top_p: float, seed):
        self.prompt_ids, self.max_tokens, self.temperature, self.n = prompt_ids, max_tokens, temperature, n
        self.top_p, self.seed = top_p, seed
        self.key = (max_tokens, temperature, top_p)
        self.version: Optional[int] = None  # the policy version decoding it, once admitted into a job
        self.result: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None
        self.done = threading.Event()
        self.updates: "queue.Queue[List[Dict[str, Any]]]" = queue.Queue()

    def wait(self) -> Dict[str, Any]:
        """Block until served; returns ``result`` or raises the job's error."""
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


class _Job:
    """Requests decoded together (same ``key``; a seeded request alone), ``steps`` new tokens so far."""

    def __init__(self, requests: List[GenerationRequest], pad_token_id: int, version: int):
        padded = left_pad_prompts([r.prompt_ids for r in requests for _ in range(r.n)], pad_token_id)
        self.requests, self.version = requests, version
        for request in requests:
            request.version = version
        self.ids, self.mask = padded["input_ids"], padded["attention_mask"]  # [rows, width + steps]
        self.width, self.steps = self.ids.shape[1], 0
        self.cache = None  # the KV cache of every token but the last, after the first slice
        self.logprobs: List[torch.Tensor] = []  # per slice [rows, k] float32
        self.rng = None
        if requests[0].seed is not None:
            saved = torch.get_rng_state()
            torch.manual_seed(int(requests[0].seed))
            self.rng = torch.get_rng_state()
            torch.set_rng_state(saved)


class PolicyEngine:
    """An HF causal LM serving sampled completions with per-token log-probs, at a policy version.

    Args:
        model_path: a preset name (``verl.utils.model_presets``, e.g. ``"tiny"``), an HF directory or a hub id.
        version: the policy version of the initial weights (0).
        dtype: torch dtype name of the weights (``"float32"``).
        num_threads: ``torch.set_num_threads`` for this process (None: unchanged).
        slice_tokens: new tokens a job decodes before the next job's turn (module docstring).

    Thread-safe: requests from any number of threads are queued and batched (:meth:`generate`); a weight update
    never lands while a job is being decoded.
    """

    def __init__(
        self,
        model_path: str,
        version: int = 0,
        dtype: str = "float32",
        num_threads: Optional[int] = None,
        slice_tokens: int = DEFAULT_SLICE_TOKENS,
    ):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from verl.utils.model_presets import prepare_model

        if int(slice_tokens) < 1:
            raise ValueError(f"slice_tokens must be >= 1, got {slice_tokens}")
        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.model_path = prepare_model(model_path)
        self.model_name = str(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=getattr(torch, dtype))
        self.model.eval()
        self.version = int(version)
        self.slice_tokens = int(slice_tokens)
        self.eos_token_ids = eos_token_ids(self.model.generation_config.eos_token_id, self.tokenizer)
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        )
        self.context_length = int(self.model.config.max_position_embeddings)  # prompt + new tokens per sequence
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)
        self._lock = threading.Lock()  # held while a slice is decoded (or weights load)
        self._cond = threading.Condition()  # guards the queue, the jobs and the flags below
        self._queue: List[GenerationRequest] = []  # submitted, not yet in a job
        self._jobs: Deque[_Job] = collections.deque()  # admitted, waiting for their next slice
        self._running: Optional[_Job] = None
        self._updates_waiting = 0
        self._closed = False
        self._num_threads = torch.get_num_threads()
        self._thread = threading.Thread(target=self._schedule, name="hf-engine", daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------------------------------------- weights
    def update_weights(self, weights: Union[Mapping[str, torch.Tensor], str, os.PathLike], version: int) -> bool:
        """Load new weights (:func:`load_weights`: a state dict or a path) as policy ``version``, once the jobs being
        decoded have finished (no new job starts meanwhile).

        Returns: True when loaded; False when ``version`` equals the served one (nothing to do, e.g. a broadcast
        retried after a timeout). Raises StaleWeightsError: ``version`` is older than the served one.
        RuntimeError: the state dict does not match the model (missing / unexpected keys or shapes).
        """
        with self._cond:
            self._updates_waiting += 1
            try:
                while self._jobs or self._running is not None:
                    self._cond.wait()
                with self._lock:
                    if not check_version(version, self.version):
                        return False
                    self.model.load_state_dict(load_weights(weights), strict=True)
                    self.version = int(version)
                    return True
            finally:
                self._updates_waiting -= 1
                self._cond.notify_all()

    # -------------------------------------------------------------------------------------------- generation
    def submit(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int = 16,
        temperature: float = 1.0,
        n: int = 1,
        seed: Optional[int] = None,
        top_p: float = 1.0,
    ) -> GenerationRequest:
        """Queue ``n`` completions of one prompt and return the request (its ``wait()`` gives :meth:`generate`'s
        answer, its ``updates`` the choices after each slice). Arguments and errors as :meth:`generate`."""
        check_generate_args(prompt_ids, max_tokens, temperature, n)
        if not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"need 0 < top_p <= 1, got {top_p}")
        top_p = 1.0 if float(temperature) == 0.0 else float(top_p)  # greedy: no sampling to truncate
        request = GenerationRequest(
            [int(t) for t in prompt_ids], int(max_tokens), float(temperature), int(n), top_p, seed
        )
        with self._cond:
            if self._closed:
                raise RuntimeError("the engine is closed")
            self._queue.append(request)
            self._cond.notify_all()
        return request

    def generate(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int = 16,
        temperature: float = 1.0,
        n: int = 1,
        seed: Optional[int] = None,
        top_p: float = 1.0,
    ) -> Dict[str, Any]:
        """Sample ``n`` completions of one prompt (blocks until served).

        Args: ``prompt_ids`` token ids (non-empty); ``max_tokens`` >= 1 new tokens at most; ``temperature`` >= 0
            (0: greedy); ``n`` >= 1; ``seed``: this request's samples are reproducible (its own RNG stream);
            ``top_p`` in (0, 1]: nucleus sampling (Holtzman et al. 2020, arXiv:1904.09751), the log-probs then of the
            truncated, renormalised distribution sampled from (1: the whole distribution).
        Returns: ``{"policy_version", "prompt_token_ids", "choices": [{"token_ids", "logprobs", "finish_reason"}]}``
            where ``logprobs[i]`` (nats) is the log-prob of ``token_ids[i]`` under ``softmax(logits / temperature)``
            (greedy: ``softmax(logits)``) and a choice ends at its first EOS (kept; ``"stop"``) or at ``max_tokens``
            (``"length"``).
        Raises ValueError: empty prompt, ``max_tokens < 1``, ``n < 1``, a negative temperature or ``top_p`` outside
            (0, 1]; whatever the model raised while decoding the request's job.
        """
        return self.submit(prompt_ids, max_tokens, temperature, n, seed, top_p).wait()

    def close(self) -> None:
        """Stop the scheduler; queued requests fail with RuntimeError."""
        with self._cond:
            self._closed = True
            for request in self._queue:
                request.error = RuntimeError("the engine was closed before serving this request")
                request.done.set()
            self._queue = []
            self._cond.notify_all()

    # ------------------------------------------------------------------------------------------- scheduling
    def _schedule(self) -> None:
        torch.set_num_threads(self._num_threads)  # torch's thread count is per OS thread
        while True:
            with self._cond:
                while not self._closed and not self._jobs and not (self._queue and not self._updates_waiting):
                    self._cond.wait()
                if self._closed:
                    return
            with self._lock:  # held by a weight update (or a test) -> requests keep queueing
                with self._cond:
                    if not self._updates_waiting:
                        self._admit()
                    job = self._running = self._jobs.popleft() if self._jobs else None
                if job is None:
                    continue
                try:
                    finished = self._advance(job)
                except Exception as exc:  # noqa: BLE001 - every request of the job gets the error, none hangs
                    logger.exception("inference engine: a job failed")
                    for request in job.requests:
                        request.error = exc
                        request.done.set()
                    finished = None
            with self._cond:
                self._running = None
                if finished is False:
                    self._jobs.append(job)
                self._cond.notify_all()

    def _admit(self) -> None:
        """Turn the queue into jobs (caller holds ``_cond``): one per key, a seeded request alone; new jobs first."""
        new: Dict[Any, List[GenerationRequest]] = {}
        for request in self._queue:
            key = ("seed", id(request)) if request.seed is not None else request.key
            new.setdefault(key, []).append(request)
        self._queue = []
        for requests in reversed(list(new.values())):
            self._jobs.appendleft(_Job(requests, self.pad_token_id, self.version))

    @torch.no_grad()
    def _advance(self, job: _Job) -> bool:
        """Decode one slice of ``job`` (caller holds ``_lock``); publish each request's choices so far. Returns
        whether the job is finished."""
        from transformers import GenerationConfig

        first = job.requests[0]
        greedy = first.temperature == 0.0
        k = min(self.slice_tokens, first.max_tokens - job.steps)
        config = GenerationConfig(
            # top-k / top-p explicitly off: left unset, generate would fill in the model's or its own defaults
            # (top_k=50) and sample from a truncated distribution the recorded log-probs do not describe
            do_sample=not greedy,
            temperature=None if greedy else first.temperature,
            top_k=0,
            top_p=first.top_p,
            repetition_penalty=1.0,
            max_new_tokens=k,
            num_return_sequences=1,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            output_logits=True,
            output_scores=first.top_p < 1.0,  # the processed scores: temperature-scaled, outside the nucleus -inf
            return_dict_in_generate=True,
        )
        if job.cache is None:  # the first slice: each distinct prompt prefilled once, its cache copied to its rows
            job.cache = prefill_once(self.model, job.ids, job.mask)
        saved = None
        if job.rng is not None:
            saved = torch.get_rng_state()
            torch.set_rng_state(job.rng)
        try:
            out = self.model.generate(
                input_ids=job.ids,
                attention_mask=job.mask,
                generation_config=config,
                **({cache_keyword(self.model): job.cache} if job.cache is not None else {}),
            )
        finally:
            if saved is not None:
                job.rng = torch.get_rng_state()
                torch.set_rng_state(saved)
        new = out.sequences[:, job.ids.shape[1] :]  # [rows, k'] (k' < k when every row ended)
        if first.top_p < 1.0:  # the distribution sampled from: softmax over the nucleus of logits / temperature
            job.logprobs.append(logprobs_from_logits(torch.stack(out.scores, dim=1).float(), new))
        else:
            logits = torch.stack(out.logits, dim=1).float()  # [rows, k', V] raw logits
            scale = 1.0 if greedy else first.temperature
            job.logprobs.append(logprobs_from_logits(logits / scale, new))  # the learner's code (chunked over V)
        job.ids, job.cache = out.sequences, out.past_key_values
        job.mask = torch.cat([job.mask, job.mask.new_ones(new.shape)], dim=1)
        job.steps += new.shape[1]
        tokens = job.ids[:, job.width :]
        ended = torch.isin(tokens, torch.tensor(sorted(self.eos_token_ids))).any(dim=1)
        finished = job.steps >= first.max_tokens or bool(ended.all()) or new.shape[1] < k
        self._publish(job, tokens, torch.cat(job.logprobs, dim=1), finished)
        return finished

    def _publish(self, job: _Job, tokens: torch.Tensor, logprobs: torch.Tensor, finished: bool) -> None:
        """Each request's choices so far to its ``updates``; with ``finished``, its ``result``."""
        row = 0
        for request in job.requests:
            choices = []
            for _ in range(request.n):
                ids = tokens[row].tolist()
                end = next((i + 1 for i, t in enumerate(ids) if t in self.eos_token_ids), None)
                reason = "stop" if end is not None else ("length" if finished else None)
                end = end if end is not None else len(ids)
                choices.append(
                    {"token_ids": ids[:end], "logprobs": logprobs[row, :end].tolist(), "finish_reason": reason}
                )
                row += 1
            request.updates.put(choices)
            if finished:
                request.result = {
                    "policy_version": job.version,
                    "prompt_token_ids": request.prompt_ids,
                    "choices": choices,
                }
                request.done.set()
