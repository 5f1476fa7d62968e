"""Reading JSON and JSON-lines files: one reader so every caller reports a bad file the same way.

Every decoding problem -- bytes that are not UTF-8, a line that is not JSON, a JSONL line that is not an object --
raises :class:`JsonInputError` (a ``ValueError``) naming the file, the 1-based line and what was expected, e.g.
``file data.jsonl, line 7: not valid UTF-8 (byte 0xff at column 12)`` or
``file data.jsonl, line 3: not valid JSON: Expecting ',' delimiter (column 18)``. Columns are 1-based and count
characters. CLIs turn it into a one-line message and exit status 2.

Lines are separated by ``"\\n"`` only (``"\\r\\n"`` works too), never by the other characters ``str.splitlines``
breaks at: a JSON string may hold a raw U+2028. A UTF-8 byte-order mark at the start of a file is skipped.
"""

from __future__ import annotations

import codecs
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

__all__ = ["JsonInputError", "iter_json_objects", "load_json_file"]


class JsonInputError(ValueError):
    """A JSON / JSON-lines input file cannot be decoded.

    Attributes:
        path: the file (``str``).
        line: 1-based line number, or None when the problem is not tied to a line.
        problem: what is wrong, e.g. ``not valid UTF-8 (byte 0xff at column 12)``.

    The message is ``file PATH, line N: PROBLEM`` (``file PATH: PROBLEM`` without a line).
    """

    def __init__(self, path: str | os.PathLike, line: int | None, problem: str) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.problem = problem
        where = f"file {self.path}" if line is None else f"file {self.path}, line {line}"
        super().__init__(f"{where}: {problem}")

    def __reduce__(self):  # picklable across processes despite the custom __init__
        return type(self), (self.path, self.line, self.problem)


def _utf8_problem(raw: bytes, err: UnicodeDecodeError, line_start: int = 0) -> str:
    """``not valid UTF-8 (byte 0xNN at column C)`` for ``err`` raised decoding ``raw``; the column is counted in
    characters from ``line_start`` (a byte offset into ``raw``)."""
    column = len(raw[line_start : err.start].decode("utf-8", errors="replace")) + 1
    return f"not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {column})"


def _decode_line(raw: bytes, path: str | os.PathLike, line_no: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JsonInputError(path, line_no, _utf8_problem(raw, err)) from err


def _lines(path: str | os.PathLike, text: str | None) -> Iterable[tuple[int, str]]:
    """``(1-based line number, line text)`` of the file (decoded line by line) or of ``text``."""
    if text is not None:
        if text.startswith(codecs.BOM_UTF8.decode("utf-8")):
            text = text[1:]
        yield from enumerate(text.split("\n"), start=1)
        return
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            if line_no == 1 and raw.startswith(codecs.BOM_UTF8):
                raw = raw[len(codecs.BOM_UTF8) :]
            yield line_no, _decode_line(raw, path, line_no)


def iter_json_objects(path: str | os.PathLike, text: str | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(1-based line number, object)`` for every non-blank line of a JSONL file, read lazily.

    Args:
        path: the JSONL file; with ``text`` only used to name the file in errors.
        text: the file's content already decoded (then ``path`` is not opened).

    Returns:
        An iterator of ``(line number, dict)``; blank lines are skipped but counted.

    Raises:
        FileNotFoundError: ``path`` does not exist (when ``text`` is not given).
        JsonInputError: a line is not valid UTF-8, not valid JSON, or not a JSON object (file, line and what was
            expected named; raised when the iterator reaches that line).
    """
    if text is None and not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    for line_no, line in _lines(path, text):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise JsonInputError(path, line_no, f"not valid JSON: {err.msg} (column {err.colno})") from err
        if not isinstance(record, dict):
            raise JsonInputError(path, line_no, f"expected a JSON object, got {type(record).__name__}")
        yield line_no, record


def load_json_file(path: str | os.PathLike) -> Any:
    """Parse a whole JSON file (UTF-8, optional byte-order mark).

    Args:
        path: the file.

    Returns:
        The decoded JSON value.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        JsonInputError: the file is not valid UTF-8 or not valid JSON (file, line and column named).
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such file")
    with open(path, "rb") as handle:
        raw = handle.read()
    raw = raw.removeprefix(codecs.BOM_UTF8)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line_start = raw.rfind(b"\n", 0, err.start) + 1
        raise JsonInputError(path, raw.count(b"\n", 0, err.start) + 1, _utf8_problem(raw, err, line_start)) from err
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JsonInputError(path, err.lineno, f"not valid JSON: {err.msg} (column {err.colno})") from err
