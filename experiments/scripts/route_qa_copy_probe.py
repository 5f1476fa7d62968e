"""rq-03's copy warm-up probes on route_qa's corpus: how fast a tiny-like model learns to copy, and how exactly.

    python experiments/scripts/route_qa_copy_probe.py width NAME hidden heads kv layers intermediate lr steps
    python experiments/scripts/route_qa_copy_probe.py digits NAME steps digit_share
    python experiments/scripts/route_qa_copy_probe.py exact MODEL_DIR

``width``: a copy warm-up of a random model of another width / learning rate (tiny's tokenizer), then its exact-copy
rate on 200 fresh sequences. ``digits``: tiny's warm-up with ``digit_share`` of the spans digit runs. ``exact``: a
warmed-up model's exact-copy rate on 150 sequences whose spans are digit runs and on 150 of the module's own draws.
The probes ran against ``verl.trainer.route_qa.copy_warmup`` at commit 49c4fff (full softmax, word-piece spans only;
``digits`` patched the digit runs in, which the module draws itself since); greedy decoding; the corpus is
``/tmp/rq/corpus.jsonl`` (``python -m verl.utils.dataset.route_qa --output_dir /tmp/rq``). Prints one JSON line.
"""

from __future__ import annotations

import json
import logging
import sys
import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig

import verl.trainer.route_qa.copy_warmup as cw
from verl.utils.model_presets import prepare_model

CORPUS = "/tmp/rq/corpus.jsonl"


def digit_ids(tok) -> list[int]:
    return [tok(d, add_special_tokens=False)["input_ids"][0] for d in "0123456789"]


def patch_digit_spans(tok, share: dict) -> None:
    """Make ``_Sequences.span`` draw a 3-8 digit run with probability ``share["p"]`` (changeable later), else 2-9 word
    pieces (the module's own ``DIGIT_SHARE`` bypassed, so the split rates are digit runs only and pieces only)."""
    digits = digit_ids(tok)

    def span(self):
        if self.rng.random() < share["p"]:
            return [self.rng.choice(digits) for _ in range(self.rng.randint(3, 8))]
        return self.tokens(2, 9)  # word pieces, as the module drew every span at 49c4fff

    cw._Sequences.span = span


def exact_rate(model, data, n: int) -> float:
    ok = 0
    with torch.no_grad():
        for _ in range(n):
            context, target = data.draw()
            out = model.generate(torch.tensor([context]), max_new_tokens=len(target), do_sample=False)
            ok += out[0, len(context) :].tolist() == target
    return ok / n


def loss_every_100(losses: list[float]) -> dict:
    return {k: round(sum(losses[k - 50 : k]) / 50, 3) for k in range(100, len(losses) + 1, 100)}


def main(argv: list[str]) -> None:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    mode, src = argv[0], prepare_model("tiny")
    tok = AutoTokenizer.from_pretrained(src)
    share = {"p": 0.0}
    patch_digit_spans(tok, share)

    def split_rates(model) -> dict:  # 150 digit runs, then 150 with the share in force
        share["p"], data = 1.0, cw._Sequences(tok, CORPUS, seed=123)
        digits = exact_rate(model, data, 150)
        share["p"] = 0.0
        return {"digits": digits, "pieces": exact_rate(model, data, 150)}

    if mode == "exact":
        print(json.dumps({"model": argv[1], "exact": split_rates(AutoModelForCausalLM.from_pretrained(argv[1]))}))
        return
    name = argv[1]
    if mode == "width":
        d, h, kv, layers, inter = map(int, argv[2:7])
        lr, steps = float(argv[7]), int(argv[8])
        cfg = LlamaConfig.from_pretrained(src)
        cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads = d, h, kv
        cfg.num_hidden_layers, cfg.intermediate_size, cfg.head_dim = layers, inter, d // h
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg)
    else:
        steps, lr = int(argv[2]), cw.CopyWarmup.lr
        share["p"] = float(argv[3])
        model = AutoModelForCausalLM.from_pretrained(src)
    start = time.monotonic()
    losses = cw.copy_warmup(model, tok, CORPUS, cw.CopyWarmup(steps=steps, lr=lr))
    seconds = time.monotonic() - start
    rate = exact_rate(model, cw._Sequences(tok, CORPUS, seed=123), 200) if mode == "width" else split_rates(model)
    model.save_pretrained(f"/tmp/exp2/{name}")
    tok.save_pretrained(f"/tmp/exp2/{name}")
    print(json.dumps({"name": name, "s": round(seconds), "loss_at": loss_every_100(losses), "exact": rate}))


if __name__ == "__main__":
    main(sys.argv[1:])
