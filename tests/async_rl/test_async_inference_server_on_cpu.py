"""Inference server of the async mode (verl/async_rl/inference_server.py): log-probs, versions, HTTP, Ray actor."""

from __future__ import annotations

import pytest
import torch

from verl.async_rl.inference_server import InferenceServer, OpenAIClient, StaleWeightsError


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    srv = InferenceServer(tiny_model_dir, num_threads=1)
    yield srv
    srv.shutdown()


def _assert_forward_logprobs(engine, prompt, choice, temperature):
    """A choice's recorded log-probs are those of one forward pass over prompt + its tokens at ``temperature``."""
    ids = torch.tensor([prompt + choice["token_ids"]])
    with torch.no_grad():
        logits = engine.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
    ref = torch.log_softmax(logits, -1).gather(-1, ids[0, len(prompt) :, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(choice["logprobs"]), atol=1e-4)


def test_logprobs_match_a_forward_pass(server):
    engine = server.engine
    prompt = [5, 6, 7, 8]
    out = engine.generate(prompt, max_tokens=6, temperature=0.7, n=2, seed=3)
    assert out["policy_version"] == 0 and len(out["choices"]) == 2
    for choice in out["choices"]:
        _assert_forward_logprobs(engine, prompt, choice, temperature=0.7)
    again = engine.generate(prompt, max_tokens=6, temperature=0.7, n=2, seed=3)
    assert [c["token_ids"] for c in again["choices"]] == [c["token_ids"] for c in out["choices"]]


def test_n_copies_share_one_prefill_and_sample_what_independent_rows_would(server):
    """n > 1: the prompt is prefilled once and its cache copied to the n rows; the tokens drawn from one seed equal
    those of generate's own n-fold expansion (no shared prefill), and so do their log-probs."""
    from transformers import GenerationConfig

    engine = server.engine
    prompt = [5, 6, 7, 8, 9]
    calls = []
    original = engine.model.forward

    def counting(*args, **kwargs):
        calls.append(int(kwargs["input_ids"].shape[0] * kwargs["input_ids"].shape[1]))
        return original(*args, **kwargs)

    engine.model.forward = counting
    try:
        shared = engine.generate(prompt, max_tokens=6, temperature=0.7, n=3, seed=11)
    finally:
        del engine.model.forward
    assert calls[0] == len(prompt) - 1  # one prefill of the prompt, not three
    torch.manual_seed(11)
    config = GenerationConfig(
        do_sample=True,
        temperature=0.7,
        top_k=0,
        top_p=1.0,
        max_new_tokens=6,
        num_return_sequences=3,
        eos_token_id=sorted(engine.eos_token_ids),
        pad_token_id=engine.pad_token_id,
    )
    ids = torch.tensor([prompt])
    with torch.no_grad():
        plain = engine.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    for row, choice in enumerate(shared["choices"]):
        expected = plain[row, len(prompt) :].tolist()
        assert choice["token_ids"] == expected[: len(choice["token_ids"])]


def test_update_weights_is_monotonic(server):
    engine = server.engine
    state = {k: v.clone() for k, v in engine.model.state_dict().items()}
    assert server.update_weights(state, 2) is True and engine.version == 2
    assert server.update_weights(state, 2) is False  # same version: no-op
    with pytest.raises(StaleWeightsError, match="version 1 rejected"):
        server.update_weights(state, 1)
    assert engine.version == 2


def test_http_endpoints_report_version_and_logprobs(server):
    client = OpenAIClient(server.url())
    out = client.completions([5, 6, 7], max_tokens=4, temperature=1.0, n=2, seed=0)
    assert out["policy_version"] == server.policy_version()
    for choice in out["choices"]:
        assert len(choice["token_ids"]) == len(choice["logprobs"]["token_logprobs"]) >= 1
        assert all(lp <= 0 for lp in choice["logprobs"]["token_logprobs"])
    chat = client.chat([{"role": "user", "content": "hi"}], max_tokens=3)
    assert chat["object"] == "chat.completion" and chat["choices"][0]["message"]["role"] == "assistant"
    assert len(chat["choices"][0]["logprobs"]["content"]) == len(chat["choices"][0]["token_ids"])
    with pytest.raises(RuntimeError, match="400.*prompt: Field required"):
        client._post("/completions", {})


def test_ray_actor_serves_on_loopback(ray_session, tiny_model_dir):
    from verl.async_rl.inference_server import start_inference_server

    ray = ray_session
    actor = start_inference_server(tiny_model_dir)
    url = ray.get(actor.url.remote())
    assert url.startswith("http://127.0.0.1:")
    out = OpenAIClient(url).completions("hello", max_tokens=2)
    assert out["policy_version"] == 0
    ray.kill(actor)


def test_backend_choice_is_validated(tiny_model_dir):
    from verl.async_rl.inference_server import make_engine

    with pytest.raises(ValueError, match="backend must be one of"):
        make_engine("sglang", tiny_model_dir)
    with pytest.raises(ValueError, match="need backend=vllm"):
        make_engine("hf", tiny_model_dir, max_model_len=512)
    engine = make_engine("hf", tiny_model_dir)
    assert next(engine.model.parameters()).dtype == torch.float32


def test_concurrent_requests_are_served_in_one_batch(server):
    """Requests queued while the engine is busy are served together by the next holder: one generate call for
    three requests (different prompt lengths, left-padded), each answer's log-probs still those of a forward pass of
    its own prompt; a failing batch hands its error to every waiting request instead of leaving them waiting."""
    engine = server.engine
    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13]]
    results, calls = {}, []
    original = engine.model.generate

    def counting(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape[0])
        return original(*args, **kwargs)

    engine.model.generate = counting
    try:
        _queue_while_busy(
            engine,
            [
                lambda i=i: results.__setitem__(i, engine.generate(prompts[i], max_tokens=5, temperature=0.7, n=2))
                for i in range(3)
            ],
        )
    finally:
        del engine.model.generate
    assert calls == [6]  # one batch: 3 requests x n = 2 rows
    for i, prompt in enumerate(prompts):
        out = results[i]
        assert out["prompt_token_ids"] == prompt and len(out["choices"]) == 2
        for choice in out["choices"]:
            _assert_forward_logprobs(engine, prompt, choice, temperature=0.7)

    errors = []
    engine.model.generate = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("out of memory"))
    try:
        _queue_while_busy(
            engine,
            [
                lambda: errors.append(pytest.raises(RuntimeError, engine.generate, [5, 6], max_tokens=3))
                for _ in range(2)
            ],
        )
    finally:
        del engine.model.generate
    assert len(errors) == 2 and all("out of memory" in str(e.value) for e in errors)


