"""The HF engine decodes a slice at a time (verl/async_rl/hf_engine.py): slicing changes nothing that is generated, a
short request is answered while a whole-context one runs, weight updates wait for the running jobs, and ``stream``
sends the same tokens as server-sent events (over real HTTP, several clients at once)."""

from __future__ import annotations

import json
import threading
import time

import pytest
import requests
import torch

from verl.async_rl.hf_engine import PolicyEngine
from verl.async_rl.inference_server import InferenceServer


@pytest.fixture(scope="module")
def engines(tiny_model_dir):
    """One engine that never slices (one generate per job) and one that slices every 3 tokens."""
    whole, sliced = PolicyEngine(tiny_model_dir, slice_tokens=10**6), PolicyEngine(tiny_model_dir, slice_tokens=3)
    yield whole, sliced
    whole.close()
    sliced.close()


@pytest.mark.parametrize("temperature, top_p, n", [(0.0, 1.0, 1), (0.8, 1.0, 3), (1.0, 0.9, 2)])
def test_slicing_changes_nothing_generated(engines, temperature, top_p, n):
    """Greedy, sampled (one seed) and nucleus: token ids equal and log-probs equal to float32 rounding, also for
    copies that end (EOS) in an earlier slice than the others."""
    whole, sliced = engines
    prompt = [5, 6, 7, 8, 9]
    a = whole.generate(prompt, max_tokens=17, temperature=temperature, n=n, seed=4, top_p=top_p)
    b = sliced.generate(prompt, max_tokens=17, temperature=temperature, n=n, seed=4, top_p=top_p)
    assert [c["token_ids"] for c in a["choices"]] == [c["token_ids"] for c in b["choices"]]
    assert [c["finish_reason"] for c in a["choices"]] == [c["finish_reason"] for c in b["choices"]]
    for ca, cb in zip(a["choices"], b["choices"]):
        assert torch.allclose(torch.tensor(ca["logprobs"]), torch.tensor(cb["logprobs"]), atol=1e-5)


def test_a_seeded_request_keeps_its_samples_while_others_sample_in_between(engines):
    _, sliced = engines
    alone = sliced.generate([5, 6, 7], max_tokens=12, temperature=1.0, seed=9)
    seeded = sliced.submit([5, 6, 7], max_tokens=12, temperature=1.0, seed=9)
    others = [sliced.submit([11, 12], max_tokens=12, temperature=1.0) for _ in range(3)]
    assert seeded.wait()["choices"] == alone["choices"]
    assert all(len(o.wait()["choices"][0]["token_ids"]) >= 1 for o in others)


def test_a_short_request_is_answered_while_a_whole_context_one_runs(tiny_model_dir):
    engine = PolicyEngine(tiny_model_dir)  # the default slice
    try:
        prompt = [5, 6, 7, 8]
        long = engine.submit(prompt, max_tokens=engine.context_length - len(prompt), temperature=0.0)
        long.updates.get(timeout=60)  # its first slice is decoded: it is running
        start = time.monotonic()
        short = engine.generate([9, 10, 11], max_tokens=4, temperature=0.0)
        waited = time.monotonic() - start
        assert len(short["choices"][0]["token_ids"]) >= 1 and waited < 5.0, waited
        assert not long.done.is_set()  # still decoding the long one
    finally:
        engine.close()


def test_a_weight_update_waits_for_running_jobs(tiny_model_dir):
    """Every choice of one answer comes from one version: an update sent mid-job lands after it; a request sent
    after the update is decoded by the new version."""
    engine = PolicyEngine(tiny_model_dir, slice_tokens=2)
    try:
        running = engine.submit([5, 6, 7], max_tokens=40, temperature=0.0)
        running.updates.get(timeout=60)
        state = {k: v.clone() for k, v in engine.model.state_dict().items()}
        done = []
        updater = threading.Thread(target=lambda: done.append(engine.update_weights(state, 1)))
        updater.start()
        result = running.wait()
        updater.join(timeout=60)
        assert done == [True] and result["policy_version"] == 0
        assert engine.generate([5, 6], max_tokens=2)["policy_version"] == 1
    finally:
        engine.close()


