#!/usr/bin/env bash
# Run and measure the GPU: the main job killed and resumed (bitwise), train_grpo.sh, our GRPO step against TRL's,
# update MFU, rollout tokens/s, the CUDA exactness tests, the async mode, each figure against the last committed
# benchmarks/results/gpu_*.json of the same GPU model; within --budget-s, 540 s by default (one call of a lent
# machine), split over calls with --only / --resume (benchmarks/gpu_suite.py; benchmarks/README.md).
#   bash benchmarks/gpu_suite.sh                 # on a machine with a CUDA GPU; writes benchmarks/results/gpu_<date>.json
#   bash benchmarks/gpu_suite.sh --cpu-smoke     # toy sizes on CPU: checks the suite itself (CI)
# The lent GPU machines have PyTorch, Triton and transformers but no network: PYTHON defaults to python3 as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" benchmarks/gpu_suite.py "$@"
