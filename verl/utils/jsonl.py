"""Reading JSON-lines files: one helper so every reader reports bad lines the same way (file and line named)."""
from __future__ import annotations

import json
import os
from collections.abc import Iterator


def iter_json_objects(path: str | os.PathLike, text: str | None = None) -> Iterator[tuple[int, dict]]:
    """Yield ``(1-based line number, object)`` for every non-blank line of a JSONL file (or of ``text``).

    Raises:
        FileNotFoundError: ``path`` does not exist (when ``text`` is not given).
        ValueError: a line is not valid JSON, or not a JSON object (``path:line N`` named).
    """
    if text is None:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"{path}: no such file")
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:line {line_no}: not valid JSON ({err})") from err
        if not isinstance(record, dict):
            raise ValueError(f"{path}:line {line_no}: expected a JSON object, got {type(record).__name__}")
        yield line_no, record
