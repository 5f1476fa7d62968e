"""The executing multi-turn loop, token in and token out: generate, parse the tool calls, execute, append the
observations as tokens, and continue until an answer or ``max_turns``.

One episode (:class:`~agent_system.multi_turn_rollout.episode.Episode`) per sample; all active episodes generate
together in one batched call per round (``docs/tools.md``, "The multi-turn loop"). Per episode the loop keeps one
growing list of token ids:

- the prompt: ``apply_chat_template(episode.reset(), tools=episode.tools, add_generation_prompt=True)``;
- per assistant turn, the ids the policy sampled, exactly as sampled (they end with the EOS that closed the turn),
  with ``response_mask`` 1 and the sampler's log-probs;
- after a turn with calls (parsed from the turn's decoded text with ``tool_format``), each call's observation as a
  ``tool`` turn, and after a turn without calls the episode's next user messages: in both cases the ids the chat
  template renders for those messages plus the next assistant header (:class:`TurnRenderer`), with
  ``response_mask`` 0.

Nothing is decoded and re-encoded: the policy's ids are never re-tokenised (the decoded text is only read to find the
calls), and an observation's ids come from rendering that observation alone. So the ids trained on are the ids the
policy sampled plus the observations' ids, and a trainer's log-probs on the policy's tokens equal the sampler's.

An episode ends with ``stop_reason``:

- ``answer``: a turn without a call and ``next_turn`` returned None;
- ``done``: the episode ended itself after a turn's calls (``episode.done``, e.g. BFCL's step limit);
- ``max_turns``: ``max_turns`` assistant turns generated;
- ``length``: the policy stopped without EOS (its turn's token budget or the response budget ran out), or the next
  turn's template ids would pass ``max_response_length``;
- ``context``: the prompt, or the next turn's ids, would pass ``max_model_len`` (prompt plus response).

Observations longer than ``max_observation_tokens`` tokens are cut to that many tokens (the cut is recorded).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, Sequence

import torch

from agent_system.multi_turn_rollout.episode import Episode
from agent_system.tools.result import ToolResult
from verl.protocol import DataProto
from verl.utils.prompt_batch import left_pad_prompts
from verl.utils.reward_score.tool_formats import get_tool_format, parse_calls
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

__all__ = [
    "STOP_REASONS",
    "CallRecord",
    "EpisodeOutput",
    "GenRequest",
    "Generated",
    "LoopConfig",
    "RolloutGenerator",
    "ScriptedGenerator",
    "TokenGenerator",
    "TurnRenderer",
    "outputs_to_data_proto",
    "run_tool_loop",
    "tool_loop_metrics",
]

STOP_REASONS = ("answer", "done", "max_turns", "length", "context")
_DUMMY = [{"role": "user", "content": "u"}, {"role": "assistant", "content": "a"}]


@dataclass
class GenRequest:
    """One generation: episode ``index``'s whole conversation so far as ``prompt_ids`` and its token budget;
    ``forbid_tool_calls``: the episode's (``Episode.forbid_tool_calls``), the generation may not open a tool call."""

    index: int
    prompt_ids: list[int]
    max_new_tokens: int
    forbid_tool_calls: bool = False


@dataclass
class Generated:
    """The sampled ids of one request (ending with EOS unless the budget ran out) and their log-probs (float, one
    per id, the sampling distribution's; None when the generator does not record them)."""

    ids: list[int]
    log_probs: list[float] | None = None


class TokenGenerator(Protocol):
    """Anything that samples continuations of token-id prompts, one :class:`Generated` per request, in order."""

    def generate(self, requests: list[GenRequest]) -> list[Generated]: ...


