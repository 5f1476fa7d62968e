"""A copy warm-up for a random-initialised model: synthetic sequences that can only be continued by copying a span
from the context, so that the model forms induction heads before it learns a task's format.

    python -m verl.trainer.route_qa.copy_warmup --model tiny --corpus DIR/corpus.jsonl --output OUT [--steps 3000]

Why: answering a ``route_qa`` question after a tool call means copying the observation's number or name into the
``<response>`` block. A random-initialised 7M model fine-tuned on the task's traces alone learns the format and the
choice of tool but copies nothing (``experiments/notebook.md``, run rq-01: at most 12% right after 2,000 SFT steps).
Copying in context is the job of induction heads, which a small transformer forms abruptly once it has seen enough
sequences whose continuation repeats earlier tokens (Olsson et al., 2022, "In-context Learning and Induction
Heads", section 3: the phase change). This module trains on exactly such sequences, four kinds in fixed shares:

- ``repeat`` (20%): a span, a separator ``" |"``, ``<response>``, then the span again (the span at the start: the
  easiest copy, which forms the induction heads first);
- ``delimited`` (30%): random filler, an opening delimiter, a span, its closing delimiter, a little more filler,
  ``<response>``, then the span (as an answer copies a tool turn: what opens and closes it tells where it is, not
  its position);
- ``marked`` (25%): random filler, a key word, a span, more filler, ``" |"``, the key word, ``<response>``, then the
  span that followed the key;
- ``recall`` (25%): four ``key span |`` pairs, then one of the keys and ``<response>``, then its span.

With ``table_share`` above 0, that share of the sequences is instead a one-digit problem of the task (a direct
arithmetic question in a training template, ``verl.utils.dataset.route_qa.one_digit_problems``), ``<response>``, then
its answer: an attempt to teach the table a model answers in its head at the warm-up's cost a sequence rather than
the SFT's (a sequence without the system prompt, under the restricted softmax). Off by default: in run rq-04 a share
of 0.1 left the warm-up answering 94 of the 288 problems and the warm start after SFT 10% of them.

Every target ends with ``</response>``. The loss is the cross-entropy on the target tokens only, computed on their
positions alone (no ``[tokens, vocab]`` logits for the context), and by default over the ids a target can hold
rather than the whole vocabulary (a restricted softmax, Jean et al., 2015, "On Using Very Large Target Vocabulary
for Neural Machine Translation": 2.5 times faster a step on 2 CPU cores for ``tiny``, whose 49,152-row output layer
is most of its compute; its loss is not comparable with the full softmax's). A span is a run of 3 to 8 digits
(``DIGIT_SHARE``: numbers repeat their tokens, so a copy cannot find its place by the token alone) or 2 to 9 tokens
drawn uniformly from the pieces of the corpus' words. Key words are the task's attribute words. The same model,
corpus, seed and steps give the same weights.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from verl.utils.dataset.route_qa import TEMPLATES, one_digit_problems

__all__ = ["CopyWarmup", "copy_warmup"]

logger = logging.getLogger(__name__)

KEY_WORDS = ("capital", "river", "year", "founded", "sum", "product", "result", "name", "city", "answer")
DIGIT_SHARE = 0.4  # spans that are digit runs: numbers repeat their tokens, which a copy of pieces never trains
SHARES = {"repeat": 0.2, "delimited": 0.3, "marked": 0.25, "recall": 0.25}
DELIMITERS = ((" [", "]"), (" (", ")"), ("\n", "\n"), (" <", ">"), (": ", "."))


@dataclass(frozen=True)
class CopyWarmup:
    """The warm-up's settings: ``steps`` optimizer steps of ``batch_size`` sequences, AdamW at ``lr`` after a linear
    warm-up over ``warmup_steps`` (then constant: with a decaying rate the phase change comes later, rq-02),
    gradients clipped at ``clip`` (L2 norm), ``seed`` for the sequences and the order of operations;
    ``table_share`` of the sequences one-digit problems (module docstring; 0: none, and the draws of the other kinds
    are as without it)."""

    steps: int = 3000
    batch_size: int = 32
    lr: float = 1e-3
    warmup_steps: int = 100
    clip: float = 1.0
    seed: int = 0
    restricted_softmax: bool = True
    table_share: float = 0.0

    def lr_at(self, step: int) -> float:
        """The learning rate of optimizer step ``step`` (0-based)."""
        return self.lr * min(1.0, (step + 1) / self.warmup_steps)


class _Sequences:
    """Draws the warm-up's ``(context ids, target ids)`` pairs (module docstring) from a seeded ``random.Random``."""

    def __init__(self, tokenizer, corpus_path: str | Path, seed: int, table_share: float = 0.0) -> None:
        words: set[str] = set()
        with open(corpus_path, encoding="utf-8") as f:
            for line in f:
                words.update(json.loads(line)["text"].replace(".", " ").split())
        ids = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
        pieces = {i for w in words for i in ids(" " + w)} | {i for d in "0123456789" for i in ids(d)}
        if not pieces:
            raise ValueError(f"copy warm-up: {corpus_path} has no words to draw spans from")
        self.pool = sorted(pieces)
        self.digits = sorted({i for d in "0123456789" for i in ids(d)})
        self.keys = [ids(" " + w) for w in KEY_WORDS]
        self.sep, self.open, self.close = ids(" |"), ids("<response>"), ids("</response>")
        self.delimiters = [(ids(a), ids(b)) for a, b in DELIMITERS]
        self.rng = random.Random(seed)
        self.table_share = float(table_share)
        if not 0.0 <= self.table_share < 1.0:
            raise ValueError(f"copy warm-up: table_share must be in [0, 1), got {table_share}")
        self.table = [(p, ids(" " + a)) for p, a in one_digit_problems()] if self.table_share else []
        self._ids = ids

    def tokens(self, low: int, high: int) -> list[int]:
        """``low`` to ``high`` (inclusive) tokens drawn uniformly from the pool."""
        return [self.rng.choice(self.pool) for _ in range(self.rng.randint(low, high))]

    def span(self) -> list[int]:
        """A span to copy: a run of 3 to 8 digits (``DIGIT_SHARE``), else 2 to 9 pieces of the pool."""
        if self.rng.random() < DIGIT_SHARE:
            return [self.rng.choice(self.digits) for _ in range(self.rng.randint(3, 8))]
        return self.tokens(2, 9)

    def targets(self) -> list[int]:
        """Every token id a target can hold, sorted: the pool and ``</response>``'s tokens."""
        return sorted(set(self.pool) | set(self.close))

    def draw(self) -> tuple[list[int], list[int]]:
        if self.table_share and self.rng.random() < self.table_share:
            phrase, answer = self.rng.choice(self.table)
            question = self.rng.choice(TEMPLATES["train"]).format(q=phrase)
            return self._ids(question) + self.open, answer + self.close  # the answer as in the traces: " 56"
        u = self.rng.random()
        if u < SHARES["repeat"]:
            s = self.span() + self.span()
            return s + self.sep + self.open, s + self.close
        u -= SHARES["repeat"]
        if u < SHARES["delimited"]:
            s, (left, right) = self.span() + self.span(), self.rng.choice(self.delimiters)
            before, after = self.tokens(0, 24), self.tokens(0, 6)
            return before + left + s + right + after + self.open, s + self.close
        if u < SHARES["delimited"] + SHARES["marked"]:
            s, key = self.span(), self.rng.choice(self.keys)
            context = self.span() + self.span() + key + s + self.span()
            return context + self.sep + key + self.open, s + self.close
        keys = self.rng.sample(self.keys, 4)
        spans = [self.span() for _ in keys]
        j = self.rng.randrange(len(keys))
        context = [t for k, s in zip(keys, spans) for t in k + s + self.sep]
        return context + keys[j] + self.open, spans[j] + self.close


