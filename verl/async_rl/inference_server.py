"""Inference server of the asynchronous mode: the current policy behind an OpenAI-compatible HTTP endpoint.

Design: ``docs/async.md``, sections "Inference server" and "Token-in/token-out": serve the current policy over
OpenAI-compatible HTTP on loopback (HF backend on CPU), accept new weights with a version number, never go back to an
older version.

Pieces:

* :class:`PolicyEngine` -- an HF causal LM plus its tokenizer and policy version; ``generate`` samples with
  ``transformers``' ``generate`` and returns per-token log-probs; ``update_weights`` loads a state dict or a file.
* ``vllm_engine.VllmPolicyEngine`` -- the same interface on an in-process ``vllm.LLM`` (``backend="vllm"``).
* :class:`InferenceServer` -- an engine served by the standard library's ``ThreadingHTTPServer`` on
  ``127.0.0.1`` (port 0 = any free port). Run it in a Ray actor with ``ray.remote(InferenceServer)``
  (:func:`start_inference_server`).
* :class:`OpenAIClient` -- a small ``requests`` client for the two endpoints; it talks to any OpenAI-compatible
  server (a vLLM/SGLang URL works the same when it returns ``token_ids``/log-probs).

Endpoints (JSON in, JSON out; errors are HTTP 400/404/500 with ``{"error": {"message", "type"}}``):

* ``POST /v1/completions``: ``prompt`` (a string or a list of token ids) and the options; each choice has ``text``,
  ``finish_reason`` (``"stop"``: ended by an EOS token, kept as the last generated token, or by a ``stop`` string;
  ``"length"``: hit ``max_tokens``), ``token_ids`` (the generated ids) and ``logprobs = {"tokens": [str],
  "token_logprobs": [float]}``.
* ``POST /v1/chat/completions``: ``messages`` (chat template with the generation prompt) and the same options; each
  choice has ``message = {"role": "assistant", "content"}``, ``token_ids`` and ``logprobs = {"content": [{"token",
  "logprob"}]}``.
* The options (``max_tokens``, ``temperature``, ``top_p``, ``n``, ``stop``, ``seed``, ``model``, ``logprobs``) and
  what each does are in :mod:`verl.async_rl.openai_protocol`; any other field is a 400 naming it.
* Both answers carry ``policy_version`` (the version of the weights that generated every choice), ``prompt_token_ids``
  and ``usage``. ``GET /v1/models`` and ``GET /health`` (``{"policy_version"}``) for probes.

Log-probs are natural logs of the sampling distribution ``softmax(logits / temperature)`` (the same temperature
scaling as the learner's ``logits / temperature``, ``verl.workers.actor.dp_actor``); with ``temperature = 0`` (greedy)
they are of ``softmax(logits)``; with ``top_p < 1`` (HF backend) of the nucleus renormalised. The trainer's env actors
never set ``top_p`` (it would change the distribution the learner corrects for).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import torch

from verl.async_rl.openai_protocol import (
    RequestError,
    apply_stop,
    check_model,
    check_prompt_ids,
    new_token_budget,
    parse_request,
)
from verl.utils.prompt_batch import left_pad_prompts
from verl.utils.torch_functional import logprobs_from_logits
from verl.workers.rollout.hf_rollout import cache_keyword, prefill_once

logger = logging.getLogger(__name__)

__all__ = [
    "BACKENDS",
    "InferenceServer",
    "OpenAIClient",
    "PolicyEngine",
    "StaleWeightsError",
    "check_backend",
    "check_generate_args",
    "check_version",
    "eos_token_ids",
    "load_weights",
    "make_engine",
    "start_inference_server",
    "template_ids",
]


# the helpers both engines share live in engine_utils (vllm_engine imports them from there: no import cycle);
# re-exported here, their historical home
from verl.async_rl.engine_utils import (  # noqa: E402,F401
    BACKENDS,
    StaleWeightsError,
    check_backend,
    check_generate_args,
    check_version,
    eos_token_ids,
    load_weights,
)


class PolicyEngine:
    """An HF causal LM serving sampled completions with per-token log-probs, at a policy version.

    Args:
        model_path: a preset name (``verl.utils.model_presets``, e.g. ``"tiny"``), an HF directory or a hub id.
        version: the policy version of the initial weights (0).
        dtype: torch dtype name of the weights (``"float32"``).
        num_threads: ``torch.set_num_threads`` for this process (None: unchanged).

    Thread-safe: one generation or weight update at a time (an update never lands mid-generation, so every choice of
    one answer comes from one version); concurrent requests are batched (:meth:`generate`).
    """

    def __init__(self, model_path: str, version: int = 0, dtype: str = "float32", num_threads: Optional[int] = None):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from verl.utils.model_presets import prepare_model

        if num_threads:
            torch.set_num_threads(int(num_threads))
        self.model_path = prepare_model(model_path)
        self.model_name = str(model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_path, dtype=getattr(torch, dtype))
        self.model.eval()
        self.version = int(version)
        self._lock = threading.Lock()  # one generate (or weight update) at a time
        self._queue_lock = threading.Lock()  # guards the queue of requests waiting to be batched
        self._queue: List[_Request] = []
        self.eos_token_ids = eos_token_ids(self.model.generation_config.eos_token_id, self.tokenizer)
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        )
        self.context_length = int(self.model.config.max_position_embeddings)  # prompt + new tokens per sequence
        self.vocab_size = int(self.model.get_input_embeddings().num_embeddings)

    # ----------------------------------------------------------------------------------------------- weights
    def update_weights(self, weights: Union[Mapping[str, torch.Tensor], str, os.PathLike], version: int) -> bool:
        """Load new weights (:func:`load_weights`: a state dict or a path) as policy ``version``.

        Returns: True when loaded; False when ``version`` equals the served one (nothing to do, e.g. a broadcast
        retried after a timeout). Raises StaleWeightsError: ``version`` is older than the served one.
        RuntimeError: the state dict does not match the model (missing / unexpected keys or shapes).
        """
        with self._lock:
            if not check_version(version, self.version):
                return False
            self.model.load_state_dict(load_weights(weights), strict=True)
            self.version = int(version)
            return True

    # -------------------------------------------------------------------------------------------- generation
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
        """Sample ``n`` completions of one prompt.

        Concurrent calls (the env actors' requests, one HTTP thread each) are batched: whoever holds the engine
        finishes its ``generate`` call, and the next holder serves every request queued meanwhile with the same
        ``max_tokens`` and ``temperature`` in one batched ``generate`` (left-padded prompts, each prompt prefilled once
        for its copies). A seeded call runs alone, so its samples stay reproducible.

        Args: ``prompt_ids`` token ids (non-empty); ``max_tokens`` >= 1 new tokens at most; ``temperature`` >= 0
            (0: greedy); ``n`` >= 1; ``seed``: seeds torch's RNG for this call (reproducible samples); ``top_p`` in
            (0, 1]: nucleus sampling (Holtzman et al. 2020, arXiv:1904.09751), the log-probs then of the truncated,
            renormalised distribution sampled from (1: the whole distribution).
        Returns: ``{"policy_version", "prompt_token_ids", "choices": [{"token_ids", "logprobs", "finish_reason"}]}``
            where ``logprobs[i]`` (nats) is the log-prob of ``token_ids[i]`` (module docstring) and a choice ends
            at its first EOS (kept).
        Raises ValueError: empty prompt, ``max_tokens < 1``, ``n < 1`` or a negative temperature.
        """
        check_generate_args(prompt_ids, max_tokens, temperature, n)
        if not 0.0 < float(top_p) <= 1.0:
            raise ValueError(f"need 0 < top_p <= 1, got {top_p}")
        top_p = 1.0 if float(temperature) == 0.0 else float(top_p)  # greedy: no sampling to truncate
        request = _Request([int(t) for t in prompt_ids], int(max_tokens), float(temperature), int(n), top_p)
        if seed is not None:
            with self._lock:
                torch.manual_seed(int(seed))
                self._serve([request])
            return request.result
        with self._queue_lock:
            self._queue.append(request)
        while request.result is None and request.error is None:
            with self._lock:
                if request.result is not None or request.error is not None:  # served in another caller's batch
                    break
                with self._queue_lock:
                    batch = [r for r in self._queue if r.key == request.key]
                    self._queue = [r for r in self._queue if r.key != request.key]
                if batch:
                    try:
                        self._serve(batch)
                    except BaseException as exc:  # every request of the failed batch gets the error, not a hang
                        for other in batch:
                            other.error = exc
                        if not isinstance(exc, Exception):
                            raise
        if request.error is not None:
            raise request.error
        return request.result

    def _serve(self, requests: List["_Request"]) -> None:
        """One batched ``generate`` for ``requests`` (same ``max_tokens``, ``temperature`` and ``top_p``; caller holds
        the lock); sets each request's ``result``."""
        from transformers import GenerationConfig

        first = requests[0]
        greedy = first.temperature == 0.0
        config = GenerationConfig(
            # top-k / top-p explicitly off: left unset, generate would fill in the model's or its own defaults
            # (top_k=50) and sample from a truncated distribution the recorded log-probs do not describe
            do_sample=not greedy,
            temperature=None if greedy else first.temperature,
            top_k=0,
            top_p=first.top_p,
            repetition_penalty=1.0,
            max_new_tokens=first.max_tokens,
            num_return_sequences=1,
            eos_token_id=sorted(self.eos_token_ids),
            pad_token_id=self.pad_token_id,
            output_logits=True,
            output_scores=first.top_p < 1.0,  # the processed scores: temperature-scaled, outside the nucleus -inf
            return_dict_in_generate=True,
        )
        # every request's n copies as rows, prompts left-padded; each distinct prompt is prefilled once and its KV
        # cache copied to its copies (the synchronous HF rollout's shared prefill): the tokens of independent rows
        padded = left_pad_prompts([r.prompt_ids for r in requests for _ in range(r.n)], self.pad_token_id)
        input_ids, mask = padded["input_ids"], padded["attention_mask"]
        width = input_ids.shape[1]
        version = self.version
        cache = prefill_once(self.model, input_ids, mask)
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=mask,
            generation_config=config,
            **({cache_keyword(self.model): cache} if cache is not None else {}),
        )
        new = out.sequences[:, width:]  # [rows, T]
        if first.top_p < 1.0:  # the distribution sampled from: softmax over the nucleus of logits / temperature
            logprobs = logprobs_from_logits(torch.stack(out.scores, dim=1).float(), new)
        else:
            logits = torch.stack(out.logits, dim=1).float()  # [rows, T, V] raw logits
            scale = 1.0 if greedy else first.temperature
            logprobs = logprobs_from_logits(logits / scale, new)  # the learner's log-prob code (chunked over the vocab)
        row = 0
        for request in requests:
            choices = []
            for _ in range(request.n):
                ids = new[row].tolist()
                end = next((i + 1 for i, t in enumerate(ids) if t in self.eos_token_ids), None)
                finish = "stop" if end is not None else "length"
                end = end if end is not None else len(ids)
                choices.append(
                    {"token_ids": ids[:end], "logprobs": logprobs[row, :end].tolist(), "finish_reason": finish}
                )
                row += 1
            request.result = {"policy_version": version, "prompt_token_ids": request.prompt_ids, "choices": choices}