@dataclass
class LoopConfig:
    """The loop's limits.

    Attributes:
        tool_format: the tool-call format the policy writes (``data.tool_format``; a registered format).
        max_turns: assistant generations per episode (>= 1).
        max_tokens_per_turn: the token budget of one assistant turn (>= 1).
        max_response_length: the budget of everything after the prompt, policy and observation tokens (>= 1).
        max_observation_tokens: an observation's content is cut to this many tokens (>= 1).
        max_model_len: prompt plus response may not pass this (None: no limit beyond the response budget).
    """

    tool_format: str = "toolrl"
    max_turns: int = 8
    max_tokens_per_turn: int = 512
    max_response_length: int = 4096
    max_observation_tokens: int = 512
    max_model_len: int | None = None

    def __post_init__(self):
        get_tool_format(self.tool_format)  # ValueError listing the registered formats
        for key in ("max_turns", "max_tokens_per_turn", "max_response_length", "max_observation_tokens"):
            if int(getattr(self, key)) < 1:
                raise ValueError(f"tool loop: {key} must be >= 1, got {getattr(self, key)!r}")
        if self.max_model_len is not None and int(self.max_model_len) < 2:
            raise ValueError(f"tool loop: max_model_len must be >= 2 or None, got {self.max_model_len!r}")


@dataclass
class CallRecord:
    """One executed call: its result, the observation's token count as appended, and whether it was cut."""

    result: ToolResult
    obs_tokens: int
    truncated: bool = False


@dataclass
class EpisodeOutput:
    """One episode's tokens and record.

    Attributes:
        prompt_ids: the rendered opening messages (``P`` ids).
        response_ids: every id after the prompt: policy turns, observations, later user turns.
        response_mask: 1 on the policy's ids, 0 on the rest (same length as ``response_ids``).
        log_probs: the sampler's log-prob of each policy id, 0.0 elsewhere (float; all 0 when not recorded).
        turns: assistant turns generated.
        calls: every executed call in order.
        stop_reason: one of :data:`STOP_REASONS`.
        texts: the decoded assistant turns (what the parser read).
        log_probs_recorded: every policy turn came with the sampler's log-probs.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    turns: int = 0
    calls: list[CallRecord] = field(default_factory=list)
    stop_reason: str = ""
    texts: list[str] = field(default_factory=list)
    log_probs_recorded: bool = True

    def extend(self, ids: Sequence[int], policy: bool, log_probs: Sequence[float] | None = None) -> None:
        if policy and log_probs is None:
            self.log_probs_recorded = False
        self.response_ids += list(ids)
        self.response_mask += [int(policy)] * len(ids)
        self.log_probs += list(log_probs) if log_probs is not None else [0.0] * len(ids)


class TurnRenderer:
    """The chat template's ids for messages appended after an assistant turn that ended with EOS.

    ``ids(messages)`` renders a fixed two-message conversation with and without ``messages`` (plus the assistant
    header, ``add_generation_prompt=True``) and returns what follows the dummy assistant turn's EOS: the template's
    separator after that EOS and the new messages. Raises ValueError when the template does not render the longer
    conversation as an extension of the shorter (e.g. a template that rewrites earlier turns), or has no EOS.
    """

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        eos = tokenizer.eos_token_id
        if eos is None:
            raise ValueError("the tool loop needs a tokenizer with an eos_token_id (it ends each assistant turn)")
        self.eos = int(eos)
        base = self._render(_DUMMY, add_generation_prompt=False)
        ends = [k for k, t in enumerate(base) if t == self.eos]
        if not ends:
            raise ValueError("the chat template does not end an assistant turn with the tokenizer's EOS")
        self._base, self._cut = base, ends[-1] + 1

    def _render(self, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None = None) -> list[int]:
        out = self.tokenizer.apply_chat_template(
            messages, tools=tools or None, tokenize=True, add_generation_prompt=add_generation_prompt
        )
        if isinstance(out, dict) or hasattr(out, "input_ids"):  # transformers >= 5 may return a BatchEncoding
            out = out["input_ids"]
        return [int(t) for t in out]

    def prompt(self, messages: list[dict], tools: list[dict] | None = None) -> list[int]:
        """The opening prompt's ids, ending with the assistant header."""
        return self._render(list(messages), add_generation_prompt=True, tools=tools)

    def ids(self, messages: list[dict]) -> list[int]:
        full = self._render(_DUMMY + list(messages), add_generation_prompt=True)
        if full[: len(self._base)] != self._base:
            raise ValueError(
                "the chat template renders a conversation differently once turns are appended; the token-in/token-out "
                "loop needs a template whose earlier turns do not change"
            )
        return full[self._cut :]


