"""BFCL v4 multi-turn evaluation through the executing multi-turn loop, scored by BFCL's own ``multi_turn_checker``::

    python -m verl.trainer.main_eval --dataset bfcl --categories multi_turn_base --oracle --output s.json
    python -m verl.trainer.main_eval --dataset bfcl --categories multi_turn_base --oracle \\
        --oracle-control other-row --output control.json

Every row is one :class:`~agent_system.environments.bfcl_multi_turn.BFCLMultiTurnEpisode`; all rows of a category
play together in :func:`~agent_system.multi_turn_rollout.tool_loop.run_tool_loop` (the policy's text is parsed with
the configured tool-call format, the calls run on the row's BFCL backends, their outputs come back as ``tool``
turns, and a turn without a call moves on to the next user turn). The calls each episode recorded per turn and step
then go to ``multi_turn_checker`` with the row's ground truth: it replays them on fresh backends under a name of its
own per row (so no state is shared with the episode or another row) and compares state and outputs after every turn.

A row fails without reaching the checker when the loop stopped it before its last user turn (``stop_reason``
``context``, ``length`` or ``max_turns``: BFCL's ``multi_turn:force_terminated``), when one user turn took more
calling steps than BFCL's ``MAXIMUM_STEP_LIMIT`` (BFCL quits such a row), and when its prompt alone does not fit
``max_model_len`` (``over_context``; counted and reported).

The oracle (:func:`oracle_scripts`) is the ground truth written as a model would write it: per user turn, one
assistant text holding the turn's calls in the tool-call format (:func:`~verl.utils.reward_score.tool_formats.
render_calls`; ``toolrl`` after a ``<think>`` line, as RLLA answers are), then a text without a call that ends the
turn. 100% shows that prompt, parsing, execution, turn handling and scoring agree end to end; the control
(:func:`control_scripts`: each row gets the next row's scripts) shows that the score depends on the calls.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
import uuid
from collections import Counter
from typing import Mapping, Sequence

from agent_system.environments.bfcl_multi_turn import BFCLMultiTurnEpisode
from agent_system.multi_turn_rollout.tool_loop import (
    EpisodeOutput,
    LoopConfig,
    ScriptedGenerator,
    TokenGenerator,
    run_tool_loop,
    tool_loop_metrics,
)
from verl.utils.dataset.bfcl_multi_turn import (
    MULTI_TURN_CATEGORIES,
    drop_backend_instances,
    ground_truth_calls,
    is_multi_turn_category,
    load_multi_turn_category,
    multi_turn_api,
    parse_multi_turn_categories,
)
from verl.utils.fs import atomic_path
from verl.utils.reward_score.tool_formats import render_calls

logger = logging.getLogger(__name__)

__all__ = [
    "CONTROLS",
    "DEFAULT_MAX_MODEL_LEN",
    "control_scripts",
    "evaluate_multi_turn",
    "main_multi_turn",
    "oracle_scripts",
    "score_episode",
    "wants_multi_turn",
]

DEFAULT_MAX_MODEL_LEN = 32768
CONTROLS = ("other-row",)
_THINK_CALL = "<think> These calls do what the request needs next. </think>\n"
_DONE = {"toolrl": "<think> The request is handled. </think>\n<response> Done. </response>"}


def oracle_scripts(rows: Sequence[Mapping], tool_format: str = "toolrl") -> list[list[str]]:
    """Per row, the assistant texts of a perfect model: for every user turn, one text with the turn's ground-truth
    calls (none when the turn's ground truth is empty) and then one without a call.

    Returns:
        ``scripts[i]``: row ``i``'s texts in generation order (for :class:`~agent_system.multi_turn_rollout.
        tool_loop.ScriptedGenerator`).

    Raises:
        ValueError: a ground-truth call string cannot be read (row and turn named); an unknown tool format.
    """
    prefix = _THINK_CALL if tool_format == "toolrl" else ""
    done = _DONE.get(tool_format, "Done.")
    scripts = []
    for row in rows:
        texts = []
        for calls in ground_truth_calls(row):
            if calls:
                texts.append(prefix + render_calls(calls, tool_format))
            texts.append(done)
        scripts.append(texts)
    return scripts


def control_scripts(scripts: Sequence[Sequence[str]]) -> list[list[str]]:
    """The negative control: row ``i`` gets row ``i + 1``'s scripts (the last row the first's)."""
    return [list(scripts[(i + 1) % len(scripts)]) for i in range(len(scripts))]


def score_episode(row: Mapping, episode: BFCLMultiTurnEpisode, output: EpisodeOutput) -> dict:
    """BFCL's verdict on one played row (see the module docstring for the failures decided before the checker).

    Returns:
        ``{"valid": bool, "error_type": str | None, "error_message": str | None}``; a checker that raises is an
        invalid row with ``error_type`` ``multi_turn:checker_error`` (and logged).
    """
    if output.stop_reason == "context" and output.turns == 0:
        return _invalid("over_context", f"the prompt ({len(output.prompt_ids)} tokens) does not fit max_model_len")
    if episode.force_quit:
        return _invalid("multi_turn:force_terminated", f"a user turn took more than {multi_turn_api().max_steps} steps")
    if not episode.finished:
        return _invalid(
            "multi_turn:force_terminated",
            f"stopped ({output.stop_reason}) in user turn {episode.turn + 1} of {episode.turns}",
        )
    checker_name = f"toolrl_check_{uuid.uuid4().hex}"
    entry = {"id": row["id"], "initial_config": row["initial_config"], "involved_classes": row["involved_classes"]}
    try:
        result = multi_turn_api().checker(episode.steps, row["ground_truth"], entry, row["category"], checker_name)
    except Exception as err:  # a checker crash is a finding about this row, reported with the others
        logger.warning("BFCL %s: multi_turn_checker raised %s: %s", row["id"], type(err).__name__, err)
        return _invalid("multi_turn:checker_error", f"{type(err).__name__}: {err}")
    finally:
        drop_backend_instances(checker_name)
    if result.get("valid"):
        return {"valid": True, "error_type": None, "error_message": None}
    return _invalid(str(result.get("error_type")), str(result.get("error_message")))


def _invalid(error_type: str, message: str) -> dict:
    return {"valid": False, "error_type": error_type, "error_message": message}


def evaluate_multi_turn(
    category: str,
    tokenizer,
    generator: TokenGenerator,
    tool_format: str = "toolrl",
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    rows: Sequence[Mapping] | None = None,
    max_rows: int | None = None,
    max_tokens_per_turn: int = 2048,
    max_observation_tokens: int | None = None,
) -> dict:
    """Play the rows of ``category`` through the multi-turn loop with ``generator`` and score them with BFCL.

    Args:
        category: one of :data:`~verl.utils.dataset.bfcl_multi_turn.MULTI_TURN_CATEGORIES`.
        tokenizer: a chat tokenizer whose template renders ``system``/``user``/``assistant``/``tool`` turns.
        generator: the policy (``generate(list[GenRequest]) -> list[Generated]``), episode ``i`` being row ``i``.
        tool_format: the tool-call format the policy writes.
        max_model_len: prompt plus response tokens per row (also the response budget).
        rows: the rows (:func:`~verl.utils.dataset.bfcl_multi_turn.load_multi_turn_category`'s; None: load them).
        max_rows: with ``rows`` None, the first ``max_rows`` rows (None: all).
        max_tokens_per_turn: one assistant turn's token budget (BFCL's long-context rows write tweets of ~1,400
            tokens).
        max_observation_tokens: an observation is cut to this many tokens (None: not cut, as BFCL shows every
            output whole; ``max_model_len`` still bounds the conversation).

    Returns:
        ``{"accuracy", "rows", "correct", "over_context" (rows stopped at max_model_len), "prompt_over_context"
        (rows whose prompt alone does not fit), "force_terminated", "error_types", "failed" (per failed row: id,
        error type and message), "stop_reasons", "tool_loop" (:func:`tool_loop_metrics`), "seconds"}``.

    Raises:
        ValueError: an unknown category or tool format, bad loop limits, or a row BFCL's data cannot describe.
    """
    [category] = parse_multi_turn_categories([category])
    start = time.perf_counter()
    rows = list(rows) if rows is not None else load_multi_turn_category(category, max_rows)
    if not rows:
        raise ValueError(f"BFCL {category}: no rows to evaluate")
    limit = multi_turn_api().max_steps
    config = LoopConfig(
        tool_format=tool_format,
        max_turns=max(len(r["question"]) for r in rows) * (limit + 2),
        max_tokens_per_turn=max_tokens_per_turn,
        max_response_length=max_model_len,
        max_observation_tokens=max_observation_tokens or max_model_len,
        max_model_len=max_model_len,
    )
    episodes = [BFCLMultiTurnEpisode(row) for row in rows]
    try:
        outputs = run_tool_loop(episodes, generator, tokenizer, config)
        verdicts = [score_episode(row, ep, out) for row, ep, out in zip(rows, episodes, outputs)]
    finally:
        for episode in episodes:
            episode.close()
    correct = sum(v["valid"] for v in verdicts)
    failed = [{"id": r["id"], **{k: v[k] for k in ("error_type", "error_message")}} for r, v in zip(rows, verdicts)]
    return {
        "accuracy": correct / len(rows),
        "rows": len(rows),
        "correct": correct,
        "over_context": sum(o.stop_reason == "context" for o in outputs),
        "prompt_over_context": sum(v["error_type"] == "over_context" for v in verdicts),
        "force_terminated": sum(v["error_type"] == "multi_turn:force_terminated" for v in verdicts),
        "error_types": dict(Counter(v["error_type"] for v in verdicts if not v["valid"])),
        "failed": [f for f, v in zip(failed, verdicts) if not v["valid"]],
        "stop_reasons": dict(Counter(o.stop_reason for o in outputs)),
        "tool_loop": tool_loop_metrics(outputs),
        "seconds": round(time.perf_counter() - start, 3),
    }


def run_multi_turn_oracle(
    categories: str | Sequence[str],
    tokenizer,
    tool_format: str = "toolrl",
    max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    control: str | None = None,
    max_rows: int | None = None,
) -> dict:
    """The oracle (or, with ``control="other-row"``, the control) on every category: ``{"oracle": True,
    "oracle_control", "dataset": "bfcl", "tool_format", "max_model_len", "categories": {name: evaluate_multi_turn's
    summary}}``.

    Raises:
        ValueError: an unknown category, control or tool format.
    """
    if control is not None and control not in CONTROLS:
        raise ValueError(f"--oracle-control {control!r}: expected one of {list(CONTROLS)}")
    out = {}
    for category in parse_multi_turn_categories(categories):
        rows = load_multi_turn_category(category, max_rows)
        scripts = oracle_scripts(rows, tool_format)
        scripts = control_scripts(scripts) if control else scripts
        generator = ScriptedGenerator(tokenizer, scripts)
        out[category] = evaluate_multi_turn(category, tokenizer, generator, tool_format, max_model_len, rows=rows)
        logger.info("BFCL %s: accuracy %.4f over %d rows", category, out[category]["accuracy"], len(rows))
    return {
        "oracle": True,
        "oracle_control": control,
        "dataset": "bfcl",
        "tool_format": tool_format,
        "max_model_len": max_model_len,
        "categories": out,
    }


def wants_multi_turn(categories: str | None) -> bool:
    """Whether a ``--categories`` value names a multi-turn category."""
    return bool(categories) and any(is_multi_turn_category(c.strip()) for c in str(categories).split(","))


def model_generator(model: str, max_tokens_per_turn: int, micro_batch_size: int = 4):
    """A greedy policy over a model (a preset name or a local path): ``(generator, tokenizer, max_model_len)``, the
    generator an HF rollout (:class:`~verl.workers.rollout.hf_rollout.HFRollout`, float32) under
    :class:`~agent_system.multi_turn_rollout.tool_loop.RolloutGenerator`, logging one heartbeat line per round.

    Raises:
        ValueError: the model cannot be found (:func:`verl.utils.model_presets.prepare_model`).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agent_system.multi_turn_rollout.tool_loop import RolloutGenerator
    from verl.trainer.config_utils import default_section
    from verl.utils.model_presets import prepare_model
    from verl.workers.rollout.hf_rollout import HFRollout

    path = prepare_model(model, key="--model")
    tokenizer = AutoTokenizer.from_pretrained(path)
    lm = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    config = default_section(
        "actor_rollout_ref.rollout",
        response_length=max_tokens_per_turn,
        do_sample=False,
        dtype="float32",
        micro_batch_size=micro_batch_size,
    )
    rollout = RolloutGenerator(HFRollout(lm, config, tokenizer), tokenizer, do_sample=False, validate=True)
    return _Heartbeat(rollout), tokenizer, int(getattr(lm.config, "max_position_embeddings", DEFAULT_MAX_MODEL_LEN))


class _Heartbeat:
    """Logs each generation round of the loop: active episodes, prompt tokens, seconds."""

    def __init__(self, inner: TokenGenerator):
        self.inner, self.round, self.start = inner, 0, time.perf_counter()

    def generate(self, requests):
        self.round += 1
        t = time.perf_counter()
        out = self.inner.generate(requests)
        logger.info(
            "round %d: %d episodes, longest context %d tokens, %d new tokens, %.1fs (%.0fs total)",
            self.round,
            len(requests),
            max(len(r.prompt_ids) for r in requests),
            sum(len(g.ids) for g in out),
            time.perf_counter() - t,
            time.perf_counter() - self.start,
        )
        return out


def main_multi_turn(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """``main_eval``'s multi-turn branch over multi-turn ``--categories``: ``--oracle`` (with the SmolLM2 chat
    tokenizer, :func:`verl.utils.model_presets.prepare_tokenizer`) or ``--model`` (a model plays the rows greedily,
    :func:`model_generator`; no generations file can hold a multi-turn conversation); writes the summary to
    ``--output`` atomically and prints it.

    Returns:
        0 (bad arguments exit through ``parser.error``).
    """
    from transformers import AutoTokenizer

    from verl.utils.model_presets import prepare_tokenizer

    names = [c.strip() for c in str(args.categories).split(",")]
    single = [c for c in names if not is_multi_turn_category(c)]
    if single:
        parser.error(
            f"--categories: {single} are single-turn and {[c for c in names if c not in single]} multi-turn "
            f"categories; evaluate them in separate runs (multi-turn: {', '.join(MULTI_TURN_CATEGORIES)})"
        )
    if args.generations:
        parser.error("multi-turn BFCL categories: --oracle or --model (no generations file holds a conversation)")
    if args.oracle == bool(args.model):
        parser.error("multi-turn BFCL categories: give exactly one of --oracle or --model")
    if args.oracle_control and not args.oracle:
        parser.error("--oracle-control: only with --oracle")
    if not args.output:
        parser.error("multi-turn BFCL needs --output")
    if args.max_model_len is not None and args.max_model_len < 2:
        parser.error(f"--max-model-len must be >= 2, got {args.max_model_len}")
    if args.max_tokens_per_turn is not None and args.max_tokens_per_turn < 1:
        parser.error(f"--max-tokens-per-turn must be >= 1, got {args.max_tokens_per_turn}")
    if args.oracle:
        tokenizer = AutoTokenizer.from_pretrained(str(prepare_tokenizer()))
        max_model_len = args.max_model_len or DEFAULT_MAX_MODEL_LEN
        summary = run_multi_turn_oracle(
            names, tokenizer, args.tool_format, max_model_len, control=args.oracle_control, max_rows=args.max_rows
        )
    else:
        per_turn = args.max_tokens_per_turn or 512
        generator, tokenizer, context = model_generator(args.model, per_turn)
        max_model_len = args.max_model_len or context
        categories = {}
        for category in parse_multi_turn_categories(names):
            categories[category] = evaluate_multi_turn(
                category,
                tokenizer,
                generator,
                args.tool_format,
                max_model_len,
                max_rows=args.max_rows,
                max_tokens_per_turn=per_turn,
            )
            logger.info(
                "BFCL %s: accuracy %.4f over %d rows",
                category,
                categories[category]["accuracy"],
                categories[category]["rows"],
            )
        summary = {
            "oracle": False,
            "model": args.model,
            "dataset": "bfcl",
            "tool_format": args.tool_format,
            "max_model_len": max_model_len,
            "max_tokens_per_turn": per_turn,
            "categories": categories,
        }
    summary["summary_path"] = str(args.output)
    with atomic_path(args.output) as tmp:
        tmp.write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(summary, indent=2))
    sys.stdout.flush()
    return 0
