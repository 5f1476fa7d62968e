"""Inference server of the asynchronous mode: the current policy behind an OpenAI-compatible HTTP endpoint.

Design: ``docs/async.md``, sections "Inference server" and "Token-in/token-out": serve the current policy over
OpenAI-compatible HTTP on loopback (HF backend on CPU), accept new weights with a version number, never go back to an
older version.

Pieces:

* ``hf_engine.PolicyEngine`` -- an HF causal LM plus its tokenizer and policy version; its scheduler thread decodes
  the queued requests with ``transformers``' ``generate`` a slice of tokens at a time (a short request is answered
  while a long one runs) and returns per-token log-probs; ``update_weights`` loads a state dict or a file.
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
* The options (``max_tokens``, ``temperature``, ``top_p``, ``n``, ``stop``, ``seed``, ``model``, ``logprobs``,
  ``stream``) and what each does are in :mod:`verl.async_rl.openai_protocol`; any other field is a 400 naming it.
  With ``stream: true`` the answer is server-sent events (``data: <chunk>`` ... ``data: [DONE]``), each chunk's
  choices with their new ``text`` (completions) or ``delta.content`` (chat), ``token_ids`` and log-probs.
* Both answers carry ``policy_version`` (the version of the weights that generated every choice), ``prompt_token_ids``
  and ``usage``. ``GET /v1/models`` and ``GET /health`` (``{"policy_version"}``) for probes.

Log-probs are natural logs of the sampling distribution ``softmax(logits / temperature)`` (the same temperature
scaling as the learner's ``logits / temperature``, ``verl.workers.actor.dp_actor``); with ``temperature = 0`` (greedy)
they are of ``softmax(logits)``; with ``top_p < 1`` (HF backend) of the nucleus renormalised. The trainer's env actors
never set ``top_p`` (it would change the distribution the learner corrects for).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import queue
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
from verl.async_rl.hf_engine import PolicyEngine

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


def template_ids(tokenizer, messages: List[Dict[str, str]], add_generation_prompt: bool) -> List[int]:
    """Chat-templated token ids of ``messages`` (transformers 5 may return a BatchEncoding: its ``input_ids``)."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
    return list(ids["input_ids"] if isinstance(ids, Mapping) else ids)


def _prepare(engine, body: Any, chat: bool):
    """``(request, prompt_ids, max_tokens)`` of one request of ``/v1/completions`` (``chat`` false) or
    ``/v1/chat/completions`` (``openai_protocol``: the fields accepted, and what each does).

    Raises RequestError: the request is refused (its status and field)."""
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
    if request.stream and not hasattr(engine, "submit"):
        raise RequestError(f"stream: the {type(engine).__name__} backend answers each request in one response")
    # completions take max_tokens 0 (chat needs >= 1): the API's empty completion, nothing generated
    max_tokens = 0 if request.max_tokens == 0 else new_token_budget(request, len(prompt_ids), engine.context_length)
    return request, prompt_ids, max_tokens


def _final_choice(tok, choice: Mapping[str, Any], stops: List[str]):
    """``(token_ids, logprobs, text, finish_reason)`` of a finished engine choice, cut at the first stop string."""
    ids, lps, finish = choice["token_ids"], choice["logprobs"], choice["finish_reason"]
    text = tok.decode(ids, skip_special_tokens=True)
    cut = apply_stop(tok, ids, lps, stops)
    if cut is not None:
        ids, lps, text, finish = cut["token_ids"], cut["logprobs"], cut["text"], "stop"
    return ids, lps, text, finish


def _logprobs_field(tok, ids: List[int], lps: List[float], chat: bool) -> Dict[str, Any]:
    pieces = tok.convert_ids_to_tokens(ids)
    if chat:
        return {"content": [{"token": p, "logprob": lp} for p, lp in zip(pieces, lps)]}
    return {"tokens": pieces, "token_logprobs": lps}


def _envelope(engine, chat: bool, chunk: bool, uid: str) -> Dict[str, Any]:
    kind = ("chat.completion.chunk" if chunk else "chat.completion") if chat else "text_completion"
    return {"id": uid, "object": kind, "created": int(time.time()), "model": engine.model_name}