def _queue_while_busy(engine, calls):
    """Run each of ``calls`` (each one ``engine.generate`` request) in its own thread while the engine's lock is held,
    so that all of them queue up; release the lock and wait for every thread."""
    import threading

    with engine._lock:
        threads = [threading.Thread(target=call) for call in calls]
        for thread in threads:
            thread.start()
        while len(engine._queue) < len(calls):
            threading.Event().wait(0.01)
    for thread in threads:
        thread.join(timeout=120)


def _post(server, route: str, body) -> tuple:
    """(status, JSON answer) of one raw POST, the body sent as given (no client defaults)."""
    import requests

    data = body if isinstance(body, (bytes, str)) else None
    answer = requests.post(server.url() + route, json=None if data else body, data=data, timeout=60)
    return answer.status_code, answer.json()


@pytest.mark.parametrize(
    "field, value",
    [
        ("tools", [{"type": "function", "function": {"name": "f"}}]),
        ("tool_choice", "auto"),
        ("echo", True),
        ("best_of", 2),
        ("logit_bias", {"5": 10}),
        ("presence_penalty", 0.5),
        ("logprobs", 3),
    ],
)
def test_fields_the_server_does_not_honour_are_refused_by_name(server, field, value):
    status, answer = _post(server, "/completions", {"prompt": [5, 6, 7], "max_tokens": 2, field: value})
    assert status == 400 and answer["error"]["message"].startswith(f"{field}:"), answer


