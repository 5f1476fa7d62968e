"""The RLVCR rollout phase: per step, alternative thinks for the other levels, then the entropy of the *original*
action tokens under every level's context (``docs/rlvcr.md``, section "Rollout phase", steps 1-4; cited below as
"docs step N").

Input: the batch the trainer holds after generation (single-turn RLLA rows after the reward, or the multi-turn
loop's step rows): ``prompts`` ``[B, P]`` (left-padded history h), ``responses`` ``[B, R]``, ``attention_mask``
``[B, P + R]``, ``response_mask`` ``[B, R]``. For each row:

1. Parse (docs §Response format and parsing, :func:`rlvcr.prompts.parse_level_response`) the decoded response. The
   action token ids ``a`` are the response's own sampled ids covering the action content (token-in/token-out, never
   re-encoded). A token may straddle the opening tag and the content (``'>left'``, ``'>\\n'``): it belongs to ``a``
   and the part of the tag it carries (``tag_tail``) is cut from the end of every context, so that context + ``a``
   always reads ``...<tag>a``. A row whose action does not align this way is counted as unparseable.
2. Alternatives (docs step 1): for every evaluated row and level ``L != l``, ``L > 1``: prompt = h with the
   level-specific instruction (:func:`rlvcr.prompts.alternative_instruction`) appended to the last turn before the
   assistant header + ``<level>L</level><think>`` (:func:`rlvcr.prompts.generation_prefix`). All of them go through
   ONE ``generate_fn`` call (the trainer's rollout) with meta_info ``temperature=alt_temperature``,
   ``top_p=alt_top_p``, ``max_new_tokens=alt_max_think_tokens`` and ``stop=['</think>']``; the text is cut at the
   first ``</think>`` (:func:`rlvcr.prompts.cut_alternative_think`), so a think that hit the budget is truncated
   (the HF and vLLM rollouts honour both keys, ``resolve_sampling``; the cut also covers an engine without stop
   strings). Alternatives are sampled unless the generate function is greedy (agent mode: ``rollout.do_sample``).
   ``T_1`` is empty; ``T_l`` is the original think.
3. Contexts (docs step 2): ``c_l`` = h + the response ids before ``a`` (exactly what was sampled); ``c_L`` (L != l) =
   h + the tokens of :func:`rlvcr.prompts.level_context` (``<level>L</level>[<think>T_L</think>]<tag>``).
4. Scoring (docs steps 3-4): ONE ``log_prob_fn`` call (the actor's ``compute_log_prob``: micro-batched, entropy over
   the vocabulary computed in chunks by ``verl.utils.torch_functional.entropy_from_logits``) on ``B_eval x N`` rows
   ``[c_L | a]``: ``U_L`` = mean entropy over the tokens of ``a`` only (the forced level/think/tag tokens are context
   and never scored). The entropy is that of the policy's sampling distribution (logits / ``rollout.temperature``),
   as the loss's log-probs. ``C_L`` = number of tokens of ``T_L`` (the text re-encoded, for every level alike).

Output, in ``batch.non_tensor_batch`` (what :func:`rlvcr.core_rlvcr.rlvcr_batch_inputs` reads): ``thinking_level``
int64 ``[B]`` (0 = unparseable), ``thinking_level_action_entropy`` / ``thinking_level_think_cost`` float64 ``[B, N]``
(NaN on rows not evaluated), ``thinking_evaluated`` bool ``[B]``. The per-level statistics (``rlvcr/level_frac_k``,
``action_entropy_level_k``, ``think_tokens_level_k``, ``unparseable_frac``) are computed once, at advantage time
(``compute_rlvcr_metrics``); the phase returns its own: ``rlvcr/alternatives``, ``rlvcr/alt_unclosed_frac``,
``rlvcr/alt_empty_frac`` (alternatives with nothing in the think, e.g. EOS at once), ``rlvcr/evaluated_frac``,
``rlvcr/timing_s`` (of which ``rlvcr/timing_alt_gen_s``: parsing and the generate call, ``rlvcr/timing_score_s``: the
log-prob call). Alternatives are never trained on: the batch keeps its rows.

``only_positive_episodes``: rows are evaluated only when their episode return is > 0 (``episode_return`` of agent
rows, else the row's summed ``token_level_scores`` -- the single-turn phase runs after the reward for this reason);
without either field every row is evaluated (logged once). Rows with ``reward_valid`` False are never evaluated.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from rlvcr.core_rlvcr import RLVCRSettings, compute_action_uncertainty, rlvcr_active
from rlvcr.prompts import (
    AGENT_FORMAT,
    RLLA_FORMAT,
    LevelFormat,
    alternative_instruction,
    cut_alternative_think,
    generation_prefix,
    level_context,
    level_guide,
    parse_level_response,
)
from verl.protocol import DataProto
from verl.utils.torch_functional import compute_position_id_with_mask
from verl.utils.reward_score.tool_parse import WRAPPER_MARKERS, close_tag, open_tag

logger = logging.getLogger(__name__)

__all__ = [
    "PHASE_FIELDS",
    "LevelStep",
    "RLVCRPhase",
    "alternative_suffix",
    "insert_instruction",
    "level_format",
    "make_rlvcr_phase",
    "rlla_level_setup",
]

PHASE_FIELDS = ("thinking_level", "thinking_level_action_entropy", "thinking_level_think_cost", "thinking_evaluated")
GenerateFn = Callable[[DataProto], DataProto]


def level_format(settings: RLVCRSettings, rlla: bool) -> LevelFormat:
    """The response layout: RLLA's (``<think></think>`` at level 1, newline before the action) or the agent envs',
    with ``settings.action_tags`` and ``settings.num_levels``."""
    base = RLLA_FORMAT if rlla else AGENT_FORMAT
    return dataclasses.replace(base, action_tags=settings.action_tags, num_levels=settings.num_levels)


def make_rlvcr_phase(config, tokenizer, rlla: bool) -> Optional["RLVCRPhase"]:
    """The phase for a trainer config, or None unless ``adv_estimator == 'rlvcr'`` and ``algorithm.rlvcr.enable``."""
    if not rlvcr_active(config.algorithm):
        return None
    settings = RLVCRSettings.from_config(config.algorithm.rlvcr)
    if rlla and not {"tool_call", "response"} & set(settings.action_tags):
        logger.warning(
            "RLVCR on RLLA rows with algorithm.rlvcr.action_tags=%s: RLLA actions are <tool_call>/"
            "<response> (set action_tags=[tool_call,response])",
            list(settings.action_tags),
        )
    return RLVCRPhase(tokenizer, settings, level_format(settings, rlla))


def agent_level_setup(config, tokenizer) -> Tuple[Optional["RLVCRPhase"], str]:
    """Agent environments under RLVCR: ``(phase, prompt_suffix)`` for ``AgentRollout`` — the phase and its
    thinking-level guide appended to every observation prompt — or ``(None, "")`` when the phase is off."""
    phase = make_rlvcr_phase(config, tokenizer, rlla=False)
    return phase, (level_guide(phase.fmt) if phase is not None else "")


def rlla_level_setup(config, tokenizer) -> Tuple[Optional[Callable], Optional[Callable]]:
    """RLLA rows under RLVCR: ``(chat_template_func, compute_score)`` for ``RLHFDataset`` and the RLLA reward
    manager, or ``(None, None)`` when the phase is off. The template adds the thinking-level guide to the system
    prompt (:func:`rlvcr.prompts.add_level_guide`); the score strips the leading ``<level>`` tag before ToolRL's
    reward (:func:`rlvcr.prompts.level_scored_compute_score`)."""
    phase = make_rlvcr_phase(config, tokenizer, rlla=True)
    if phase is None:
        return None, None
    from rlvcr.prompts import add_level_guide, level_scored_compute_score
    from verl.utils.reward_score import default_compute_score

    def chat_template(messages):
        return tokenizer.apply_chat_template(
            add_level_guide(list(messages), phase.fmt), tokenize=False, add_generation_prompt=True
        )

    return chat_template, level_scored_compute_score(default_compute_score)


def alternative_suffix(level: int, fmt: LevelFormat) -> str:
    """Text added to the end of the last user turn when sampling ``T_L`` (docs step 1): a blank line and
    :func:`rlvcr.prompts.alternative_instruction`. Raises ValueError: ``level`` outside ``2..num_levels``."""
    return "\n\n" + alternative_instruction(level, fmt)


def _rfind(seq: Sequence[int], sub: Sequence[int], end: Optional[int] = None) -> int:
    """Start of the last occurrence of ``sub`` in ``seq[:end]``, -1 if none."""
    end = len(seq) if end is None else end
    for start in range(end - len(sub), -1, -1):
        if list(seq[start : start + len(sub)]) == list(sub):
            return start
    return -1


def insert_instruction(
    history: List[int], instruction: List[int], markers: Sequence[Tuple[List[int], List[int]]]
) -> List[int]:
    """``history`` with ``instruction`` ids inserted at the end of the last turn before the assistant header: the
    last ``end`` marker before the last ``start`` marker of ``markers`` (chat templates'
    ``(assistant header, end of turn)`` ids, ``tool_parse.WRAPPER_MARKERS``). Without a chat template (no marker
    found) the instruction is appended to the history."""
    for start_ids, end_ids in markers:
        start = _rfind(history, start_ids)
        turn_end = _rfind(history, end_ids, start) if start > 0 else -1
        if turn_end >= 0:
            return history[:turn_end] + instruction + history[turn_end:]
    return history + instruction


@dataclass(frozen=True)
class LevelStep:
    """One parseable row. ``history``: h (prompt ids without padding); ``head``: the response ids before ``action``
    (c_l without h); ``action``: the original action ids a; ``tag_tail``: the end of ``<action_tag>`` that the first
    action token carries ('' when aligned); ``think``: T_l; ``action_tag``: the action span's tag."""

    row: int
    level: int
    action_tag: str
    history: List[int]
    head: List[int]
    action: List[int]
    tag_tail: str
    think: str


