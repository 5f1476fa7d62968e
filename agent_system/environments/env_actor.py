"""Env actors of the asynchronous mode: play episodes against an OpenAI-compatible inference server, return Rollouts.

docs/async.md, "Usage": env actors generate rollouts continuously from a set of problems with a
verifier (any env type), talking to inference through the OpenAI-compatible interface with log-probs. They live with
the environments they play; the async core (``verl.async_rl.orchestrator.Orchestrator``) receives
:func:`make_env_actor` from the entry point (``verl.trainer.main_async``) and never imports them.

Two kinds (``kind`` of an env spec):

* ``text_env``: any environment registered in ``agent_system.environments`` (:func:`make_env`, e.g. ``line_world``,
  ``rlla_multiturn``). A problem is a reset seed (``problem_id = "seed-{seed}"``); a group is ``group_size`` episodes
  from the same seed. Each step: the model's completion is an ``assistant`` turn, the action is
  :func:`~agent_system.environments.base.project_action` of its text, the step reward goes on that turn, and the
  next observation is a ``user`` turn. An episode ends when the env says done or after ``max_turns`` model turns.
* ``rlla``: single-turn rows (``rows``: loaded once by the orchestrator as the synchronous trainer loads
  ``data.train_files``, ``verl.async_rl.prompts.load_prompt_rows``). ``problem_id = "rlla-{row}-{seed}"`` (the row
  and the draw number). Draw ``k`` takes row ``k mod N`` in file order, or, with ``shuffle_seed`` (``data.seed`` when
  ``data.shuffle``), row ``perm_e[k mod N]`` of a permutation ``perm_e`` drawn afresh for each pass ``e = k // N``
  over the rows (numpy's generator seeded with ``(shuffle_seed, e)``): every row once per pass, as an epoch of the
  synchronous data loader. One request with ``n = group_size``; the completions are scored by the synchronous trainer's reward manager (``reward_manager``:
  the built-in RLLA manager or a ``custom_reward_function`` through the reward API and its sandbox, as
  ``reward_model.*`` / ``reward.*`` configure it) at trainer step ``policy_version + 1`` (the step these rollouts
  train at with ``replay.max_age=0``, the step a synchronous trainer scores them at; ToolRL's scheduled switches read
  it), with ``format`` / ``correctness`` as named reward components. A completion the reward cannot score keeps
  reward 0 with ``reward_valid`` False in its metadata (the learner leaves it out of its group's advantage).

An ``rlla`` env with ``tools`` plays each completion as an episode of the executing multi-turn loop
(``agent_system.multi_turn_rollout.tool_loop``, ``docs/tools.md``): the calls of a completion (``data.tool_format``)
run on the tools in the tool sandbox and their observations come back as ``tool`` turns (the chat template's ids),
up to ``max_turns`` completions of ``max_tokens`` each; the reward scores the whole episode (policy and tool tokens,
as the synchronous trainer's multi-turn rollout does) and goes on its last assistant turn. Each completion is one
``/v1/completions`` request of the whole episode so far, as token ids.

Problem ids are unique per draw (``seed`` counts draws; replica ``i`` of ``R`` draws ``i, i + R, i + 2R, ...`` from the
orchestrator's ``seed`` and ``seed_stride``, so replicas never share a seed and walk the RLLA rows interleaved), so a
group is exactly the ``group_size`` rollouts of one draw: a row drawn again at the same policy version starts a new
group instead of growing the old one past the batcher's token share.

Token bookkeeping: the env actor owns the token sequence. The first prompt is the tokenizer's chat template with the
generation prompt; the server completes token-id prompts (``/v1/completions`` with a list of ids), so the generated
ids and their log-probs are exactly what the learner trains on (no re-tokenisation of the model's text). An
observation's tokens are the chat-template text that follows the assistant message (closing the assistant turn,
opening the user turn and the next generation prompt).

Rollout metadata: ``policy_version`` = the *oldest* server version among the episode's completions (a conservative
staleness for multi-turn episodes that span a weight update), ``policy_versions`` (all of them), ``truncated`` (some
completion hit ``max_tokens``), ``done`` (the env ended the episode), ``rewards`` (named components; ``rlla`` only),
``reward_valid`` / ``reward_error`` (``rlla`` only).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
import uuid
from typing import Any, Callable, Dict, List, Mapping, Optional

from agent_system.environments.base import make_env, project_action
from agent_system.multi_turn_rollout.tool_loop import EpisodeOutput, Generated, GenRequest
from verl.async_rl.inference_server import OpenAIClient, template_ids
from verl.async_rl.types import Rollout, Turn

logger = logging.getLogger(__name__)

__all__ = ["EnvActor", "make_env_actor"]

KINDS = ("text_env", "rlla")


def observation_ids(tokenizer, messages: List[Dict[str, str]], generated_ids: List[int], observation: str) -> List[int]:
    """Token ids between the end of a generated assistant message and the next generation: the template's closing of
    the assistant turn (less the EOS the model already produced), the user turn with ``observation`` and the
    generation prompt. ``messages`` already ends with the assistant message (its text)."""
    before = tokenizer.apply_chat_template(messages, tokenize=False)
    after = tokenizer.apply_chat_template(
        messages + [{"role": "user", "content": observation}], tokenize=False, add_generation_prompt=True
    )
    content = messages[-1]["content"]
    closing = before[before.rindex(content) + len(content) :] if content and content in before else ""
    eos_text = tokenizer.decode(generated_ids[-1:]) if generated_ids else ""
    if eos_text and closing.startswith(eos_text) and generated_ids[-1] == tokenizer.eos_token_id:
        closing = closing[len(eos_text) :]
    return tokenizer.encode(closing + after[len(before) :], add_special_tokens=False)


class EnvActor:
    """Generates groups of rollouts for one env type (module docstring).

    Args:
        env_name: the env type's name (``Rollout.environment``, the replay buffer's name).
        spec: a complete ``async.envs`` entry (``verl.async_rl.config.AsyncEnvSpec``): ``kind`` (``text_env`` |
            ``rlla``); ``text_env``: ``env`` (registered name) and ``env_kwargs``;
            ``rlla``: ``data_file`` (optional) and ``max_rows`` (optional).
        base_url: the inference server (``http://host:port/v1``).
        tokenizer_path: the policy's tokenizer (preset name or directory).
        group_size: rollouts per problem (>= 1). max_tokens: per completion. temperature: sampling.
        max_turns: model turns per episode (``text_env``). seed, seed_stride: problems are ``seed, seed + stride,
            seed + 2 * stride, ...`` (an RLLA problem is row ``seed mod rows``); replica ``i`` of ``R`` gets
            ``seed0 + i`` and stride ``R``. timeout_s: per HTTP request.
        reward_manager: ``rlla``: ``reward_manager(tokenizer)`` builds the reward manager in this process (the
            composition layer passes ``verl.trainer.main_async.make_reward_manager`` bound to the config). A
            ``text_env`` scores with its environment's step rewards and takes none.
        rows: ``rlla``: the prompt rows (``load_prompt_rows``' dicts: ``index``, ``prompt_ids``, ``reward_model``,
            ``data_source``, ``extra_info``). shuffle_seed: ``rlla``: the row order (module docstring); None: file
            order.
        tool_format: ``rlla`` with ``spec["tools"]``: the format the calls are parsed with (``data.tool_format``).
        max_seq_len: ``rlla`` with tools: an episode stops (``context``) before prompt and response pass this many
            tokens (``async.batcher.max_seq_len``: a longer rollout is not trained on); None: no such limit.

    Raises ValueError: unknown ``kind``, a ``text_env`` spec without ``env``, ``seed_stride`` < 1, an ``rlla`` spec
        without ``reward_manager`` or rows, a ``text_env`` one with either or with tools, tools that do not load.
    """

    def __init__(
        self,
        env_name: str,
        spec: Mapping[str, Any],
        base_url: str,
        tokenizer_path: str,
        group_size: int = 2,
        max_tokens: int = 16,
        temperature: float = 1.0,
        max_turns: int = 2,
        seed: int = 0,
        seed_stride: int = 1,
        timeout_s: float = 120.0,
        reward_manager: Optional[Callable[[Any], Any]] = None,
        rows: Optional[List[Dict[str, Any]]] = None,
        shuffle_seed: Optional[int] = None,
        tool_format: str = "toolrl",
        max_seq_len: Optional[int] = None,
    ):
        from transformers import AutoTokenizer

        from verl.utils.model_presets import prepare_model

        spec = dict(spec)
        kind = spec["kind"]  # a complete verl.async_rl.config.AsyncEnvSpec (the orchestrator's typed async.envs)
        if kind not in KINDS:
            raise ValueError(f"env {env_name!r}: kind {kind!r} is not one of {KINDS}")
        if kind == "text_env" and not spec["env"]:
            raise ValueError(f"env {env_name!r}: a text_env spec needs 'env' (a registered environment name)")
        if int(seed_stride) < 1:
            raise ValueError(f"env {env_name!r}: seed_stride must be >= 1, got {seed_stride}")
        if (kind == "rlla") != (reward_manager is not None) or (kind == "rlla") != bool(rows):
            raise ValueError(
                f"env {env_name!r}: an rlla env plays rows (rows) scored by a reward manager (reward_manager), a "
                f"text_env its environment with its rewards; got kind {kind!r} with {len(rows or [])} rows and "
                f"reward_manager={reward_manager!r}"
            )
        self.env_name, self.kind, self.spec = env_name, kind, spec
        self.tokenizer = AutoTokenizer.from_pretrained(prepare_model(tokenizer_path))
        self.group_size, self.max_tokens = int(group_size), int(max_tokens)
        self.temperature, self.max_turns = float(temperature), int(max_turns)
        self.timeout_s = float(timeout_s)
        self._seeds = itertools.count(int(seed), int(seed_stride))
        self.client = OpenAIClient(base_url, timeout=self.timeout_s)
        self._rows = list(rows) if kind == "rlla" else None
        self.shuffle_seed = None if shuffle_seed is None else int(shuffle_seed)
        self.reward = reward_manager(self.tokenizer) if reward_manager is not None else None
        if spec.get("tools") and kind != "rlla":
            raise ValueError(f"env {env_name!r}: tools run in rlla envs only, got kind {kind!r}")
        self.max_seq_len = None if max_seq_len is None else int(max_seq_len)
        self.tools = _ToolPlay(env_name, spec, self.tokenizer, tool_format, self) if spec.get("tools") else None

    def set_url(self, base_url: str) -> None:
        """Point at another inference server (after a restart)."""
        self.client = OpenAIClient(base_url, timeout=self.timeout_s)

    def ping(self) -> bool:
        return True

    def close(self) -> None:
        """Stop the tool sandbox's worker processes (they also exit when this process dies: their stdin closes)."""
        if self.tools is not None:
            self.tools.runner.close()

    def _row(self, draw: int) -> Dict[str, Any]:
        """The RLLA row of draw number ``draw`` (module docstring)."""
        size = len(self._rows)
        if self.shuffle_seed is None:
            return self._rows[draw % size]
        import numpy as np

        order = np.random.default_rng((self.shuffle_seed, draw // size)).permutation(size)
        return self._rows[int(order[draw % size])]

    # ------------------------------------------------------------------------------------------------ groups
    def run_group(self) -> List[Dict[str, Any]]:
        """One group: ``group_size`` rollouts of the next problem, as ``Rollout.to_dict()`` dicts.

        Raises RuntimeError: the inference server failed or is unreachable (the orchestrator then checks it).
        """
        seed = next(self._seeds)
        try:
            if self.kind == "rlla":
                rollouts = self._rlla_group(self._row(seed), seed)
            else:
                rollouts = [self._episode(seed) for _ in range(self.group_size)]
        except Exception as exc:  # requests' ConnectionError etc.: one error type for the orchestrator
            raise RuntimeError(f"env {self.env_name!r}: inference at {self.client.base_url} failed: {exc!r}") from exc
        return [r.to_dict() for r in rollouts]

    def _complete(self, prompt_ids: List[int], n: int = 1) -> Dict[str, Any]:
        return self.client.completions(prompt_ids, max_tokens=self.max_tokens, temperature=self.temperature, n=n)

    def _rollout(self, problem_id: str, turns: List[Turn], versions: List[int], truncated: bool, **meta) -> Rollout:
        metadata = {"policy_version": min(versions), "policy_versions": versions, "truncated": truncated, **meta}
        return Rollout(self.env_name, problem_id, f"{self.env_name}-{uuid.uuid4().hex}", turns, metadata)

    def _score(self, row: Dict[str, Any], prompts: List[List[int]], responses: List[List[int]], version: int):
        """The reward manager's scores of ``responses`` to the row (``score_completions``) at step ``version + 1``."""
        from verl.workers.reward_manager.completions import score_completions

        size = len(responses)
        return score_completions(
            self.reward,
            prompts,
            responses,
            {
                "reward_model": [row["reward_model"]] * size,
                self.reward.reward_fn_key: [row["data_source"]] * size,
                "extra_info": [row["extra_info"]] * size,
                **({"raw_prompt": [row["raw_prompt"]] * size} if row.get("raw_prompt") is not None else {}),
            },
            step=version + 1,
            pad_token_id=int(self.tokenizer.pad_token_id or 0),
        )

    def _rlla_group(self, row: Dict[str, Any], seed: int) -> List[Rollout]:
        prompt_ids = list(row["prompt_ids"])
        if self.tools is not None:
            return self._rlla_tool_group(row, seed)
        answer = self._complete(prompt_ids, n=self.group_size)
        version = int(answer["policy_version"])
        choices = answer["choices"]
        scored = self._score(row, [prompt_ids] * len(choices), [choice["token_ids"] for choice in choices], version)
        rollouts = []
        for i, choice in enumerate(choices):
            text = self.tokenizer.decode(choice["token_ids"], skip_special_tokens=True)
            now = time.time()
            turns = [
                Turn("<prompt>", "user", prompt_ids, timestamp=now),
                Turn(
                    text,
                    "assistant",
                    choice["token_ids"],
                    choice["logprobs"]["token_logprobs"],
                    reward=scored.scores[i],
                    inference_metadata={"finish_reason": choice["finish_reason"]},
                    timestamp=now,
                ),
            ]
            rollouts.append(
                self._rollout(
                    f"rlla-{row['index']}-{seed}",
                    turns,
                    [version],
                    choice["finish_reason"] == "length",
                    done=True,
                    rewards={k: v[i] for k, v in scored.components.items()},
                    reward_valid=scored.valid[i],
                    reward_error=scored.errors[i],
                )
            )
        return rollouts

    def _rlla_tool_group(self, row: Dict[str, Any], seed: int) -> List[Rollout]:
        """``group_size`` episodes of the row through the executing loop (module docstring)."""
        prompt_ids = list(row["prompt_ids"])
        outputs, versions, finishes = self.tools.play(row, prompt_ids, self.group_size)
        oldest = min(v for vs in versions for v in vs)
        scored = self._score(row, [prompt_ids] * len(outputs), [o.response_ids for o in outputs], oldest)
        rollouts = []
        for i, out in enumerate(outputs):
            turns = [Turn("<prompt>", "user", prompt_ids, timestamp=time.time())] + episode_turns(
                self.tokenizer, out, finishes[i]
            )
            last = max(k for k, t in enumerate(turns) if t.is_generated)
            turns[last] = dataclasses.replace(turns[last], reward=scored.scores[i])
            rollouts.append(
                self._rollout(
                    f"rlla-{row['index']}-{seed}",
                    turns,
                    versions[i],
                    out.stop_reason == "length",
                    done=out.stop_reason in ("answer", "done"),
                    stop_reason=out.stop_reason,
                    tool_calls=len(out.calls),
                    tool_failures=sum(not c.result.ok for c in out.calls),
                    rewards={k: v[i] for k, v in scored.components.items()},
                    reward_valid=scored.valid[i],
                    reward_error=scored.errors[i],
                )
            )
        return rollouts

    def _episode(self, seed: int) -> Rollout:
        env = make_env(self.spec["env"], **dict(self.spec["env_kwargs"] or {}))
        try:
            first = env.reset(seed)
            messages = [{"role": "user", "content": f"{env.instruction}\n{first.text}".strip()}]
            context = template_ids(self.tokenizer, messages, add_generation_prompt=True)
            turns = [Turn(messages[0]["content"], "user", context, timestamp=time.time())]
            versions, truncated, done = [], False, False
            for turn_index in range(self.max_turns):
                answer = self._complete(context)
                choice = answer["choices"][0]
                versions.append(int(answer["policy_version"]))
                truncated |= choice["finish_reason"] == "length"
                ids = list(choice["token_ids"])
                text = self.tokenizer.decode(ids, skip_special_tokens=True)
                result = env.step(project_action(text, getattr(env, "action_tag", "action")))
                done = bool(result.done)
                turns.append(
                    Turn(
                        text,
                        "assistant",
                        ids,
                        choice["logprobs"]["token_logprobs"],
                        reward=float(result.reward),
                        timestamp=time.time(),
                        inference_metadata={
                            "finish_reason": choice["finish_reason"],
                            "valid_action": bool(result.info.get("is_action_valid", True)),
                        },
                    )
                )
                if done or turn_index == self.max_turns - 1:
                    break
                messages.append({"role": "assistant", "content": text})
                obs_ids = observation_ids(self.tokenizer, messages, ids, result.text)
                messages.append({"role": "user", "content": result.text})
                turns.append(Turn(result.text, "user", obs_ids, timestamp=time.time()))
                context = context + ids + obs_ids
            return self._rollout(f"seed-{seed}", turns, versions, truncated, done=done)
        finally:
            env.close()


def episode_turns(tokenizer, out: EpisodeOutput, finish_reasons: List[str]) -> List[Turn]:
    """The loop's response as rollout turns: each run of the policy's ids (``response_mask`` 1) an ``assistant``
    turn with its log-probs and the server's ``finish_reason``, each run between them a ``tool`` turn (the
    observations and the template's ids around them)."""
    turns, start, k = [], 0, 0
    ids, mask = out.response_ids, out.response_mask
    while start < len(ids):
        end = start
        while end < len(ids) and mask[end] == mask[start]:
            end += 1
        chunk = ids[start:end]
        text = tokenizer.decode(chunk, skip_special_tokens=True)
        if mask[start]:
            meta = {"finish_reason": finish_reasons[k] if k < len(finish_reasons) else None}
            lps = out.log_probs[start:end]
            turns.append(Turn(text, "assistant", chunk, lps, inference_metadata=meta, timestamp=time.time()))
            k += 1
        else:
            turns.append(Turn(text, "tool", chunk, timestamp=time.time()))
        start = end
    return turns


class _ToolPlay:
    """An ``rlla`` env's tools (``spec["tools"]`` in ``spec["tool_sandbox"]``, the sandbox's default limits) and the
    loop's limits: ``max_turns`` completions of ``max_tokens`` each, observations cut to 256 tokens, prompt and
    response within the actor's ``max_seq_len`` (docs/tools.md)."""

    OBSERVATION_TOKENS = 256

    def __init__(self, env_name: str, spec: Mapping[str, Any], tokenizer, tool_format: str, actor: "EnvActor"):
        from agent_system.multi_turn_rollout.tool_loop import LoopConfig
        from agent_system.tools.base import ToolRegistry
        from agent_system.tools.runner import make_tool_runner
        from verl.utils.reward_score.tool_formats import resolve_tool_format

        try:
            self.runner = make_tool_runner(ToolRegistry.from_specs(list(spec["tools"])), sandbox=spec["tool_sandbox"])
        except (ValueError, TypeError, ImportError) as err:
            raise ValueError(f"env {env_name!r}: tools: {err}") from err
        self.actor, self.tokenizer = actor, tokenizer
        turns, budget = int(actor.max_turns), int(actor.max_tokens)
        self.config = LoopConfig(
            tool_format=resolve_tool_format(tool_format, tokenizer),
            max_turns=turns,
            max_tokens_per_turn=budget,
            # every turn's tokens plus, between turns, an observation and its template ids (64 is ample for these)
            max_response_length=turns * budget + (turns - 1) * (self.OBSERVATION_TOKENS + 64),
            max_observation_tokens=self.OBSERVATION_TOKENS,
            max_model_len=actor.max_seq_len,
        )

    def play(self, row: Mapping[str, Any], prompt_ids: List[int], size: int):
        """``size`` episodes of the row: ``(outputs, versions, finish_reasons)``, per episode the loop's output, the
        policy version of each completion and its ``finish_reason``."""
        from agent_system.multi_turn_rollout.episode import ToolEpisode
        from agent_system.multi_turn_rollout.tool_loop import run_tool_loop

        generator = _ServerGenerator(self.actor)
        episodes = [ToolEpisode(list(row.get("raw_prompt") or []), self.runner, list_tools=False) for _ in range(size)]
        outputs = run_tool_loop(episodes, generator, self.tokenizer, self.config, prompt_ids=[prompt_ids] * size)
        return outputs, [generator.versions[i] for i in range(size)], [generator.finishes[i] for i in range(size)]


class _ServerGenerator:
    """The loop's generator over the inference server: one ``/v1/completions`` request (token ids) per episode and
    round, the sampled ids and log-probs as the server returns them (EOS kept as the last id)."""

    def __init__(self, actor: "EnvActor"):
        self.actor = actor
        self.versions: Dict[int, List[int]] = {}
        self.finishes: Dict[int, List[str]] = {}

    def generate(self, requests: List[GenRequest]) -> List[Generated]:
        out = []
        for req in requests:
            answer = self.actor.client.completions(
                req.prompt_ids, max_tokens=req.max_new_tokens, temperature=self.actor.temperature, n=1
            )
            choice = answer["choices"][0]
            self.versions.setdefault(req.index, []).append(int(answer["policy_version"]))
            self.finishes.setdefault(req.index, []).append(choice["finish_reason"])
            out.append(Generated(list(choice["token_ids"]), list(choice["logprobs"]["token_logprobs"])))
        return out


def make_env_actor(*args, num_cpus: float = 0, **kwargs):
    """Start :class:`EnvActor` as a Ray actor (``num_cpus`` reserved, 0 by default)."""
    import ray

    return ray.remote(num_cpus=num_cpus, max_restarts=0)(EnvActor).remote(*args, **kwargs)