class ScriptedGenerator:
    """A generator that replays texts: episode ``i``'s ``k``-th generation is ``scripts[i][k]`` encoded without
    special tokens plus EOS (only EOS once the script is used up); cut to the request's budget. For oracles and
    tests; log-probs are not recorded."""

    def __init__(self, tokenizer, scripts: Sequence[Sequence[str]]):
        self.tokenizer = tokenizer
        self.scripts = [list(s) for s in scripts]
        self.position = [0] * len(self.scripts)

    def generate(self, requests: list[GenRequest]) -> list[Generated]:
        out = []
        for req in requests:
            script, k = self.scripts[req.index], self.position[req.index]
            text = script[k] if k < len(script) else ""
            self.position[req.index] = k + 1
            ids = self.tokenizer.encode(text, add_special_tokens=False) + [int(self.tokenizer.eos_token_id)]
            out.append(Generated(ids[: req.max_new_tokens]))
        return out


class RolloutGenerator:
    """A generator over a rollout engine (``HFRollout``, ``vLLMRollout``: anything with ``generate_sequences``).

    Each round's requests become one left-padded ``DataProto`` (``input_ids``/``attention_mask``/``position_ids``)
    with ``meta_info`` ``max_new_tokens`` (the largest budget of the round; each row is then cut to its own), ``n=1``,
    ``do_sample``, and the EOS/pad ids, and the [B] bool ``forbid_tool_calls`` field when a request forbids tool
    calls (``verl.workers.rollout.forbid_text``); a row's sampled ids are its ``responses`` under ``response_mask``, and its
    log-probs the rollout's ``rollout_log_probs`` where the rollout records them (``rollout.calculate_log_probs``).
    """

    def __init__(self, rollout: Any, tokenizer, do_sample: bool = True, validate: bool = False):
        self.rollout, self.tokenizer = rollout, tokenizer
        self.do_sample, self.validate = do_sample, validate

    def generate(self, requests: list[GenRequest]) -> list[Generated]:
        pad = self.tokenizer.pad_token_id
        pad = int(self.tokenizer.eos_token_id if pad is None else pad)
        batch = left_pad_prompts([r.prompt_ids for r in requests], pad)
        meta = {
            "eos_token_id": int(self.tokenizer.eos_token_id),
            "pad_token_id": pad,
            "n": 1,
            "do_sample": self.do_sample,
            "validate": self.validate,
            "max_new_tokens": max(r.max_new_tokens for r in requests),
        }
        if any(r.forbid_tool_calls for r in requests):
            batch[FORBID_TOOL_CALLS] = torch.tensor([r.forbid_tool_calls for r in requests], dtype=torch.bool)
        out = self.rollout.generate_sequences(DataProto.from_dict(tensors=batch, meta_info=meta))
        responses, mask = out.batch["responses"], out.batch["response_mask"]
        log_probs = out.batch["rollout_log_probs"] if "rollout_log_probs" in out.batch.keys() else None
        result = []
        for i, req in enumerate(requests):
            width = min(int(mask[i].sum()), req.max_new_tokens)
            lp = None if log_probs is None else [float(x) for x in log_probs[i, :width]]
            result.append(Generated([int(t) for t in responses[i, :width]], lp))
        return result


def _observation(renderer: TurnRenderer, result: ToolResult, budget: int) -> tuple[dict, int, bool]:
    """The ``tool`` message of one result, its content cut to ``budget`` tokens; (message, content tokens, cut)."""
    ids = renderer.tokenizer.encode(result.content, add_special_tokens=False)
    if len(ids) <= budget:
        return {"role": "tool", "content": result.content}, len(ids), False
    text = renderer.tokenizer.decode(ids[:budget], skip_special_tokens=False)
    return {"role": "tool", "content": text}, budget, True


