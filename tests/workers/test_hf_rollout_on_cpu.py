"""HFRollout on the tiny model: output layout, masks and EOS handling, greedy determinism, n > 1 interleaving."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from verl.protocol import DataProto
from verl.trainer.config_utils import default_section
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.workers.rollout.hf_rollout import HFRollout

RESPONSE_LENGTH = 6


@pytest.fixture(scope="module")
def prompts(tokenizer):
    tokenizer.padding_side = "left"
    enc = tokenizer(["hello", "a longer prompt than the first one", "tool call?"], return_tensors="pt", padding=True)
    position_ids = compute_position_id_with_mask(enc["attention_mask"])
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"], "position_ids": position_ids}


def rollout_config(**overrides):
    base = dict(
        response_length=RESPONSE_LENGTH,
        temperature=1.0,
        top_k=-1,
        top_p=1.0,
        do_sample=True,
        micro_batch_size=2,
        dtype="bfloat16",
        val_kwargs=dict(do_sample=False, temperature=0.0, top_k=-1, top_p=1.0, n=1),
    )
    base.update(overrides)
    return default_section("actor_rollout_ref.rollout", **base)


def generate(model, tokenizer, prompts, **meta):
    data = DataProto.from_dict(tensors={k: v.clone() for k, v in prompts.items()}, meta_info=meta)
    return HFRollout(model, rollout_config(), tokenizer).generate_sequences(data)


def test_layout_and_masks(causal_lm, tokenizer, prompts):
    out = generate(causal_lm, tokenizer, prompts, do_sample=True)
    batch = out.batch
    size, prompt_len = prompts["input_ids"].shape
    assert batch["prompts"].shape == (size, prompt_len)
    assert batch["responses"].shape == batch["response_mask"].shape == (size, RESPONSE_LENGTH)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert batch[key].shape == (size, prompt_len + RESPONSE_LENGTH), key
    assert torch.equal(batch["input_ids"], torch.cat([batch["prompts"], batch["responses"]], dim=1))
    assert torch.equal(batch["attention_mask"][:, prompt_len:], batch["response_mask"])
    assert torch.equal(batch["attention_mask"][:, :prompt_len], prompts["attention_mask"])
    # positions continue the prompt's last position one by one
    last = prompts["position_ids"][:, -1:]
    assert torch.equal(batch["position_ids"][:, prompt_len:], last + torch.arange(1, RESPONSE_LENGTH + 1))


def test_greedy_is_deterministic_and_validation_uses_val_kwargs(causal_lm, tokenizer, prompts):
    first = generate(causal_lm, tokenizer, prompts, do_sample=False).batch["responses"]
    second = generate(causal_lm, tokenizer, prompts, do_sample=False).batch["responses"]
    validation = generate(causal_lm, tokenizer, prompts, validate=True).batch["responses"]
    assert torch.equal(first, second) and torch.equal(first, validation)
    # greedy = argmax of a direct forward for the first generated token
    with torch.no_grad():
        logits = causal_lm(**{k: prompts[k] for k in ("input_ids", "attention_mask", "position_ids")}).logits
    assert torch.equal(first[:, 0], logits[:, -1].argmax(-1))


def test_stops_at_eos_and_pads_after_it(causal_lm, tokenizer, prompts):
    """Declare the token greedy decoding emits first for row 0 as EOS: that row must end right there."""
    greedy = generate(causal_lm, tokenizer, prompts, do_sample=False).batch["responses"]
    fake_eos = int(greedy[0, 0])
    pad = tokenizer.pad_token_id
    out = generate(causal_lm, tokenizer, prompts, do_sample=False, eos_token_id=fake_eos, pad_token_id=pad).batch
    for row in range(len(greedy)):
        hits = (greedy[row] == fake_eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else RESPONSE_LENGTH  # mask covers up to and including the first EOS
        assert out["response_mask"][row].tolist() == [1] * end + [0] * (RESPONSE_LENGTH - end)
        assert torch.equal(out["responses"][row, :end], greedy[row, :end])
        assert torch.all(out["responses"][row, end:] == pad)
    assert out["response_mask"][0].sum() == 1


def test_ignore_eos_is_refused(causal_lm, tokenizer):
    """rollout.ignore_eos=true (vLLM's key): generate always stops at EOS, so the HF rollout refuses it."""
    with pytest.raises(ValueError, match="ignore_eos=true: the HF rollout cannot decode past EOS"):
        HFRollout(causal_lm, rollout_config(ignore_eos=True), tokenizer)


def test_n_samples_are_interleaved(causal_lm, tokenizer, prompts):
    torch.manual_seed(0)
    out = generate(causal_lm, tokenizer, prompts, do_sample=True, n=2).batch
    assert out["responses"].shape[0] == 2 * prompts["input_ids"].shape[0]
    assert torch.equal(out["prompts"], prompts["input_ids"].repeat_interleave(2, dim=0))
    assert not torch.equal(out["responses"][0], out["responses"][1])  # two independent samples of prompt 0


def test_vllm_rollout_without_vllm_says_how_to_install(causal_lm, tokenizer):
    pytest.importorskip("verl.workers.rollout.vllm_rollout")
    # under pytest tests/ is on sys.path, so `import vllm` alone would find tests/vllm as a namespace package
    spec = importlib.util.find_spec("vllm")
    if spec is not None and spec.origin not in (None, "namespace"):
        pytest.skip("vllm is installed")
    from verl.workers.rollout.vllm_rollout import vLLMRollout

    with pytest.raises(ImportError, match=r"pip install \.\[gpu\].*setup_vllm_cpu_env\.sh") as err:
        vLLMRollout(causal_lm, rollout_config(), tokenizer, default_section("actor_rollout_ref.model", path="tiny"))
    assert "\n" not in str(err.value)  # one line


def test_max_new_tokens_and_stop_strings(causal_lm, tokenizer, prompts):
    """Per-call ``meta_info`` budget (the response width follows it) and stop strings (the RLVCR alternatives)."""
    out = generate(causal_lm, tokenizer, prompts, do_sample=False, max_new_tokens=3)
    assert out.batch["responses"].shape == (3, 3)
    assert out.batch["input_ids"].shape[1] == prompts["input_ids"].shape[1] + 3
    full = generate(causal_lm, tokenizer, prompts, do_sample=False).batch["responses"]
    assert torch.equal(out.batch["responses"], full[:, :3])  # greedy: the same first tokens
    stop = tokenizer.decode(full[0, :1])  # row 0 stops after its first token; padding (which ends the mask) follows
    stopped = generate(causal_lm, tokenizer, prompts, do_sample=False, stop=[stop]).batch
    assert stopped["responses"][0, 0] == full[0, 0] and (stopped["responses"][0, 1:] == tokenizer.pad_token_id).all()
    assert stopped["response_mask"][0, 2:].sum() == 0
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(causal_lm, tokenizer, prompts, max_new_tokens=0)


@pytest.mark.parametrize("do_sample", [False, True])
def test_shared_prefill_decodes_the_same_tokens(causal_lm, tokenizer, prompts, do_sample):
    """``shared_prefill``: each distinct prompt prefilled once, its cache rows copied to its copies; the same tokens as
    plain generation of the repeated prompts, greedy and sampled from the same seed, whether the copies come from the
    trainer's repeat (meta n=1) or from ``meta_info['n']``."""
    n = 3
    repeated = {k: v.repeat_interleave(n, dim=0) for k, v in prompts.items()}
    outputs, prefills = [], []
    for shared, tensors, meta_n in ((False, repeated, 1), (True, repeated, 1), (True, prompts, n)):
        data = DataProto.from_dict(
            tensors={k: v.clone() for k, v in tensors.items()}, meta_info={"do_sample": do_sample, "n": meta_n}
        )
        torch.manual_seed(7)
        micro = 9 // meta_n  # the same 9 rows per generate call
        rollout = HFRollout(causal_lm, rollout_config(shared_prefill=shared, micro_batch_size=micro), tokenizer)
        original = rollout._prefill_once
        rollout._prefill_once = lambda ids, mask, synced: prefills.append(original(ids, mask, synced)) or prefills[-1]
        outputs.append(rollout.generate_sequences(data).batch)
    assert len(prefills) == 2 and all(cache is not None for cache in prefills)
    assert all(cache.layers[0].keys.shape[0] == 9 for cache in prefills)  # 3 prompts' rows copied to 9 rows
    unshared = outputs[0]
    for shared in outputs[1:]:
        for key in ("responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
            assert torch.equal(shared[key], unshared[key]), key
    if do_sample:  # the samples of a prompt differ: each row decodes from its own copy of the cache
        assert not torch.equal(unshared["responses"][0], unshared["responses"][1])


def test_shared_prefill_computes_each_distinct_prompt_once(causal_lm, tokenizer, prompts):
    rollout = HFRollout(causal_lm, rollout_config(shared_prefill=True), tokenizer)
    calls = []
    handle = causal_lm.register_forward_pre_hook(
        lambda module, args, kwargs: calls.append(kwargs["input_ids"].shape), with_kwargs=True
    )
    try:
        ids = prompts["input_ids"].repeat_interleave(4, dim=0)
        mask = prompts["attention_mask"].repeat_interleave(4, dim=0)
        assert rollout._prefill_once(ids, mask) is not None
        assert rollout._prefill_once(prompts["input_ids"], prompts["attention_mask"]) is None  # nothing repeats
    finally:
        handle.remove()
    assert calls == [torch.Size([3, ids.shape[1] - 1])]


@pytest.mark.parametrize("sampling", [dict(temperature=0.7), dict(temperature=1.3, top_k=5, top_p=0.9)])
@pytest.mark.parametrize("shared", [False, True])
def test_calculate_log_probs_is_the_sampling_distribution(causal_lm, tokenizer, prompts, sampling, shared):
    """rollout.calculate_log_probs: each sampled token's log-prob under the distribution it was sampled from (the
    temperature, then top-k and top-p renormalised), checked against a teacher-forced forward of the same rows."""
    torch.manual_seed(0)
    cfg = rollout_config(calculate_log_probs=True, shared_prefill=shared, dtype="float32", **sampling)
    data = DataProto.from_dict(tensors={k: v.clone() for k, v in prompts.items()}, meta_info={"n": 2})
    out = HFRollout(causal_lm, cfg, tokenizer).generate_sequences(data).batch
    with torch.no_grad():
        logits = (
            causal_lm(
                input_ids=out["input_ids"], attention_mask=out["attention_mask"], position_ids=out["position_ids"]
            )
            .logits[:, -RESPONSE_LENGTH - 1 : -1]
            .float()
        )
    logits = logits / sampling["temperature"]
    if "top_k" in sampling:
        kth = logits.topk(sampling["top_k"], dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = torch.softmax(logits, -1)
        order = probs.sort(dim=-1, descending=True)
        cumulative = order.values.cumsum(-1)
        drop_sorted = (cumulative - order.values) > sampling["top_p"]  # tokens after the nucleus is full
        drop = torch.zeros_like(drop_sorted).scatter(-1, order.indices, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    expected = torch.log_softmax(logits, -1).gather(-1, out["responses"].unsqueeze(-1)).squeeze(-1)
    mask = out["response_mask"].bool()
    assert out["rollout_log_probs"].dtype == torch.float32 and not out["rollout_log_probs"][~mask].any()
    torch.testing.assert_close(out["rollout_log_probs"][mask], expected[mask], atol=2e-5, rtol=0)


@pytest.mark.parametrize("shared_prefill", [False, True])
def test_static_cache_decodes_the_same_tokens(causal_lm, tokenizer, prompts, shared_prefill):
    """``rollout.cache_implementation=static``: greedy and seeded sampled tokens equal the dynamic cache's (3 prompts
    x n=2, uneven left padding); with shared prefill asked for, the static path prefills every row instead.
    ``dynamic`` is generate's default (null): it keeps the shared prefill."""
    outputs = []
    for cache in (None, "static", "dynamic"):
        data = DataProto.from_dict(
            tensors={k: v.clone() for k, v in prompts.items()}, meta_info={"do_sample": True, "n": 2}
        )
        torch.manual_seed(11)
        rollout = HFRollout(
            causal_lm,
            rollout_config(cache_implementation=cache, shared_prefill=shared_prefill, micro_batch_size=3),
            tokenizer,
        )
        if cache == "static":
            rollout._prefill_once = lambda *args: pytest.fail("a static cache must not be prefilled as a dynamic one")
        sampled = rollout.generate_sequences(data).batch
        greedy = rollout.generate_sequences(
            DataProto.from_dict(tensors={k: v.clone() for k, v in prompts.items()}, meta_info={"do_sample": False})
        ).batch
        outputs.append((sampled, greedy))
    for other in outputs[1:]:
        for dynamic, static in zip(outputs[0], other):
            for key in ("responses", "response_mask", "position_ids"):
                assert torch.equal(static[key], dynamic[key]), key


def test_cache_implementation_is_checked_at_load():
    from verl.trainer.config_utils import ConfigError, default_config, validate_config

    config = default_config()
    config.actor_rollout_ref.rollout.cache_implementation = "sliding"
    with pytest.raises(ConfigError, match="rollout.cache_implementation='sliding'"):
        validate_config(config, check_files=False)
    config.actor_rollout_ref.rollout.cache_implementation = "static"
    config.actor_rollout_ref.rollout.name = "vllm"
    with pytest.raises(ConfigError, match="only with rollout.name=hf"):
        validate_config(config, check_files=False)
