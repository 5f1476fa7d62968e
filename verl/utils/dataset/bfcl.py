"""BFCL (Berkeley Function-Calling Leaderboard) v4 single-turn categories, asked in the RLLA format and checked by
BFCL's own checker.

Data and checker come from the PyPI package ``bfcl-eval`` (:data:`BFCL_EVAL_VERSION`). Its declared dependencies pin
numpy, networkx and a dozen model-provider SDKs that would clash with this project, yet what the data loaders and the
AST checker really import is the standard library, ``filelock``, numpy and pandas — all already here — plus one
module, ``bfcl_eval.constants.model_config``, that imports every provider SDK only to answer one question the checker
asks (does this model's API rewrite ``.`` in function names to ``_``?). So :func:`bfcl_api`:

1. uses an importable ``bfcl_eval`` as is, or else installs the pinned wheel on first use with ``--no-deps`` into
   ``<model cache>/bfcl-eval/<version>/`` (``$TOOLRL_CACHE``, next to the prepared models; a staging directory is
   renamed into place, so a killed install leaves nothing half-written) and puts that folder on ``sys.path``;
2. registers a minimal ``model_config`` module before the import: every model name maps to a config with
   ``underscore_to_dot=False`` (our model writes names as the tool list spells them) — nothing of the checker's logic
   is replaced;
3. points ``BFCL_PROJECT_ROOT`` (where BFCL creates its ``result/`` and ``score/`` folders at import) into that cache
   folder unless the user set it, also when ``bfcl_eval`` was already importable (nothing is written into
   site-packages).

Conversion both ways (tests: ``tests/data/test_bfcl_on_cpu.py``):

- prompt: BFCL's entry (its function documents with BFCL's own language hints, as BFCL gives every model) becomes an
  RLLA-schema row whose system message is the RLLA system prompt (:mod:`verl.utils.dataset.rlla_prompt`) listing the
  functions as ``Name`` / ``Description`` / ``Parameters`` (the JSON schema's ``properties``, as ToolRL's own BFCL
  handler did: the RLLA tool block has no place for the schema's ``required`` list, which BFCL's prompts for other
  models show, so scores are not leaderboard numbers), and whose user message is the RLLA dialogue history; system
  messages inside BFCL's question are appended to the system prompt;
- answer: the calls the project's one parser reads from a response (``tool_parse.parse_tool_calls``) become BFCL's
  decoded form ``[{name: {parameter: value}}]``; :func:`oracle_response` writes a BFCL possible answer (the first
  acceptable value of every parameter, nested dicts resolved the same way; ``""`` means "may be omitted") as an RLLA
  response, and an irrelevance row's oracle is a response without a call.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path
from typing import Mapping, Sequence

import pyarrow as pa

from verl.utils.dataset.api_bank import tool_calls_to_ground_truth
from verl.utils.dataset.rlla_data import make_rlla_row, write_parquet_atomic
from verl.utils.dataset.rlla_prompt import render_history, render_system

logger = logging.getLogger(__name__)

BFCL_EVAL_VERSION = "2026.3.23"
BFCL_DATA_SOURCE = "bfcl"
# the single-turn categories BFCL v4 ships whose calls are JSON-valued (a possible-answer file each, checked by the AST
# checker as Python) ... simple_java / simple_javascript are left out: their parameter values are Java / JavaScript
# source strings, an output language the RLLA format does not have
AST_CATEGORIES = {name: "PYTHON" for name in (
    "simple_python", "multiple", "parallel", "parallel_multiple",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")}
# ... and the relevance categories, judged on whether a call was made (no possible answers)
IRRELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance")
RELEVANCE_CATEGORIES = ("live_relevance",)
CATEGORIES = tuple(AST_CATEGORIES) + IRRELEVANCE_CATEGORIES + RELEVANCE_CATEGORIES
NO_CALL_RESPONSE = ("<think> None of the available tools fits this request. </think>\n"
                    "<response> I cannot do this with the available tools. </response>")


def bfcl_install_dir() -> Path:
    """``<model cache>/bfcl-eval/<version>`` (``$TOOLRL_CACHE`` or ``~/.cache/toolrl_router``)."""
    from verl.utils.model_presets import cache_root

    return cache_root() / "bfcl-eval" / BFCL_EVAL_VERSION


def _install_bfcl_eval(target: Path) -> None:
    """``pip install --no-deps --target`` the pinned wheel into a staging folder, then rename it to ``target``."""
    staging = target.with_name(f".{target.name}.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    logger.info("installing bfcl-eval==%s (--no-deps, ~2 MB) into %s (first use)", BFCL_EVAL_VERSION, target)
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
           "--target", str(staging), f"bfcl-eval=={BFCL_EVAL_VERSION}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"could not install bfcl-eval=={BFCL_EVAL_VERSION} ({' '.join(cmd)}):\n"
                           f"{proc.stderr.strip()[-2000:]}\nInstall it yourself with "
                           f"`pip install --no-deps bfcl-eval=={BFCL_EVAL_VERSION}` and run again.")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(staging, target)
    except OSError:  # another process installed it first
        shutil.rmtree(staging, ignore_errors=True)
        if not (target / "bfcl_eval").is_dir():
            raise


class _AnyModelConfig(dict):
    """Stand-in for ``MODEL_CONFIG_MAPPING``: every model name → a config that keeps ``.`` in function names."""

    def __missing__(self, key: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(underscore_to_dot=False, display_name=key, is_fc_model=False)


_API: types.SimpleNamespace | None = None


def bfcl_api() -> types.SimpleNamespace:
    """BFCL's own loaders, checker and summary helpers (installed and imported on first use, see the module docstring).

    Returns:
        namespace with ``load_dataset_entry``, ``load_ground_truth_entry``, ``ast_checker``, ``Language``,
        ``is_empty_output``, ``is_function_calling_format_output``, ``calculate_weighted_accuracy``,
        ``calculate_unweighted_accuracy`` and ``version``.

    Raises:
        RuntimeError: bfcl-eval is not importable and could not be installed (the pip error is included).
    """
    global _API
    if _API is not None:
        return _API
    if importlib.util.find_spec("bfcl_eval") is None:
        target = bfcl_install_dir()
        if not (target / "bfcl_eval").is_dir():
            _install_bfcl_eval(target)
        sys.path.insert(0, str(target))
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(bfcl_install_dir() / "workdir"))
    if "bfcl_eval.constants.model_config" not in sys.modules:
        stub = types.ModuleType("bfcl_eval.constants.model_config")
        stub.MODEL_CONFIG_MAPPING = _AnyModelConfig()
        sys.modules["bfcl_eval.constants.model_config"] = stub
    checker = importlib.import_module("bfcl_eval.eval_checker.ast_eval.ast_checker")
    utils = importlib.import_module("bfcl_eval.utils")
    helper = importlib.import_module("bfcl_eval.eval_checker.eval_runner_helper")
    enums = importlib.import_module("bfcl_eval.constants.enums")
    try:
        from importlib.metadata import version
        found = version("bfcl-eval")
    except Exception:  # a --target install has its dist-info beside the package, not always on the metadata path
        found = BFCL_EVAL_VERSION
    _API = types.SimpleNamespace(
        load_dataset_entry=utils.load_dataset_entry, load_ground_truth_entry=utils.load_ground_truth_entry,
        ast_checker=checker.ast_checker, Language=enums.Language, is_empty_output=utils.is_empty_output,
        is_function_calling_format_output=utils.is_function_calling_format_output,
        calculate_weighted_accuracy=helper.calculate_weighted_accuracy,
        calculate_unweighted_accuracy=helper.calculate_unweighted_accuracy, version=found)
    return _API


def parse_categories(categories: str | Sequence[str] | None) -> list[str]:
    """``"a,b"`` / a list / None (every category of :data:`CATEGORIES`) → the validated list, in the order given.

    Raises:
        ValueError: an unknown category (the message lists the known ones).
    """
    if categories is None or categories == "" or categories == "all":
        return list(CATEGORIES)
    names = [c.strip() for c in categories.split(",")] if isinstance(categories, str) else [str(c) for c in categories]
    unknown = [c for c in names if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown BFCL categories {unknown}; expected some of {list(CATEGORIES)} (single-turn AST "
                         "and relevance categories)")
    return names


def load_category(category: str, max_rows: int | None = None, skip_rows: int = 0) -> list[dict]:
    """BFCL's entries of ``category`` for evaluation: ``{id, category, question, prompt_function, function,
    ground_truth}`` — ``prompt_function`` with BFCL's language hints (what the model is shown), ``function`` without
    them (what the checker reads), ``ground_truth`` the possible answer (None for the relevance categories).
    In BFCL's file order: the first ``skip_rows`` entries left out, then at most ``max_rows`` (None or <= 0: all the
    rest), so that ``skip_rows=12`` gives a sample disjoint from ``max_rows=12``'s.

    Raises:
        ValueError: unknown category; ``skip_rows`` < 0; an entry without a possible answer (its id is named).
    """
    if skip_rows < 0:
        raise ValueError(f"BFCL {category}: skip_rows must be >= 0, got {skip_rows}")
    [category] = parse_categories([category])
    api = bfcl_api()
    shown = api.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True)
    plain = {e["id"]: e for e in api.load_dataset_entry(category, include_prereq=False,
                                                          include_language_specific_hint=False)}
    answers = {}
    if category in AST_CATEGORIES:
        answers = {e["id"]: e["ground_truth"] for e in api.load_ground_truth_entry(category)}
    rows = []
    stop = skip_rows + max_rows if max_rows and max_rows > 0 else None
    for entry in shown[skip_rows:stop]:
        if category in AST_CATEGORIES and entry["id"] not in answers:
            raise ValueError(f"BFCL {category}: entry {entry['id']} has no possible answer")
        rows.append({"id": entry["id"], "category": category, "question": entry["question"],
                     "prompt_function": entry["function"], "function": plain[entry["id"]]["function"],
                     "ground_truth": answers.get(entry["id"])})
    return rows


def bfcl_messages(entry: Mapping) -> list[dict]:
    """The RLLA chat ``[system, user]`` for one BFCL entry (single-turn: ``question`` holds one turn).

    Raises:
        ValueError: a multi-turn entry, or a message that cannot be rendered (the entry id is named).
    """
    question = entry["question"]
    if len(question) != 1:
        raise ValueError(f"BFCL entry {entry['id']}: {len(question)} turns; only single-turn categories are supported")
    turn = list(question[0])
    extra = "\n\n".join(m["content"] for m in turn if m.get("role") == "system")
    tools = [(f["name"], f.get("description", ""), (f.get("parameters") or {}).get("properties", {}))
             for f in entry["prompt_function"]]
    try:
        history = render_history([m for m in turn if m.get("role") != "system"])
    except ValueError as err:
        raise ValueError(f"BFCL entry {entry['id']}: {err}") from err
    return [{"role": "system", "content": render_system(tools, extra)}, {"role": "user", "content": history}]


def bfcl_rlla_rows(categories: str | Sequence[str] | None = None, max_rows: int | None = None,
                   skip_rows: int = 0) -> list[dict]:
    """RLLA-schema rows for ``categories`` (``max_rows`` per category after the first ``skip_rows``, as
    :func:`load_category`), ``data_source="bfcl"``; ``extra_info`` carries
    ``bfcl_id``, ``bfcl_category`` and ``bfcl_has_answer``. The ground truth is the oracle response (RLLA format), so
    RLLA tooling reads the intended calls; ``live_relevance`` ships no answer (any call is right there), so its rows
    hold a placeholder without a call and ``bfcl_has_answer=False``: score them with BFCL's checker, never as RLLA
    ground truths."""
    out = []
    for category in parse_categories(categories):
        for entry in load_category(category, max_rows, skip_rows):
            messages = bfcl_messages(entry)
            row = make_rlla_row({"instruction": messages[0]["content"], "input": messages[1]["content"],
                                 "output": oracle_response(entry)}, len(out), split="test")
            row["data_source"] = BFCL_DATA_SOURCE
            row["extra_info"] = {**row["extra_info"], "bfcl_id": entry["id"], "bfcl_category": category,
                                 "bfcl_has_answer": category not in RELEVANCE_CATEGORIES}
            out.append(row)
    return out


def write_bfcl_parquet(path: str | os.PathLike, categories: str | Sequence[str] | None = None,
                       max_rows: int | None = None, skip_rows: int = 0) -> Path:
    """Write :func:`bfcl_rlla_rows` to ``path`` (atomic; ``extra_info`` keeps the BFCL id and category): ``max_rows``
    per category after its first ``skip_rows`` — a category with fewer rows gives what it has.

    Raises:
        ValueError: as :func:`load_category`; no row at all (e.g. ``skip_rows`` past every category's end).
    """
    rows = bfcl_rlla_rows(categories, max_rows, skip_rows)
    if not rows:
        raise ValueError(f"no BFCL rows for categories {categories!r} with max_rows={max_rows}, skip_rows={skip_rows}")
    return write_parquet_atomic(pa.Table.from_pylist(rows), path)


BFCL_ROW_FIELDS = ("bfcl_id", "bfcl_category")


def bfcl_fields(extra_info: object) -> dict:
    """The BFCL fields of a row's ``extra_info`` (``bfcl_id``, ``bfcl_category``; :func:`bfcl_rlla_rows` writes them)
    that a generation row carries so that ``eval_bfcl`` can score it; ``{}`` for a row that is not BFCL's (also when
    a parquet of both kinds gives its other rows null BFCL fields)."""
    if not isinstance(extra_info, Mapping):
        return {}
    return {k: extra_info[k] for k in BFCL_ROW_FIELDS if extra_info.get(k) is not None}


def calls_to_bfcl(calls: Sequence[Mapping]) -> list[dict]:
    """Parsed ``{name, parameters}`` calls → BFCL's decoded form ``[{name: parameters}]`` (order kept)."""
    return [{str(c["name"]): dict(c.get("parameters") or {})} for c in calls]


