"""Tool-cost metrics of an evaluation: how many tools a model calls, whether it calls one when the ground truth does,
and how much correctness each call buys. Shared by every evaluation summary (RLLA, API-Bank, BFCL)."""

from __future__ import annotations

from typing import Sequence


_TOLERANCE = 1e-9  # rounding in Σ_a π(a)·x(a) when the probabilities sum to 1


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def decision_f1(tp: float, fp: float, fn: float) -> float | None:
    """F1 of the call / no-call decision with "call" as the positive class, ``2·TP / (2·TP + FP + FN)``, from counts
    that may be expected (fractional) counts; None when all three are 0."""
    return _ratio(2 * tp, 2 * tp + fp + fn)


def tool_cost_metrics(
    num_calls: Sequence[int],
    wants_call: Sequence[bool],
    correct: Sequence[bool],
    made_call: Sequence[bool] | None = None,
) -> dict:
    """Tool-use and call/no-call decision metrics over N evaluated rows.

    Args:
        num_calls: readable tool calls in each response (int >= 0).
        wants_call: whether the ground truth of each row calls at least one tool.
        correct: whether each row was judged correct (exact match, a right abstention, BFCL's verdict, ...).
        made_call: whether each response counts as calling a tool (default: ``num_calls > 0``; the evaluators pass
            False for responses whose tool-call block failed to parse).

    Returns:
        ``rows``; ``calls_per_prompt`` (mean of ``num_calls``); ``tool_use_rate`` (fraction with ``made_call``);
        ``decision_accuracy`` (``made_call == wants_call``) and ``decision_precision`` / ``decision_recall`` /
        ``decision_f1`` with "call" as the positive class; ``tool_productivity`` = Σ correct / Σ num_calls, the
        number of correct answers per tool call (OTC-PO, Wang et al. 2025, arXiv:2504.14870, §4 "tool productivity").
        As there, every correct row counts, those answered right without a call included (they are what a cheaper
        policy buys), so it can exceed 1, and a model that calls only where it must scores highest.
        A ratio with a zero denominator is None.

    Raises:
        ValueError: the sequences differ in length.
    """
    made = [n > 0 for n in num_calls] if made_call is None else [bool(m) for m in made_call]
    return expected_tool_cost_metrics(
        [float(n) for n in num_calls], wants_call, [float(bool(c)) for c in correct], [float(m) for m in made]
    )


def expected_tool_cost_metrics(
    num_calls: Sequence[float], wants_call: Sequence[bool], correct: Sequence[float], made_call: Sequence[float]
) -> dict:
    """:func:`tool_cost_metrics` of a stochastic policy in expectation: per row, the expected number of calls, the
    probability of being correct and the probability of calling a tool (e.g. ``Σ_a π(a)·x(a)`` over a router's routes
    when each route's response is fixed). Every figure is its ratio of expected counts — TP = Σ P(call) over the rows
    whose ground truth calls a tool, FP = Σ P(call) over the others, FN = Σ (1 − P(call)) over the former, tool
    productivity = Σ P(correct) / Σ E[calls] — not the expectation of each ratio; with 0/1 inputs it equals
    :func:`tool_cost_metrics` exactly (which calls it).

    Raises:
        ValueError: the sequences differ in length, or a probability lies outside [0, 1].
    """
    if not len(num_calls) == len(wants_call) == len(correct) == len(made_call):
        raise ValueError(
            f"expected_tool_cost_metrics: lengths differ: num_calls {len(num_calls)}, wants_call "
            f"{len(wants_call)}, correct {len(correct)}, made_call {len(made_call)}"
        )
    bad = [
        (name, i, v)
        for name, seq in (("correct", correct), ("made_call", made_call))
        for i, v in enumerate(seq)
        if not -_TOLERANCE <= v <= 1.0 + _TOLERANCE
    ]
    if bad:
        name, i, v = bad[0]
        raise ValueError(f"expected_tool_cost_metrics: {name}[{i}] = {v}: expected a probability in [0, 1]")
    n = len(num_calls)
    tp = sum(m for m, w in zip(made_call, wants_call) if w)
    fp = sum(m for m, w in zip(made_call, wants_call) if not w)
    fn = sum(1.0 - m for m, w in zip(made_call, wants_call) if w)
    tn = sum(1.0 - m for m, w in zip(made_call, wants_call) if not w)
    return {
        "rows": n,
        "calls_per_prompt": _ratio(sum(num_calls), n),
        "tool_use_rate": _ratio(sum(made_call), n),
        "decision_accuracy": _ratio(tp + tn, n),
        "decision_precision": _ratio(tp, tp + fp),
        "decision_recall": _ratio(tp, tp + fn),
        "decision_f1": decision_f1(tp, fp, fn),
        "tool_productivity": _ratio(sum(correct), sum(num_calls)),
    }
