"""The executing multi-turn loop: token identity (the ids trained on are the ids sampled plus the observations'),
masks, stop reasons, observation budget, batching, and the trainer's log-probs equal to the HF rollout's."""

from __future__ import annotations


import pytest
import torch

from agent_system.multi_turn_rollout.tool_loop import (
    LoopConfig,
    RolloutGenerator,
    ScriptedGenerator,
    TurnRenderer,
    outputs_to_data_proto,
    run_tool_loop,
    tool_loop_metrics,
)
from verl.trainer.config_utils import default_section
from verl.utils.reward_score import tool_formats
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.hf_rollout import HFRollout

from tool_loop_testlib import CountingEpisode, Recording, eos_biased, odd_format


def test_scripted_episode_layout_and_masks(tokenizer):
    call = tool_formats.render_calls([{"name": "lookup", "parameters": {"q": "x"}}], "toolrl")
    scripts = [[call, "<response> 4 </response>", "<response> done </response>"], ["<response> 7 </response>"]]
    episodes = [CountingEpisode("What is 2+2?"), CountingEpisode("Seven?", follow_ups=0)]
    gen = Recording(ScriptedGenerator(tokenizer, scripts))
    outs = run_tool_loop(episodes, gen, tokenizer, LoopConfig(max_observation_tokens=10))
    first, second = outs
    assert [o.stop_reason for o in outs] == ["answer", "answer"]
    assert (first.turns, second.turns) == (3, 1)
    assert episodes[0].executed == [[{"name": "lookup", "parameters": {"q": "x"}}]]
    # token identity: the response is the sampled ids, then the template's ids for the observation / next user turn
    renderer = TurnRenderer(tokenizer)
    obs = tokenizer.decode(tokenizer.encode(" ".join(["obs"] * 40), add_special_tokens=False)[:10])
    expected = (
        gen.seen[0][0]
        + renderer.ids([{"role": "tool", "content": obs}])
        + gen.seen[0][1]
        + renderer.ids([{"role": "user", "content": "And then?"}])
        + gen.seen[0][2]
    )
    assert first.response_ids == expected
    policy = [t for t, m in zip(first.response_ids, first.response_mask) if m]
    assert policy == [t for turn in gen.seen[0] for t in turn]
    assert first.calls[0].obs_tokens == 10 and first.calls[0].truncated
    # the whole episode is the chat template's rendering of the conversation (this template round-trips)
    conversation = episodes[0].reset() + [
        {"role": "assistant", "content": call},
        {"role": "tool", "content": obs},
        {"role": "assistant", "content": "<response> 4 </response>"},
        {"role": "user", "content": "And then?"},
        {"role": "assistant", "content": "<response> done </response>"},
    ]
    rendered = tokenizer.apply_chat_template(conversation, tokenize=False)
    assert tokenizer.decode(first.prompt_ids + first.response_ids) + "\n" == rendered
    metrics = tool_loop_metrics(outs)
    assert metrics["tool_loop/calls_per_episode"] == 0.5
    assert metrics["tool_loop/obs_tokens_per_call"] == 10.0
    assert metrics["tool_loop/stop_answer"] == 1.0

    batch = outputs_to_data_proto(outs, tokenizer.pad_token_id, response_length=256).batch
    width = len(first.response_ids)
    assert batch["response_mask"][0, :width].tolist() == first.response_mask
    assert batch["attention_mask"][0, -256:].sum() == width and batch["response_mask"][0].sum() < width
    assert batch["prompts"].shape[1] == max(len(o.prompt_ids) for o in outs)
    assert "rollout_log_probs" not in batch.keys()  # the scripted sampler records none: no zeros posing as them


def test_stop_reasons_and_limits(tokenizer):
    call = tool_formats.render_calls([{"name": "lookup", "parameters": {}}], "toolrl")
    scripts = [[call] * 5, ["x " * 100], [call] * 5]
    cfg = LoopConfig(max_turns=2, max_tokens_per_turn=64, max_observation_tokens=4)
    outs = run_tool_loop(
        [CountingEpisode("q") for _ in range(3)], ScriptedGenerator(tokenizer, scripts), tokenizer, cfg
    )
    assert outs[0].stop_reason == "max_turns" and outs[0].turns == 2 and len(outs[0].calls) == 2
    assert outs[1].stop_reason == "length" and len(outs[1].response_ids) == 64
    prompt = len(outs[2].prompt_ids)
    short = run_tool_loop(
        [CountingEpisode("q")], ScriptedGenerator(tokenizer, scripts[2:]), tokenizer, LoopConfig(max_model_len=prompt)
    )
    assert short[0].stop_reason == "context" and short[0].turns == 0
    with pytest.raises(ValueError, match="max_turns"):
        LoopConfig(max_turns=0)
    with pytest.raises(ValueError, match="registered"):
        LoopConfig(tool_format="nope")


@pytest.mark.parametrize("remove_padding", [False, True])
def test_hf_rollout_log_probs_equal_the_trainers(causal_lm, tokenizer, monkeypatch, remove_padding):
    """Sampled episodes through HFRollout: the actor's log-probs on the policy's tokens equal the rollout's
    (float32, 1e-5), with observations and user turns between the turns and episodes of different lengths."""
    odd_format(monkeypatch)
    model = eos_biased(causal_lm, tokenizer.eos_token_id)
    rollout_cfg = default_section(
        "actor_rollout_ref.rollout",
        response_length=16,
        temperature=1.0,
        top_k=-1,
        top_p=1.0,
        do_sample=True,
        dtype="float32",
        calculate_log_probs=True,
    )
    torch.manual_seed(0)
    episodes = [CountingEpisode(f"question {k}" + " pad" * k, follow_ups=2, obs_words=3 + k) for k in range(4)]
    gen = Recording(RolloutGenerator(HFRollout(model, rollout_cfg, tokenizer), tokenizer))
    cfg = LoopConfig(tool_format="odd", max_turns=5, max_tokens_per_turn=16, max_response_length=200)
    outs = run_tool_loop(episodes, gen, tokenizer, cfg)
    assert sum(o.turns for o in outs) > len(outs) and any(o.calls for o in outs)  # really multi-turn, with calls
    for i, out in enumerate(outs):
        assert [t for t, m in zip(out.response_ids, out.response_mask) if m] == [
            t for turn in gen.seen[i] for t in turn
        ]
    data = outputs_to_data_proto(outs, tokenizer.pad_token_id, response_length=200)
    data.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=False)
    actor = DataParallelPPOActor(default_section("actor_rollout_ref.actor", use_remove_padding=remove_padding), model)
    log_probs, _ = actor.compute_log_prob(data)
    mask = data.batch["response_mask"].bool()
    diff = (log_probs - data.batch["rollout_log_probs"])[mask].abs().max().item()
    print(f"turns {[o.turns for o in outs]} calls {[len(o.calls) for o in outs]} max |diff| {diff:.2e}")
    assert diff < 1e-5, diff