class RLVCRPhase:
    """See the module docstring. ``__call__(batch, generate_fn, log_prob_fn) -> metrics`` fills the batch fields.

    Args: tokenizer: the actor's; settings: ``algorithm.rlvcr``; fmt: the response layout (:func:`level_format`).
    """

    def __init__(self, tokenizer, settings: RLVCRSettings, fmt: LevelFormat):
        self.tokenizer, self.settings, self.fmt = tokenizer, settings, fmt
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.markers = [(self._encode(s), self._encode(e)) for s, e in WRAPPER_MARKERS.values()]
        self._warned = False

    def _encode(self, text: str) -> List[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def _decode(self, ids: Sequence[int]) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    # ------------------------------------------------------------------------------------------ 1. parsing
    def _tokens_within(self, ids: List[int], n_chars: int) -> int:
        """The most leading tokens whose decoded text has at most ``n_chars`` characters (binary search)."""
        lo, hi = 0, len(ids)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if len(self._decode(ids[:mid])) <= n_chars else (lo, mid - 1)
        return lo

    def parse_row(self, history: List[int], response: List[int], row: int = 0) -> Tuple[Optional[LevelStep], int]:
        """``(step, level)`` of one row: ``step`` None when unparseable (``level`` then 0) or when the action span
        is not token-aligned (see the module docstring; ``level`` kept)."""
        text = self._decode(response)
        parsed = parse_level_response(text, self.fmt.action_tags, self.fmt.num_levels)
        if not parsed.parseable:
            return None, 0
        k0 = self._tokens_within(response, parsed.action_start)
        before = self._decode(response[:k0])
        tail = text[len(before) : parsed.action_start]
        k1 = self._tokens_within(response, parsed.action_end - 1) + 1
        if (
            not text.startswith(before)
            or not open_tag(parsed.action_tag).endswith(tail)
            or k1 <= k0
            or len(self._decode(response[:k1])) < parsed.action_end
        ):
            return None, 0
        return LevelStep(
            row, parsed.level, parsed.action_tag, history, response[:k0], response[k0:k1], tail, parsed.think
        ), parsed.level

    def _eligible(self, batch: DataProto) -> np.ndarray:
        """bool ``[B]``: rows whose alternatives may be scored (``only_positive_episodes``, ``reward_valid``)."""
        nt, size = batch.non_tensor_batch, len(batch)
        ok = np.asarray(nt.get("reward_valid", np.ones(size, dtype=bool)), dtype=bool).copy()
        if self.settings.only_positive_episodes:
            if "episode_return" in nt:
                ok &= np.asarray(nt["episode_return"], dtype=np.float64) > 0
            elif batch.batch is not None and "token_level_scores" in batch.batch.keys():
                ok &= (batch.batch["token_level_scores"].sum(-1) > 0).cpu().numpy()
            elif not self._warned:
                self._warned = True
                logger.warning(
                    "rlvcr.only_positive_episodes: the batch has no episode_return/token_level_scores; "
                    "every row is evaluated"
                )
        return ok

    # ------------------------------------------------------------------------------------------ 2. alternatives
    def alternative_prompts(self, steps: Sequence[LevelStep]) -> Tuple[List[Tuple[int, int]], List[List[int]]]:
        """``(keys, prompts)``: one ``(step index, L)`` and its generation prompt ids per alternative
        (L != l, L > 1)."""
        keys, prompts = [], []
        for k, step in enumerate(steps):
            for level in range(2, self.fmt.num_levels + 1):
                if level != step.level:
                    instruction = self._encode(alternative_suffix(level, self.fmt))
                    prompt = insert_instruction(step.history, instruction, self.markers)
                    keys.append((k, level))
                    prompts.append(prompt + self._encode(generation_prefix(level, self.fmt)))
        return keys, prompts

    def sample_thinks(
        self, steps: Sequence[LevelStep], generate_fn: GenerateFn
    ) -> Tuple[Dict[Tuple[int, int], str], Dict[str, float]]:
        """``{(step index, L): T_L}`` for every alternative, from ONE ``generate_fn`` call; and its metrics."""
        from verl.utils.prompt_batch import left_pad_prompts

        keys, prompts = self.alternative_prompts(steps)
        if not keys:
            return {}, {"rlvcr/alternatives": 0.0}
        s = self.settings
        meta = {
            "temperature": s.alt_temperature,
            "top_p": s.alt_top_p,
            "max_new_tokens": s.alt_max_think_tokens,
            "stop": [close_tag("think")],
        }
        out = generate_fn(DataProto.from_dict(left_pad_prompts(prompts, self.pad_id), meta_info=meta))
        ids = [
            r[m.bool()][: s.alt_max_think_tokens].tolist()
            for r, m in zip(out.batch["responses"], out.batch["response_mask"])
        ]
        texts = self.tokenizer.batch_decode(ids, skip_special_tokens=True)
        unclosed = sum(close_tag("think") not in t for t in texts)  # cut by the budget (or ended without it)
        thinks = {key: cut_alternative_think(t) for key, t in zip(keys, texts)}
        empty = sum(not t.strip() for t in thinks.values())  # e.g. EOS at once: scored as an empty think
        return thinks, {
            "rlvcr/alternatives": float(len(keys)),
            "rlvcr/alt_unclosed_frac": unclosed / len(keys),
            "rlvcr/alt_empty_frac": empty / len(keys),
        }

    # ------------------------------------------------------------------------------------------ 3. contexts
    def level_contexts(self, step: LevelStep, thinks: Dict[int, str]) -> Tuple[List[List[int]], List[float]]:
        """``(contexts, costs)`` for L = 1..N: the ids of ``c_L`` (followed by ``step.action`` when scored) and
        ``C_L``. ``thinks``: ``{L: T_L}`` for the alternative levels."""
        contexts, costs = [], []
        for level in range(1, self.fmt.num_levels + 1):
            if level == step.level:
                contexts.append(step.history + step.head)
                think = step.think
            else:
                think = "" if level == 1 else thinks[level]
                text = level_context(level, think, step.action_tag, self.fmt)
                contexts.append(step.history + self._encode(text[: len(text) - len(step.tag_tail)]))
            costs.append(float(len(self._encode(think))) if level > 1 and think else 0.0)
        return contexts, costs

    # ------------------------------------------------------------------------------------------ 4. scoring
    def score_batch(self, contexts: List[List[int]], actions: List[List[int]]) -> DataProto:
        """The log-prob input ``[c | a]``: ``input_ids``/``attention_mask``/``position_ids`` ``[K, P + A]``
        (contexts left-padded to P, actions right-padded to A), ``responses`` ``[K, A]``, ``response_mask`` ``[K, A]``
        (1 on the action tokens)."""
        from verl.utils.prompt_batch import left_pad_prompts

        ctx = left_pad_prompts(contexts, self.pad_id)
        width = max(len(a) for a in actions)
        responses = torch.full((len(actions), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(actions), width), dtype=torch.long)
        for k, a in enumerate(actions):
            responses[k, : len(a)] = torch.tensor(a, dtype=torch.long)
            mask[k, : len(a)] = 1
        attention = torch.cat([ctx["attention_mask"], mask], dim=1)
        return DataProto.from_dict(
            {
                "input_ids": torch.cat([ctx["input_ids"], responses], dim=1),
                "attention_mask": attention,
                "position_ids": compute_position_id_with_mask(attention),
                "responses": responses,
                "response_mask": mask,
            }
        )

    # ------------------------------------------------------------------------------------------ the phase
    def __call__(self, batch: DataProto, generate_fn: GenerateFn, log_prob_fn: GenerateFn) -> Dict[str, float]:
        """Run steps 1-4 on ``batch`` (fields written in place); returns the phase's metrics (module docstring)."""
        start = time.perf_counter()
        size, n_levels = len(batch), self.fmt.num_levels
        prompt_len = batch.batch["prompts"].shape[1]
        eligible = self._eligible(batch)
        levels = np.zeros(size, dtype=np.int64)
        steps: List[LevelStep] = []
        for i in range(size):
            history = batch.batch["prompts"][i][batch.batch["attention_mask"][i, :prompt_len].bool()].tolist()
            response = batch.batch["responses"][i][batch.batch["response_mask"][i].bool()].tolist()
            step, levels[i] = self.parse_row(history, response, i)
            if step is not None and eligible[i]:
                steps.append(step)
        entropy = np.full((size, n_levels), np.nan)
        cost = np.full((size, n_levels), np.nan)
        thinks, metrics = self.sample_thinks(steps, generate_fn) if steps else ({}, {"rlvcr/alternatives": 0.0})
        metrics["rlvcr/timing_alt_gen_s"] = time.perf_counter() - start
        if steps:
            contexts, actions = [], []
            for k, step in enumerate(steps):
                level_ctx, cost[step.row] = self.level_contexts(step, {L: t for (j, L), t in thinks.items() if j == k})
                contexts += level_ctx
                actions += [step.action] * n_levels
            scored = self.score_batch(contexts, actions)
            responses = scored.batch["responses"].view(len(steps), n_levels, -1)
            if not bool((responses == responses[:, :1]).all()):  # the fork's defect: each level its own action
                raise RuntimeError("RLVCR: the scored action ids differ across levels of one step")
            scoring = time.perf_counter()
            out = log_prob_fn(scored)
            metrics["rlvcr/timing_score_s"] = time.perf_counter() - scoring
            u = compute_action_uncertainty(out.batch["entropys"].float().cpu(), scored.batch["response_mask"].float())
            entropy[[s.row for s in steps]] = u.view(len(steps), n_levels).double().numpy()
        evaluated = np.zeros(size, dtype=bool)
        evaluated[[s.row for s in steps]] = True
        batch.non_tensor_batch.update(
            {
                "thinking_level": levels,
                "thinking_level_action_entropy": entropy,
                "thinking_level_think_cost": cost,
                "thinking_evaluated": evaluated,
            }
        )
        metrics["rlvcr/evaluated_frac"] = float(evaluated.mean()) if size else 0.0
        metrics["rlvcr/timing_s"] = time.perf_counter() - start
        return metrics
