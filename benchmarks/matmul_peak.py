"""Measured dense matmul peak of this machine (the denominator of ``perf/mfu_*`` on CPU).

    python benchmarks/matmul_peak.py                 # float32, 1..cpu_count threads, 1024x1024 products
    python benchmarks/matmul_peak.py --dtype bfloat16 --size 2048 --seconds 2

The trainer measures the same number once at start-up with its CPU workers' thread count
(``verl.trainer.ppo.metric_utils.MfuMeter``); ``trainer.peak_flops_per_s`` overrides it.
"""

from __future__ import annotations

import argparse
import os

import torch

from verl.utils.flops_counter import measure_matmul_peak


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--seconds", type=float, default=1.0)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    threads = [torch.get_num_threads()] if args.device != "cpu" else list(range(1, (os.cpu_count() or 1) + 1))
    print(f"{args.size}x{args.size} {args.dtype} matmul on {args.device}, best of ~{args.seconds} s")
    for n in threads:
        torch.set_num_threads(n)
        peak = measure_matmul_peak(args.seconds, args.size, dtype, args.device)
        print(f"threads {n:3d}: {peak / 1e9:9.1f} GFLOP/s")


if __name__ == "__main__":
    main()
