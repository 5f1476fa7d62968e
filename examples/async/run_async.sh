#!/usr/bin/env bash
# Asynchronous RL on CPU with the tiny model: two env types (line_world agent env + single-turn RLLA), one inference
# server, one learner (spec specs/async_rl.md). Extra key=value arguments are passed to Hydra.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
export RAY_AUTH_MODE="${RAY_AUTH_MODE:-disabled}" TOKENIZERS_PARALLELISM=false
"$PYTHON" -m verl.trainer.main_async \
    actor_rollout_ref.model.path="${MODEL:-tiny}" \
    actor_rollout_ref.actor.optim.lr=1e-4 \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \
    trainer.total_training_steps="${STEPS:-4}" trainer.save_freq=2 \
    trainer.project_name=async trainer.experiment_name="${NAME:-tiny_cpu}" \
    trainer.logger='[console]' \
    ray_init.num_cpus=2 \
    async.inference.max_tokens=16 \
    async.batcher.total_token_budget=2048 async.batcher.max_seq_len=1024 \
    async.envs.line_world.fraction=0.5 \
    '+async.envs.rlla={kind: rlla, max_rows: 16, replicas: 1, fraction: 0.5, group_size: 2}' \
    "$@"
