"""Built-in tools: a calculator (family ``calculate``) and BM25 search over a local corpus (family ``search``).

Reference: ``docs/tools.md``. The calculator evaluates arithmetic with ``simpleeval`` (no ``eval``: only numbers,
operators, the functions and constants of :data:`MATH_FUNCTIONS` / :data:`MATH_NAMES`; ``simpleeval`` refuses powers
and strings that would be huge, so ``9**9**9`` fails at once). Search ranks documents with Okapi BM25
(``rank_bm25.BM25Okapi``; Robertson and Zaragoza, "The Probabilistic Relevance Framework: BM25 and Beyond", 2009,
eq. 3.26) over lower-cased word tokens.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Sequence

from agent_system.tools.base import Tool, tool

__all__ = ["MATH_FUNCTIONS", "MATH_NAMES", "SearchIndex", "calculator", "load_corpus", "search_tool"]

MATH_FUNCTIONS = {
    name: getattr(math, name)
    for name in ("sqrt", "exp", "log", "log10", "log2", "sin", "cos", "tan", "asin", "acos", "atan", "floor", "ceil")
}


def _factorial(n: int) -> int:
    if not isinstance(n, int) or not 0 <= n <= 999:
        raise ValueError(f"factorial takes an integer from 0 to 999, got {n!r}")
    return math.factorial(n)


MATH_FUNCTIONS.update({"abs": abs, "round": round, "min": min, "max": max, "factorial": _factorial})
MATH_NAMES = {"pi": math.pi, "e": math.e}


@tool(family="calculate")
def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression and return its value.

    Args:
        expression: the expression, with + - * / // % **, parentheses, numbers, pi, e and the functions sqrt, exp,
            log, log10, log2, sin, cos, tan, asin, acos, atan, floor, ceil, abs, round, min, max, factorial.
    """
    from simpleeval import SimpleEval

    value = SimpleEval(functions=MATH_FUNCTIONS, names=MATH_NAMES).eval(expression)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"the expression gave {type(value).__name__}, not a number")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"the result is not finite ({value})")
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    return str(value)


_TOKEN = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class SearchIndex:
    """A BM25 index over documents, each ``{"title": str, "text": str}`` (a plain string is a text without title).

    Raises:
        ValueError: no documents, or a document that is neither a string nor a mapping with a string ``text``.
    """

    def __init__(self, documents: Sequence, where: str = "corpus") -> None:
        from rank_bm25 import BM25Okapi

        docs = []
        for i, doc in enumerate(documents):
            if isinstance(doc, str):
                doc = {"title": "", "text": doc}
            if not isinstance(doc, dict) or not isinstance(doc.get("text"), str):
                raise ValueError(f"{where}: document {i} must be a string or an object with a string 'text'")
            docs.append({"title": str(doc.get("title") or ""), "text": doc["text"]})
        if not docs:
            raise ValueError(f"{where}: no documents")
        self.documents = docs
        self._bm25 = BM25Okapi([_tokens(f"{d['title']} {d['text']}") or ["_"] for d in docs])

    def search(self, query: str, top_k: int = 3) -> list[dict]:
        """The ``top_k`` best documents for ``query`` with a positive BM25 score, best first:
        ``{"title", "text", "score"}``."""
        scores = self._bm25.get_scores(_tokens(query))
        order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[: max(0, int(top_k))]
        return [{**self.documents[i], "score": round(float(scores[i]), 4)} for i in order if scores[i] > 0]


def load_corpus(path: str | Path) -> list:
    """Documents from a ``.jsonl`` file (one document per line) or a ``.json`` file (a list of documents).

    Raises:
        ValueError: the file is missing, not JSON, or not a list of documents (the message names the file and line).
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"search corpus {path}: no such file")
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        docs = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    docs.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"search corpus {path} line {n}: not JSON ({err.msg})") from None
        return docs
    try:
        docs = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"search corpus {path}: not JSON ({err.msg} at line {err.lineno})") from None
    if not isinstance(docs, list):
        raise ValueError(f"search corpus {path}: expected a JSON list of documents, got {type(docs).__name__}")
    return docs


def search_tool(corpus_path: str | None = None, documents: list | None = None, top_k: int = 3, name: str = "search"):
    """A search tool (family ``search``) over a corpus file (:func:`load_corpus`) or a list of documents.

    Load it by reference for the process sandbox: ``ToolSpec(ref="agent_system.tools.builtin:search_tool",
    kwargs={"corpus_path": ...})``.

    Raises:
        ValueError: neither or both of ``corpus_path`` and ``documents``; see :class:`SearchIndex`.
    """
    if (corpus_path is None) == (documents is None):
        raise ValueError("search_tool: give exactly one of corpus_path and documents")
    where = str(corpus_path) if corpus_path is not None else "documents"
    index = SearchIndex(load_corpus(corpus_path) if corpus_path is not None else documents, where=where)

    def search(query: str) -> str:
        """Search the knowledge base and return the most relevant passages.

        Args:
            query: what to look for, in a few keywords.
        """
        hits = index.search(query, top_k)
        if not hits:
            return "No results."
        return "\n".join(
            f"[{k + 1}] {h['title']}: {h['text']}" if h["title"] else f"[{k + 1}] {h['text']}"
            for k, h in enumerate(hits)
        )

    made: Tool = tool(search, name=name, family="search")
    made.index = index
    return made
