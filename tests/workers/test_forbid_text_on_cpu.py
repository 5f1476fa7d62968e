"""Constrained decoding (``verl/workers/rollout/forbid_text.py``): rows flagged ``forbid_tool_calls`` never generate
``"<tool"`` however the tokenizer splits it — by hand on a toy vocabulary, then against a scripted "model" that wants
to write ``<tool_call>`` with the real SmolLM2 tokenizer, then through the HF rollout and the router."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from verl.protocol import DataProto
from verl.workers.rollout import hf_rollout
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS, ForbidText, _state, banned_tokens_by_state


def test_banned_tokens_by_hand():
    vocab = ["<", "tool", "<to", "ol", "x", "l", "<tool_call>", "too", "o"]
    banned = banned_tokens_by_state(vocab, "<tool")
    # after "", only a token holding the whole text; after "<": "tool"; after "<t": none ("ool" absent);
    # after "<to": "ol"; after "<too": "l"
    assert [sorted(vocab[i] for i in b.tolist()) for b in banned] == [
        ["<tool_call>"],
        ["<tool_call>", "tool"],
        ["<tool_call>"],
        ["<tool_call>", "ol"],
        ["<tool_call>", "l"],
    ]
    assert [_state(tail, "<tool") for tail in ("", "ab", "a<", "<t", "x<to", "<too", "<tool")] == [0, 0, 1, 2, 3, 4, 0]
    with pytest.raises(ValueError, match="must not be empty"):
        banned_tokens_by_state(vocab, "")


def test_a_model_that_wants_to_call_a_tool_cannot_in_a_forbidden_row(tokenizer):
    """A scripted model prefers, at every step, the next token of ``<tool_call>`` (in each of three tokenisations
    in turn); the forbidden row's text never contains "<tool", the free row's does."""
    targets = [tokenizer(s, add_special_tokens=False)["input_ids"] for s in ("<tool_call>", " <tool_call>", "x<tool")]
    for target in targets:
        ids = torch.zeros(2, 3, dtype=torch.long)  # a 3-token "prompt"
        proc = ForbidText(tokenizer, "<tool", torch.tensor([True, False]), prompt_width=3)
        for step in range(len(target) + 3):
            scores = torch.zeros(2, len(tokenizer))
            scores[:, target[min(step, len(target) - 1)]] = 10.0  # the wanted token
            scores[:, tokenizer("o", add_special_tokens=False)["input_ids"][0]] = 5.0  # a runner-up
            scores = proc(ids, scores)
            ids = torch.cat([ids, scores.argmax(-1, keepdim=True)], dim=1)
        forbidden, free = (tokenizer.decode(row[3:].tolist()) for row in ids)
        assert "<tool" not in forbidden and "<tool" in free, (forbidden, free)


def test_the_hf_rollout_constrains_only_the_flagged_rows(causal_lm, tokenizer, monkeypatch):
    from test_hf_rollout_on_cpu import rollout_config

    seen = []

    class Recording(ForbidText):
        def __init__(self, tok, text, rows, prompt_width):
            seen.append((rows.tolist(), prompt_width))
            super().__init__(tok, text, rows, prompt_width)

    monkeypatch.setattr(hf_rollout, "ForbidText", Recording)
    tokenizer.padding_side = "left"
    enc = tokenizer(["hello", "a longer prompt", "tool?"], return_tensors="pt", padding=True)
    tensors = dict(
        input_ids=enc["input_ids"],
        attention_mask=enc["attention_mask"],
        position_ids=(enc["attention_mask"].cumsum(-1) - 1).clamp(min=0),
    )
    rollout = hf_rollout.HFRollout(causal_lm, rollout_config(micro_batch_size=2), tokenizer)
    torch.manual_seed(3)
    plain = rollout.generate_sequences(
        DataProto.from_dict(tensors={k: v.clone() for k, v in tensors.items()}, meta_info={"do_sample": True, "n": 2})
    )
    flagged = {**{k: v.clone() for k, v in tensors.items()}, FORBID_TOOL_CALLS: torch.tensor([True, False, False])}
    torch.manual_seed(3)
    out = rollout.generate_sequences(DataProto.from_dict(tensors=flagged, meta_info={"do_sample": True, "n": 2}))
    width = tensors["input_ids"].shape[1]
    assert seen == [([True, True, False, False], width)]  # micro-batch 1 (rows 0, 1; n = 2); micro-batch 2: none
    # the tiny model does not write "<tool" here: the constraint changes none of its samples (same seed)
    assert not any("<tool" in tokenizer.decode(r) for r in plain.batch["responses"].tolist())
    assert torch.equal(out.batch["responses"], plain.batch["responses"])


def test_the_router_flags_answer_routed_copies(tokenizer):
    from verl.router import RouterAction
    from verl.router.controller import RouterController
    from verl.trainer.config_utils import default_section

    raw = np.empty(3, dtype=object)
    raw[:] = [[{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": "hi"}]] * 3
    ids = torch.ones(3, 4, dtype=torch.long)
    tensors = dict(input_ids=ids, attention_mask=torch.ones_like(ids), position_ids=torch.arange(4).expand(3, 4))
    logits = torch.full((3, 3), -20.0)
    for row, action in enumerate((RouterAction.ANSWER, RouterAction.SEARCH, RouterAction.ANSWER)):
        logits[row, int(action)] = 20.0
    for enabled in (False, True):
        batch = DataProto.from_dict(tensors={k: v.clone() for k, v in tensors.items()}, non_tensors={"raw_prompt": raw})
        controller = RouterController(
            default_section("router", answer_forbids_tool_calls=enabled),
            default_section("data", max_prompt_length=64),
            tokenizer,
        )
        controller.route(batch, logits, validate=True)
        if enabled:
            assert batch.batch[FORBID_TOOL_CALLS].tolist() == [True, False, True]
        else:
            assert FORBID_TOOL_CALLS not in batch.batch.keys()


def test_the_constraint_needs_the_hf_rollout():
    from verl.trainer.config_utils import ConfigError, default_config, validate_config

    config = default_config()
    config.router.enable = True
    config.router.answer_forbids_tool_calls = True
    config.actor_rollout_ref.rollout.name = "vllm"
    with pytest.raises(ConfigError, match="router.answer_forbids_tool_calls=true blocks tool calls while decoding"):
        validate_config(config, check_files=False)


def test_the_constraint_needs_untruncated_sampling():
    from verl.trainer.config_utils import ConfigError, default_config, validate_config

    config = default_config()
    config.router.enable = True
    config.router.answer_forbids_tool_calls = True
    config.actor_rollout_ref.rollout.top_p = 0.9
    with pytest.raises(ConfigError, match="needs untruncated sampling"):
        validate_config(config, check_files=False)
