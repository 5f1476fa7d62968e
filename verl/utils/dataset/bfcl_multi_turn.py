"""BFCL v4's multi-turn categories: the rows, their ground truths, and BFCL's call strings both ways.

A multi-turn row (``multi_turn_base`` and the three variants of the same code path, :data:`MULTI_TURN_CATEGORIES`)
is a conversation of user turns over stateful Python backends that ``bfcl-eval`` ships (a file system, a trading bot,
a travel API, ...): ``initial_config`` is each backend's starting state, ``involved_classes`` the backends, and the
function documents are the involved classes' files in ``data/multi_turn_func_doc`` (BFCL's loader
``load_dataset_entry`` attaches them as ``function``). The ground truth holds, per user turn, a flat list of call
strings such as ``cd(folder='document')``; BFCL's checker executes them on fresh backends and compares the model's
backends' state and outputs with those after every turn. A turn whose list is empty is one where the request cannot
be fulfilled (``miss_param``: a parameter is missing; ``miss_func``: the needed function is held out until a later
turn, which has no user message: BFCL then shows the held-out documents and asks again).

Function names are bare method names in the documents and the ground truths alike (``cd``, not
``GorillaFileSystem.cd``; only the rows' ``path`` field qualifies them), and no two backends share a method name, so
a call names its method directly. The ground truths pass some arguments positionally (``sort('final_report.pdf')``,
``get_zipcode_based_on_city('Rivermist')``); :func:`parse_call_string` maps those to parameter names with the
backend method's signature (:func:`backend_signatures`; the function documents list a few parameters in another
order than the code, e.g. ``purchase_insurance``).

Conversion (tests: ``tests/data/test_bfcl_multi_turn_on_cpu.py``): :func:`call_to_string` writes a parsed
``{"name", "parameters"}`` call as BFCL's string with keyword arguments (values as Python literals), and
:func:`parse_call_string` reads one back with :mod:`ast`, literal values only.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import keyword
import re
import types
from typing import Any, Mapping, Sequence

from verl.utils.dataset.bfcl import bfcl_api

__all__ = [
    "MULTI_TURN_CATEGORIES",
    "backend_signatures",
    "call_to_string",
    "drop_backend_instances",
    "ground_truth_calls",
    "is_multi_turn_category",
    "load_multi_turn_category",
    "multi_turn_api",
    "parse_call_string",
    "parse_multi_turn_categories",
]

MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
_JSON_SCALARS = (str, int, float, bool, type(None))


def is_multi_turn_category(name: str) -> bool:
    """Whether ``name`` is one of :data:`MULTI_TURN_CATEGORIES`."""
    return name in MULTI_TURN_CATEGORIES


def parse_multi_turn_categories(categories: str | Sequence[str]) -> list[str]:
    """``"a,b"`` or a list → the validated multi-turn category names, in the order given.

    Raises:
        ValueError: a name that is not a multi-turn category (the message lists them).
    """
    names = [c.strip() for c in categories.split(",")] if isinstance(categories, str) else [str(c) for c in categories]
    unknown = [c for c in names if c not in MULTI_TURN_CATEGORIES]
    if unknown or not names:
        raise ValueError(
            f"unknown BFCL multi-turn categories {unknown}; expected some of {list(MULTI_TURN_CATEGORIES)}"
        )
    return names


_MT_API: types.SimpleNamespace | None = None


def multi_turn_api() -> types.SimpleNamespace:
    """BFCL's multi-turn pieces, imported once (through :func:`verl.utils.dataset.bfcl.bfcl_api`, which installs and
    prepares ``bfcl_eval``).

    Returns:
        namespace with ``execute`` (``execute_multi_turn_func_call``), ``checker`` (``multi_turn_checker``),
        ``utils_module`` (the module whose globals hold the live backend instances), ``class_modules``
        (``CLASS_FILE_PATH_MAPPING``), ``max_steps`` (``MAXIMUM_STEP_LIMIT``, steps per turn before BFCL quits a
        row), ``added_functions_prompt`` (what BFCL's user says when held-out functions appear), and
        ``load_dataset_entry`` / ``load_ground_truth_entry``.

    Raises:
        RuntimeError: bfcl-eval is not importable and could not be installed.
    """
    global _MT_API
    if _MT_API is not None:
        return _MT_API
    api = bfcl_api()
    utils = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
    checker = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
    backends = importlib.import_module("bfcl_eval.constants.executable_backend_config")
    prompts = importlib.import_module("bfcl_eval.constants.default_prompts")
    _MT_API = types.SimpleNamespace(
        execute=utils.execute_multi_turn_func_call,
        checker=checker.multi_turn_checker,
        utils_module=utils,
        class_modules=dict(backends.CLASS_FILE_PATH_MAPPING),
        max_steps=int(prompts.MAXIMUM_STEP_LIMIT),
        added_functions_prompt=prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC,
        load_dataset_entry=api.load_dataset_entry,
        load_ground_truth_entry=api.load_ground_truth_entry,
    )
    return _MT_API


def backend_signatures(classes: Sequence[str]) -> dict[str, list[str]]:
    """``{method name: [parameter names in signature order]}`` of the public methods of BFCL backend ``classes``.

    Raises:
        ValueError: a class BFCL has no backend for (the known ones are listed).
    """
    mt = multi_turn_api()
    out: dict[str, list[str]] = {}
    for name in classes:
        if name not in mt.class_modules:
            raise ValueError(f"BFCL backend class {name!r} unknown; known: {sorted(mt.class_modules)}")
        cls = getattr(importlib.import_module(mt.class_modules[name]), name)
        for method, fn in inspect.getmembers(cls, predicate=inspect.isfunction):
            if not method.startswith("_"):
                out[method] = [p for p in inspect.signature(fn).parameters if p != "self"]
    return out


def _check_value(value: Any, where: str) -> None:
    if isinstance(value, _JSON_SCALARS):
        return
    if isinstance(value, list):
        for item in value:
            _check_value(item, where)
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ValueError(f"{where}: a dict key is {type(key).__name__} {key!r}, expected a string")
            _check_value(item, where)
        return
    raise ValueError(f"{where}: value of type {type(value).__name__} is not a JSON value: {value!r:.80}")


def call_to_string(call: Mapping, where: str = "call") -> str:
    """A parsed call ``{"name": str, "parameters": {str: JSON value}}`` as BFCL's call string, keyword arguments in
    the order given, values as Python literals (``repr``): ``{"name": "cd", "parameters": {"folder": "document"}}``
    → ``"cd(folder='document')"``.

    Raises:
        ValueError: the name or a parameter name is not a Python identifier (or is a keyword), the parameters are not
            a mapping, or a value is not a JSON value (``where`` is named).
    """
    name = call.get("name") if isinstance(call, Mapping) else None
    if not isinstance(name, str) or not name.isidentifier() or keyword.iskeyword(name):
        raise ValueError(f"{where}: function name {name!r} is not a Python identifier")
    params = call.get("parameters") or {}
    if not isinstance(params, Mapping):
        raise ValueError(f"{where}: parameters of {name}: expected an object, got {type(params).__name__}")
    parts = []
    for key, value in params.items():
        if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
            raise ValueError(f"{where}: parameter name {key!r} of {name} is not a Python identifier")
        _check_value(value, f"{where}: {name}.{key}")
        parts.append(f"{key}={value!r}")
    return f"{name}({', '.join(parts)})"


def parse_call_string(text: str, signatures: Mapping[str, Sequence[str]] | None = None, where: str = "call") -> dict:
    """BFCL's call string → ``{"name", "parameters"}``: ``"cd(folder='document')"`` → ``{"name": "cd",
    "parameters": {"folder": "document"}}``. Argument values must be literals (``ast.literal_eval``: strings,
    numbers, booleans, None, lists, dicts; tuples become lists, as JSON has none). Positional arguments are named
    from ``signatures`` (``{function: [parameter names]}``, :func:`backend_signatures`) and refused without one.

    Raises:
        ValueError: not a single call of a bare name; ``*args`` / ``**kwargs``; a value that is not a literal; a
            positional argument without a signature for the function, or more of them than it has parameters; a
            parameter given twice (``where`` names the row and turn).
    """
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ValueError(f"{where}: {text!r} is not a Python call ({err.msg})") from None
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"{where}: {text!r} is not a call of a bare function name")
    name = node.func.id

    def literal(arg: ast.AST, label: str) -> Any:
        if isinstance(arg, ast.Starred):
            raise ValueError(f"{where}: {text!r}: *{label} arguments are not supported")
        try:
            value = ast.literal_eval(arg)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise ValueError(f"{where}: {text!r}: argument {label} is not a literal value") from None
        return _lists(value)

    params: dict[str, Any] = {}
    if node.args:
        names = (signatures or {}).get(name)
        if names is None:
            raise ValueError(
                f"{where}: {text!r}: positional arguments need {name}'s signature (keyword arguments only)"
            )
        if len(node.args) > len(names):
            raise ValueError(f"{where}: {text!r}: {len(node.args)} positional arguments, {name} takes {len(names)}")
        for param, arg in zip(names, node.args):
            params[param] = literal(arg, param)
    for kw in node.keywords:
        if kw.arg is None:
            raise ValueError(f"{where}: {text!r}: **kwargs arguments are not supported")
        if kw.arg in params:
            raise ValueError(f"{where}: {text!r}: parameter {kw.arg} given twice")
        params[kw.arg] = literal(kw.value, kw.arg)
    return {"name": name, "parameters": params}


def _lists(value: Any) -> Any:
    """Tuples (and sets) as lists, recursively: the JSON shape of a literal."""
    if isinstance(value, (tuple, list, set, frozenset)):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


def load_multi_turn_category(category: str, max_rows: int | None = None, skip_rows: int = 0) -> list[dict]:
    """The rows of a multi-turn category, in BFCL's file order (the first ``skip_rows`` left out, then at most
    ``max_rows``; None or <= 0: all the rest).

    Returns:
        One dict per row: ``id``, ``category``, ``question`` (per user turn a list of ``{"role", "content"}``; a
        held-out turn of ``miss_func`` is empty), ``initial_config``, ``involved_classes``, ``functions`` (the
        documents shown from the start, with BFCL's language hints), ``missed_function`` (``{turn index (int):
        [documents shown at that turn]}``, empty outside ``miss_func``), ``ground_truth`` (per turn a list of call
        strings) and ``long_context`` (whether the backends load BFCL's long-context scenario).

    Raises:
        ValueError: an unknown category, ``skip_rows`` < 0, or a row whose ground truth is missing or has another
            number of turns than its question (the row is named).
    """
    [category] = parse_multi_turn_categories([category])
    if skip_rows < 0:
        raise ValueError(f"BFCL {category}: skip_rows must be >= 0, got {skip_rows}")
    mt = multi_turn_api()
    entries = mt.load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True)
    answers = {e["id"]: e["ground_truth"] for e in mt.load_ground_truth_entry(category)}
    stop = skip_rows + max_rows if max_rows and max_rows > 0 else None
    rows = []
    for entry in entries[skip_rows:stop]:
        row_id = entry["id"]
        truth = answers.get(row_id)
        if truth is None:
            raise ValueError(f"BFCL {category}: row {row_id} has no ground truth")
        if len(truth) != len(entry["question"]):
            raise ValueError(
                f"BFCL {category}: row {row_id}: {len(entry['question'])} user turns, {len(truth)} ground-truth turns"
            )
        rows.append(
            {
                "id": row_id,
                "category": category,
                "question": [list(turn) for turn in entry["question"]],
                "initial_config": entry.get("initial_config") or {},
                "involved_classes": list(entry["involved_classes"]),
                "functions": list(entry["function"]),
                "missed_function": {int(k): list(v) for k, v in (entry.get("missed_function") or {}).items()},
                "ground_truth": [list(turn) for turn in truth],
                "long_context": "long_context" in category,
            }
        )
    return rows


def ground_truth_calls(row: Mapping) -> list[list[dict]]:
    """A row's ground truth as parsed calls: per user turn the list of ``{"name", "parameters"}`` (positional
    arguments named by the backends' signatures).

    Raises:
        ValueError: a call string :func:`parse_call_string` cannot read (row, turn and call are named).
    """
    signatures = backend_signatures(row["involved_classes"])
    return [
        [parse_call_string(s, signatures, where=f"BFCL {row['id']} turn {t} call {k}") for k, s in enumerate(turn)]
        for t, turn in enumerate(row["ground_truth"])
    ]


def drop_backend_instances(model_name: str) -> int:
    """Forget the backend instances BFCL's executor keeps for ``model_name`` (its own, its ``_eval`` replay's and the
    checker's ``_ground_truth`` replay's: BFCL keys them ``<model name>_<row id>_<class>_instance`` in the globals of
    its ``multi_turn_utils`` module, with ``-./:`` written as ``_``, and never frees them). Returns how many."""
    store = vars(multi_turn_api().utils_module)
    prefix = re.sub(r"[-./:]", "_", f"{model_name}_")
    stale = [k for k in store if k.startswith(prefix) and k.endswith("_instance")]
    for key in stale:
        del store[key]
    return len(stale)
