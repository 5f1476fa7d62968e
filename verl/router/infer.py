"""Router inference (spec "Inference"): route greedily, rewrite the prompt, generate once, write JSONL.

``python -m verl.router.infer --checkpoint CKPT --prompts FILE --output OUT.jsonl [--max_new_tokens N]
[--batch_size B] [--device cpu|cuda] [--routes learned|answer|search|calculate|random:B [--seed S]]
[--filter_overlong_prompts] [--fixed_lambda L | --target_cost B] [--tools SPEC [SPEC ...] [--tool_sandbox MODE]]``

``--routes`` replaces the learned head by a fixed routing policy on the same actor (the baselines of the router's
evaluation: never-tools ``answer``, always-tools ``search``, random routes at the budget's rate ``random:B``).
A ``router.loss_mode=value`` head routes at the checkpoint's price λ, at ``--fixed_lambda``, or at the price that
spends ``--target_cost`` on these prompts (λ set by their route probabilities alone: the budget on a new distribution).

``CKPT`` is a trainer checkpoint ``.../global_step_N`` (or its ``actor/`` subdirectory; the layout and the loaders
are :mod:`verl.router.checkpoint`).

``FILE`` is a parquet in the RLLA schema (``prompt`` column of chat messages, optional ``extra_info``) or a JSONL
file (``.jsonl`` / ``.json``, one JSON object a line) with the same ``prompt`` (and optional ``extra_info``) fields.

Per batch of prompts (no reference model, critic or reward is loaded), the same steps as
``RouterController.route`` with ``validate=True`` during training, so a route gives the same rewritten prompt:

1. tokenise the ORIGINAL prompts (``rewrite.tokenize_prompts``, ``data.max_prompt_length`` / ``data.truncation``);
2. ``router_logits`` [B, 3] from the actor's hidden states and the checkpoint's ``RouterHead`` (with
   ``router.loss_mode=value`` priced as in training by ``data.pt``'s λ and route values: :func:`load_value_policy`);
   argmax route;
3. tool families per row (``extra_info.tool_families`` or the heuristic; ``router.tool_family_file`` overrides);
4. rewrite the system message for the route (``router.filter_tools``, ``router.other_as``) and re-tokenise;
5. one greedy generation with ``HFRollout`` (at most ``--max_new_tokens``), decoded with special tokens kept (as
   ``verl.trainer.main_generation``), and tool calls parsed with ``tool_parse.parse_tool_calls``; or, with tools
   that run (``--tools``, or the checkpoint's ``actor_rollout_ref.rollout.multi_turn`` enabled), one episode of the
   executing tool loop whose route offers its family's tools (:mod:`verl.router.tool_play`; ``--max_new_tokens``
   is then the episode's whole response budget, observations included).

Output rows (input order, written atomically)::

    {"index": extra_info.index (else the row position), "row": position in FILE,
     "route": "ANSWER" | "SEARCH" | "CALCULATE", "router_probs": {"ANSWER": p, "SEARCH": p, "CALCULATE": p}
     (the learned head's, also under a fixed --routes policy: what the head would have chosen),
     "router_lambda": the price λ those probabilities were computed at (``router.loss_mode=value`` heads only: the
     checkpoint's, ``--fixed_lambda``, or the one ``--target_cost`` set; ``verl.router.value.reprice_probs`` moves
     them to another price),
     "response": str, "tool_calls": [{"name", "parameters"}, ...],
     "ground_truth", "data_source": the row's, when it has them (so ``main_eval --generations OUT`` scores the file),
     "bfcl_id", "bfcl_category": from ``extra_info`` for BFCL rows (``verl.utils.dataset.bfcl.write_bfcl_parquet``),
     so that BFCL's checker scores the file,
     with executed tools also "answer", "num_turns", "stop_reason", "offered_tools", "tool_results"
     (:func:`verl.router.tool_play.play_routed`)}

The command prints a JSON summary (route counts, rows with tool calls, timing).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import torch
from omegaconf import OmegaConf

from verl.utils.dataset.bfcl import bfcl_fields
from verl.router import ROUTE_NAMES, RouterAction, parse_other_as
from verl.router.families import load_tool_family_file, row_tool_families
from verl.router.checkpoint import load_checkpoint_config, load_router_head, load_value_policy, resolve_checkpoint
from verl.router.head import compute_router_features, compute_router_logits, sample_actions
from verl.router.value import lambda_for_cost, mean_route_cost, value_policy_logits
from verl.router.prompt_rows import PromptRow, load_prompt_rows  # noqa: F401 - load_prompt_rows: public here too
from verl.router.rewrite import rewrite_batch, tokenize_prompts
from verl.utils.dataset.rl_dataset import PromptTooLongError

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------------------ inference
@dataclass
class RoutedBatch:
    """The router's decision for a batch of prompts and the prompts to generate from.

    ``actions`` LongTensor [B]; ``probs`` float32 [B, 3] (softmax of the router logits); ``messages`` the rewritten
    chat prompts; ``tokens`` their ``input_ids`` / ``attention_mask`` / ``position_ids`` [B, P] (left-padded,
    padding-only columns trimmed).
    """

    actions: torch.Tensor
    probs: torch.Tensor
    messages: list[list[dict]]
    tokens: dict[str, torch.Tensor]


class RouterInference:
    """The actor LM, its router head and the rewrite settings of one checkpoint.

    Args:
        checkpoint: ``.../global_step_N`` or its ``actor/`` subdirectory (:func:`resolve_checkpoint`).
        max_new_tokens: the generation limit (>= 1).
        device: ``cpu`` | ``cuda``; None: CUDA when available.
        routes: ``--routes`` (:func:`parse_routes`); seed: of ``random:B`` routes.
        fixed_lambda: ``router.loss_mode=value`` only: route at this λ instead of the checkpoint's (the head as a
            fixed-penalty policy; its cost–reward curve as λ varies).
        tools / tool_sandbox: tools that run, over the checkpoint's ``multi_turn`` section
            (:func:`verl.router.tool_play.build_multi_turn`).

    Raises:
        FileNotFoundError / ValueError / KeyError: see :func:`resolve_checkpoint`, :func:`load_checkpoint_config`,
            :func:`load_router_head`, :func:`load_value_policy`; ``cuda`` requested without CUDA; ``fixed_lambda``
            with a ``loss_mode=pg`` checkpoint or below 0.
    """

    def __init__(
        self,
        checkpoint: str | os.PathLike,
        max_new_tokens: int = 256,
        device: Optional[str] = None,
        routes: str = "learned",
        seed: int = 0,
        fixed_lambda: Optional[float] = None,
        tools: Optional[Sequence[str]] = None,
        tool_sandbox: Optional[str] = None,
    ):
        from transformers import AutoTokenizer

        from verl.router.tool_play import build_multi_turn

        self.routes = parse_routes(routes)
        self.route_generator = torch.Generator().manual_seed(int(seed))

        from verl.trainer.config_utils import default_section
        from verl.trainer.main_generation import _device
        from verl.utils.mixed_precision import mixed_precision_policy
        from verl.utils.model_utils import load_causal_lm
        from verl.workers.rollout.hf_rollout import HFRollout

        self.files = resolve_checkpoint(checkpoint)
        self.config = load_checkpoint_config(self.files.config_file)
        self.router_cfg = self.config.router
        self.device = _device(device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda: CUDA is not available on this machine")
        trust_remote_code = bool(self.config.actor_rollout_ref.model.trust_remote_code)
        self.tokenizer = AutoTokenizer.from_pretrained(self.files.hf_dir, trust_remote_code=trust_remote_code)
        self.model = load_causal_lm(
            default_section(
                "actor_rollout_ref.model", path=str(self.files.hf_dir), trust_remote_code=trust_remote_code
            ),
            trainable=False,
        ).to(self.device)
        # compute as training did: under the run's mixed-precision policy (bf16 on CUDA by default) the actor's
        # parameters are bf16 copies of the float32 weights, buffers as loaded (verl/utils/mixed_precision.py)
        key = "actor_rollout_ref.actor.fsdp_config.mixed_precision"
        policy = mixed_precision_policy(OmegaConf.select(self.config, key), self.device.type, key)
        self.compute_dtype = policy.param_dtype if policy is not None else torch.float32
        for param in self.model.parameters():
            param.data = param.data.to(self.compute_dtype)
        self.head = load_router_head(self.files.router_file, self.router_cfg, int(self.model.config.hidden_size)).to(
            self.device
        )
        self.value_policy = load_value_policy(self.files.step_dir, self.router_cfg)
        if fixed_lambda is not None:  # the same head at another price: the fixed-penalty policy
            if self.value_policy is None:
                raise ValueError(
                    "--fixed_lambda prices a router.loss_mode=value head; this checkpoint's head is a "
                    "policy (router.loss_mode=pg)"
                )
            if not float(fixed_lambda) >= 0:
                raise ValueError(f"--fixed_lambda must be >= 0, got {fixed_lambda}")
            baseline, cost, _, temperature = self.value_policy
            self.value_policy = (baseline, cost, float(fixed_lambda), temperature)
        self.max_prompt_length = int(self.config.data.max_prompt_length)
        self.truncation = self.config.data.truncation
        self.filter_tools = bool(self.router_cfg.filter_tools)
        # as in training: ANSWER-routed prompts cannot open a tool call (a checkpoint from before the key: off)
        self.answer_forbids_tool_calls = bool(
            OmegaConf.select(self.router_cfg, "answer_forbids_tool_calls", default=False)
        )
        self.other_as = parse_other_as(self.router_cfg.other_as)
        family_file = self.router_cfg.tool_family_file
        self.family_overrides = load_tool_family_file(family_file) if family_file else None
        self.rollout = HFRollout(
            self.model,
            default_section(
                "actor_rollout_ref.rollout",
                response_length=int(max_new_tokens),
                do_sample=False,
                micro_batch_size=None,
                dtype=str(self.compute_dtype).split(".")[-1],
            ),
            self.tokenizer,
        )
        self.pad_token_id = (
            self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        )
        self.multi_turn = build_multi_turn(self.config, self.tokenizer, int(max_new_tokens), tools, tool_sandbox)
        logger.info(
            "router inference: %s (router %s, head=%s, pooling=%s, filter_tools=%s, other_as=%s) on %s",
            self.files.hf_dir,
            self.files.router_file.name,
            self.head.head_type,
            self.head.pooling,
            self.filter_tools,
            getattr(self.other_as, "name", None),
            self.device,
        )

    def prompt_length(self, messages: Sequence[Mapping]) -> int:
        """Token length of an ORIGINAL prompt, chat-templated as the trainer's dataset builds it."""
        from verl.utils.dataset.rl_dataset import prompt_text

        text = prompt_text(self.tokenizer, [dict(m) for m in messages], True, None)
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _tokenize(self, messages: Sequence[Sequence[Mapping]]) -> dict[str, torch.Tensor]:
        from verl.utils.torch_functional import trim_left_padding

        return trim_left_padding(
            tokenize_prompts(self.tokenizer, messages, self.max_prompt_length, truncation=self.truncation)
        )

    @torch.no_grad()
    def prompt_features(self, prompts: Sequence[Sequence[Mapping]]) -> torch.Tensor:
        """The router head's input for ORIGINAL prompts: pooled final hidden states, float32 ``[B, H]`` on CPU
        (:func:`verl.router.head.compute_router_features`, before the head's normalisation; what
        ``router.value_fit=ridge`` fits on).

        Raises:
            PromptTooLongError: a prompt exceeds ``data.max_prompt_length`` with ``data.truncation='error'``.
        """
        original = {k: v.to(self.device) for k, v in self._tokenize(prompts).items()}
        return (
            compute_router_features(
                self.model, self.head, original["input_ids"], original["attention_mask"], original["position_ids"]
            )
            .float()
            .cpu()
        )

    def _policy_logits(self, prompts: Sequence[Sequence[Mapping]]) -> torch.Tensor:
        """float32 ``[B, 3]`` routing logits of ORIGINAL prompts (a value head's values priced at its λ)."""
        original = {k: v.to(self.device) for k, v in self._tokenize(prompts).items()}
        logits = compute_router_logits(
            self.model, self.head, original["input_ids"], original["attention_mask"], original["position_ids"]
        ).float()
        if self.value_policy is not None:  # router.loss_mode=value: the head's values, priced by the run's λ
            logits = value_policy_logits(logits, *self.value_policy)
        return logits

    @torch.no_grad()
    def set_price_for_cost(self, rows: Sequence["PromptRow"], budget: float, batch_size: int = 8) -> float:
        """A value head's price set for these prompts, from the prompts alone (one router forward per prompt, no
        generation, no label): the smallest λ at which the greedy routes it will take spend at most ``budget`` in
        mean route cost ``c̄`` over ``rows`` (:func:`verl.router.value.lambda_for_cost` with ``greedy=True``; greedy
        cost moves in steps of one prompt's ``c̄``). Later routing uses it; the log gives the greedy and the
        expected (the stochastic policy's) cost at it. Returns λ.

        Raises:
            ValueError: a ``router.loss_mode=pg`` head; ``batch_size < 1``; as ``lambda_for_cost`` (e.g. a budget
                below every route's ``c̄``).
            PromptTooLongError: as :meth:`route`, naming the rows.
        """
        if self.value_policy is None:
            raise ValueError(
                "--target_cost prices a router.loss_mode=value head; this checkpoint's head is a policy "
                "(router.loss_mode=pg)"
            )
        if batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
        baseline, cost, lam, temperature = self.value_policy
        probs = []
        for start in range(0, len(rows), batch_size):
            try:
                logits = self._policy_logits([r.messages for r in rows[start : start + batch_size]])
            except PromptTooLongError as exc:
                raise PromptTooLongError(f"rows {start}..{min(start + batch_size, len(rows)) - 1}: {exc}") from exc
            probs.append(torch.softmax(logits.double(), -1).cpu())
        probs = torch.cat(probs)
        price = lambda_for_cost(probs, cost, lam, temperature, budget, greedy=True)
        logger.info(
            "price for a mean route cost of at most %s over %d prompts: λ = %.4f (greedy cost %.4f, expected %.4f)",
            budget,
            len(rows),
            price,
            mean_route_cost(probs, cost, lam, price, temperature, True),
            mean_route_cost(probs, cost, lam, price, temperature),
        )
        self.value_policy = (baseline, cost, price, temperature)
        return price

    @torch.no_grad()
    def route(self, prompts: Sequence[Sequence[Mapping]], extra_infos: Optional[Sequence[Any]] = None) -> RoutedBatch:
        """Greedy route for each ORIGINAL prompt, then its rewritten messages and tokens (see :class:`RoutedBatch`).

        Args:
            prompts: B chat prompts (lists of ``{role, content}``).
            extra_infos: B ``extra_info`` values (None entries allowed) for ``tool_families``; None: all None.

        Raises:
            PromptTooLongError: a prompt exceeds ``data.max_prompt_length`` with ``data.truncation='error'``.
            ValueError: ``extra_infos`` of another length; a bad ``extra_info.tool_families``.
        """
        extra_infos = [None] * len(prompts) if extra_infos is None else list(extra_infos)
        if len(extra_infos) != len(prompts):
            raise ValueError(f"route: {len(prompts)} prompts but {len(extra_infos)} extra_info values")
        logits = self._policy_logits(prompts)
        actions = fixed_routes(self.routes, len(prompts), self.route_generator)
        if actions is None:  # the learned head, greedily
            actions, _ = sample_actions(logits, greedy=True)
        actions = actions.to(logits.device)
        families = [row_tool_families(list(p), e, self.family_overrides) for p, e in zip(prompts, extra_infos)]
        messages = rewrite_batch(
            [list(p) for p in prompts], actions.cpu(), families, filter_tools=self.filter_tools, other_as=self.other_as
        )
        return RoutedBatch(actions.cpu(), torch.softmax(logits, dim=-1).cpu(), messages, self._tokenize(messages))

    def generate(self, tokens: Mapping[str, torch.Tensor], actions: Optional[torch.Tensor] = None) -> list[str]:
        """One greedy response per prompt row (``HFRollout``), decoded up to and including EOS, special tokens kept.

        Args:
            tokens: ``input_ids`` / ``attention_mask`` / ``position_ids`` [B, P], left-padded.
            actions: [B] the rows' routes; with ``router.answer_forbids_tool_calls`` the ANSWER rows cannot open a
                tool call (as in training).
        """
        from verl.protocol import DataProto
        from verl.workers.rollout.forbid_text import FORBID_TOOL_CALLS

        meta = {"n": 1, "eos_token_id": self.tokenizer.eos_token_id, "pad_token_id": self.pad_token_id}
        tensors = dict(tokens)
        if self.answer_forbids_tool_calls and actions is not None:
            tensors[FORBID_TOOL_CALLS] = actions == int(RouterAction.ANSWER)
        result = self.rollout.generate_sequences(DataProto.from_dict(tensors=tensors, meta_info=meta))
        lengths = result.batch["response_mask"].sum(-1).tolist()
        return [
            self.tokenizer.decode(ids[: int(n)].tolist(), skip_special_tokens=False)
            for ids, n in zip(result.batch["responses"], lengths)
        ]

    def run(self, rows: Sequence[PromptRow], batch_size: int = 8, source: str = "prompts") -> list[dict]:
        """Route, rewrite and generate for every row, ``batch_size`` rows at a time; the output rows in input order.

        Raises:
            ValueError: ``batch_size < 1``.
            PromptTooLongError: as :meth:`route`, naming ``source`` and the rows of the batch.
        """
        from verl.utils.reward_score.tool_formats import parse_calls, resolve_tool_format
        from verl.utils.reward_score.tool_parse import parse_tool_calls
        from verl.router.tool_play import play_routed

        fmt = resolve_tool_format(self.config.data.tool_format, self.tokenizer)  # as the checkpoint was trained
        calls_of = (
            parse_tool_calls if fmt == "toolrl" else (lambda text: [dict(c) for c in parse_calls(text, fmt).calls])
        )

        if batch_size < 1:
            raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
        out = []
        for start in range(0, len(rows), batch_size):
            batch = rows[start : start + batch_size]
            try:
                routed = self.route([r.messages for r in batch], [r.extra_info for r in batch])
            except PromptTooLongError as exc:
                raise PromptTooLongError(f"{source} rows {start}..{start + len(batch) - 1}: {exc}") from exc
            if self.multi_turn is not None:  # tools that run: one episode per prompt, its route's tools offered
                played = play_routed(
                    self.multi_turn,
                    self.rollout.generate_sequences,
                    routed.tokens,
                    routed.actions,
                    routed.messages,
                    self.answer_forbids_tool_calls,
                )
                responses = [p.pop("response") for p in played]
            else:
                played, responses = [{} for _ in batch], self.generate(routed.tokens, routed.actions)
            for j, (row, response) in enumerate(zip(batch, responses)):
                out.append(
                    {
                        "index": row.index,
                        "row": row.position if row.position is not None else start + j,
                        "route": ROUTE_NAMES[int(routed.actions[j])],
                        "router_probs": {name: float(p) for name, p in zip(ROUTE_NAMES, routed.probs[j].tolist())},
                        **({"router_lambda": self.value_policy[2]} if self.value_policy is not None else {}),
                        "response": response,
                        "tool_calls": calls_of(response),
                        **({"ground_truth": row.ground_truth} if row.ground_truth is not None else {}),
                        **({"data_source": row.data_source} if row.data_source is not None else {}),
                        **bfcl_fields(row.extra_info),
                        **played[j],
                    }
                )
            logger.info("router inference: %d/%d prompts", start + len(batch), len(rows))
        return out


