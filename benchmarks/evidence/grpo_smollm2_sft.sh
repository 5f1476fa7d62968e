#!/usr/bin/env bash
# Issue 19 §3.1: GRPO without the router (ToolRL's reward and override list, train_grpo.sh) from smollm2-135m-sft on
# the real RLLA data, sized for 2 CPU cores: 8 prompts x 4 samples per step, prompts <= 768 tokens (207 of 399 train
# rows, 33 of 80 validation rows), 128 response tokens, actor lr 1e-5, 40 steps (1.6 epochs), validation every 10
# steps, a checkpoint every 5 (the newest 2 kept). Niced: it runs beside other work and resumes exactly when started
# again (checkpoints/TinyZero/grpo_smollm2_sft). Metrics: outputs/evidence/grpo_smollm2_sft/metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
export BASE_MODEL=smollm2-135m-sft MAX_PROMPT_LENGTH=768 MAX_RESPONSE_LENGTH=128 TRAIN_BATCH_SIZE=8 ROLLOUT_N=4 \
  PPO_MINI_BATCH_SIZE=8 LR=1e-5 TOTAL_STEPS=40 SAVE_FREQ=5 TEST_FREQ=10 EXPERIMENT_NAME=grpo_smollm2_sft \
  RUN_DIR=outputs/evidence/grpo_smollm2_sft
exec nice -n 19 bash train_grpo.sh trainer.max_actor_ckpt_to_keep=2 "$@"
