#!/usr/bin/env bash
# Measure the GPU (issue 24): update MFU, rollout tokens/s, a 10-step train_grpo.sh, the async mode, each figure
# against the last committed benchmarks/results/gpu_*.json of the same GPU model; within --budget-s, 570 s by default
# (one call of a lent machine), split over calls with --only / --resume (benchmarks/gpu_suite.py).
#   bash benchmarks/gpu_suite.sh                 # on a machine with a CUDA GPU; writes benchmarks/results/gpu_<date>.json
#   bash benchmarks/gpu_suite.sh --cpu-smoke     # toy sizes on CPU: checks the suite itself (CI)
# The lent GPU machines have PyTorch, Triton and transformers but no network: PYTHON defaults to python3 as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" benchmarks/gpu_suite.py "$@"