def parse_routes(spec: str) -> tuple[str, Optional[float]]:
    """``--routes``: ``learned`` (the checkpoint's head, greedy), ``answer`` / ``search`` / ``calculate`` (every prompt
    on that route), or ``random:B`` (a tool route — SEARCH, which keeps every tool unless ``router.filter_tools`` —
    with probability B, else ANSWER: the random baseline at the budget's rate). Returns ``(kind, rate)``.

    Raises:
        ValueError: anything else, or a rate outside [0, 1].
    """
    kind, _, rate = str(spec).partition(":")
    if kind in ("learned", "answer", "search", "calculate") and not rate:
        return kind, None
    if kind == "random" and rate:
        try:
            value = float(rate)
        except ValueError:
            value = -1.0
        if 0.0 <= value <= 1.0:
            return kind, value
    raise ValueError(f"--routes {spec!r}: learned | answer | search | calculate | random:B with 0 <= B <= 1")


def fixed_routes(routes: tuple[str, Optional[float]], n: int, generator: torch.Generator) -> Optional[torch.Tensor]:
    """LongTensor [n] of route ids for a fixed policy (:func:`parse_routes`), or None for ``learned``."""
    kind, rate = routes
    if kind == "learned":
        return None
    if kind == "random":
        tool = torch.rand(n, generator=generator) < float(rate)
        return torch.where(tool, ROUTE_NAMES.index("SEARCH"), ROUTE_NAMES.index("ANSWER")).long()
    return torch.full((n,), ROUTE_NAMES.index(kind.upper()), dtype=torch.long)


