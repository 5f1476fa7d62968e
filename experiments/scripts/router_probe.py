"""Is the tool route's gain predictable from the router head's input? A linear probe, offline (issue 19 §3.2).

    python experiments/scripts/router_probe.py --model MODEL_DIR \
        --train TRAIN_GEN.jsonl --train-data dataset/rlla_4k/train.parquet \
        --val VAL_GEN.jsonl --val-data dataset/rlla_4k/test.parquet --max-prompt-tokens 1024 --budget 0.3 \
        --output experiments/runs/ID/probe.json

``TRAIN_GEN`` / ``VAL_GEN`` are ``main_generation`` outputs of the fixed actor on the ORIGINAL prompts (the tool block
kept: what the SEARCH / CALCULATE routes show, in another tool order), greedy. Each row's RLLA score is its
tool-route reward ``r_tool(x)``. The ANSWER route's reward is not generated: with the tool block removed and tool
calls forbidden, a ground truth that calls a tool scores format 0 and correctness ``c_min`` (−3), one that does not
scores correctness 0 and format 1 when the response is a plain ``<response>`` (``docs/rlla_reward.md``), so
``r_answer(x)`` is taken as −3 or +1 by the ground truth. The gain of giving tools is ``g(x) = r_tool(x) − r_answer(x)``.

Features are the router head's own inputs: the fixed actor's final hidden states on the original prompt, pooled
(``last_token`` or ``mean``: ``verl.router.head.pool_hidden``; the last layer is what the head reads; earlier
layers, and ``lastK`` — the mean over the prompt's last K tokens, not a head option — are probed for comparison),
standardised with the training prompts' statistics.
A ridge regression of ``g`` on them (closed form, penalty chosen by leave-one-out on the training prompts) ranks the
validation prompts; the policy that gives tools to the top ``budget`` share of them is scored with the validation
rows' own rewards and compared with random routing at the same rate (its expectation) and with the hindsight-best
choice. Also reported: the rank correlation of predicted and realised gains, and the ground-truth split of the chosen
prompts. No part of this is used by the trainer; it tells which input the head can learn from before a run is spent.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.router.head import pool_hidden
from verl.trainer.main_eval import read_generations, row_metrics
from verl.utils.reward_score.rlla import RewardSwitches


def prompt_lengths(tokenizer, frame: pd.DataFrame) -> list[int]:
    return [
        len(
            tokenizer(
                tokenizer.apply_chat_template([dict(m) for m in p], add_generation_prompt=True, tokenize=False),
                add_special_tokens=False,
            )["input_ids"]
        )
        for p in frame["prompt"]
    ]


@torch.no_grad()
def features(
    model, tokenizer, frame: pd.DataFrame, rows: list[int], layers: list[int], poolings: list[str]
) -> dict[str, np.ndarray]:
    """``{"<pooling>_L<layer>": [N, H]}``: hidden states after decoder layer ``layer`` (the last one: after the final
    norm, what the router head reads), pooled over each original prompt."""
    out: dict[str, list] = {}
    for r in rows:
        text = tokenizer.apply_chat_template(
            [dict(m) for m in frame["prompt"].iloc[r]], add_generation_prompt=True, tokenize=False
        )
        ids = torch.tensor([tokenizer(text, add_special_tokens=False)["input_ids"]])
        mask = torch.ones_like(ids)
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True, logits_to_keep=1).hidden_states
        for layer in layers:
            for pooling in poolings:
                key = f"{pooling}_L{layer}"
                if pooling.startswith("last"):  # lastK: the mean over the prompt's last K tokens
                    k = int(pooling[4:])
                    vec = hidden[layer][0, -k:].double().mean(0)
                else:
                    vec = pool_hidden(hidden[layer], mask, pooling)[0].double()
                out.setdefault(key, []).append(vec.numpy())
    return {k: np.stack(v) for k, v in out.items()}


def rewards(
    gen_path: str, frame: pd.DataFrame, switches: RewardSwitches, keep: set[int]
) -> dict[int, tuple[float, bool]]:
    """``{file row: (r_tool, ground truth calls a tool)}`` for the generation rows whose prompt is in ``keep``. Rows
    are matched to the file by ``extra_info.index`` (unique in the RLLA splits), whatever filtering made the file."""
    position = {int(e["index"]): i for i, e in enumerate(frame["extra_info"])}
    if len(position) != len(frame):
        raise ValueError("extra_info.index is not unique in the data file: cannot match generations to prompts")
    out = {}
    for row in read_generations(gen_path):
        r = position[int(row["index"])]
        if r in keep and int(row.get("sample", 0)) == 0:
            out[r] = (row_metrics(row, switches)["score"], "<tool_call>" in row["ground_truth"])
    return out


def ridge_loo(x: np.ndarray, y: np.ndarray, penalties: list[float]) -> tuple[float, np.ndarray, float]:
    """Ridge with an intercept on standardised ``x``; the penalty with the smallest leave-one-out error."""
    n = x.shape[0]
    xc, yc = x - x.mean(0), y - y.mean()
    best = None
    for lam in penalties:
        h = xc @ np.linalg.solve(xc.T @ xc + lam * np.eye(x.shape[1]), xc.T)
        resid = (yc - h @ yc) / (1.0 - np.diag(h) - 1.0 / n)
        loo = float(np.mean(resid**2))
        if best is None or loo < best[0]:
            best = (loo, lam)
    lam = best[1]
    w = np.linalg.solve(xc.T @ xc + lam * np.eye(x.shape[1]), xc.T @ yc)
    return lam, w, best[0]


def spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = pd.Series(a).rank().to_numpy(), pd.Series(b).rank().to_numpy()
    return float(np.corrcoef(ra, rb)[0, 1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--train", required=True)
    p.add_argument("--train-data", required=True)
    p.add_argument("--val", required=True)
    p.add_argument("--val-data", required=True)
    p.add_argument("--max-prompt-tokens", type=int, default=1024)
    p.add_argument("--budget", type=float, default=0.3)
    p.add_argument("--pooling", default="last_token,mean")
    p.add_argument("--layers", default="-1,20,15,10", help="decoder layers whose output to probe; -1: the last")
    p.add_argument("--output", default=None)
    p.add_argument("--cache", default=None, help="npz of the pooled features (written once, then read)")
    args = p.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    switches = RewardSwitches.from_env()
    data = {}
    for split, gen, path in (("train", args.train, args.train_data), ("val", args.val, args.val_data)):
        frame = pd.read_parquet(path)
        lengths = prompt_lengths(tok, frame)
        keep = {i for i, n in enumerate(lengths) if n <= args.max_prompt_tokens}
        rew = rewards(gen, frame, switches, keep)
        rows = sorted(rew)
        r_tool = np.array([rew[r][0] for r in rows])
        needs = np.array([rew[r][1] for r in rows])
        r_answer = np.where(needs, -3.0, 1.0)
        data[split] = dict(
            frame=frame,
            rows=rows,
            r_tool=r_tool,
            needs=needs,
            gain=r_tool - r_answer,
            r_answer=r_answer,
            length=np.array([lengths[r] for r in rows], dtype=float),
        )
    val = data["val"]
    n_val = len(val["rows"])
    k = round(args.budget * n_val)
    random_score = float(np.mean(val["r_answer"]) + args.budget * np.mean(val["gain"]))
    best = np.argsort(-val["gain"])[:k]
    hindsight = float((val["r_answer"].sum() + val["gain"][best].sum()) / n_val)
    report = {
        "model": args.model,
        "budget": args.budget,
        "max_prompt_tokens": args.max_prompt_tokens,
        "train_prompts": len(data["train"]["rows"]),
        "val_prompts": n_val,
        "val_tool_prompts": k,
        "random_at_budget": random_score,
        "hindsight_best": hindsight,
        "val_gain_mean": float(np.mean(val["gain"])),
        "train_gain_mean": float(np.mean(data["train"]["gain"])),
        "probes": {},
    }

    def score_choice(pred: np.ndarray, name: str, lam=None, loo=None) -> None:
        chosen = np.argsort(-pred)[:k]
        score = float((val["r_answer"].sum() + val["gain"][chosen].sum()) / n_val)
        mask = np.zeros(n_val, dtype=bool)
        mask[chosen] = True
        # paired against random routing at the same rate, in expectation: per prompt, chosen·g − rate·g
        diff = (mask.astype(float) - args.budget) * val["gain"]
        report["probes"][name] = {
            "ridge_penalty": lam,
            "loo_mse": loo,
            "val_score": score,
            "gain_over_random": float(diff.mean()),
            "gain_over_random_se": float(diff.std(ddof=1) / math.sqrt(n_val)),
            "spearman_pred_vs_gain": spearman(pred, val["gain"]),
            "tool_frac_needs_tool": float(mask[val["needs"]].mean()),
            "tool_frac_no_tool": float(mask[~val["needs"]].mean()) if (~val["needs"]).any() else None,
        }

    layers = [int(v) for v in args.layers.split(",")]
    layers = [model.config.num_hidden_layers if v < 0 else v for v in layers]
    poolings = args.pooling.split(",")
    cache = Path(args.cache) if args.cache else None
    if cache is not None and cache.is_file():
        stored = np.load(cache)
        feats = {
            s: {k.split("/", 1)[1]: stored[k] for k in stored.files if k.startswith(s + "/")} for s in ("train", "val")
        }
    else:
        feats = {s: features(model, tok, data[s]["frame"], data[s]["rows"], layers, poolings) for s in ("train", "val")}
        if cache is not None:
            np.savez(cache, **{f"{s}/{k}": v for s in feats for k, v in feats[s].items()})
    for key in feats["train"]:
        mu = feats["train"][key].mean(0)
        # per-feature standardisation, or the head's router.input_norm=running (centred, one RMS for all features)
        for norm, sd in (
            ("std", feats["train"][key].std(0) + 1e-6),
            ("rms", np.sqrt(((feats["train"][key] - mu) ** 2).mean()) + 1e-6),
        ):
            xtr, xva = (feats["train"][key] - mu) / sd, (feats["val"][key] - mu) / sd
            y = data["train"]["gain"]
            lam, w, loo = ridge_loo(xtr, y, [10.0**e for e in range(-2, 6)])
            pred = (xva - xtr.mean(0)) @ w + y.mean()
            score_choice(pred, f"ridge_{key}_{norm}", lam, loo)
            report["probes"][f"ridge_{key}_{norm}"]["loo_r2"] = 1.0 - loo / float(np.var(y))
    # two reference predictors without the LM: shorter prompts first; the ground truth's call/no-call (an oracle)
    score_choice(-val["length"], "shorter_prompt_first")
    score_choice(val["needs"].astype(float) + 1e-3 * np.random.default_rng(0).random(n_val), "oracle_needs_tool")
    print(json.dumps(report, indent=2))
    if args.output:
        Path(args.output).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
