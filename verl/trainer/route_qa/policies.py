"""Routing policies on ``route_qa`` scored from a played table (:mod:`verl.trainer.route_qa.evaluate`), and the
bag-of-words baseline (``docs/route_qa.md`` "Evaluation").

A policy is, per question, a probability over the settings ``ANSWER``, ``SEARCH``, ``CALCULATE``, ``BOTH``
(``[N, 4]`` float64, rows summing to 1; a deterministic policy is one-hot). Its expected accuracy, cost and calls are
``Σ_s p_s · x_s`` per question, averaged over the questions; two policies on the same questions are compared by the
paired standard error of the mean of their per-question differences, ``std(d, ddof=1) / √N``.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from verl.trainer.route_qa.evaluate import DTYPES, SETTINGS
from verl.trainer.tool_cost import expected_tool_cost_metrics
from verl.utils.dataset.route_qa import KINDS, ROUTE_OF_KIND

__all__ = [
    "BagOfWords",
    "always",
    "kind_shares",
    "oracle",
    "paired_se",
    "policy_summary",
    "random_at_budget",
    "routes_policy",
]

COLUMNS = tuple(DTYPES)  # the table's columns


def _matrix(table: dict, column: str) -> np.ndarray:
    """``[N, 4]`` float64 of ``column`` per question and setting (in :data:`SETTINGS` order)."""
    return np.stack([np.asarray(table[s][column], dtype=np.float64) for s in SETTINGS], axis=1)


def routes_policy(routes: Sequence[str]) -> np.ndarray:
    """The one-hot policy ``[N, 4]`` of one setting name per question."""
    index = {s: k for k, s in enumerate(SETTINGS)}
    policy = np.zeros((len(routes), len(SETTINGS)))
    policy[np.arange(len(routes)), [index[r] for r in routes]] = 1.0
    return policy


def always(setting: str, n: int) -> np.ndarray:
    """The same setting for all ``n`` questions (``BOTH``: always-tools)."""
    return routes_policy([setting] * n)


def oracle(rows: Sequence[dict]) -> np.ndarray:
    """Each question's own route (its kind's: arithmetic CALCULATE, fact SEARCH, direct ANSWER)."""
    return routes_policy([ROUTE_OF_KIND[r["extra_info"]["kind"]] for r in rows])


def random_at_budget(table: dict, budget: float) -> np.ndarray:
    """Routes drawn independently of the question, SEARCH and CALCULATE equally often and ANSWER otherwise, with
    the probability ``q`` of each tool route set so that the expected cost is ``budget``:
    ``q·(c̄_SEARCH + c̄_CALCULATE) = B`` with ``c̄`` a route's mean cost on the table (tool use).

    Raises:
        ValueError: the budget cannot be spent that way (``q`` outside ``[0, 1/2]``).
    """
    cost = _matrix(table, "used_tool").mean(axis=0)
    spend = cost[SETTINGS.index("SEARCH")] + cost[SETTINGS.index("CALCULATE")]
    q = budget / spend if spend > 0 else (0.0 if budget == 0 else float("inf"))  # B = 0: always ANSWER
    if 0.5 < q <= 0.5 + 1e-9:  # the largest spend, B = c̄_SEARCH + c̄_CALCULATE over 2, up to rounding
        q = 0.5
    if not 0.0 <= q <= 0.5:
        raise ValueError(f"random routing cannot spend B={budget}: the tool routes cost {spend / 2:.3f} on average")
    n = len(table[SETTINGS[0]]["correct"])
    probs = np.zeros(len(SETTINGS))
    probs[[SETTINGS.index("SEARCH"), SETTINGS.index("CALCULATE")]] = q
    probs[SETTINGS.index("ANSWER")] = 1.0 - 2 * q
    return np.tile(probs, (n, 1))


def expected(table: dict, policy: np.ndarray, column: str) -> np.ndarray:
    """Per question, the policy's expected value of ``column`` ([N] float64)."""
    return (_matrix(table, column) * policy).sum(axis=1)


def paired_se(a: np.ndarray, b: np.ndarray) -> float:
    """The standard error of ``mean(a − b)`` over paired questions."""
    d = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    return float(d.std(ddof=1) / np.sqrt(len(d))) if len(d) > 1 else float("nan")


