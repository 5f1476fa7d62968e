"""LoRA RL vs full fine-tuning: peak memory and update time of the actor's PPO update on the same batch.

    python benchmarks/bench_lora.py                                  # smollm2-135m, 4 x (128 + 128) tokens, rank 16
    python benchmarks/bench_lora.py --model tiny --steps 2 --json out.json

Each mode runs in its own subprocess (peak RSS is per process): the model is loaded as the trainer loads it
(``load_causal_lm`` with ``actor_rollout_ref.model.lora_rank``), with the optimizer over its trainable parameters
(AdamW, the trainer's), then ``--steps`` calls of ``DataParallelPPOActor.update_policy`` on one random batch; the
update time is the median over the steps after the first (which also allocates the optimizer state). Printed: peak
RSS (``ru_maxrss``, includes the model load), trainable parameters, optimizer-state bytes and update seconds per
mode, and LoRA / full ratios. The reference pass is not timed: with LoRA it is the same module with adapters
disabled (no second model in memory), which the memory ratio of a full run would add on top.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def run_mode(args) -> dict:
    import resource

    import torch

    from verl.protocol import DataProto
    from verl.trainer.config_utils import default_section
    from verl.utils.model_presets import prepare_model
    from verl.utils.model_utils import load_causal_lm
    from verl.utils.torch_functional import compute_position_id_with_mask
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    rank = args.rank if args.mode == "lora" else 0
    model = load_causal_lm(
        default_section(
            "actor_rollout_ref.model",
            path=prepare_model(args.model),
            lora_rank=rank,
            lora_alpha=2 * max(rank, 1),
            enable_gradient_checkpointing=False,
        )
    )
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-5)
    b, p_len, r_len = args.batch, args.prompt_length, args.response_length
    gen = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    prompts = torch.randint(3, vocab, (b, p_len), generator=gen)
    responses = torch.randint(3, vocab, (b, r_len), generator=gen)
    mask = torch.ones(b, p_len + r_len, dtype=torch.long)
    data = DataProto.from_dict(
        {
            "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": mask,
            "position_ids": compute_position_id_with_mask(mask),
            "responses": responses,
            "response_mask": torch.ones(b, r_len, dtype=torch.long),
            "old_log_probs": -5.0 + 0.1 * torch.randn(b, r_len, generator=gen),
            "advantages": torch.randn(b, r_len, generator=gen),
        },
        meta_info={"temperature": 1.0},
    )
    cfg = default_section(
        "actor_rollout_ref.actor",
        ppo_mini_batch_size=b,
        ppo_micro_batch_size_per_gpu=b,
        entropy_coeff=0.0,
        use_remove_padding=False,
    )
    actor = DataParallelPPOActor(cfg, model, optimizer)
    times = []
    for _ in range(args.steps):
        start = time.perf_counter()
        actor.update_policy(data)
        times.append(time.perf_counter() - start)
    state_bytes = sum(
        t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if torch.is_tensor(t)
    )
    return {
        "mode": args.mode,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
        "trainable_params": sum(p.numel() for p in params),
        "total_params": sum(p.numel() for p in model.parameters()),
        "optimizer_state_gb": state_bytes / 2**30,
        "update_s": statistics.median(times[1:] if len(times) > 1 else times),
        "update_s_all": times,
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--prompt-length", type=int, default=128)
    parser.add_argument("--response-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the results here")
    parser.add_argument("--mode", choices=("full", "lora"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.mode:  # the child: one mode, JSON on the last line of stdout
        print(json.dumps(run_mode(args)))
        return 0
    results = {}
    for mode in ("full", "lora"):
        child = [sys.executable, __file__, "--mode", mode, *(argv if argv is not None else sys.argv[1:])]
        out = subprocess.run(child, check=True, capture_output=True, text=True)
        results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
        r = results[mode]
        print(
            f"{mode:>4}: peak RSS {r['peak_rss_gb']:.2f} GB, trainable {r['trainable_params'] / 1e6:.2f}M of "
            f"{r['total_params'] / 1e6:.1f}M params, optimizer state {r['optimizer_state_gb'] * 1024:.1f} MB, "
            f"update {r['update_s']:.2f} s"
        )
    full, lora = results["full"], results["lora"]
    ratios = {
        "peak_rss": lora["peak_rss_gb"] / full["peak_rss_gb"],
        "update_time": lora["update_s"] / full["update_s"],
        "optimizer_state": lora["optimizer_state_gb"] / max(full["optimizer_state_gb"], 1e-12),
    }
    print(
        f"LoRA / full: peak RSS {ratios['peak_rss']:.2f}x, update time {ratios['update_time']:.2f}x, optimizer "
        f"state {ratios['optimizer_state']:.4f}x"
    )
    if args.json:
        settings = {
            k: getattr(args, k)
            for k in ("model", "rank", "batch", "prompt_length", "response_length", "steps", "threads")
        }
        with open(args.json, "w") as fh:
            json.dump({"settings": settings, "results": results, "ratios": ratios}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