def _events(url: str, body: dict) -> list:
    answer = requests.post(url, json=body, stream=True, timeout=120)
    assert answer.status_code == 200 and answer.headers["Content-Type"] == "text/event-stream", answer.text
    lines = [line for line in answer.iter_lines(decode_unicode=True) if line]
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    return [json.loads(line[len("data: ") :]) for line in lines[:-1]]


@pytest.fixture(scope="module")
def sliced_server(tiny_model_dir):
    srv = InferenceServer(tiny_model_dir, num_threads=1)
    srv.engine.slice_tokens = 4  # several chunks per choice
    yield srv
    srv.shutdown()


@pytest.mark.parametrize("route", ["/completions", "/chat/completions"])
def test_stream_sends_the_tokens_of_the_same_request_without_it(sliced_server, route):
    chat = route == "/chat/completions"
    prompt = {"messages": [{"role": "user", "content": "hi"}]} if chat else {"prompt": [5, 6, 7, 8]}
    body = {**prompt, "max_tokens": 14, "temperature": 1.0, "seed": 2, "n": 2}
    plain = requests.post(sliced_server.url() + route, json=body, timeout=120).json()
    events = _events(sliced_server.url() + route, {**body, "stream": True})
    assert len(events) > 2 and all(
        e["object"] == ("chat.completion.chunk" if chat else "text_completion") for e in events
    )
    for i, choice in enumerate(plain["choices"]):
        parts = [c for e in events for c in e["choices"] if c["index"] == i]
        text = "".join((c["delta"].get("content", "") if chat else c["text"]) for c in parts)
        ids = [t for c in parts for t in c.get("token_ids", [])]
        assert ids == choice["token_ids"]
        assert text == (choice["message"]["content"] if chat else choice["text"])
        assert [c["finish_reason"] for c in parts if c["finish_reason"]] == [choice["finish_reason"]]
        logprobs = [
            x["logprob"] if chat else x
            for c in parts
            for x in (c.get("logprobs") or {}).get("content" if chat else "token_logprobs", [])
        ]
        expected = choice["logprobs"]["content"] if chat else choice["logprobs"]["token_logprobs"]
        assert logprobs == pytest.approx([x["logprob"] for x in expected] if chat else expected, abs=1e-5)


def test_stream_with_stop_strings_never_sends_text_past_them(sliced_server):
    body = {"prompt": [5, 6, 7, 8], "max_tokens": 16, "temperature": 0}
    text = requests.post(sliced_server.url() + "/completions", json=body, timeout=120).json()["choices"][0]["text"]
    stop = text[5:7]
    events = _events(sliced_server.url() + "/completions", {**body, "stop": [stop], "stream": True})
    assert "".join(c["text"] for e in events for c in e["choices"]) == text[: text.find(stop)]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_concurrent_streaming_and_plain_clients(sliced_server):
    """Four clients at once, two streaming: every answer complete and equal to the same request sent alone."""
    url = sliced_server.url() + "/completions"
    bodies = [{"prompt": [5 + i, 6, 7], "max_tokens": 10, "temperature": 0} for i in range(4)]
    alone = [requests.post(url, json=b, timeout=120).json()["choices"][0]["token_ids"] for b in bodies]
    got = {}

    def run(i):
        if i % 2:
            got[i] = [
                t for e in _events(url, {**bodies[i], "stream": True}) for c in e["choices"] for t in c["token_ids"]
            ]
        else:
            got[i] = requests.post(url, json=bodies[i], timeout=120).json()["choices"][0]["token_ids"]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert [got[i] for i in range(4)] == alone


def test_stream_refusals_are_400_before_any_event(sliced_server):
    answer = requests.post(
        sliced_server.url() + "/completions",
        json={"prompt": [5], "stream": True, "stream_options": {"include_usage": True}},
        timeout=60,
    )
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("stream_options:")
