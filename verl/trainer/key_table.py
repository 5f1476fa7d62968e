"""The key table: for every config key, which entry points read it and the values it takes.

Two config trees, five entry points:

- ``ppo_trainer.yaml`` (``async_trainer.yaml`` is it plus an ``async`` section): ``main_ppo`` (single-turn: parquet
  prompts and reward managers), ``agent`` (``main_ppo`` with ``env.env_name`` set: multi-turn episodes in an
  environment) and ``main_async`` (the asynchronous mode);
- ``generation.yaml``: ``main_generation`` and ``main_eval`` (the ``eval`` section, scoring the generations; run on its
  own, ``main_eval`` takes command-line flags that argparse checks).

Every key of each tree has one row (:data:`ROWS`, written in :data:`_TABLE`); ``tests/trainer/test_key_table_on_cpu.py``
walks the composed configs so a key cannot be added without one. At load each entry point calls :func:`check_keys`:
a key it does not read, set to anything but its default, is refused with its name, the entry point and what to do
instead; a key it reads must lie in its row's range. The value's type is the schema's (``config_schema``), checked
before. ``docs/config_keys.md`` is this table as a page (``python -m verl.trainer.key_table_doc``, checked by the test).

A row reads ``key | readers | range | note``: readers are letters (``P`` main_ppo, ``A`` agent, ``S`` main_async,
``G`` main_generation, ``E`` main_eval; ``-`` none), the range is ``-`` (any value of the type) or alternatives
joined by ``or``: ``>= x``, ``> x``, ``[a, b]`` (closed), ``(a, b]``, ``{a, b, c}`` (one of these words), ``finite``
(any finite number) or a single literal (``-1``); null passes where the type allows it, NaN and ±inf never. Every
numeric key that an entry point reads declares its range (a test walks the schema's types). The note says what a reader reads it for, under which
condition, or why the others do not.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Tuple

from omegaconf import DictConfig, ListConfig, OmegaConf

from verl.trainer.config_errors import ConfigError

ENTRY_POINTS = ("main_ppo", "agent", "main_async", "main_generation", "main_eval")
CODES = {"P": "main_ppo", "A": "agent", "S": "main_async", "G": "main_generation", "E": "main_eval"}
# main_generation scores its output with main_eval in the same process: it reads main_eval's keys too
ALSO_READS = {"main_generation": ("main_eval",)}
TREES = {
    "ppo_trainer": ("main_ppo", "agent", "main_async"),
    "generation": ("main_generation", "main_eval"),
}

from verl.trainer.key_table_rows import TABLE as _TABLE  # noqa: E402 - the rows, data only


@dataclass(frozen=True)
class KeyRow:
    """One key: ``read_by`` (entry point names), ``range`` (the table's text, ``""`` for any) and ``note``."""

    key: str
    tree: str
    read_by: Tuple[str, ...]
    range: str
    note: str

    def allows(self, value: Any) -> bool:
        """Whether ``value`` lies in the range (null always does: the schema decides whether null is allowed). NaN and
        ±inf lie in none: every numeric key means a finite number."""
        if isinstance(value, float) and not math.isfinite(value):
            return False
        if not self.range or value is None:
            return True
        return any(_alternative_allows(alt.strip(), value) for alt in self.range.split(" or "))


_INTERVAL = re.compile(r"^([\[(])\s*(-?[\d.e+-]+)\s*,\s*(-?[\d.e+-]+)\s*([\])])$")


def _alternative_allows(alt: str, value: Any) -> bool:
    if alt == "finite":  # any finite number (non-finite ones are refused before)
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if alt.startswith("{"):
        return str(value) in {w.strip() for w in alt.strip("{}").split(",")}
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return alt == str(value)
    for op in (">=", ">", "<=", "<"):
        if alt.startswith(op):
            bound = float(alt[len(op) :])
            return {">=": value >= bound, ">": value > bound, "<=": value <= bound, "<": value < bound}[op]
    match = _INTERVAL.match(alt)
    if match:
        low_open, high_open = match.group(1) == "(", match.group(4) == ")"
        low, high = float(match.group(2)), float(match.group(3))
        return (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    return float(alt) == float(value)


def _parse(table: str) -> Dict[str, KeyRow]:
    rows: Dict[str, KeyRow] = {}
    tree = None
    for number, line in enumerate(table.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            if line.startswith("# tree:"):
                tree = line.split(":", 1)[1].strip()
            continue
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != 4 or tree not in TREES:
            raise ValueError(f"key table line {number}: expected 'key | readers | range | note' in a tree: {line!r}")
        key, readers, value_range, note = parts
        names = tuple(CODES[c] for c in readers if c != "-")
        if not set(names) <= set(TREES[tree]) or f"{tree}:{key}" in rows:
            raise ValueError(f"key table line {number}: readers {readers!r} not of tree {tree} or {key} twice")
        rows[f"{tree}:{key}"] = KeyRow(key, tree, names, "" if value_range == "-" else value_range, note)
    return rows


ROWS: Dict[str, KeyRow] = _parse(_TABLE)


def rows_of(tree: str) -> Dict[str, KeyRow]:
    """``{key: row}`` of one tree (``ppo_trainer`` or ``generation``)."""
    return {row.key: row for row in ROWS.values() if row.tree == tree}


def flat_items(config: DictConfig, prefix: str = "", resolve: bool = True) -> Iterator[Tuple[str, Any]]:
    """``(dotted key, plain value)`` of every leaf of ``config``; a mapping whose default is empty (an open section
    such as ``override_config``) or null is one leaf. ``resolve=False`` gives an interpolation as its text
    (``"${data.max_prompt_length}"``), so a key that follows another is not taken for one the user set."""
    for key in config.keys():
        node = config._get_node(key)
        path = f"{prefix}{key}"
        if isinstance(node, DictConfig) and not node._is_none() and len(node) and not _is_open(path):
            yield from flat_items(node, path + ".", resolve)
        elif not resolve and node._is_interpolation():
            yield path, node._value()
        else:
            value = config[key] if not OmegaConf.is_missing(config, key) else "???"
            if isinstance(value, (DictConfig, ListConfig)):
                value = OmegaConf.to_container(value, resolve=resolve)
            yield path, value


def _is_open(path: str) -> bool:
    from verl.trainer.config_keys import OPEN_SECTIONS

    return path in OPEN_SECTIONS or path == "async.envs"


def check_keys(config: DictConfig, defaults: DictConfig, entry_point: str) -> None:
    """Refuse, for ``entry_point``, a key it does not read that differs from ``defaults``, and a key it reads whose
    value is outside its row's range. ``config`` and ``defaults`` are the same tree (typed or plain); keys of
    ``config`` with no row (a mapping under an open section) are not looked at.

    Raises:
        ConfigError: every such key, with its value, the entry point and the row's note.
    """
    tree = next(t for t, points in TREES.items() if entry_point in points)
    rows = rows_of(tree)
    reading = {entry_point, *ALSO_READS.get(entry_point, ())}
    default_values = dict(flat_items(defaults, resolve=False))
    given = dict(flat_items(config, resolve=False))
    problems = []
    for key, value in flat_items(config):
        row = rows.get(key)
        if row is None:
            continue
        if not reading & set(row.read_by):
            if key in default_values and given[key] != default_values[key]:
                readers = ", ".join(row.read_by) or "nothing"
                problems.append(
                    f"{key}={value!r}: {entry_point} does not read it (read by {readers}; {row.note}); "
                    f"leave it at {default_values[key]!r}"
                )
        elif not row.allows(value):
            expected = row.range or "a finite number"
            problems.append(f"{key}={value!r}: expected {expected}" + (f" ({row.note})" if row.note else ""))
    if problems:
        raise ConfigError(f"{entry_point}: " + "\n  ".join(problems))


def keys_of(entry_point: str) -> Dict[str, KeyRow]:
    """The rows of the keys in ``entry_point``'s composed config (the ``async`` section is ``main_async``'s only)."""
    tree = next(t for t, points in TREES.items() if entry_point in points)
    return {k: r for k, r in rows_of(tree).items() if entry_point == "main_async" or not k.startswith("async.")}


def counts() -> Dict[str, Dict[str, int]]:
    """``{entry point: {"read": n, "refused": m}}`` over the keys of its config (refused: not read, so refused when
    set). ``main_generation`` reads ``main_eval``'s keys too (it runs it); ``main_eval`` refuses none (run on its own it
    takes command-line flags)."""
    out = {}
    for point in ENTRY_POINTS:
        rows = keys_of(point)
        reading = {point, *ALSO_READS.get(point, ())}
        read = sum(bool(reading & set(row.read_by)) for row in rows.values())
        # main_eval on its own takes command-line flags (argparse refuses unknown ones): it refuses no key here
        out[point] = {"read": read, "refused": 0 if point == "main_eval" else len(rows) - read}
    return out
