"""``route_qa``: a seeded question-answering task on which each route of the tool router pays (``docs/route_qa.md``).

    python -m verl.utils.dataset.route_qa --output_dir DIR [--seed 0] [--train 3000] [--val 300] [--test 1200]

Three kinds of question, in equal shares by default:

- ``arithmetic``: ``a op b`` with ``a``, ``b`` of 3 to 4 digits and ``op`` plus, minus or times; too long for a small
  model to work out in its head, exact with the ``calculator`` tool (route CALCULATE);
- ``fact``: an attribute (capital, river, founding year) of a fictional country, stated only in the generated corpus
  (``corpus.jsonl``), found with the ``search`` tool (route SEARCH);
- ``direct``: answerable without a tool (route ANSWER): half are ``a op b`` with one-digit operands, half state the
  fact in the question before asking it.

So that the kind cannot be read off the words alone, the kinds share the question templates (a ``direct``
arithmetic question is written like an ``arithmetic`` one, a ``direct`` fact question ends like a ``fact`` one), and
the test split's question templates are never used in train or validation. Each split has its own countries, so a
test fact cannot have been memorised in training.

Rows follow the RLLA schema (``data_source`` ``route_qa``): a system message listing both tools in the RLLA
``**Available Tools**`` block (the router's tool families, also in ``extra_info.tool_families``) and the user's
question; ``reward_model.ground_truth`` the exact answer, scored by exact match on the final ``<response>`` block
(``verl.utils.reward_score.route_qa``); ``extra_info``: ``index``, ``split``, ``kind``, ``subkind``
(``arithmetic``, ``fact``, ``direct_arithmetic``, ``direct_fact``), ``needs_tool``, ``tool`` and ``call`` (the
tool call that answers the question, as ``{"name", "parameters"}`` JSON: every question has one, a direct one too,
where it only costs; an oracle makes it only when ``needs_tool``), ``template``, ``tool_families``. ``meta.json`` records the seed, the counts per kind and the tool-needing share.
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from verl.utils.reward_score.route_qa import DATA_SOURCE

__all__ = [
    "DATA_SOURCE",
    "KINDS",
    "ROUTE_OF_KIND",
    "SYSTEM_PROMPT",
    "TOOL_FAMILIES",
    "Country",
    "ensure_task",
    "extra_info_problems",
    "generate",
    "make_countries",
    "one_digit_problems",
    "task_dir",
    "write_task",
]

KINDS = ("arithmetic", "fact", "direct")
ROUTE_OF_KIND = {"arithmetic": "CALCULATE", "fact": "SEARCH", "direct": "ANSWER"}
TOOL_FAMILIES = {"calculator": "CALCULATE", "search": "SEARCH"}
SPLITS = ("train", "val", "test")

SYSTEM_PROMPT = """You answer questions. Think only as much as needed.
**Available Tools**
In your response, you can use the following tools:
1. Name: calculator
Description: Calculate an arithmetic expression exactly.
Parameters: {"expression": {"description": "the expression, e.g. 12 * (3 + 4)", "type": "string"}}
2. Name: search
Description: Search the encyclopedia for passages about a place.
Parameters: {"query": {"description": "what to look for, in a few keywords", "type": "string"}}