class _Request:
    """One ``PolicyEngine.generate`` call waiting in the queue (``result`` set once served)."""

    def __init__(self, prompt_ids: List[int], max_tokens: int, temperature: float, n: int, top_p: float = 1.0):
        self.prompt_ids, self.max_tokens, self.temperature, self.n = prompt_ids, max_tokens, temperature, n
        self.top_p = top_p
        self.key = (max_tokens, temperature, top_p)
        self.result: Optional[Dict[str, Any]] = None
        self.error: Optional[BaseException] = None


def template_ids(tokenizer, messages: List[Dict[str, str]], add_generation_prompt: bool) -> List[int]:
    """Chat-templated token ids of ``messages`` (transformers 5 may return a BatchEncoding: its ``input_ids``)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)


def _completion_response(engine: PolicyEngine, body: Any, chat: bool) -> Dict[str, Any]:
    """Answer one request of ``/v1/completions`` (``chat`` false) or ``/v1/chat/completions`` (``openai_protocol``:
    the fields accepted, and what each does). Raises RequestError: the request is refused (its status and field)."""
    request = parse_request(body, chat)
    check_model(request, engine.model_name)
    tok = engine.tokenizer
    if chat:
        messages = [m.model_dump(exclude_none=True) for m in request.messages]
        prompt_ids = template_ids(tok, messages, add_generation_prompt=True)
    else:
        prompt = request.prompt
        prompt_ids = tok.encode(prompt, add_special_tokens=False) if isinstance(prompt, str) else list(prompt)
    check_prompt_ids(prompt_ids, engine.vocab_size)
    if request.max_tokens == 0:  # completions only (chat needs >= 1): the API's empty completion, nothing generated
        empty = {"token_ids": [], "logprobs": [], "finish_reason": "length"}
        result = {"policy_version": engine.version, "prompt_token_ids": prompt_ids, "choices": [empty] * request.n}
    else:
        max_tokens = new_token_budget(request, len(prompt_ids), engine.context_length)
        result = engine.generate(
            prompt_ids, max_tokens, request.temperature, request.n, seed=request.seed, top_p=request.top_p
        )
    choices = []
    for i, c in enumerate(result["choices"]):
        ids, lps, finish = c["token_ids"], c["logprobs"], c["finish_reason"]
        text = tok.decode(ids, skip_special_tokens=True)
        cut = apply_stop(tok, ids, lps, request.stop)
        if cut is not None:
            ids, lps, text, finish = cut["token_ids"], cut["logprobs"], cut["text"], "stop"
        pieces = tok.convert_ids_to_tokens(ids)
        choice: Dict[str, Any] = {"index": i, "finish_reason": finish, "token_ids": ids}
        if chat:
            choice["message"] = {"role": "assistant", "content": text}
            choice["logprobs"] = {"content": [{"token": p, "logprob": lp} for p, lp in zip(pieces, lps)]}
        else:
            choice["text"] = text
            choice["logprobs"] = {"tokens": pieces, "token_logprobs": lps}
        choices.append(choice)
    n_gen = sum(len(c["token_ids"]) for c in choices)
    return {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": engine.model_name,
        "policy_version": result["policy_version"],
        "prompt_token_ids": result["prompt_token_ids"],
        "choices": choices,
        "usage": {
            "prompt_tokens": len(result["prompt_token_ids"]),
            "completion_tokens": n_gen,
            "total_tokens": len(result["prompt_token_ids"]) + n_gen,
        },
    }


def _make_handler(engine: PolicyEngine):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # quiet: route through logging at DEBUG
            logger.debug("inference server: " + fmt, *args)

        def _send(self, code: int, payload: Mapping[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802 (http.server naming)
            if self.path == "/health":
                self._send(200, {"status": "ok", "policy_version": engine.version})
            elif self.path == "/v1/models":
                self._send(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": engine.model_name, "object": "model", "policy_version": engine.version}],
                    },
                )
            else:
                self._send(404, {"error": {"message": f"no route GET {self.path}", "type": "not_found"}})

        def do_POST(self):  # noqa: N802
            routes = {"/v1/completions": False, "/v1/chat/completions": True}
            if self.path not in routes:
                self._send(404, {"error": {"message": f"no route POST {self.path}", "type": "not_found"}})
                return
            try:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}"
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError as exc:
                    raise RequestError(f"the request body is not JSON: {exc}") from None
                self._send(200, _completion_response(engine, body, routes[self.path]))
            except RequestError as exc:
                kind = "not_found_error" if exc.status == 404 else "invalid_request_error"
                self._send(exc.status, {"error": {"message": str(exc), "type": kind}})
            except (KeyError, ValueError, TypeError) as exc:
                self._send(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
            except Exception as exc:  # noqa: BLE001 - report, keep serving
                logger.exception("inference server: request failed")
                self._send(500, {"error": {"message": repr(exc), "type": "internal_error"}})

    return Handler


def make_engine(
    backend: str,
    model_path: str,
    version: int = 0,
    dtype: Optional[str] = None,
    num_threads: Optional[int] = None,
    **options,
):
    """The generation engine of a server: ``"hf"`` (:class:`PolicyEngine`, float32 by default) or ``"vllm"``
    (``vllm_engine.VllmPolicyEngine``, bf16 on GPU by default; ``options``: ``max_model_len``, ``engine_kwargs``).
    Raises ValueError: unknown backend or options the HF engine does not take; ImportError: vLLM missing."""
    if check_backend(backend) == "hf":
        if options:
            raise ValueError(f"async.inference: options {sorted(options)} need backend=vllm")
        return PolicyEngine(model_path, version=version, dtype=dtype or "float32", num_threads=num_threads)
    from verl.async_rl.vllm_engine import VllmPolicyEngine

    return VllmPolicyEngine(model_path, version=version, dtype=dtype or "bfloat16", num_threads=num_threads, **options)


class InferenceServer:
    """A generation engine (:func:`make_engine`) behind the OpenAI-compatible endpoints (module docstring) on loopback.

    Args: ``model_path``, ``version``, ``dtype``, ``num_threads`` as :class:`PolicyEngine`; ``backend`` (``"hf"`` or
    ``"vllm"``) and its ``engine_options``; ``host`` (``127.0.0.1``) and ``port`` (0: a free port). The HTTP server
    runs in a daemon thread from construction on.
    """

    def __init__(
        self,
        model_path: str,
        version: int = 0,
        dtype: Optional[str] = None,
        num_threads: Optional[int] = None,
        host: str = "127.0.0.1",
        port: int = 0,
        backend: str = "hf",
        **engine_options,
    ):
        self.engine = make_engine(
            backend, model_path, version=version, dtype=dtype, num_threads=num_threads, **engine_options
        )
        self._httpd = ThreadingHTTPServer((host, int(port)), _make_handler(self.engine))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="inference-http", daemon=True)
        self._thread.start()

    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT/v1``; a server bound to every interface (``0.0.0.0`` / ``::``)
        gives this node's address (Ray's node IP inside a Ray actor, else the host name's address)."""
        host, port = self._httpd.server_address[:2]
        if host in ("0.0.0.0", "::"):
            host = _node_address()
        return f"http://{host}:{port}/v1"

    def policy_version(self) -> int:
        return self.engine.version

    def update_weights(self, weights: Union[Mapping[str, torch.Tensor], str, os.PathLike], version: int) -> bool:
        """:meth:`PolicyEngine.update_weights` (same returns and errors)."""
        return self.engine.update_weights(weights, version)

    def ping(self) -> bool:
        return True

    def shutdown(self) -> None:
        """Stop serving HTTP."""
        self._httpd.shutdown()
        self._httpd.server_close()