def kind_shares(policy: np.ndarray, rows: Sequence[dict]) -> dict[str, dict[str, float]]:
    """Per kind, the mean probability of each setting: ``{kind: {setting: share}}``."""
    kinds = np.array([r["extra_info"]["kind"] for r in rows])
    return {
        k: {s: float(policy[kinds == k, j].mean()) for j, s in enumerate(SETTINGS)} for k in KINDS if (kinds == k).any()
    }


def policy_summary(table: dict, policy: np.ndarray, rows: Sequence[dict]) -> dict:
    """Accuracy, cost (tool use), calls, observation tokens and seconds per question, the share of tool use on
    questions that need a tool, the route shares per kind, and the call/no-call decision metrics
    (:func:`verl.trainer.tool_cost.expected_tool_cost_metrics`: decision F1 and tool productivity, in expectation)."""
    needs = np.array([bool(r["extra_info"]["needs_tool"]) for r in rows])
    out = {k: float(expected(table, policy, k).mean()) for k in COLUMNS}
    out["accuracy"] = out.pop("correct")
    out["cost"] = out.pop("used_tool")
    used = expected(table, policy, "used_tool")
    out["tool_use_on_needed"] = float(used[needs].sum() / used.sum()) if used.sum() > 0 else None
    out["route_shares"] = kind_shares(policy, rows)
    calls, correct = expected(table, policy, "calls"), expected(table, policy, "correct")
    decision = expected_tool_cost_metrics(list(calls), list(needs), list(correct), list(np.clip(used, 0.0, 1.0)))
    out["decision_f1"] = decision.get("decision_f1")
    out["tool_productivity"] = decision.get("tool_productivity")
    return out


_WORD = re.compile(r"\w+")


class BagOfWords:
    """A bag-of-words classifier of the question's kind: binary word features (lower-cased ``\\w+`` tokens of the
    user message; the vocabulary is the training questions'), multinomial logistic regression with an L2 penalty,
    fitted by full-batch L-BFGS (a fixed seed; words never seen in training are dropped).

    Args:
        l2: the penalty on the weights (not the bias), per training question.
    """

    def __init__(self, l2: float = 1e-3, seed: int = 0):
        self.l2, self.seed = float(l2), int(seed)
        self.vocab: dict[str, int] = {}

    @staticmethod
    def question(row: dict) -> str:
        return next(m["content"] for m in row["prompt"] if m["role"] == "user")

    def _features(self, rows: Sequence[dict]):
        import torch

        x = torch.zeros((len(rows), len(self.vocab)), dtype=torch.float64)
        for i, row in enumerate(rows):
            for word in set(_WORD.findall(self.question(row).lower())):
                if word in self.vocab:
                    x[i, self.vocab[word]] = 1.0
        return x

    def fit(self, rows: Sequence[dict]) -> "BagOfWords":
        import torch

        words = sorted({w for r in rows for w in _WORD.findall(self.question(r).lower())})
        self.vocab = {w: k for k, w in enumerate(words)}
        x = self._features(rows)
        y = torch.tensor([KINDS.index(r["extra_info"]["kind"]) for r in rows])
        gen = torch.Generator().manual_seed(self.seed)
        self.weight = (0.01 * torch.randn(len(words), len(KINDS), generator=gen, dtype=torch.float64)).requires_grad_()
        self.bias = torch.zeros(len(KINDS), dtype=torch.float64, requires_grad=True)
        opt = torch.optim.LBFGS([self.weight, self.bias], max_iter=200, line_search_fn="strong_wolfe")

        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(x @ self.weight + self.bias, y)
            loss = loss + self.l2 * (self.weight**2).sum()
            loss.backward()
            return loss

        opt.step(closure)
        return self

    def predict(self, rows: Sequence[dict]) -> list[str]:
        """Each question's predicted kind."""
        import torch

        with torch.no_grad():
            logits = self._features(rows) @ self.weight + self.bias
        return [KINDS[k] for k in logits.argmax(-1).tolist()]

    def routes(self, rows: Sequence[dict]) -> np.ndarray:
        """The policy that takes the predicted kind's route."""
        return routes_policy([ROUTE_OF_KIND[k] for k in self.predict(rows)])
