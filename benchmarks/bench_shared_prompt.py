"""Scaling table for shared-prompt computation: GRPO step time vs samples per prompt and prompt length.

One "step" is what the actor worker does per GRPO step, on one process: the HF rollout (``n`` sampled responses per
prompt, up to ``--response-length`` new tokens), the old-log-prob pass, and one PPO update (forward + backward, AdamW
step) with random advantages. It runs twice per grid cell, with ``model.use_shared_prompt`` off (padded batches,
the fastest unshared path on CPU) and on (shared prefill in the rollout, shared layout in both passes), on the same
``--prompts`` real RLLA validation prompts of one length bucket (the shortest, middle and longest thirds of the
prompts that fit ``--max-prompt``). The same seed is used for both modes, so both generate the same responses.

Printed: per cell the phase times of both modes and their ratio; per mode the fitted slopes

* time vs total tokens (least squares over all cells, seconds per 1,000 valid tokens of the unshared batch), and
* the log-log slope of step time vs ``n`` per bucket (1 = linear in samples per prompt; sharing brings it down
  because the prompt, most of the tokens, is computed once).

    python benchmarks/bench_shared_prompt.py --json shared_prompt.json     # ~10 min on 2 CPU cores
    python benchmarks/bench_shared_prompt.py --n 2 4 --buckets short --response-length 16   # a quick smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run as a script from a checkout: make ``verl`` importable
    sys.path.insert(0, str(REPO_ROOT))

BUCKETS = ("short", "medium", "long")


def bucket_prompts(tokenizer, count: int, max_prompt: int) -> dict[str, list[list[int]]]:
    """``count`` chat-templated RLLA validation prompts from the middle of each length third."""
    import pandas as pd

    from verl.utils.dataset.rlla_data import resolve_rlla_file

    frame = pd.read_parquet(resolve_rlla_file("test"))
    prompts = []
    for chat in frame["prompt"]:
        ids = tokenizer.apply_chat_template([dict(m) for m in chat], add_generation_prompt=True, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        if len(ids) <= max_prompt:
            prompts.append(ids)
    prompts.sort(key=len)
    third = len(prompts) // 3
    out = {}
    for i, name in enumerate(BUCKETS):
        part = prompts[i * third : (i + 1) * third]
        start = max(0, len(part) // 2 - count // 2)
        out[name] = part[start : start + count]
    return out


def prompt_batch(prompts: list[list[int]], pad_id: int):
    from verl.protocol import DataProto
    from verl.utils.torch_functional import compute_position_id_with_mask

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, p in enumerate(prompts):
        ids[row, width - len(p) :] = torch.tensor(p)
        mask[row, width - len(p) :] = 1
    return DataProto.from_dict(
        tensors={"input_ids": ids, "attention_mask": mask, "position_ids": compute_position_id_with_mask(mask)}
    )


def run_step(model, tokenizer, prompts, n: int, shared: bool, args) -> dict:
    """One actor step (rollout, old log-probs, update) on ``prompts`` x ``n``; returns phase seconds and tokens."""
    from verl.trainer.config_utils import default_section
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.rollout.hf_rollout import HFRollout

    rollout_cfg = default_section(
        "actor_rollout_ref.rollout",
        **dict(
            response_length=args.response_length,
            temperature=1.0,
            top_k=-1,
            top_p=1.0,
            do_sample=True,
            dtype="bfloat16",
            micro_batch_size=len(prompts) * n,
            shared_prefill=shared,
        ),
    )
    actor_cfg = default_section(
        "actor_rollout_ref.actor",
        **dict(
            ppo_mini_batch_size=len(prompts) * n,
            ppo_micro_batch_size_per_gpu=args.micro_batch,
            use_dynamic_bsz=False,
            use_remove_padding=False,
            use_shared_prompt=shared,
            clip_ratio=0.2,
            loss_agg_mode="token-mean",
            entropy_coeff=0.0,
            grad_clip=1.0,
            ppo_epochs=1,
            shuffle=False,
        ),
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.0)  # lr 0: every cell starts from the same weights
    actor = DataParallelPPOActor(actor_cfg, model, optimizer)
    batch = prompt_batch(prompts, tokenizer.pad_token_id).repeat(n, interleave=True)  # the trainer's order
    batch.meta_info.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True)
    times = {}
    torch.manual_seed(0)
    start = time.perf_counter()
    out = HFRollout(model, rollout_cfg, tokenizer).generate_sequences(batch)
    times["gen"] = time.perf_counter() - start
    out.meta_info.update(temperature=1.0, micro_batch_size=args.micro_batch, use_dynamic_bsz=False)
    start = time.perf_counter()
    old, _ = actor.compute_log_prob(out)
    times["old_log_prob"] = time.perf_counter() - start
    out.batch["old_log_probs"] = old
    mask = out.batch["response_mask"]
    out.batch["advantages"] = torch.randn(len(out), 1, generator=torch.Generator().manual_seed(1)) * mask
    start = time.perf_counter()
    actor.update_policy(out)
    times["update_actor"] = time.perf_counter() - start
    times["step"] = sum(times.values())
    valid = out.batch["attention_mask"].sum().item()
    return dict(times=times, valid_tokens=int(valid), response_tokens=int(mask.sum()), responses=out.batch["responses"])


def least_squares(xs, ys):
    """Slope and intercept of y = a + b x."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")
    return b, my - b * mx


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-sft", help="model preset or HF directory")
    parser.add_argument("--prompts", type=int, default=4, help="prompts per bucket")
    parser.add_argument("--n", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--buckets", nargs="+", default=list(BUCKETS), choices=BUCKETS)
    parser.add_argument("--response-length", type=int, default=128)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--max-prompt", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from verl.utils.model_presets import prepare_model

    if args.threads:
        torch.set_num_threads(args.threads)
    path = prepare_model(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    buckets = bucket_prompts(tokenizer, args.prompts, args.max_prompt)
    print(
        f"{args.model}, {torch.get_num_threads()} threads; {args.prompts} prompts per bucket, "
        f"up to {args.response_length} new tokens, micro-batch {args.micro_batch} rows"
    )
    run_step(model, tokenizer, buckets[args.buckets[0]][:1], 2, False, args)  # warm-up (allocator, kernels)
    cells = []
    for name in args.buckets:
        lengths = [len(p) for p in buckets[name]]
        for n in args.n:
            row = dict(bucket=name, n=n, prompt_tokens=lengths)
            for shared in (False, True):
                result = run_step(model, tokenizer, buckets[name], n, shared, args)
                row["shared" if shared else "unshared"] = {k: v for k, v in result.items() if k != "responses"}
                row.setdefault("_responses", []).append(result["responses"])
            row["same_responses"] = bool(torch.equal(*row.pop("_responses")))
            u, s = row["unshared"]["times"], row["shared"]["times"]
            print(
                f"{name:6s} prompts {min(lengths)}-{max(lengths)} tok, n={n:2d}: "
                + "  ".join(f"{phase} {u[phase]:.2f}->{s[phase]:.2f} s" for phase in u)
                + f"  (shared/unshared step {s['step'] / u['step']:.2f}x, same responses {row['same_responses']})"
            )
            cells.append(row)

    summary = {}
    for mode in ("unshared", "shared"):
        tokens = [c["unshared"]["valid_tokens"] / 1000 for c in cells]
        steps = [c[mode]["times"]["step"] for c in cells]
        per_k, intercept = least_squares(tokens, steps)
        n_slopes = {}
        for name in args.buckets:
            mine = [c for c in cells if c["bucket"] == name]
            if len(mine) > 1:
                n_slopes[name], _ = least_squares(
                    [math.log(c["n"]) for c in mine], [math.log(c[mode]["times"]["step"]) for c in mine]
                )
        shares = {
            phase: sum(c[mode]["times"][phase] for c in cells) / sum(c[mode]["times"]["step"] for c in cells)
            for phase in ("gen", "old_log_prob", "update_actor")
        }
        summary[mode] = dict(
            seconds_per_1k_tokens=per_k, intercept_s=intercept, loglog_slope_vs_n=n_slopes, phase_shares=shares
        )
        print(
            f"{mode:8s}: step = {intercept:.2f} s + {per_k:.3f} s per 1k valid tokens; log-log slope vs n: "
            + ", ".join(f"{k} {v:.2f}" for k, v in n_slopes.items())
            + "; phase shares "
            + ", ".join(f"{k} {100 * v:.0f}%" for k, v in shares.items())
        )
    total = {mode: sum(c[mode]["times"]["step"] for c in cells) for mode in ("unshared", "shared")}
    print(f"whole grid: shared/unshared step time = {total['shared'] / total['unshared']:.2f}x")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(
                dict(args=vars(args), cells=cells, summary=summary, ratio=total["shared"] / total["unshared"]),
                fh,
                indent=1,
            )


if __name__ == "__main__":
    main()