def _node_address() -> str:
    """This node's address as other nodes reach it: Ray's node IP when Ray runs here, else the host name's."""
    import socket

    try:
        import ray

        if ray.is_initialized():
            return ray.util.get_node_ip_address()
    except ImportError:
        pass
    return socket.gethostbyname(socket.gethostname())


def start_inference_server(
    model_path: str,
    version: int = 0,
    num_threads: Optional[int] = 1,
    num_cpus: float = 0,
    num_gpus: float = 0,
    **options,
):
    """Start :class:`InferenceServer` as a Ray actor (``num_cpus`` reserved, 0 by default so a 2-CPU local cluster
    can host every component; ``num_gpus`` for a vLLM server on GPU) and return the actor handle;
    ``ray.get(handle.url.remote())`` is its base URL. ``options``: ``backend`` and the engine options."""
    import ray

    actor_cls = ray.remote(num_cpus=num_cpus, num_gpus=num_gpus, max_restarts=0)(InferenceServer)
    return actor_cls.remote(model_path, version=version, num_threads=num_threads, **options)


class OpenAIClient:
    """Minimal client for an OpenAI-compatible completions server (``requests``).

    Args: ``base_url`` (``.../v1``), ``model`` (sent as ``model``), ``timeout`` seconds per request.
    """

    def __init__(self, base_url: str, model: str = "policy", timeout: float = 120.0):
        import requests

        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = float(timeout)
        self._session = requests.Session()

    def _post(self, route: str, body: Dict[str, Any]) -> Dict[str, Any]:
        response = self._session.post(
            f"{self.base_url}{route}", json={"model": self.model, **body}, timeout=self.timeout
        )
        if response.status_code != 200:
            raise RuntimeError(f"{self.base_url}{route} answered {response.status_code}: {response.text[:500]}")
        return response.json()

    def completions(self, prompt: Union[str, Sequence[int]], **options) -> Dict[str, Any]:
        """``POST /completions`` (options: ``max_tokens``, ``temperature``, ``n``, ``seed``, ``logprobs``).
        Raises RuntimeError on a non-200 answer (the message has the server's error)."""
        return self._post(
            "/completions", {"prompt": prompt if isinstance(prompt, str) else list(prompt), "logprobs": 0, **options}
        )

    def chat(self, messages: Sequence[Mapping[str, str]], **options) -> Dict[str, Any]:
        """``POST /chat/completions`` (same options and errors as :meth:`completions`)."""
        return self._post("/chat/completions", {"messages": list(messages), "logprobs": True, **options})