def _completion_response(engine, body: Any, chat: bool) -> Dict[str, Any]:
    """The answer to one non-streaming request (:func:`_prepare`). Raises RequestError: the request is refused."""
    request, prompt_ids, max_tokens = _prepare(engine, body, chat)
    tok = engine.tokenizer
    if max_tokens == 0:
        empty = {"token_ids": [], "logprobs": [], "finish_reason": "length"}
        result = {"policy_version": engine.version, "prompt_token_ids": prompt_ids, "choices": [empty] * request.n}
    else:
        result = engine.generate(
            prompt_ids, max_tokens, request.temperature, request.n, seed=request.seed, top_p=request.top_p
        )
    choices = []
    for i, c in enumerate(result["choices"]):
        ids, lps, text, finish = _final_choice(tok, c, request.stop)
        choice: Dict[str, Any] = {"index": i, "finish_reason": finish, "token_ids": ids}
        choice["message" if chat else "text"] = {"role": "assistant", "content": text} if chat else text
        choice["logprobs"] = _logprobs_field(tok, ids, lps, chat)
        choices.append(choice)
    n_gen = sum(len(c["token_ids"]) for c in choices)
    return {
        **_envelope(engine, chat, False, f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"),
        "policy_version": result["policy_version"],
        "prompt_token_ids": result["prompt_token_ids"],
        "choices": choices,
        "usage": {
            "prompt_tokens": len(result["prompt_token_ids"]),
            "completion_tokens": n_gen,
            "total_tokens": len(result["prompt_token_ids"]) + n_gen,
        },
    }


def _stream_chunks(engine, request, prompt_ids: List[int], max_tokens: int, chat: bool):
    """The server-sent events of one ``stream: true`` request: a chunk per choice and engine slice that has new
    text, the last with its ``finish_reason``, each with the new ``token_ids`` and their log-probs (OpenAI's
    ``text_completion`` / ``chat.completion.chunk`` objects plus ``policy_version``). Joined, a choice's chunks give
    the text and token ids of the same request without ``stream``.

    With ``stop`` strings, the last ``max(len(stop))`` tokens of an unfinished choice are held back (a stop string
    they start is cut off before its text is sent); a token whose text is an incomplete UTF-8 character waits for the
    next one."""
    tok, stops = engine.tokenizer, list(request.stop or [])
    uid = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
    hold = max((len(s) for s in stops), default=0)
    if max_tokens == 0:
        updates, job = [[{"token_ids": [], "logprobs": [], "finish_reason": "length"}] * request.n], None
        version = engine.version
    else:
        job = engine.submit(
            prompt_ids, max_tokens, request.temperature, request.n, seed=request.seed, top_p=request.top_p
        )
        updates, version = None, None
    sent_ids = [0] * request.n
    sent_text = [""] * request.n
    done = [False] * request.n
    if chat:  # OpenAI's first chat chunk: the role
        yield {
            **_envelope(engine, chat, True, uid),
            "choices": [{"index": i, "delta": {"role": "assistant"}, "finish_reason": None} for i in range(request.n)],
        }
    while not all(done):
        if job is not None:
            while True:  # the next slice's choices, or the job's error
                try:
                    snapshot = job.updates.get(timeout=1.0)
                    break
                except queue.Empty:
                    if job.done.is_set() and job.updates.empty():
                        job.wait()  # raises the job's error
                        raise RuntimeError("the engine finished the request without its last choices")
            version = job.version
        else:
            snapshot = updates.pop(0)
        chunks = []
        for i, c in enumerate(snapshot):
            if done[i]:
                continue
            if c["finish_reason"] is not None:
                ids, lps, text, finish = _final_choice(tok, c, stops)
                commit = len(ids)
            else:
                ids, lps, finish = c["token_ids"], c["logprobs"], None
                cut = apply_stop(tok, ids, lps, stops)
                if cut is not None:
                    ids, lps, text, finish = cut["token_ids"], cut["logprobs"], cut["text"], "stop"
                    commit = len(ids)
                else:
                    commit = max(sent_ids[i], len(ids) - hold)
                    text = tok.decode(ids[:commit], skip_special_tokens=True)
                    while commit > sent_ids[i] and text.endswith("\ufffd"):
                        commit -= 1
                        text = tok.decode(ids[:commit], skip_special_tokens=True)
            new_ids, new_lps = ids[sent_ids[i] : commit], lps[sent_ids[i] : commit]
            delta = text[len(sent_text[i]) :]
            if not new_ids and not delta and finish is None:
                continue
            choice: Dict[str, Any] = {"index": i, "finish_reason": finish, "token_ids": new_ids}
            choice["delta" if chat else "text"] = {"content": delta} if chat else delta
            choice["logprobs"] = _logprobs_field(tok, new_ids, new_lps, chat)
            chunks.append(choice)
            sent_ids[i], sent_text[i], done[i] = commit, text, finish is not None
        if chunks:
            yield {**_envelope(engine, chat, True, uid), "policy_version": version, "choices": chunks}


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

        def _stream(self, chunks) -> None:
            """Send ``chunks`` as server-sent events (``data: <json>``, then ``data: [DONE]``) and close; a failure
            after the first chunk is sent as a last ``{"error"}`` event."""
            first = next(chunks)  # a request error surfaces here, before any header is sent
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for chunk in itertools.chain([first], chunks):
                    self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                    self.wfile.flush()
            except Exception as exc:  # noqa: BLE001 - the status is sent: report in the stream
                logger.exception("inference server: streamed request failed")
                error = {"error": {"message": repr(exc), "type": "internal_error"}}
                self.wfile.write(f"data: {json.dumps(error)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

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
                chat = routes[self.path]
                if isinstance(body, dict) and body.get("stream") is True:
                    self._stream(_stream_chunks(engine, *_prepare(engine, body, chat), chat))
                else:
                    self._send(200, _completion_response(engine, body, chat))
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
        """Stop serving HTTP (and the HF engine's scheduler)."""
        self._httpd.shutdown()
        self._httpd.server_close()
        if hasattr(self.engine, "close"):
            self.engine.close()


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
