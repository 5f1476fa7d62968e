"""Score responses to BFCL rows with BFCL's own checker and summarise them as BFCL does.

Per row (:func:`check_bfcl_response`), with the calls the project's one parser reads from the response
(``tool_parse``: the complete ``<tool_call>`` blocks; a response with ``<tool_call>`` but no complete block, or a block
item that is not a readable call, is a decode failure, as an unparsable answer is in BFCL):

- AST categories (``simple_*``, ``multiple``, ``parallel*``, ``live_*`` with answers): a decode failure or a response
  without ``<tool_call>`` is wrong (``ast_decoder:decoder_failed`` / ``ast_decoder:no_tool_call``); otherwise the
  decoded calls go through BFCL's ``is_function_calling_format_output`` and then BFCL's ``ast_checker`` with the
  entry's un-hinted function documents and possible answer;
- ``irrelevance`` / ``live_irrelevance``: right when the response makes no call (a decode failure, no block, or what
  BFCL's ``is_empty_output`` calls empty); ``live_relevance``: right when it makes one.

Summary (:func:`summarize_bfcl`): ``categories.<name>.{accuracy, rows, correct, error_types}``; ``bfcl`` holds BFCL's
own aggregate figures computed with BFCL's helpers (``calculate_unweighted_accuracy`` /
``calculate_weighted_accuracy``, as its leaderboard does): ``non_live_ast`` = unweighted mean of simple (itself the
unweighted mean of simple_python/java/javascript), multiple, parallel, parallel_multiple; ``live_ast`` = the
row-weighted mean of live_simple, live_multiple, live_parallel, live_parallel_multiple; ``irrelevance``,
``live_irrelevance``, ``live_relevance`` as they are. A figure whose categories were not all evaluated is None
(BFCL shows "N/A"): since the Java and JavaScript categories are not asked (their values are source strings, see
:data:`verl.utils.dataset.bfcl.AST_CATEGORIES`), ``non_live_ast`` and ``non_live_simple`` stay None, and
``non_live_ast_python`` gives the same mean with simple_python as the simple category. ``tool_cost`` is :func:`verl.trainer.tool_cost.tool_cost_metrics` over every row (a call is wanted everywhere
but in the irrelevance categories).
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping, Sequence

from verl.trainer.tool_cost import tool_cost_metrics
from verl.utils.dataset.bfcl import (
    AST_CATEGORIES,
    IRRELEVANCE_CATEGORIES,
    RELEVANCE_CATEGORIES,
    bfcl_api,
    calls_to_bfcl,
    load_category,
    oracle_response,
    parse_categories,
    unsatisfiable_reason,
)
from verl.utils.reward_score.tool_parse import parse_tool_calls, tool_usage

MODEL_NAME = "toolrl_router"  # passed to BFCL's checker; its model-config lookup answers underscore_to_dot=False


def check_bfcl_response(entry: Mapping, response: str) -> dict:
    """BFCL's verdict on one response (see the module docstring).

    Returns:
        ``{valid, error_type, num_calls, made_call}``; ``error_type`` is BFCL's (or ours for the two decode cases)
        when not valid, else None.
    """
    api = bfcl_api()
    usage = tool_usage(response)
    calls = parse_tool_calls(response)
    failure = usage.parse_failed
    decoded = calls_to_bfcl(calls)
    made_call = (
        not failure
        and usage.has_tool_call_tag
        and api.is_function_calling_format_output(decoded)
        and not api.is_empty_output(decoded)
    )
    category = entry["category"]
    out = {"num_calls": len(calls), "made_call": bool(made_call)}
    if category in IRRELEVANCE_CATEGORIES or category in RELEVANCE_CATEGORIES:
        valid = not made_call if category in IRRELEVANCE_CATEGORIES else made_call
        error = (
            None
            if valid
            else (
                "irrelevance_error:decoder_success"
                if category in IRRELEVANCE_CATEGORIES
                else "relevance_error:decoder_failed"
            )
        )
        return {**out, "valid": valid, "error_type": error}
    if failure:
        return {**out, "valid": False, "error_type": "ast_decoder:decoder_failed"}
    if not usage.has_tool_call_tag:
        return {**out, "valid": False, "error_type": "ast_decoder:no_tool_call"}
    if not api.is_function_calling_format_output(decoded):
        return {**out, "valid": False, "error_type": "ast_decoder:decoder_wrong_output_format"}
    result = api.ast_checker(
        entry["function"],
        decoded,
        entry["ground_truth"],
        getattr(api.Language, AST_CATEGORIES[category]),
        category,
        MODEL_NAME,
    )
    return {**out, "valid": bool(result["valid"]), "error_type": None if result["valid"] else result.get("error_type")}


def _score(category_results: Mapping[str, list[dict]], name: str) -> dict:
    """BFCL's score record for one category (``display_accuracy`` "N/A" when it was not evaluated)."""
    results = category_results.get(name)
    if not results:
        return {"accuracy": 0.0, "total_count": 0, "display_accuracy": "N/A"}
    accuracy = sum(r["valid"] for r in results) / len(results)
    return {"accuracy": accuracy, "total_count": len(results), "display_accuracy": accuracy}


def _aggregate(fn, records: Sequence[Mapping]) -> dict:
    """BFCL's ``fn`` over ``records``; "N/A" without calling it when none was evaluated (it would divide by 0)."""
    if not any(r["total_count"] for r in records):
        return {"accuracy": 0.0, "total_count": 0, "display_accuracy": "N/A"}
    return fn(list(records))


