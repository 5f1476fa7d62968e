"""The PPO trainer's multi-turn rollout (``actor_rollout_ref.rollout.multi_turn.enable=true``): every prompt of the
batch is one episode of the executing tool loop (``agent_system.multi_turn_rollout.tool_loop``, ``docs/tools.md``),
its calls run by the configured tools in the tool sandbox, each round's generation one ``generate_sequences`` call
on the actor's rollout workers.

- The prompt of an episode is the row's prompt ids as the dataset rendered them (``input_ids`` under
  ``attention_mask``): nothing is re-rendered, so the tools are described where the data puts them (RLLA's system
  prompt lists them; ``data.tool_format`` is the format the calls are parsed with).
- The response holds the policy's turns and the observations between them, right-padded to
  ``rollout.response_length``; ``response_mask`` is 1 only on the policy's tokens and the trainer keeps it (the loss,
  the KL penalty and the advantages see only what the policy sampled); ``rollout_log_probs`` are the sampler's when
  the rollout records them (``rollout.calculate_log_probs``).
- Metrics of the step: ``tool_loop/*`` (:func:`~agent_system.multi_turn_rollout.tool_loop.tool_loop_metrics`) and
  the sandbox's ``tool/*`` counters for the step's calls.
- With the router (``router.enable``), each row's route decides what its episode may call
  (:func:`verl.router.families.offered_tools`: ANSWER none, SEARCH the ``search`` tools, CALCULATE the
  ``calculate`` ones); a call to a tool the route does not offer fails without running (``tool/refused``), and the
  ANSWER rows under ``router.answer_forbids_tool_calls`` cannot open a call at all.
- When the router prices tool seconds (``router.cost_weights.seconds`` > 0), the seconds measured in each training
  rollout are written to ``<run_dir>/tool_seconds.jsonl`` before they are used, and a rollout already written there
  (a resumed run repeating a step) takes the recorded seconds: the cost, and so the run, stays bitwise what the
  uninterrupted run computed (:class:`RecordedSeconds`).
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Callable

import numpy as np

from agent_system.multi_turn_rollout.episode import ToolEpisode
from agent_system.multi_turn_rollout.tool_loop import (
    EpisodeOutput,
    LoopConfig,
    RolloutGenerator,
    TurnRenderer,
    outputs_to_data_proto,
    run_tool_loop,
    tool_loop_metrics,
)
from agent_system.tools.base import ToolRegistry
from agent_system.tools.runner import make_tool_runner
from verl.protocol import DataProto
from verl.router import RouterAction, parse_other_as
from verl.router.families import offered_tools
from verl.trainer.config_errors import ConfigError
from verl.trainer.multi_turn_config_checks import KEY
from verl.utils.reward_score.tool_formats import resolve_tool_format
from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

__all__ = ["MultiTurnRollout", "RecordedSeconds"]

logger = logging.getLogger(__name__)


class _Engine:
    """What :class:`RolloutGenerator` calls: the trainer's one-round generation as ``generate_sequences``."""

    def __init__(self, generate_sequences: Callable[[DataProto], DataProto]):
        self.generate_sequences = generate_sequences