def test_max_tokens_and_n_as_the_api_defines_them(server):
    status, empty = _post(server, "/completions", {"prompt": [5, 6, 7], "max_tokens": 0, "n": 2})
    assert status == 200 and [c["token_ids"] for c in empty["choices"]] == [[], []]
    assert {c["finish_reason"] for c in empty["choices"]} == {"length"} and empty["usage"]["completion_tokens"] == 0
    status, chat = _post(
        server, "/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}
    )
    assert status == 400 and chat["error"]["message"].startswith("max_tokens:")
    for n in (0, -1):
        status, answer = _post(server, "/completions", {"prompt": [5], "n": n})
        assert status == 400 and answer["error"]["message"].startswith("n:")
    status, three = _post(server, "/completions", {"prompt": [5, 6], "max_tokens": 2, "n": 3, "seed": 1})
    assert status == 200 and len(three["choices"]) == 3
    context = server.engine.context_length
    status, long = _post(server, "/completions", {"prompt": [5, 6, 7], "max_tokens": 10**6})
    assert (
        status == 400
        and f"context ({context})" in long["error"]["message"]
        and str(context - 3) in long["error"]["message"]
    )


def test_stop_strings_end_a_choice_before_them(server):
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 12, "temperature": 0}
    status, plain = _post(server, "/completions", body)
    text = plain["choices"][0]["text"]
    assert status == 200 and len(text) > 4
    stop = text[2:4]  # a piece from inside the greedy text: the same greedy tokens, cut before it
    status, cut = _post(server, "/completions", {**body, "stop": [stop, "never appears 123"]})
    choice = cut["choices"][0]
    assert status == 200 and choice["finish_reason"] == "stop" and choice["text"] == text[: text.find(stop)]
    ids = choice["token_ids"]
    assert ids == plain["choices"][0]["token_ids"][: len(ids)] and len(ids) == len(choice["logprobs"]["token_logprobs"])
    assert stop in server.engine.tokenizer.decode(ids) and stop not in server.engine.tokenizer.decode(ids[:-1])
    status, bad = _post(server, "/completions", {**body, "stop": ["a", "b", "c", "d", "e"]})
    assert status == 400 and bad["error"]["message"].startswith("stop:")


def test_top_p_samples_from_the_nucleus_and_reports_its_log_probs(server):
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 6, "temperature": 1.0, "seed": 0}
    status, tiny_nucleus = _post(server, "/completions", {**body, "top_p": 1e-6})  # only the likeliest token
    _, greedy = _post(server, "/completions", {**body, "temperature": 0})
    choice = tiny_nucleus["choices"][0]
    assert status == 200 and choice["token_ids"] == greedy["choices"][0]["token_ids"]
    assert choice["logprobs"]["token_logprobs"] == pytest.approx([0.0] * len(choice["token_ids"]), abs=1e-6)
    status, answer = _post(server, "/completions", {**body, "top_p": 0})
    assert status == 400 and answer["error"]["message"].startswith("top_p:")


def test_bad_requests_are_4xx_naming_the_field(server):
    vocab = server.engine.vocab_size
    cases = [
        ("/completions", {"prompt": [5, vocab]}, 400, f"prompt[1]: token id {vocab}"),
        ("/completions", {"prompt": [5, -1]}, 400, "prompt[1]"),
        ("/completions", {"prompt": ""}, 400, "prompt: no tokens"),
        ("/chat/completions", {"messages": [{"role": "user"}]}, 400, "messages[0].content: Field required"),
        ("/chat/completions", {"messages": [{"role": "user", "content": None}]}, 400, "messages[0].content"),
        ("/chat/completions", {"messages": []}, 400, "messages:"),
        ("/chat/completions", {"messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
        ("/completions", {"prompt": [5], "model": "another-model"}, 404, "model: 'another-model' is not served"),
        ("/completions", {"prompt": [5], "temperature": -1}, 400, "temperature:"),
        ("/completions", b"{not json", 400, "not JSON"),
        ("/completions", b"[1, 2]", 400, "JSON object"),
    ]
    for route, body, code, text in cases:
        status, answer = _post(server, route, body)
        assert status == code and text in answer["error"]["message"], (body, answer)
    status, ok = _post(server, "/completions", {"prompt": [5, 6], "max_tokens": 1})  # still serving
    assert status == 200 and ok["choices"][0]["token_ids"]


def test_a_server_bound_to_every_interface_advertises_a_reachable_address(tiny_model_dir):
    import requests

    srv = InferenceServer(tiny_model_dir, num_threads=1, host="0.0.0.0")
    try:
        url = srv.url()
        assert "0.0.0.0" not in url
        assert requests.get(url.rsplit("/v1", 1)[0] + "/health", timeout=10).json()["status"] == "ok"
    finally:
        srv.shutdown()
