"""Rule-based reward manager: decode each rollout, score it, put the score on the last valid response token.

One class serves both conventions (``docs/verl_compat.md`` "Reward manager", ``docs/rlla_reward.md`` "How it is
called"):

- upstream verl's ``NaiveRewardManager``: ``decode="response"`` decodes only the valid response tokens with
  ``skip_special_tokens=True`` and calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``;
- ToolRL's ``RewardManager``: ``decode="prompt+response"`` decodes the valid prompt plus the valid response with
  special tokens kept, so the RLLA reward strips the chat wrapper itself.

A bare response and a wrapped one score the same under the RLLA reward (``docs/rlla_reward.md`` "Extracting the
prediction"), so the two modes agree for RLLA rows. The trainer step reaches the scorer through ``extra_info["step"]``
and the chat wrapper through ``extra_info["wrapper"]``.

Scoring is one method, ``_score_rows`` (``agent_system.reward.manager.RewardAPIManager`` overrides it to call a reward-API function). A sample
whose scoring raises (e.g. ``InvalidGroundTruthError``), or whose score or component is not a finite float32 number
(NaN, ±inf, or beyond ±3.4e38 such as a float64 1e308: never clamped), does not stop the batch: it scores 0, is marked
``reward_valid=False`` and counted (``reward_invalid_count``, ``reward_metrics``), with a warning naming the row.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from verl.protocol import DataProto
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.rlla import RewardSwitches
from verl.utils.reward_score.tool_formats import format_tool_usage, resolve_tool_format

logger = logging.getLogger(__name__)

DECODE_MODES = ("response", "prompt+response")
WRAPPER_CHOICES = ("auto", "qwen", "llama", "none")
COMPONENTS = ("format", "correctness", "length")
_MAX_REASON_CHARS = 300
_FLOAT32_MAX = 3.4028234663852886e38  # numpy.finfo(numpy.float32).max


def float32_problem(score: Any, values: dict) -> str:
    """``""`` when ``score`` and the components in ``values`` (:data:`COMPONENTS`) are finite float32 numbers, else
    why not, naming the first bad one (what makes a sample invalid rather than a crash or a clamped value)."""
    for name, value in (("score", score), *((n, values[n]) for n in COMPONENTS if n in values)):
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):  # OverflowError: an int beyond float64
            return f"reward {name}={value!r:.80} is not a number"
        if not math.isfinite(number) or abs(number) > _FLOAT32_MAX:
            return f"reward {name}={value!r:.80} is not a finite float32 number"
    return ""


def infer_wrapper(tokenizer: Any) -> str:
    """Chat wrapper for the RLLA reward from a tokenizer's chat template: ``"qwen"`` if it contains ``<|im_start|>``
    (ChatML, e.g. Qwen and SmolLM2), ``"llama"`` if ``<|start_header_id|>`` (Llama 3), else ``"none"``."""
    template = getattr(tokenizer, "chat_template", None)
    text = str(template) if template else ""
    if "<|im_start|>" in text:
        return "qwen"
    if "<|start_header_id|>" in text:
        return "llama"
    return "none"


@dataclass
class ScoreRow:
    """One decoded row handed to :meth:`RLLARewardManager._score_rows`: its position, ``data_source``,
    ``reward_model`` dict, decoded ``text`` (see ``decode``), ``extra_info`` (with ``step`` and ``wrapper``) and the
    number of valid response tokens."""

    index: int
    data_source: Any
    reward_model: Any
    text: str
    extra_info: dict
    valid_response_len: int


def ground_truth_of(reward_model: Any) -> Any:
    """``reward_model["ground_truth"]``.

    Raises:
        KeyError: ``reward_model`` is not a dict with ``ground_truth`` (the message shows it).
    """
    if not isinstance(reward_model, dict) or "ground_truth" not in reward_model:
        raise KeyError(f"reward_model must be a dict with 'ground_truth', got {str(reward_model)[:120]!r}")
    return reward_model["ground_truth"]


class RLLARewardManager:
    """Reward manager for rule-based scores (RLLA by default); verl's ``NaiveRewardManager`` interface.

    Args:
        tokenizer: HF tokenizer of the policy (decodes the token ids).
        num_examine: log (INFO) the first ``num_examine`` decoded samples of each data source per call.
        compute_score: ``fn(data_source, solution_str, ground_truth, extra_info) -> float | dict`` (a dict must hold
            ``"score"``; its other keys go to ``reward_extra_info``). Default ``default_compute_score``.
        decode: ``"response"`` (upstream: valid response only, special tokens skipped) or ``"prompt+response"``
            (ToolRL: valid prompt + valid response, special tokens kept).
        wrapper: chat wrapper passed to the scorer as ``extra_info["wrapper"]``: ``"qwen"``, ``"llama"``, ``"none"``,
            or ``"auto"`` (``infer_wrapper(tokenizer)``).
        reward_fn_key: non-tensor key holding each row's data source.
        switches: RLLA switches to use; None snapshots the environment once per call (``RewardSwitches.from_env``).
            Only handed to the default scorer (``extra_info["reward_switches"]``).
        tool_format: how responses write their calls (``data.tool_format``: a ``tool_formats`` name or ``auto``,
            from the tokenizer's chat template): handed to the scorer as ``extra_info["tool_format"]`` and used for
            the tool-call metrics.

    Raises:
        ValueError: unknown ``decode``, ``wrapper`` or ``tool_format``, or negative ``num_examine``.
    """

    def __init__(
        self,
        tokenizer: Any,
        num_examine: int = 0,
        compute_score: Callable | None = None,
        decode: str = "response",
        wrapper: str = "auto",
        reward_fn_key: str = "data_source",
        switches: RewardSwitches | None = None,
        tool_format: str = "toolrl",
    ) -> None:
        if decode not in DECODE_MODES:
            raise ValueError(f"reward manager: decode={decode!r}; expected one of {DECODE_MODES}")
        if wrapper not in WRAPPER_CHOICES:
            raise ValueError(f"reward manager: wrapper={wrapper!r}; expected one of {WRAPPER_CHOICES}")
        if int(num_examine) < 0:
            raise ValueError(f"reward manager: num_examine must be >= 0, got {num_examine}")
        self.tokenizer = tokenizer
        self.num_examine = int(num_examine)
        self.compute_score = compute_score or default_compute_score
        self.decode = decode
        self.wrapper = infer_wrapper(tokenizer) if wrapper == "auto" else wrapper
        self.reward_fn_key = reward_fn_key
        self.switches = switches
        self.tool_format = resolve_tool_format(tool_format, tokenizer)

    @property
    def name(self) -> str:
        """The scoring function, for messages (``module.qualname``)."""
        fn = self.compute_score
        return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"

    # ------------------------------------------------------------------------------------------------------------
    def _decode_row(
        self,
        prompt_ids: torch.Tensor,
        response_ids: torch.Tensor,
        valid_prompt_len: int,
        valid_response_len: int,
        decode: str | None = None,
    ) -> str:
        """Text handed to the scorer for one row (see ``decode``; None: ``self.decode``)."""
        valid_response = response_ids[:valid_response_len]
        if (decode or self.decode) == "response":
            return self.tokenizer.decode(valid_response.tolist(), skip_special_tokens=True)
        valid_prompt = prompt_ids[prompt_ids.shape[-1] - valid_prompt_len :]
        return self.tokenizer.decode(torch.cat((valid_prompt, valid_response)).tolist(), skip_special_tokens=False)

    @staticmethod
    def _row_value(data: DataProto, key: str, index: int, default: Any = None) -> Any:
        column = data.non_tensor_batch.get(key)
        return default if column is None else column[index]

    def __call__(self, data: DataProto, step: int = 0, return_dict: bool = False) -> torch.Tensor | dict[str, Any]:
        """Score every row of ``data``.

        Args:
            data: needs ``batch["prompts"]`` [B, P] (left-padded), ``batch["responses"]`` [B, R] (right-padded),
                ``batch["attention_mask"]`` [B, P + R], and ``non_tensor_batch["reward_model"]`` (dicts with
                ``ground_truth``) and ``[reward_fn_key]``; ``extra_info`` (dicts) is optional.
            step: trainer global step, passed as ``extra_info["step"]`` (RLLA schedules; 0 = validation before
                training).
            return_dict: return the dict below instead of the bare reward tensor.

        Returns:
            ``reward_tensor``: float32 [B, R], zero except ``score`` at the last valid response token (index
            ``valid_response_len - 1``, or 0 for an empty response). With ``return_dict`` a dict:

            - ``reward_tensor`` and ``token_level_scores_{format,correctness,length}`` (same layout);
            - ``reward_extra_info``: per-sample lists ``format``, ``correctness``, ``length``, ``reward_valid``
              (bool), ``reward_error`` (``""`` when valid), plus any extra keys the scorer returned (None for rows
              that lack them);
            - ``reward_invalid_count`` (int) and ``reward_metrics`` (``reward/invalid_count``,
              ``reward/invalid_frac``, plus those of the scorer, e.g. ``reward/timeouts`` from the reward API's
              sandbox, and the tool calls of the responses, :meth:`_tool_call_metrics`).

            If the batch already holds ``rm_scores`` (a reward model ran), that tensor is the reward, as upstream.

        Raises:
            KeyError: a required batch or non-tensor key is missing (message names it).
            ValueError: ``attention_mask`` is not [B, P + R].
        """
        if data.batch is not None and "rm_scores" in data.batch.keys():
            rm = data.batch["rm_scores"]
            return {"reward_tensor": rm, "reward_extra_info": {}} if return_dict else rm
        for key in ("prompts", "responses", "attention_mask"):
            if data.batch is None or key not in data.batch.keys():
                raise KeyError(
                    f"reward manager: batch has no {key!r} tensor (needs prompts, responses, attention_mask)"
                )
        for key in ("reward_model", self.reward_fn_key):
            if key not in data.non_tensor_batch:
                raise KeyError(f"reward manager: non_tensor_batch has no {key!r} (has {sorted(data.non_tensor_batch)})")
        prompts, responses = data.batch["prompts"], data.batch["responses"]
        attention_mask = data.batch["attention_mask"]
        prompt_len, response_len = prompts.shape[-1], responses.shape[-1]
        if attention_mask.shape[-1] != prompt_len + response_len:
            raise ValueError(
                f"reward manager: attention_mask has {attention_mask.shape[-1]} columns, expected "
                f"prompts ({prompt_len}) + responses ({response_len})"
            )
        valid_prompt_lens = attention_mask[:, :prompt_len].sum(-1).tolist()
        valid_response_lens = attention_mask[:, prompt_len:].sum(-1).tolist()

        switches = self.switches if self.switches is not None else RewardSwitches.from_env()
        batch_size = len(data)
        rows = []
        for i in range(batch_size):
            row_info = self._row_value(data, "extra_info", i) or {}
            valid_len = int(valid_response_lens[i])
            rows.append(
                ScoreRow(
                    index=i,
                    data_source=self._row_value(data, self.reward_fn_key, i),
                    reward_model=self._row_value(data, "reward_model", i),
                    text=self._decode_row(prompts[i], responses[i], int(valid_prompt_lens[i]), valid_len),
                    extra_info={
                        **(row_info if isinstance(row_info, dict) else {}),
                        "step": step,
                        "wrapper": self.wrapper,
                        "tool_format": self.tool_format,
                    },
                    valid_response_len=valid_len,
                )
            )
        outcomes, run_metrics = self._score_rows(data, rows, step, switches)

        tensors = {name: torch.zeros(responses.shape, dtype=torch.float32) for name in ("score",) + COMPONENTS}
        extra: dict[str, list] = defaultdict(list)
        examined: dict[str, int] = defaultdict(int)
        scorer_extra: list[dict] = []  # per row: extra keys returned by the scorer
        invalid = 0
        for row, (score, values, error) in zip(rows, outcomes):
            values = dict(values)
            if not error:
                error = float32_problem(score, values)
                if error:  # an overflowing or non-finite reward: an invalid sample, never clamped
                    score, values = 0.0, {}
            if error:
                invalid += 1
                logger.warning(
                    "reward manager: row %d (data_source=%r, step=%s) could not be scored, reward 0: %s",
                    row.index,
                    row.data_source,
                    step,
                    error,
                )
            position = max(row.valid_response_len - 1, 0)
            tensors["score"][row.index, position] = score
            for name in COMPONENTS:
                component = float(values.pop(name, 0.0))
                tensors[name][row.index, position] = component
                extra[name].append(component)
            scorer_extra.append(values)
            extra["reward_valid"].append(not error)
            extra["reward_error"].append(error)
            source_key = str(row.data_source)
            if examined[source_key] < self.num_examine:
                examined[source_key] += 1
                reward_model = row.reward_model
                logger.info(
                    "[reward sample] data_source=%s step=%s score=%s components=%s\n[text] %s\n[ground_truth] %s",
                    source_key,
                    step,
                    score,
                    {n: extra[n][-1] for n in COMPONENTS},
                    row.text,
                    reward_model.get("ground_truth") if isinstance(reward_model, dict) else reward_model,
                )
        if invalid:
            logger.warning("reward manager: %d of %d samples could not be scored at step %s", invalid, batch_size, step)
        if not return_dict:
            return tensors["score"]
        for key in dict.fromkeys(k for row in scorer_extra for k in row):  # union, first-seen order
            extra[key] = [row.get(key) for row in scorer_extra]  # None where a row lacks it (e.g. invalid rows)
        return {
            "reward_tensor": tensors["score"],
            **{f"token_level_scores_{name}": tensors[name] for name in COMPONENTS},
            "reward_extra_info": dict(extra),
            "reward_invalid_count": invalid,
            "reward_metrics": {
                "reward/invalid_count": float(invalid),
                "reward/invalid_frac": invalid / batch_size if batch_size else 0.0,
                **run_metrics,
                **self._tool_call_metrics(prompts, responses, rows),
            },
        }

    def _tool_call_metrics(self, prompts: torch.Tensor, responses: torch.Tensor, rows: list[ScoreRow]) -> dict:
        """Tool calls of the responses (read in ``data.tool_format``, ``tool_formats.format_tool_usage``):
        ``response/tool_calls/mean`` (readable calls per response), ``response/tool_call_rate`` (responses with at
        least one), ``response/tool_parse_failure_rate`` (a ``<tool_call>`` that cannot be read)."""
        if not rows:
            return {}
        usages = [
            format_tool_usage(
                row.text
                if self.decode == "response"
                else self._decode_row(
                    prompts[row.index], responses[row.index], 0, row.valid_response_len, decode="response"
                ),
                self.tool_format,
            )
            for row in rows
        ]
        n = len(usages)
        return {
            "response/tool_calls/mean": sum(u.num_calls for u in usages) / n,
            "response/tool_call_rate": sum(u.num_calls > 0 for u in usages) / n,
            "response/tool_parse_failure_rate": sum(u.parse_failed for u in usages) / n,
        }

    def _score_rows(
        self, data: DataProto, rows: list[ScoreRow], step: int, switches: RewardSwitches
    ) -> tuple[list[tuple[float, dict, str]], dict[str, float]]:
        """Score every row with ``compute_score``, in this process.

        Returns:
            per row ``(score, values, error)``: ``values`` the scorer's other keys (components included), ``error``
            ``""`` when valid, else ``"Type: message"`` and score 0; and extra ``reward_metrics`` (none here).
        """
        outcomes = []
        for row in rows:
            extra_info = dict(row.extra_info)
            if self.compute_score is default_compute_score:
                extra_info["reward_switches"] = switches
            try:
                result = self.compute_score(
                    data_source=row.data_source,
                    solution_str=row.text,
                    ground_truth=ground_truth_of(row.reward_model),
                    extra_info=extra_info,
                )
                values = dict(result) if isinstance(result, dict) else {"score": result}
                outcomes.append((float(values.pop("score")), values, ""))
            except Exception as err:  # noqa: BLE001 - one bad sample must not stop training (docs/rlla_reward.md)
                outcomes.append((0.0, {}, f"{type(err).__name__}: {err}"[:_MAX_REASON_CHARS]))
        return outcomes, {}


NaiveRewardManager = RLLARewardManager