def run_tool_loop(
    episodes: Sequence[Episode],
    generator: TokenGenerator,
    tokenizer,
    config: LoopConfig,
    prompt_ids: Sequence[Sequence[int]] | None = None,
) -> list[EpisodeOutput]:
    """Play every episode to its end, all active episodes generating together each round.

    Args:
        prompt_ids: per episode, prompt ids already rendered (the trainer's dataset prompts, unpadded); each episode
            is still ``reset()`` but its opening messages are not rendered. None: render them.

    Returns:
        One :class:`EpisodeOutput` per episode, in order.

    Raises:
        ValueError: the chat template cannot be extended turn by turn (:class:`TurnRenderer`), or ``prompt_ids``
            does not hold one non-empty prompt per episode.
    """
    renderer = TurnRenderer(tokenizer)
    if prompt_ids is not None and (len(prompt_ids) != len(episodes) or not all(len(p) for p in prompt_ids)):
        raise ValueError(f"tool loop: prompt_ids needs one non-empty prompt per episode ({len(episodes)} episodes)")
    outputs, active = [], []
    for i, episode in enumerate(episodes):
        messages = episode.reset()
        if prompt_ids is not None:
            ids = [int(t) for t in prompt_ids[i]]
        else:
            ids = renderer.prompt(messages, tools=list(episode.tools or []))
        out = EpisodeOutput(prompt_ids=ids)
        outputs.append(out)
        if config.max_model_len is not None and len(out.prompt_ids) >= config.max_model_len:
            out.stop_reason = "context"
        else:
            active.append(i)
    while active:
        requests = []
        for i in active:
            out = outputs[i]
            budget = min(config.max_tokens_per_turn, config.max_response_length - len(out.response_ids))
            if config.max_model_len is not None:
                budget = min(budget, config.max_model_len - len(out.prompt_ids) - len(out.response_ids))
            forbid = bool(getattr(episodes[i], "forbid_tool_calls", False))
            requests.append(GenRequest(i, out.prompt_ids + out.response_ids, budget, forbid))
        generated = generator.generate(requests)
        still = []
        for req, gen in zip(requests, generated):
            out, episode = outputs[req.index], episodes[req.index]
            out.extend(gen.ids, policy=True, log_probs=gen.log_probs)
            out.turns += 1
            text = tokenizer.decode(gen.ids, skip_special_tokens=True)
            out.texts.append(text)
            if not gen.ids or gen.ids[-1] != renderer.eos:
                out.stop_reason = "length"
                continue
            calls = list(parse_calls(text, config.tool_format).calls)
            if calls:
                messages = []
                results = episode.execute(calls)
                if len(results) != len(calls):
                    raise ValueError(
                        f"episode {req.index}: execute returned {len(results)} results for {len(calls)} calls"
                    )
                for result in results:
                    message, n_tokens, cut = _observation(renderer, result, config.max_observation_tokens)
                    out.calls.append(CallRecord(result, n_tokens, cut))
                    messages.append(message)
                if getattr(episode, "done", False):  # optional: an episode without it never ends itself
                    out.stop_reason = "done"
                    continue
            else:
                messages = episode.next_turn(text)
                if messages is None:
                    out.stop_reason = "answer"
                    continue
            if out.turns >= config.max_turns:
                out.stop_reason = "max_turns"
                continue
            ids = renderer.ids(messages)
            if config.max_model_len is not None and (
                len(out.prompt_ids) + len(out.response_ids) + len(ids) >= config.max_model_len
            ):
                out.stop_reason = "context"
                continue
            if len(out.response_ids) + len(ids) >= config.max_response_length:
                out.stop_reason = "length"
                continue
            out.extend(ids, policy=False)
            still.append(req.index)
        active = still
    return outputs