def _figure(record: Mapping) -> float | None:
    return None if record["display_accuracy"] == "N/A" else float(record["accuracy"])


def summarize_bfcl(rows: Sequence[Mapping], results: Sequence[Mapping]) -> dict:
    """Per-category accuracy, BFCL's aggregate figures and the tool-cost metrics (module docstring).

    Args:
        rows: one per response, with ``bfcl_category`` (and ``bfcl_id``).
        results: :func:`check_bfcl_response` of each row, in the same order.
    """
    api = bfcl_api()
    by_category: dict[str, list[dict]] = {}
    for row, result in zip(rows, results):
        by_category.setdefault(row["bfcl_category"], []).append(dict(result))
    categories = {}
    for name, res in by_category.items():
        errors = Counter(r["error_type"] for r in res if not r["valid"])
        categories[name] = {
            "accuracy": sum(r["valid"] for r in res) / len(res),
            "rows": len(res),
            "correct": sum(r["valid"] for r in res),
            "error_types": dict(errors.most_common(8)),
        }
    unweighted, weighted = api.calculate_unweighted_accuracy, api.calculate_weighted_accuracy
    simple = _aggregate(
        unweighted, [_score(by_category, c) for c in ("simple_python", "simple_java", "simple_javascript")]
    )
    non_live = _aggregate(
        unweighted, [simple] + [_score(by_category, c) for c in ("multiple", "parallel", "parallel_multiple")]
    )
    live = _aggregate(
        weighted,
        [_score(by_category, c) for c in ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")],
    )
    python = _aggregate(
        unweighted, [_score(by_category, c) for c in ("simple_python", "multiple", "parallel", "parallel_multiple")]
    )
    figures = {
        "non_live_ast": _figure(non_live),
        "non_live_ast_python": _figure(python),
        "non_live_simple": _figure(simple),
        "live_ast": _figure(live),
    }
    for name in IRRELEVANCE_CATEGORIES + RELEVANCE_CATEGORIES:
        figures[name] = _figure(_score(by_category, name))
    wants_call = [row["bfcl_category"] not in IRRELEVANCE_CATEGORIES for row in rows]
    cost = tool_cost_metrics(
        [r["num_calls"] for r in results],
        wants_call,
        [r["valid"] for r in results],
        made_call=[r["made_call"] for r in results],
    )
    return {
        "dataset": "bfcl",
        "bfcl_eval_version": api.version,
        "rows": len(rows),
        "categories": categories,
        "bfcl": figures,
        "tool_cost": cost,
    }


def check_bfcl_rows(rows: Sequence[Mapping]) -> list[dict]:
    """BFCL's verdict (:func:`check_bfcl_response`) on each generation row (``bfcl_id``, ``bfcl_category``,
    ``response``), in order.

    Raises:
        ValueError: a row lacks ``bfcl_id``/``bfcl_category``, or names an id its category does not have (the row is
            named by its ``_where`` or position).
    """
    categories = []
    for i, row in enumerate(rows):
        where = row.get("_where", f"row {i}")
        if not isinstance(row.get("bfcl_id"), str) or not isinstance(row.get("bfcl_category"), str):
            raise ValueError(f"{where}: bfcl_id / bfcl_category: missing (generate with data.format=bfcl)")
        if row["bfcl_category"] not in categories:
            categories.append(row["bfcl_category"])
    entries = {e["id"]: e for c in parse_categories(categories) for e in load_category(c)}
    results = []
    for i, row in enumerate(rows):
        entry = entries.get(row["bfcl_id"])
        if entry is None or entry["category"] != row["bfcl_category"]:
            raise ValueError(
                f"{row.get('_where', f'row {i}')}: bfcl_id {row['bfcl_id']!r} is not an entry of "
                f"BFCL {row['bfcl_category']}"
            )
        results.append(check_bfcl_response(entry, row["response"]))
    return results


def evaluate_bfcl_rows(rows: Sequence[Mapping]) -> dict:
    """Score generation rows (``bfcl_id``, ``bfcl_category``, ``response``) with :func:`check_bfcl_rows` and summarise
    them (:func:`summarize_bfcl`); raises as :func:`check_bfcl_rows`."""
    return summarize_bfcl(rows, check_bfcl_rows(rows))


def oracle_bfcl_rows(categories: str | Sequence[str] | None, max_rows: int | None = None) -> tuple[list[dict], dict]:
    """Rows whose response is each entry's oracle response (:func:`verl.utils.dataset.bfcl.oracle_response`), and
    ``{bfcl_id: reason}`` of the entries left out because BFCL's checker accepts no response on them
    (:func:`verl.utils.dataset.bfcl.unsatisfiable_reason`; every model gets those wrong in a real evaluation).

    Raises:
        ValueError: ``live_relevance`` asked for: it ships no answers (any call counts), so it has no oracle.
    """
    names = parse_categories(categories)
    no_oracle = [c for c in names if c in RELEVANCE_CATEGORIES]
    if no_oracle:
        raise ValueError(f"--oracle: BFCL ships no answers for {no_oracle} (any call counts there); leave them out")
    rows, excluded = [], {}
    for category in names:
        for entry in load_category(category, max_rows):
            reason = unsatisfiable_reason(entry)
            if reason:
                excluded[entry["id"]] = reason
            else:
                rows.append({"bfcl_id": entry["id"], "bfcl_category": category, "response": oracle_response(entry)})
    return rows, excluded
