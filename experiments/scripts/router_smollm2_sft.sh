#!/usr/bin/env bash
# Issue 19 §3.2: GRPO with the budgeted tool router (run_router_training.sh) from smollm2-135m-sft, with exactly the
# settings of the GRPO run beside it (experiments/scripts/grpo_smollm2_sft.sh): 8 prompts x 4 samples per step,
# prompts <= 768 tokens, 128 response tokens, actor lr 1e-5, ToolRL's KL in the reward (0.001) and entropy bonus
# (0.001), gradient checkpointing, 40 steps, validation every 10, a checkpoint every 5 (the newest 2 kept).
#   BUDGET_B=0.3 bash experiments/scripts/router_smollm2_sft.sh           # the main job's budget
#   BUDGET_B=0.6 bash experiments/scripts/router_smollm2_sft.sh           # a second budget
#   BUDGET_B=0.3 NAME=fixed_lambda bash experiments/scripts/router_smollm2_sft.sh router.dual_lr=0 router.lambda_init=L
# (the last: a fixed tool penalty instead of the Lagrangian, the ablation of the dual ascent). Niced; running the same
# command again resumes exactly (checkpoints/router_grpo/<experiment>). Metrics: outputs/evidence/<experiment>/.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET_B=${BUDGET_B:-0.3}
NAME=${NAME:-router}
# ROUTER_RECIPE=option_a: the seed's router settings, which these runs used (the CPU default is now value_ridge)
export ROUTER_RECIPE=option_a BUDGET_B BASE_MODEL=smollm2-135m-sft MAX_PROMPT_LENGTH=768 MAX_RESPONSE_LENGTH=128 \
  TRAIN_BATCH_SIZE=8 \
  ROLLOUT_N=4 PPO_MINI_BATCH_SIZE=8 LR=1e-5 TOTAL_STEPS=40 SAVE_FREQ=5 TEST_FREQ=10 \
  EXPERIMENT_NAME=${NAME}_smollm2_sft_b${BUDGET_B}
export RUN_DIR=outputs/evidence/$EXPERIMENT_NAME
exec nice -n 19 bash run_router_training.sh \
  actor_rollout_ref.actor.use_dynamic_bsz=True actor_rollout_ref.actor.use_kl_loss=False \
  actor_rollout_ref.actor.entropy_coeff=0.001 actor_rollout_ref.model.enable_gradient_checkpointing=True \
  algorithm.use_kl_in_reward=True algorithm.kl_ctrl.kl_coef=0.001 trainer.max_actor_ckpt_to_keep=2 "$@"
