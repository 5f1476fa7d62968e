"""Helpers shared by the multi-turn loop tests (HF here, vLLM in ``tests/vllm``)."""

from __future__ import annotations

import copy

import torch

from agent_system.multi_turn_rollout.tool_loop import GenRequest
from agent_system.tools.result import ToolResult
from verl.utils.reward_score import tool_formats


class CountingEpisode:
    """Answers every call with a long observation, and asks ``follow_ups`` more user questions after answers."""

    def __init__(self, question: str, follow_ups: int = 1, obs_words: int = 40):
        self.tools: list = []
        self.question, self.follow_ups, self.obs_words = question, follow_ups, obs_words
        self.executed: list = []
        self.done = False

    def reset(self):
        return [{"role": "system", "content": "Use tools."}, {"role": "user", "content": self.question}]

    def execute(self, calls):
        self.executed.append(calls)
        return [ToolResult(c["name"], " ".join(["obs"] * self.obs_words), ok=c["name"] != "broken") for c in calls]

    def next_turn(self, answer):
        if self.follow_ups == 0:
            return None
        self.follow_ups -= 1
        return [{"role": "user", "content": "And then?"}]


class Recording:
    """Wraps a generator and keeps what it returned per episode."""

    def __init__(self, inner):
        self.inner, self.seen = inner, {}

    def generate(self, requests: list[GenRequest]):
        out = self.inner.generate(requests)
        for req, gen in zip(requests, out):
            self.seen.setdefault(req.index, []).append(list(gen.ids))
        return out


def eos_biased(causal_lm, eos: int, bias: float = 9.0):
    """The tiny model with a bias on EOS's logit, so sampled turns end after a few tokens."""
    model = copy.deepcopy(causal_lm)
    head = torch.nn.Linear(model.lm_head.in_features, model.lm_head.out_features, bias=True)
    head.weight = model.lm_head.weight
    with torch.no_grad():
        head.bias.zero_()
        head.bias[eos] = bias
    model.lm_head = head
    return model


def odd_format(monkeypatch):
    """A test format: a turn whose decoded text has an odd length calls ``echo`` (random text then calls often)."""

    def parse(text):
        odd = len(text) % 2 == 1
        return tool_formats.ParsedCalls(({"name": "echo", "parameters": {}},) if odd else (), odd)

    monkeypatch.setitem(tool_formats.TOOL_FORMATS, "odd", tool_formats.ToolFormat("odd", parse, lambda calls: ""))
