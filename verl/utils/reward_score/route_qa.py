"""The reward of the ``route_qa`` task (``verl.utils.dataset.route_qa``, ``docs/route_qa.md``): exact match on the
final answer.

The answer is the content of the last complete ``<response>…</response>`` block of the text (with tools that run,
the text is the whole episode; tool turns never hold that tag), compared with the ground truth after both are
stripped of surrounding whitespace and a trailing period and case-folded; a number matches only the same digits
(``1,200`` is not ``1200``). No block: no answer. The router's tool cost is not part of this reward: it is priced by
the router (``docs/router.md``).
"""

from __future__ import annotations

from verl.utils.reward_score.tool_parse import RESPONSE, find_spans

__all__ = ["DATA_SOURCE", "compute_score", "final_answer", "normalize"]

DATA_SOURCE = "route_qa"


def normalize(text: str) -> str:
    """Strip whitespace and one trailing period, case-fold."""
    text = text.strip()
    if text.endswith("."):
        text = text[:-1].rstrip()
    return text.casefold()


def final_answer(text: str) -> str | None:
    """The stripped content of the last complete ``<response>`` block, or None when there is none."""
    spans = find_spans(text, RESPONSE)
    return spans[-1].content.strip() if spans else None


def compute_score(solution_str: str, ground_truth: str) -> dict:
    """``{"score", "correctness", "format", "pred"}``: score = correctness = 1.0 on an exact match of the final
    answer (:func:`normalize`), else 0.0; ``format`` 1.0 when the text gives a final answer at all; ``pred`` the
    answer (``""`` without one), what ``maj@N`` votes on.

    Raises:
        TypeError: ``ground_truth`` is not a string.
    """
    if not isinstance(ground_truth, str):
        raise TypeError(f"route_qa ground truth must be a string, got {type(ground_truth).__name__}")
    answer = final_answer(solution_str)
    correct = answer is not None and normalize(answer) == normalize(ground_truth)
    return {
        "score": float(correct),
        "correctness": float(correct),
        "format": float(answer is not None),
        "pred": answer or "",
    }