def _concrete(value: object) -> object:
    """A possible-answer value with its nested possibilities resolved: in a dict whose entries are lists, each entry
    is itself a list of acceptable values (``""`` = may be omitted), and so are those of every such dict in a list."""
    if isinstance(value, dict) and all(isinstance(v, list) for v in value.values()):
        out = {}
        for key, values in value.items():
            chosen = [v for v in values if v != ""]
            if chosen:
                out[key] = _concrete(chosen[0])
        return out
    if isinstance(value, list):
        return [_concrete(v) if isinstance(v, dict) else v for v in value]
    return value


def oracle_calls(ground_truth: Sequence[Mapping] | None, functions: Sequence[Mapping] = ()) -> list[dict]:
    """A BFCL possible answer → ``{name, parameters}`` calls a perfect model would make.

    Each parameter takes its first acceptable value other than ``""``; it is left out when ``""`` (BFCL's "may be
    omitted") is acceptable and the function document (``functions``) does not list it as required, or when ``""``
    is the only choice.
    """
    required = {f["name"]: set((f.get("parameters") or {}).get("required", [])) for f in functions}
    calls = []
    for answer in ground_truth or []:
        [(name, params)] = answer.items()
        chosen = {}
        for key, values in params.items():
            concrete = [v for v in values if v != ""]
            if concrete and ("" not in values or key in required.get(name, ())):
                chosen[key] = _concrete(concrete[0])
        calls.append({"name": name, "parameters": chosen})
    return calls


