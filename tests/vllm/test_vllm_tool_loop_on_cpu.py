"""The executing multi-turn loop over vLLMRollout: the same greedy episodes as over HFRollout, token identity, and
the trainer's log-probs against vLLM's on every policy token (the maximum difference is reported). vLLM venv only."""

from __future__ import annotations

import copy


import vllm_testlib
from vllm_testlib import LP_ATOL, agent_testlib, require_vllm

require_vllm()

import torch  # noqa: E402

from agent_system.multi_turn_rollout.tool_loop import (  # noqa: E402
    LoopConfig,
    RolloutGenerator,
    outputs_to_data_proto,
    run_tool_loop,
    tool_loop_metrics,
)
from verl.trainer.config_utils import default_section  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402
from verl.workers.rollout.hf_rollout import HFRollout  # noqa: E402
from verl.workers.rollout.vllm_rollout import vLLMRollout  # noqa: E402

lib = agent_testlib()
TURN, RESPONSE = 16, 160


def rollout_config():
    return vllm_testlib.rollout_config(prompt_length=512, response_length=TURN, micro_batch_size=4)


def eos_scaled(tiny_model_dir, tokenizer, scale: float):
    """The tiny model with EOS's (tied) embedding ``scale`` times the unit mean final hidden state of the episodes'
    prompts, so turns end after a few tokens (vLLM's Llama has no lm_head bias to load): at 0.1 greedy turns are EOS
    at once (the episodes still grow by user turns), at 0.9 EOS has ~0.2 probability per sampled token."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    prompts = [
        tokenizer.apply_chat_template(e.reset(), add_generation_prompt=True, return_dict=True)["input_ids"]
        for e in episodes()
    ]
    with torch.no_grad():
        hidden = torch.cat([model(torch.tensor([p]), output_hidden_states=True).hidden_states[-1][0] for p in prompts])
        model.lm_head.weight[2] = scale * hidden.mean(0) / hidden.mean(0).norm()
    return model


def vllm_rollout(model, tokenizer, tiny_model_dir):
    return vLLMRollout(
        model, rollout_config(), tokenizer, default_section("actor_rollout_ref.model", path=tiny_model_dir)
    )


def episodes():
    return [lib.CountingEpisode(f"question {k}" + " pad" * k, follow_ups=2, obs_words=3 + k) for k in range(4)]


def play(rollout, tokenizer, do_sample: bool):
    gen = lib.Recording(RolloutGenerator(rollout, tokenizer, do_sample=do_sample))
    cfg = LoopConfig(tool_format="odd", max_turns=5, max_tokens_per_turn=TURN, max_response_length=RESPONSE)
    return run_tool_loop(episodes(), gen, tokenizer, cfg), gen


def test_greedy_episodes_equal_the_hf_rollouts(tiny_model_dir, tokenizer, monkeypatch):
    lib.odd_format(monkeypatch)
    model = eos_scaled(tiny_model_dir, tokenizer, 0.1)
    with_vllm, _ = play(vllm_rollout(model, tokenizer, tiny_model_dir), tokenizer, do_sample=False)
    with_hf, _ = play(HFRollout(copy.deepcopy(model), rollout_config(), tokenizer), tokenizer, do_sample=False)
    assert [o.response_ids for o in with_vllm] == [o.response_ids for o in with_hf]
    assert [o.response_mask for o in with_vllm] == [o.response_mask for o in with_hf]
    assert sum(o.turns for o in with_vllm) > len(with_vllm)


def test_sampled_episodes_log_probs_equal_the_trainers(tiny_model_dir, tokenizer, monkeypatch):
    lib.odd_format(monkeypatch)
    model = eos_scaled(tiny_model_dir, tokenizer, 0.9)
    outs, gen = play(vllm_rollout(model, tokenizer, tiny_model_dir), tokenizer, do_sample=True)
    assert sum(o.turns for o in outs) > len(outs) and any(o.calls for o in outs)
    for i, out in enumerate(outs):  # token identity: the policy's ids are exactly the sampled ids
        assert [t for t, m in zip(out.response_ids, out.response_mask) if m] == [t for s in gen.seen[i] for t in s]
    data = outputs_to_data_proto(outs, tokenizer.pad_token_id, response_length=RESPONSE)
    data.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=False)
    actor = DataParallelPPOActor(default_section("actor_rollout_ref.actor", use_remove_padding=True), model)
    log_probs, _ = actor.compute_log_prob(data)
    mask = data.batch["response_mask"].bool()
    diff = (log_probs - data.batch["rollout_log_probs"])[mask].abs().max().item()
    metrics = tool_loop_metrics(outs)
    print(
        f"vLLM loop: turns {[o.turns for o in outs]} calls {[len(o.calls) for o in outs]} "
        f"policy tokens {int(mask.sum())} max |log-prob diff| {diff:.2e} metrics {metrics}"
    )
    assert diff < LP_ATOL, diff