def copy_warmup(model, tokenizer, corpus_path: str | Path, settings: CopyWarmup = CopyWarmup()) -> list[float]:
    """Train ``model`` (an HF causal LM with ``.model`` and ``.lm_head``, e.g. Llama) in place on the warm-up's
    sequences; returns the loss of every step (nats per target token).

    Raises:
        ValueError: the corpus has no words.
    """
    import torch
    import torch.nn.functional as F

    torch.manual_seed(settings.seed)
    data = _Sequences(tokenizer, corpus_path, settings.seed, settings.table_share)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    vocab = torch.tensor(data.targets()) if settings.restricted_softmax else None
    optim = torch.optim.AdamW(model.parameters(), lr=settings.lr, weight_decay=0.0)
    model.train()
    losses, start = [], time.monotonic()
    for step in range(settings.steps):
        batch = [data.draw() for _ in range(settings.batch_size)]
        width = max(len(c) + len(t) for c, t in batch)
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (context, target) in enumerate(batch):
            n = len(context) + len(target)
            ids[i, :n] = torch.tensor(context + target)
            labels[i, len(context) : n] = torch.tensor(target)
            mask[i, :n] = 1
        for group in optim.param_groups:
            group["lr"] = settings.lr_at(step)
        hidden = model.model(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1]
        targets = labels[:, 1:]
        keep = targets != -100
        if vocab is None:
            loss = F.cross_entropy(model.lm_head(hidden[keep]).float(), targets[keep])
        else:  # the softmax over the ids a target can hold (a restricted vocabulary, Jean et al. 2015)
            wanted = targets[keep]
            if not bool(torch.isin(wanted, vocab).all()):  # searchsorted would map it to another id's logit
                raise ValueError("copy warm-up: a target id outside the restricted vocabulary")
            logits = hidden[keep] @ model.lm_head.weight[vocab].T
            loss = F.cross_entropy(logits.float(), torch.searchsorted(vocab, wanted))
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), settings.clip)
        optim.step()
        losses.append(loss.item())
        if step % 100 == 0 or step == settings.steps - 1:
            logger.info(
                "[heartbeat] copy warm-up step %d/%d | loss %.3f | %.0f s",
                step + 1,
                settings.steps,
                losses[-1],
                time.monotonic() - start,
            )
    model.eval()
    return losses


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point (the module docstring): writes the warmed-up model and ``copy_warmup.jsonl`` (loss per step)."""
    parser = argparse.ArgumentParser(
        prog="python -m verl.trainer.route_qa.copy_warmup", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--model", required=True, help="a preset name or an HF model folder")
    parser.add_argument("--corpus", required=True, help="the task's corpus.jsonl")
    parser.add_argument("--output", required=True)
    parser.add_argument("--steps", type=int, default=CopyWarmup.steps)
    parser.add_argument("--seed", type=int, default=CopyWarmup.seed)
    parser.add_argument("--full_softmax", action="store_true", help="the loss over the whole vocabulary (slower)")
    parser.add_argument("--table_share", type=float, default=CopyWarmup.table_share, help="one-digit problems' share")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.utils.model_presets import prepare_model

    source = prepare_model(args.model)
    model = AutoModelForCausalLM.from_pretrained(source)
    tokenizer = AutoTokenizer.from_pretrained(source)
    losses = copy_warmup(
        model,
        tokenizer,
        args.corpus,
        CopyWarmup(
            steps=args.steps, seed=args.seed, restricted_softmax=not args.full_softmax, table_share=args.table_share
        ),
    )
    out = Path(args.output)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    with open(out / "copy_warmup.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"step": i + 1, "loss": x}) + "\n" for i, x in enumerate(losses))
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