def unsatisfiable_reason(entry: Mapping) -> str | None:
    """Why no response can pass BFCL's checker on this entry, or None. Three shapes occur in BFCL v4's live rows:
    a required parameter whose only acceptable value is ``""`` (omitted: "missing required"; given: not acceptable);
    a parameter of the answer that the called function does not have, with no ``""`` to omit it ("unexpected
    parameter"); a parameter with an empty list of acceptable values (no value and no omission passes)."""
    docs = {f["name"]: f.get("parameters") or {} for f in entry.get("function") or ()}
    for answer in entry.get("ground_truth") or ():
        [(name, params)] = answer.items()
        doc = docs.get(name, {})
        required, properties = set(doc.get("required", ())), doc.get("properties", {})
        for key, values in params.items():
            if not values:
                return f"{name}.{key}: no acceptable value"
            if key in required and all(v == "" for v in values):
                return f"{name}.{key}: required, but its only acceptable value is omission"
            if key not in properties and "" not in values:
                return f"{name}.{key}: not a parameter of {name}, yet the answer requires it"
    return None


def oracle_response(entry: Mapping) -> str:
    """The RLLA response a perfect model would give: the possible answer's calls in a ``<tool_call>`` block (written
    as RLLA/API-Bank ground truths are, :func:`verl.utils.dataset.api_bank.tool_calls_to_ground_truth`), or, for
    the irrelevance categories, :data:`NO_CALL_RESPONSE`. ``live_relevance`` ships no answers: no call either (its
    oracle is not scored)."""
    calls = oracle_calls(entry.get("ground_truth"), entry.get("function") or ())
    return tool_calls_to_ground_truth(calls) if calls else NO_CALL_RESPONSE

