"""route_qa with every invented name replaced by a distinct single-token word: does the tiny model copy a name when
the name is one token? (research record, run rq-01)

    python experiments/scripts/route_qa_single_token_names.py SRC DST

SRC is a ``verl.utils.dataset.route_qa`` folder; DST gets the same splits and corpus with each country, capital and
river name (4,500 at seed 0) mapped to a capitalised word that is one token of the SmolLM2 tokenizer (words of the
task's own templates and a few function words left out, so that no name is also a query word). Numbers are kept.
"""

import sys

import json, re, random, shutil
import pandas as pd
from transformers import AutoTokenizer
from verl.utils.model_presets import prepare_model

tok = AutoTokenizer.from_pretrained(prepare_model("tiny"))
STOP = {
    "This",
    "They",
    "These",
    "There",
    "However",
    "When",
    "What",
    "That",
    "With",
    "None",
    "Some",
    "While",
    "After",
    "Their",
    "Then",
    "Which",
    "Where",
    "Here",
    "Most",
    "Many",
    "From",
    "Each",
    "Other",
    "Both",
    "Also",
    "Such",
    "Since",
    "Because",
    "Once",
    "Even",
    "Just",
    "Only",
    "Over",
    "Into",
    "Before",
    "Under",
    "Between",
    "Through",
    "During",
    "Without",
    "Within",
    "Among",
    "About",
    "Answer",
    "Question",
    "Calculate",
    "Search",
    "Give",
    "Tell",
    "Please",
    "Quick",
    "Know",
    "Need",
    "Work",
    "Call",
    "Founding",
    "Founded",
    "Year",
    "Capital",
    "River",
    "Country",
    "Flows",
    "City",
    "Name",
    "Plus",
    "Minus",
    "Times",
    "Product",
    "Added",
    "Subtracted",
    "Sum",
    "Lies",
    "Encyclopedia",
    "Results",
    "Passages",
    "Place",
}
words = []
for i in range(tok.vocab_size):
    s = tok.decode([i])
    if re.fullmatch(r" [A-Z][a-z]{3,9}", s) and s.strip() not in STOP:
        words.append(s.strip())
rng = random.Random(0)
rng.shuffle(words)
src, dst = sys.argv[1], sys.argv[2]
docs = [json.loads(l) for l in open(f"{src}/corpus.jsonl")]
names = []
for d in docs:
    t = d["text"]
    c = d["title"]
    cap = re.search(r"The capital of \S+ is (\S+)\.", t).group(1)
    riv = re.search(r"The river (\S+) flows", t).group(1)
    names += [c, cap, riv]
assert len(set(names)) == len(names) and len(names) <= len(words), (len(names), len(words))
mapping = dict(zip(names, words))
pat = re.compile(r"\b(" + "|".join(sorted(map(re.escape, mapping), key=len, reverse=True)) + r")\b")
sub = lambda s: pat.sub(lambda m: mapping[m.group(1)], s)
import os

os.makedirs(dst, exist_ok=True)
with open(f"{dst}/corpus.jsonl", "w") as f:
    for d in docs:
        f.write(json.dumps({"title": sub(d["title"]), "text": sub(d["text"])}) + "\n")
for split in ("train", "val", "test"):
    df = pd.read_parquet(f"{src}/{split}.parquet")
    df["prompt"] = df["prompt"].map(lambda ms: [{"role": m["role"], "content": sub(m["content"])} for m in ms])
    df["reward_model"] = df["reward_model"].map(lambda r: {**r, "ground_truth": sub(r["ground_truth"])})
    df["extra_info"] = df["extra_info"].map(lambda e: {**e, "call": sub(e["call"])})
    df.to_parquet(f"{dst}/{split}.parquet", index=False)
shutil.copy(f"{src}/meta.json", f"{dst}/meta.json")
print(len(mapping), "names mapped;", list(mapping.items())[:5])