**Output Format**
Call a tool with <tool_call>{"name": ..., "parameters": {...}}</tool_call>, or give the final answer as \
<response>answer</response>."""

# question templates: {q} is the thing asked for. Train/val and test use disjoint sets.
TEMPLATES = {
    "train": ("What is {q}?", "Tell me {q}.", "Please find {q}.", "Do you know {q}?"),
    "test": ("I need to know {q}.", "Can you work out {q}?", "Give me {q}, please.", "Quick question: {q}?"),
}
# arithmetic phrasings by operator: {a}, {b}. Shared by the splits (only the question templates are held out):
# a 7M model cannot learn an unseen phrasing's meaning ("b subtracted from a": the operands swapped), and a test
# split that asks for one measures that, not routing (docs/route_qa.md "Not readable off the words").
OPERATIONS = {"+": ("{a} plus {b}", "the sum of {a} and {b}"), "-": ("{a} minus {b}",), "*": ("{a} times {b}",)}
APPLY = {"+": operator.add, "-": operator.sub, "*": operator.mul}  # each operator's value
# fact phrasings by attribute: {e} the country
ATTRIBUTES = {
    "capital": ("the capital of {e}",),
    "river": ("the river that flows through {e}",),
    "founded": ("the year {e} was founded",),
}
# the fact stated before a direct question: {e}, {v}
CONTEXTS = {
    "capital": ("The capital of {e} is {v}.",),
    "river": ("The river {v} flows through {e}.",),
    "founded": ("{e} was founded in {v}.",),
}
QUERY_WORDS = {"capital": "capital", "river": "river", "founded": "founding year"}  # an oracle's search query
_ONSETS = ("b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "dr", "kr", "st", "th", "qu")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ou")
_CODAS = ("", "", "n", "r", "l", "s", "th", "nd")


@dataclass(frozen=True)
class Country:
    """A fictional country and its attributes (all names made of invented syllables)."""

    name: str
    capital: str
    river: str
    founded: str

    def document(self) -> dict:
        """Its corpus entry ``{"title", "text"}`` (every attribute, in the train contexts' wording)."""
        text = (
            f"{self.name} is a country. The capital of {self.name} is {self.capital}. "
            f"The river {self.river} flows through {self.name}. {self.name} was founded in {self.founded}."
        )
        return {"title": self.name, "text": text}


def _word(rng: random.Random, syllables: int) -> str:
    word = "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(syllables))
    return word.capitalize()


def make_countries(rng: random.Random, n: int, taken: set[str]) -> list[Country]:
    """``n`` countries whose names (country, capital, river) are new to ``taken`` (updated in place)."""

    def fresh(syllables: int) -> str:
        while True:
            word = _word(rng, syllables)
            if word not in taken:
                taken.add(word)
                return word

    return [Country(fresh(3), fresh(2), fresh(2), str(rng.randint(1100, 1950))) for _ in range(n)]


def _arithmetic(rng: random.Random, small: bool) -> tuple[str, str, dict]:
    op = rng.choice(("+", "-", "*"))
    if small:
        a, b = rng.randint(1, 9), rng.randint(1, 9)
    else:
        a, b = rng.randint(100, 9999), rng.randint(100, 9999)
    if op == "-" and b > a:
        a, b = b, a
    phrase = rng.choice(OPERATIONS[op]).format(a=a, b=b)
    value = APPLY[op](a, b)
    call = {"name": "calculator", "parameters": {"expression": f"{a} {op} {b}"}}
    return phrase, str(value), call


def one_digit_problems() -> list[tuple[str, str]]:
    """Every ``direct_arithmetic`` problem the generator can draw, as ``(phrase, answer)`` in every phrasing of its
    operator: ``a`` and ``b`` in 1..9, a minus with ``a >= b`` (the one-digit table a model answers in its head)."""
    out = []
    for op, phrasings in OPERATIONS.items():
        for a in range(1, 10):
            for b in range(1, 10):
                if op == "-" and b > a:
                    continue
                out += [(phrasing.format(a=a, b=b), str(APPLY[op](a, b))) for phrasing in phrasings]
    return out


def _question(rng: random.Random, split: str, kind: str, subkind: str, countries: Sequence[Country]) -> dict:
    split_set = "test" if split == "test" else "train"
    t = rng.randrange(len(TEMPLATES[split_set]))
    template = TEMPLATES[split_set][t]
    context, call = "", None
    if subkind in ("arithmetic", "direct_arithmetic"):
        phrase, answer, call = _arithmetic(rng, small=subkind == "direct_arithmetic")
    else:
        country = rng.choice(countries)
        attribute = rng.choice(("capital", "river", "founded"))
        answer = getattr(country, attribute)
        phrase = rng.choice(ATTRIBUTES[attribute]).format(e=country.name)
        call = {"name": "search", "parameters": {"query": f"{QUERY_WORDS[attribute]} of {country.name}"}}
        if subkind == "direct_fact":
            context = rng.choice(CONTEXTS[attribute]).format(e=country.name, v=answer) + " "
    question = context + template.format(q=phrase)
    return {
        "question": question,
        "answer": answer,
        "kind": kind,
        "subkind": subkind,
        "needs_tool": kind != "direct",
        "tool": call["name"],
        "call": json.dumps(call),
        "template": f"{split_set}:{t}",
    }


SUBKINDS = {"arithmetic": ("arithmetic",), "fact": ("fact",), "direct": ("direct_arithmetic", "direct_fact")}


def extra_info_problems(extra: dict) -> list[tuple[str, str]]:
    """Schema problems of a ``route_qa`` row's ``extra_info`` as ``[(key, problem), …]`` (``validate-data``)."""
    problems = []
    kind = extra.get("kind")
    if kind not in KINDS:
        return [("extra_info.kind", f"expected one of {', '.join(KINDS)}, got {kind!r}")]
    if extra.get("subkind") not in SUBKINDS[kind]:
        problems.append(
            ("extra_info.subkind", f"expected one of {', '.join(SUBKINDS[kind])}, got {extra.get('subkind')!r}")
        )
    if extra.get("needs_tool") is not (kind != "direct"):
        problems.append(("extra_info.needs_tool", f"expected {kind != 'direct'} for kind {kind!r}"))
    call = extra.get("call")
    try:
        parsed = json.loads(call) if isinstance(call, str) else None
    except json.JSONDecodeError:
        parsed = None
    if not (isinstance(parsed, dict) and parsed.get("name") == extra.get("tool") in TOOL_FAMILIES):
        problems.append(
            ("extra_info.call", f"expected the answering call to one of {', '.join(TOOL_FAMILIES)} as JSON")
        )
    return problems


def _row(q: dict, split: str, index: int) -> dict:
    extra = {k: q[k] for k in ("kind", "subkind", "needs_tool", "tool", "call", "template")}
    return {
        "data_source": DATA_SOURCE,
        "prompt": [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": q["question"]}],
        "ability": "tool_use",
        "reward_model": {"style": "rule", "ground_truth": q["answer"]},
        "extra_info": {"index": index, "split": split, **extra, "tool_families": dict(TOOL_FAMILIES)},
    }


def generate(seed: int, sizes: dict[str, int], countries_per_split: int = 0) -> tuple[dict[str, list[dict]], list]:
    """The rows of every split and the corpus (``{"title", "text"}`` per country, every split's countries).

    Each split draws its kinds in equal thirds (the counts differ by at most one; ``direct`` half arithmetic, half
    fact), in a shuffled order, from ``random.Random(seed)``: the same seed and sizes give the same rows.

    Args:
        sizes: rows per split (``train``, ``val``, ``test``; each >= 3).
        countries_per_split: countries of each split (0: a third of the split's rows, at least 10).

    Raises:
        ValueError: an unknown split or a size below 3.
    """
    for split, n in sizes.items():
        if split not in SPLITS:
            raise ValueError(f"route_qa: unknown split {split!r}; expected {', '.join(SPLITS)}")
        if int(n) < 3:
            raise ValueError(f"route_qa: {split} needs at least 3 rows (one per kind), got {n}")
    rng = random.Random(int(seed))
    taken: set[str] = set()
    rows: dict[str, list[dict]] = {}
    corpus: list[dict] = []
    index = 0
    for split in SPLITS:
        if split not in sizes:
            continue
        n = int(sizes[split])
        countries = make_countries(rng, countries_per_split or max(10, n // 3), taken)
        corpus += [c.document() for c in countries]
        kinds = [KINDS[i % 3] for i in range(n)]
        rng.shuffle(kinds)
        direct_seen, out = 0, []
        for kind in kinds:
            if kind == "direct":
                subkind = ("direct_arithmetic", "direct_fact")[direct_seen % 2]
                direct_seen += 1
            else:
                subkind = kind
            out.append(_row(_question(rng, split, kind, subkind, countries), split, index))
            index += 1
        rows[split] = out
    return rows, corpus


def write_task(
    output_dir: str | os.PathLike, seed: int = 0, train: int = 3000, val: int = 300, test: int = 1200
) -> dict:
    """Write ``train.parquet``, ``val.parquet``, ``test.parquet``, ``corpus.jsonl`` and ``meta.json`` under
    ``output_dir``; returns the meta (seed, sizes, rows per kind and split, the tool-needing share)."""
    import pandas as pd

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows, corpus = generate(seed, {"train": train, "val": val, "test": test})
    for split, split_rows in rows.items():
        pd.DataFrame(split_rows).to_parquet(out / f"{split}.parquet", index=False)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps(doc) + "\n" for doc in corpus)
    kinds = {s: {k: sum(r["extra_info"]["kind"] == k for r in rs) for k in KINDS} for s, rs in rows.items()}
    meta = {
        "seed": int(seed),
        "sizes": {s: len(rs) for s, rs in rows.items()},
        "kinds": kinds,
        "tool_share": {s: sum(r["extra_info"]["needs_tool"] for r in rs) / len(rs) for s, rs in rows.items()},
        "corpus_documents": len(corpus),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def task_dir(seed: int = 0) -> Path:
    """Where :func:`ensure_task` writes the default-sized task of ``seed``: ``<cache>/data/route_qa-seed<seed>``
    (the cache root of :func:`verl.utils.model_presets.cache_root`, ``$TOOLRL_CACHE`` or ``~/.cache/toolrl_router``)."""
    from verl.utils.model_presets import cache_root

    return cache_root() / "data" / f"route_qa-seed{int(seed)}"


def ensure_task(output_dir: str | os.PathLike | None = None, seed: int = 0) -> Path:
    """The task's folder (:func:`write_task` with the default sizes), written once: an existing folder is returned
    as is; a new one is built beside its target and renamed onto it, so a crash never leaves half a task
    (``verl.utils.fs.publish_dir``). ``output_dir`` None: :func:`task_dir` of ``seed``; an empty folder is written
    into.

    Raises:
        FileExistsError: ``output_dir`` exists, is not empty and holds no ``meta.json``.
    """
    from verl.utils.fs import publish_dir

    target = Path(output_dir) if output_dir is not None else task_dir(seed)
    if target.is_dir() and not (target / "meta.json").is_file():
        if any(target.iterdir()):
            raise FileExistsError(f"route_qa: {target} exists and holds no task (no meta.json); name a new folder")
        target.rmdir()  # an empty folder made for it: write the task there
    return publish_dir(lambda tmp: write_task(tmp, seed), target)


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (the module docstring); prints the meta."""
    parser = argparse.ArgumentParser(prog="python -m verl.utils.dataset.route_qa", description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--val", type=int, default=300)
    parser.add_argument("--test", type=int, default=1200)
    args = parser.parse_args(argv)
    print(json.dumps(write_task(args.output_dir, args.seed, args.train, args.val, args.test), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
