"""Paired comparison of two generation files on the same prompts: is model B better than model A, row by row?

``python -m verl.trainer.main_eval --generations after.jsonl --baseline before.jsonl`` adds a ``paired`` block to the
summary. Means of two runs evaluated on the same prompts are correlated through the prompts (an easy prompt is easy
for both), so the standard error of a gain is the standard error of the per-prompt differences, not of each mean:

    d_i = m_B(i) - m_A(i),   gain = mean(d),   se = std(d, ddof=1) / sqrt(n),   t = gain / se

(the paired t statistic; e.g. Rice, *Mathematical Statistics and Data Analysis*, 3rd ed., §11.3). The block also
gives wins / losses / ties and the exact two-sided sign-test p-value of wins against losses (binomial with p = 1/2,
ties dropped; Rice §11.2.3), which assumes nothing about the distribution of ``d``.

Rows are matched by ``(data_source, row, sample)`` as written by ``verl.trainer.main_generation`` (and
``verl.router.infer``, whose rows carry no prompt text); the two files must hold the same keys with the same prompt
text where rows have one (and BFCL rows the same ``bfcl_id``), or a ``ValueError`` names the first key that differs. The unit of the
statistics is the prompt: with ``data.n_samples`` > 1 each side's metric is first averaged over the samples of a
prompt (sample k of one model has nothing to do with sample k of the other, and the samples of one prompt are not
independent of each other), so ``n`` counts prompts and ``d_i`` is the difference of the two per-prompt means.
Metrics per row: the RLLA reward's ``score`` / ``format`` / ``correctness`` (rows with a ground-truth string) and
``exact_match`` (1.0 when the predicted calls equal the ground-truth calls, no-call rows included, as
``overall_exact_match``). Two files of BFCL rows (``bfcl_id``; ``main_generation data.format=bfcl``) are compared
on ``bfcl_accuracy`` instead, BFCL's own checker's verdict on each row (1 right, 0 wrong), overall and per BFCL
category; in a file of both kinds only the RLLA rows are compared.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

METRICS = ("score", "format", "correctness", "exact_match", "bfcl_accuracy")


def row_key(row: Mapping) -> tuple:
    """The pairing key of a generation row: ``(data_source, row, sample)`` (``index`` when ``row`` is absent).

    Raises:
        ValueError: the row has neither ``row`` nor ``index`` (its ``_where`` is named).
    """
    position = row.get("row", row.get("index"))
    if position is None:
        raise ValueError(f"{row.get('_where', 'row')}: neither 'row' nor 'index': cannot pair it with the baseline")
    return (str(row.get("data_source")), int(position), int(row.get("sample", 0)))


def sign_test_p(wins: int, losses: int) -> float:
    """Exact two-sided sign-test p-value: ``min(1, 2 P[X <= min(wins, losses)])`` with ``X ~ Binomial(n, 1/2)``,
    ``n = wins + losses`` (1.0 when n = 0)."""
    n = wins + losses
    if n == 0:
        return 1.0
    k = min(wins, losses)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired_stats(before: Sequence[float], after: Sequence[float]) -> dict:
    """Paired statistics of ``after - before`` (equal lengths, element i of each from the same prompt).

    Returns:
        ``{n, before, after, gain, se, t, wins, losses, ties, sign_test_p}``; ``se`` and ``t`` are None when n < 2,
        ``t`` is None when ``se`` is 0.

    Raises:
        ValueError: the lengths differ or are 0.
    """
    if len(before) != len(after) or not before:
        raise ValueError(f"paired_stats: need two equal, non-empty lists, got {len(before)} and {len(after)}")
    n = len(before)
    diffs = [b - a for a, b in zip(before, after)]
    gain = sum(diffs) / n
    se = t = None
    if n > 1:
        var = sum((d - gain) ** 2 for d in diffs) / (n - 1)
        se = math.sqrt(var / n)
        t = gain / se if se > 0 else None
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    return {
        "n": n,
        "before": sum(before) / n,
        "after": sum(after) / n,
        "gain": gain,
        "se": se,
        "t": t,
        "wins": wins,
        "losses": losses,
        "ties": n - wins - losses,
        "sign_test_p": sign_test_p(wins, losses),
    }


def paired_comparison(
    baseline_rows: Sequence[Mapping],
    rows: Sequence[Mapping],
    row_metrics: Callable[[Mapping], Mapping[str, float]],
    bfcl: bool = False,
) -> dict:
    """Compare ``rows`` (model B) against ``baseline_rows`` (model A) prompt by prompt (see the module docstring).

    Args:
        baseline_rows, rows: generation rows of :func:`verl.trainer.main_eval.read_generations`; BFCL rows (with
            ``bfcl_id``) are skipped in both, or with ``bfcl`` only they are compared.
        row_metrics: the values of one row (``verl.trainer.main_eval.row_metrics``, or ``{"bfcl_accuracy": v}`` for
            BFCL rows); a metric a row lacks is not compared.
        bfcl: compare the BFCL rows instead of the others, and add ``categories``: the same statistics per
            ``bfcl_category``.

    Returns:
        ``{"rows": rows, "prompts": n, "samples_per_prompt": k, "metrics": {metric: paired_stats}}`` for every metric
        that every paired row has; each ``paired_stats`` is over the ``n`` per-prompt means (``k`` is a sorted list
        when prompts have different sample counts); with ``bfcl`` also ``"categories": {bfcl_category: {metric:
        paired_stats}}``.

    Raises:
        ValueError: a key occurs twice in one file, the two files do not hold the same keys, the prompt text (or,
            with ``bfcl``, the BFCL id) of a key differs between them, or no row is left.
    """

    def index(name: str, table: Sequence[Mapping]) -> dict[tuple, Mapping]:
        out: dict[tuple, Mapping] = {}
        for row in table:
            if ("bfcl_id" in row) != bfcl:
                continue
            key = row_key(row)
            if key in out:
                raise ValueError(f"{row.get('_where', name)}: key {key} occurs twice in the {name} file")
            out[key] = row
        return out

    base, new = index("baseline", baseline_rows), index("generations", rows)
    for key in sorted(set(base) & set(new)) if bfcl else ():  # BFCL rows of two files: the same entry, not only the
        if base[key]["bfcl_id"] != new[key]["bfcl_id"]:  # same position
            raise ValueError(
                f"{new[key].get('_where', key)}: BFCL entry {new[key]['bfcl_id']!r} where the baseline "
                f"has {base[key]['bfcl_id']!r} ({base[key].get('_where', 'baseline')}): the files are "
                "not of the same BFCL rows"
            )
    if set(base) != set(new):
        only_base, only_new = sorted(set(base) - set(new)), sorted(set(new) - set(base))
        raise ValueError(
            f"the baseline and the generations hold different rows: {len(only_base)} only in the "
            f"baseline (first {only_base[:1]}), {len(only_new)} only in the generations "
            f"(first {only_new[:1]}); generate both from the same data and settings"
        )
    if not base:
        raise ValueError(
            "no BFCL rows to compare"
            if bfcl
            else "no rows to compare (BFCL rows are compared only when both files hold nothing else)"
        )
    keys = sorted(base)
    for key in keys:
        if base[key].get("prompt") != new[key].get("prompt"):
            raise ValueError(
                f"{new[key].get('_where', key)}: the prompt of {key} differs from the baseline's "
                f"({base[key].get('_where', 'baseline')}): the files are not of the same data"
            )
    before = {k: row_metrics(base[k]) for k in keys}
    after = {k: row_metrics(new[k]) for k in keys}
    common = [m for m in METRICS if all(m in r for r in before.values()) and all(m in r for r in after.values())]
    prompts: dict[tuple, list[tuple]] = {}
    for key in keys:  # (data_source, row, sample) -> the prompt (data_source, row)
        prompts.setdefault(key[:2], []).append(key)

    def prompt_means(
        table: Mapping[tuple, Mapping[str, float]], metric: str, category: str | None = None
    ) -> list[float]:
        return [
            sum(table[k][metric] for k in group) / len(group)
            for group in prompts.values()
            if category is None or new[group[0]]["bfcl_category"] == category
        ]

    samples = {len(group) for group in prompts.values()}
    out = {
        "rows": len(keys),
        "prompts": len(prompts),
        "samples_per_prompt": samples.pop() if len(samples) == 1 else sorted(samples),
        "metrics": {m: paired_stats(prompt_means(before, m), prompt_means(after, m)) for m in common},
    }
    if bfcl:
        out["categories"] = {}
        for category in dict.fromkeys(new[k]["bfcl_category"] for k in keys):
            out["categories"][category] = {
                m: paired_stats(prompt_means(before, m, category), prompt_means(after, m, category)) for m in common
            }
    return out
