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
"""

from __future__ import annotations

import logging
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
from verl.trainer.config_errors import ConfigError
from verl.trainer.multi_turn_config_checks import KEY
from verl.utils.reward_score.tool_formats import resolve_tool_format

__all__ = ["MultiTurnRollout"]

logger = logging.getLogger(__name__)


class _Engine:
    """What :class:`RolloutGenerator` calls: the trainer's one-round generation as ``generate_sequences``."""

    def __init__(self, generate_sequences: Callable[[DataProto], DataProto]):
        self.generate_sequences = generate_sequences


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

    def __init__(self, section: Any, tokenizer, tool_format: str, response_length: int, key: str = KEY):
        mt = section
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
    def from_trainer_config(cls, config: Any, tokenizer) -> "MultiTurnRollout | None":
        """Built from the trainer's config (``actor_rollout_ref.rollout.multi_turn``, ``data.tool_format``,
        ``actor_rollout_ref.rollout.response_length``); None when ``multi_turn.enable`` is false."""
        rollout = config.actor_rollout_ref.rollout
        if not rollout.multi_turn.enable:
            return None
        return cls(rollout.multi_turn, tokenizer, config.data.tool_format, rollout.response_length)

    def generate(
        self,
        gen_batch: DataProto,
        generate_sequences: Callable[[DataProto], DataProto],
        do_sample: bool,
        validate: bool,
        raw_prompts: np.ndarray | None = None,
    ) -> DataProto:
        """Play one episode per row of ``gen_batch`` (``input_ids``/``attention_mask`` [B, P], left-padded).

        Args:
            generate_sequences: one round's generation (the worker group's ``generate_sequences``).
            raw_prompts: the rows' chat messages (``raw_prompt``), kept on the episodes for the record.

        Returns:
            The rollout batch of :func:`~agent_system.multi_turn_rollout.tool_loop.outputs_to_data_proto`
            (``prompts`` [B, P'] with P' the batch's longest prompt, ``responses`` [B, response_length],
            ``input_ids``, ``attention_mask``, ``position_ids``, ``response_mask``, and ``rollout_log_probs`` when
            the rollout records them; non-tensors ``num_turns``, ``stop_reason``, ``tool_calls``,
            ``tool_failures``), with the episodes' ``tool_loop/*`` and ``tool/*`` metrics in
            ``meta_info["rollout_metrics"]``.
        """
        ids, mask = gen_batch.batch["input_ids"], gen_batch.batch["attention_mask"].bool()
        prompt_ids = [ids[i][mask[i]].tolist() for i in range(len(gen_batch))]
        outputs = self.play(prompt_ids, generate_sequences, do_sample, validate, raw_prompts)
        output = outputs_to_data_proto(outputs, self.pad_token_id, self.response_length)
        output.meta_info["rollout_metrics"] = {**tool_loop_metrics(outputs), **self.runner.metrics()}
        return output

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