def run_inference(
    checkpoint: str | os.PathLike,
    prompts: str | os.PathLike,
    output: str | os.PathLike,
    max_new_tokens: int = 256,
    batch_size: int = 8,
    device: Optional[str] = None,
    routes: str = "learned",
    seed: int = 0,
    filter_overlong_prompts: bool = False,
    fixed_lambda: Optional[float] = None,
    target_cost: Optional[float] = None,
    tools: Optional[Sequence[str]] = None,
    tool_sandbox: Optional[str] = None,
) -> dict:
    """Load the checkpoint, run every prompt of ``prompts``, write ``output`` (JSONL, atomically).

    ``filter_overlong_prompts`` (as the trainer's ``data.filter_overlong_prompts``): drop the rows whose prompt is
    longer than the checkpoint's ``data.max_prompt_length`` instead of failing on them (their count is reported).
    ``target_cost`` (a value head): route at the smallest price at which the head's greedy routes spend at most
    ``target_cost`` in mean route cost ``c̄`` over these prompts (:meth:`RouterInference.set_price_for_cost`) — the
    budget held on a new prompt distribution, in the training batches' cost per route, not the realised cost.

    Returns:
        The summary: ``{"output_path", "prompts", "filtered_overlong", "routes": {ANSWER: n, SEARCH: n,
        CALCULATE: n}, "rows_with_tool_calls", "seconds"}``, plus ``router_lambda`` for a value head and, with tools
        that run, ``tools``: ``{"calls", "failures", "seconds_per_call", "calls_per_prompt"}`` over every episode.

    Raises:
        ValueError: ``max_new_tokens < 1``, ``batch_size < 1``, every prompt filtered out, both ``fixed_lambda`` and ``target_cost``, a
            ``target_cost`` that is not a finite number ``≥ 0``.
    """
    from verl.trainer.main_generation import write_jsonl

    if int(max_new_tokens) < 1:
        raise ValueError(f"--max_new_tokens must be >= 1, got {max_new_tokens}")
    if int(batch_size) < 1:  # before the model loads
        raise ValueError(f"--batch_size must be >= 1, got {batch_size}")
    if fixed_lambda is not None and target_cost is not None:
        raise ValueError("--fixed_lambda and --target_cost both set the price: give one")
    if target_cost is not None and not (math.isfinite(target_cost) and target_cost >= 0):
        raise ValueError(f"--target_cost must be a finite number >= 0, got {target_cost}")
    rows = load_prompt_rows(prompts)
    engine = RouterInference(checkpoint, max_new_tokens, device, routes, seed, fixed_lambda, tools, tool_sandbox)
    filtered = 0
    if filter_overlong_prompts:
        kept = [row for row in rows if engine.prompt_length(row.messages) <= engine.max_prompt_length]
        filtered = len(rows) - len(kept)
        if not kept:
            raise ValueError(
                f"{prompts}: all {len(rows)} prompts are longer than data.max_prompt_length="
                f"{engine.max_prompt_length} of the checkpoint"
            )
        logger.info(
            "filtered %d of %d prompts longer than data.max_prompt_length=%d",
            filtered,
            len(rows),
            engine.max_prompt_length,
        )
        rows = kept
    if target_cost is not None:  # logs the price it sets
        engine.set_price_for_cost(rows, float(target_cost), batch_size)
    start = time.monotonic()
    try:
        results = engine.run(rows, batch_size=batch_size, source=str(prompts))
    finally:
        if engine.multi_turn is not None:
            engine.multi_turn.close()
    seconds = time.monotonic() - start
    calls = [c for r in results for c in r.get("tool_results", [])]
    write_jsonl(output, results)
    counts = Counter(r["route"] for r in results)
    summary = {
        "output_path": str(output),
        "prompts": len(results),
        "filtered_overlong": filtered,
        "route_policy": routes,
        "routes": {name: counts.get(name, 0) for name in ROUTE_NAMES},
        "rows_with_tool_calls": sum(1 for r in results if r["tool_calls"]),
        "seconds": round(seconds, 2),
        **({"router_lambda": engine.value_policy[2]} if engine.value_policy is not None else {}),
    }
    if engine.multi_turn is not None:
        summary["tools"] = {
            "calls": len(calls),
            "failures": sum(not c["ok"] for c in calls),
            "seconds_per_call": sum(c["seconds"] for c in calls) / len(calls) if calls else 0.0,
            "calls_per_prompt": len(calls) / len(results),
        }
    logger.info("wrote %d rows to %s in %.1f s; routes %s", len(results), output, seconds, summary["routes"])
    return summary


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point (see the module docstring); prints the summary JSON."""
    from verl.trainer.main_ppo import setup_logging

    parser = argparse.ArgumentParser(prog="python -m verl.router.infer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="global_step_N directory (or its actor/ subdirectory)")
    parser.add_argument("--prompts", required=True, help="RLLA-schema parquet or JSONL with a 'prompt' field")
    parser.add_argument("--output", required=True, help="JSONL to write")
    parser.add_argument("--max_new_tokens", type=int, default=256)
    parser.add_argument("--batch_size", type=int, default=8)
    parser.add_argument("--device", choices=("cpu", "cuda"), default=None, help="default: cuda when available")
    parser.add_argument(
        "--routes",
        default="learned",
        help="learned (the head) | answer | search | calculate | random:B (fixed-routing baselines)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of random:B routes")
    parser.add_argument(
        "--filter_overlong_prompts",
        action="store_true",
        help="drop prompts longer than the checkpoint's data.max_prompt_length (else data.truncation applies to them)",
    )
    price = parser.add_mutually_exclusive_group()
    price.add_argument(
        "--fixed_lambda",
        type=float,
        default=None,
        help="router.loss_mode=value: price the routes at this λ instead of the checkpoint's (the "
        "same head as a fixed-penalty policy)",
    )
    price.add_argument(
        "--target_cost",
        type=float,
        default=None,
        help="router.loss_mode=value: the smallest price at which the head's greedy routes spend at most "
        "this mean route cost c̄ over these prompts, set from the prompts alone (the budget on a "
        "new prompt distribution)",
    )
    parser.add_argument("--tools", nargs="+", default=None, help="tools that run (docs/tools.md): each route's own")
    parser.add_argument("--tool_sandbox", choices=("none", "process"), default=None, help="default: the checkpoint's")
    args = parser.parse_args(argv)
    setup_logging()
    try:
        parse_routes(args.routes)  # a bad --routes fails before the model loads
        summary = _run_from_args(args)
    except (FileNotFoundError, ValueError, KeyError) as err:  # a user's input: one line naming the file or flag
        print(f"error: {err.args[0] if isinstance(err, KeyError) and err.args else err}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=2))
    return 0


def _run_from_args(args: argparse.Namespace) -> dict:
    return run_inference(
        args.checkpoint,
        args.prompts,
        args.output,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        device=args.device,
        routes=args.routes,
        seed=args.seed,
        filter_overlong_prompts=args.filter_overlong_prompts,
        fixed_lambda=args.fixed_lambda,
        target_cost=args.target_cost,
        tools=args.tools,
        tool_sandbox=args.tool_sandbox,
    )


if __name__ == "__main__":
    raise SystemExit(main())