def outputs_to_data_proto(outputs: Sequence[EpisodeOutput], pad_token_id: int, response_length: int) -> DataProto:
    """The episodes as the trainer's rollout batch.

    Returns:
        ``DataProto`` with int64 tensors ``prompts`` ``[B, P]`` (left-padded), ``responses`` ``[B, R]``
        (right-padded, ``R = response_length``), ``input_ids``/``attention_mask``/``position_ids`` ``[B, P + R]``
        (the attention mask is 1 on every real id, observations included), ``response_mask`` ``[B, R]`` (1 on the
        policy's ids only), float32 ``rollout_log_probs`` ``[B, R]`` (only when every episode's sampler recorded
        them: ``EpisodeOutput.log_probs_recorded``); non-tensors ``num_turns``, ``stop_reason``,
        ``tool_calls``, ``tool_failures``, ``tool_obs_tokens`` (int64: the observations' tokens as appended) and
        ``tool_seconds`` (float64: the calls' measured wall seconds) per episode.

    Raises:
        ValueError: an episode's response is longer than ``response_length``.
    """
    prompt = left_pad_prompts([o.prompt_ids for o in outputs], pad_token_id)
    n = len(outputs)
    responses = torch.full((n, response_length), pad_token_id, dtype=torch.long)
    response_mask = torch.zeros((n, response_length), dtype=torch.long)
    attention = torch.zeros((n, response_length), dtype=torch.long)
    log_probs = torch.zeros((n, response_length), dtype=torch.float32)
    for i, out in enumerate(outputs):
        width = len(out.response_ids)
        if width > response_length:
            raise ValueError(f"episode {i}: {width} response ids, more than response_length={response_length}")
        responses[i, :width] = torch.tensor(out.response_ids, dtype=torch.long)
        response_mask[i, :width] = torch.tensor(out.response_mask, dtype=torch.long)
        attention[i, :width] = 1
        log_probs[i, :width] = torch.tensor(out.log_probs, dtype=torch.float32)
    delta = torch.arange(1, response_length + 1, dtype=torch.long).unsqueeze(0)
    response_pos = prompt["position_ids"][:, -1:] + delta
    tensors = {
        "prompts": prompt["input_ids"],
        "responses": responses,
        "input_ids": torch.cat([prompt["input_ids"], responses], dim=-1),
        "attention_mask": torch.cat([prompt["attention_mask"], attention], dim=-1),
        "position_ids": torch.cat([prompt["position_ids"], response_pos], dim=-1),
        "response_mask": response_mask,
    }
    if all(o.log_probs_recorded for o in outputs):
        tensors["rollout_log_probs"] = log_probs * response_mask
    import numpy as np

    non_tensors = {
        "num_turns": np.array([o.turns for o in outputs], dtype=np.int64),
        "stop_reason": np.array([o.stop_reason for o in outputs], dtype=object),
        "tool_calls": np.array([len(o.calls) for o in outputs], dtype=np.int64),
        "tool_failures": np.array([sum(not c.result.ok for c in o.calls) for o in outputs], dtype=np.int64),
        "tool_obs_tokens": np.array([sum(c.obs_tokens for c in o.calls) for o in outputs], dtype=np.int64),
        "tool_seconds": np.array([sum(c.result.seconds for c in o.calls) for o in outputs], dtype=np.float64),
    }
    return DataProto.from_dict(tensors=tensors, non_tensors=non_tensors)


def tool_loop_metrics(outputs: Sequence[EpisodeOutput], prefix: str = "tool_loop") -> dict[str, float]:
    """The cost of the episodes' calls: ``{prefix}/calls_per_episode``, ``/seconds_per_call`` (wall seconds measured
    around each execution), ``/obs_tokens_per_call`` (observation tokens as appended), ``/failure_rate`` (failed
    calls / calls), ``/obs_truncated`` (calls cut to the budget), ``/turns_per_episode`` and ``/stop_<reason>``
    (fraction of episodes ending so). Per-call means are 0.0 without calls."""
    calls = [c for o in outputs for c in o.calls]
    n_ep, n_calls = max(len(outputs), 1), len(calls)
    metrics = {
        f"{prefix}/calls_per_episode": n_calls / n_ep,
        f"{prefix}/turns_per_episode": sum(o.turns for o in outputs) / n_ep,
        f"{prefix}/seconds_per_call": sum(c.result.seconds for c in calls) / n_calls if n_calls else 0.0,
        f"{prefix}/obs_tokens_per_call": sum(c.obs_tokens for c in calls) / n_calls if n_calls else 0.0,
        f"{prefix}/failure_rate": sum(not c.result.ok for c in calls) / n_calls if n_calls else 0.0,
        f"{prefix}/obs_truncated": float(sum(c.truncated for c in calls)),
    }
    for reason in STOP_REASONS:
        metrics[f"{prefix}/stop_{reason}"] = sum(o.stop_reason == reason for o in outputs) / n_ep
    return metrics