class RecordedSeconds:
    """The measured tool seconds of every training rollout, kept in a JSON-lines file so that a resumed run replays
    them: one line ``{"key": "<step>:<j>", "calls": [per row], "seconds": [per row]}`` for the ``j``-th rollout of
    step ``step``, written (and flushed) before the seconds are used.

    Raises:
        ValueError: the file holds a line that is not such a record (file and line named).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        self.records: dict[str, dict] = {}
        if os.path.exists(self.path):
            with open(self.path, encoding="utf-8") as f:
                for n, line in enumerate(f, 1):
                    try:
                        record = json.loads(line)
                        self.records[str(record["key"])] = record
                    except (json.JSONDecodeError, KeyError, TypeError):
                        raise ValueError(f"{self.path}:{n}: not a tool-seconds record") from None

    def replay(self, key: str, calls: np.ndarray, seconds: np.ndarray) -> np.ndarray:
        """The seconds of rollout ``key``: the recorded ones when the file has it, else ``seconds`` (recorded now).

        Args:
            calls: int [B] the rows' executed calls; seconds: float64 [B] their measured seconds.

        Raises:
            RuntimeError: the recorded rollout made other calls than this one (the run is not the one recorded).
        """
        record = self.records.get(key)
        if record is not None:
            if [int(c) for c in calls] != [int(c) for c in record["calls"]]:
                raise RuntimeError(
                    f"{self.path}: rollout {key} made other calls than the recorded one ({list(calls)} vs "
                    f"{record['calls']}): this run does not repeat the run recorded there; move the file away"
                )
            return np.asarray(record["seconds"], dtype=np.float64)
        record = {"key": key, "calls": [int(c) for c in calls], "seconds": [float(x) for x in seconds]}
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        self.records[key] = record
        return np.asarray(seconds, dtype=np.float64)


class MultiTurnRollout:
    """The executing loop over a rollout's ``generate_sequences``, with the tools of a ``multi_turn`` section.

    Args:
        section: the ``multi_turn`` section (``actor_rollout_ref.rollout.multi_turn`` of the trainer,
            ``rollout.multi_turn`` of ``main_generation``).
        tokenizer: the policy's tokenizer (its chat template renders the observations' tool turns).
        tool_format: how the policy writes calls (``data.tool_format``; ``auto`` reads the chat template).
        response_length: the width of the response, policy and observation tokens together.
        key: the section's dotted name, for errors.

    Raises:
        ConfigError: ``tools`` is empty or does not load (the reference named), the chat template cannot be
            extended turn by turn, a limit is below 1, or the sandbox cannot hold the tools.
    """

    def __init__(
        self,
        section: Any,
        tokenizer,
        tool_format: str,
        response_length: int,
        key: str = KEY,
        other_as: RouterAction | None = RouterAction.SEARCH,
        seconds_file: str | None = None,
    ):
        mt = section
        self.other_as = other_as  # the route of ``other``-family tools (router.other_as)
        self.seconds = RecordedSeconds(seconds_file) if seconds_file else None
        self._rollout_key: tuple[int, int] = (-1, 0)
        self.tokenizer = tokenizer
        self.response_length = int(response_length)
        if not list(mt.tools):
            raise ConfigError(f"{key}.tools is empty: name the tools the calls run on (docs/tools.md)")
        try:
            registry = ToolRegistry.from_specs(list(mt.tools))
        except (ValueError, TypeError, ImportError) as err:
            raise ConfigError(f"{key}.tools: {err}") from err
        try:
            TurnRenderer(tokenizer)  # a chat template the loop cannot extend turn by turn fails here, not at step 1
            self.loop = LoopConfig(
                tool_format=resolve_tool_format(str(tool_format), tokenizer),
                max_turns=int(mt.max_assistant_turns),
                max_tokens_per_turn=int(mt.max_tokens_per_turn or self.response_length),
                max_response_length=self.response_length,
                max_observation_tokens=int(mt.max_tool_response_length),
            )
        except ValueError as err:
            raise ConfigError(f"{key}: {err}") from err
        try:
            self.runner = make_tool_runner(
                registry,
                sandbox=str(mt.sandbox),
                num_workers=int(mt.num_workers),
                timeout_s=float(mt.timeout_s),
                memory_mb=None if mt.memory_mb is None else int(mt.memory_mb),
            )
        except (ValueError, TypeError) as err:
            raise ConfigError(f"{key}.sandbox={mt.sandbox}: {err}") from err
        pad = tokenizer.pad_token_id
        self.pad_token_id = int(pad if pad is not None else tokenizer.eos_token_id)
        logger.info(
            "multi-turn rollout: tools %s (%s sandbox), up to %d turns, format %s",
            ", ".join(registry.names),
            mt.sandbox,
            self.loop.max_turns,
            self.loop.tool_format,
        )

    @classmethod
    def from_trainer_config(cls, config: Any, tokenizer, run_dir: str | None = None) -> "MultiTurnRollout | None":
        """Built from the trainer's config (``actor_rollout_ref.rollout.multi_turn``, ``data.tool_format``,
        ``actor_rollout_ref.rollout.response_length``, ``router.other_as``; the seconds record under ``run_dir`` when
        the router prices seconds); None when ``multi_turn.enable`` is false."""
        rollout = config.actor_rollout_ref.rollout
        if not rollout.multi_turn.enable:
            return None
        router = config.router
        seconds = router.enable and float(router.cost_weights.seconds) > 0 and run_dir is not None
        return cls(
            rollout.multi_turn,
            tokenizer,
            config.data.tool_format,
            rollout.response_length,
            other_as=parse_other_as(router.other_as),
            seconds_file=os.path.join(run_dir, "tool_seconds.jsonl") if seconds else None,
        )

    def generate(
        self,
        gen_batch: DataProto,
        generate_sequences: Callable[[DataProto], DataProto],
        do_sample: bool,
        validate: bool,
        raw_prompts: np.ndarray | None = None,
        routes: Any = None,
        step: int | None = None,
    ) -> DataProto:
        """Play one episode per row of ``gen_batch`` (``input_ids``/``attention_mask`` [B, P], left-padded; the
        router's bool [B] ``forbid_tool_calls`` when it holds one).

        Args:
            generate_sequences: one round's generation (the worker group's ``generate_sequences``).
            raw_prompts: the rows' chat messages (``raw_prompt``), kept on the episodes for the record.
            routes: int [B] the router's routes (``router_action``): each row may call its route's tools only. None:
                every configured tool.
            step: the training step (with a seconds record, the key its seconds are recorded under; None for
                validation, which is not recorded).

        Returns:
            The rollout batch of :func:`~agent_system.multi_turn_rollout.tool_loop.outputs_to_data_proto`
            (``prompts`` [B, P'] with P' the batch's longest prompt, ``responses`` [B, response_length],
            ``input_ids``, ``attention_mask``, ``position_ids``, ``response_mask``, and ``rollout_log_probs`` when
            the rollout records them; non-tensors ``num_turns``, ``stop_reason``, ``tool_calls``,
            ``tool_failures``, ``tool_obs_tokens``, ``tool_seconds``), with the episodes' ``tool_loop/*`` and
            ``tool/*`` metrics in ``meta_info["rollout_metrics"]``.
        """
        ids, mask = gen_batch.batch["input_ids"], gen_batch.batch["attention_mask"].bool()
        prompt_ids = [ids[i][mask[i]].tolist() for i in range(len(gen_batch))]
        offered = None if routes is None else self.offered_for(routes)
        forbid = None
        if FORBID_TOOL_CALLS in gen_batch.batch.keys():
            forbid = [bool(x) for x in gen_batch.batch[FORBID_TOOL_CALLS]]
        outputs = self.play(prompt_ids, generate_sequences, do_sample, validate, raw_prompts, offered, forbid)
        output = outputs_to_data_proto(outputs, self.pad_token_id, self.response_length)
        if self.seconds is not None and step is not None:
            last, j = self._rollout_key
            self._rollout_key = (int(step), j + 1 if last == int(step) else 0)
            key = f"{self._rollout_key[0]}:{self._rollout_key[1]}"
            nt = output.non_tensor_batch
            nt["tool_seconds"] = self.seconds.replay(key, nt["tool_calls"], nt["tool_seconds"])
        output.meta_info["rollout_metrics"] = {**tool_loop_metrics(outputs), **self.runner.metrics()}
        return output

    def offered_for(self, routes: Any) -> list[list[str]]:
        """Per route (int [B]), the configured tools its episode may call (:func:`verl.router.families.offered_tools`
        over the registry's families; ``other`` tools on the route ``other_as`` names)."""
        families = self.runner.registry.families()
        return [offered_tools(int(a), families, self.other_as) for a in routes]

    def play(
        self,
        prompt_ids: list[list[int]],
        generate_sequences: Callable[[DataProto], DataProto],
        do_sample: bool,
        validate: bool,
        raw_prompts: Any = None,
        offered: list[list[str]] | None = None,
        forbid_tool_calls: list[bool] | None = None,
    ) -> list[EpisodeOutput]:
        """The episodes of prompts already tokenised (one list of ids each), one per prompt, in order; the sandbox's
        counters (``runner.metrics()``) are those of these episodes' calls.

        Args:
            offered: per prompt, the tool names its episode may call (a router's route,
                ``verl.router.families.offered_tools``); None: every configured tool.
            forbid_tool_calls: per prompt, its generations may not open a tool call (``ToolEpisode``).
        """
        n = len(prompt_ids)
        for name, value in (("offered", offered), ("forbid_tool_calls", forbid_tool_calls)):
            if value is not None and len(value) != n:
                raise ValueError(f"multi-turn rollout: {name} has {len(value)} entries for {n} prompts")
        episodes = [
            ToolEpisode(
                list(raw_prompts[i]) if raw_prompts is not None else [],
                self.runner,
                list_tools=False,
                offered=None if offered is None else offered[i],
                forbid_tool_calls=bool(forbid_tool_calls[i]) if forbid_tool_calls is not None else False,
            )
            for i in range(n)
        ]
        generator = RolloutGenerator(
            _Engine(generate_sequences), self.tokenizer, do_sample=do_sample, validate=validate
        )
        self.runner.reset_metrics()
        return run_tool_loop(episodes, generator, self.tokenizer, self.loop, prompt_ids=prompt_ids)

    def close(self) -> None:
        """Stop the sandbox's worker processes."""
        self.runner.close()
