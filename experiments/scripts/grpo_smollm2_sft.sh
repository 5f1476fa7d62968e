#!/usr/bin/env bash
# Issue 19 §3.1: GRPO without the router (ToolRL's reward and override list, train_grpo.sh) from smollm2-135m-sft on
# the real RLLA data, sized for 2 CPU cores: 8 prompts x 4 samples per step (TRAIN_BATCH_SIZE, ROLLOUT_N), 128
# response tokens (MAX_RESPONSE_LENGTH), one actor update per step (PPO_MINI_BATCH_SIZE 8 prompts), actor lr 1e-5,
# validation every 10 steps, a checkpoint every 5 (the newest 2 kept). Niced: it runs beside other work and resumes
# exactly when started again (checkpoints/TinyZero/<NAME>). Metrics: outputs/evidence/<NAME>/metrics.jsonl.
#   bash experiments/scripts/grpo_smollm2_sft.sh       # the first run: prompts <= 768 tokens (207 of 399 train rows,
#                                                      # 33 of 80 validation rows), 40 steps
#   MAX_PROMPT_LENGTH=1024 TOTAL_STEPS=60 NAME=grpo_smollm2_sft_p1024 bash experiments/scripts/grpo_smollm2_sft.sh
#                                                      # the launch scripts' CPU prompt limit: 324 train / 63 val rows
#   MAX_PROMPT_LENGTH=1024 MAX_RESPONSE_LENGTH=256 TOTAL_STEPS=40 NAME=grpo_smollm2_sft_p1024_r256 \
#     bash experiments/scripts/grpo_smollm2_sft.sh   # trained at the evaluation's response length (about 2x the step)
#   MAX_PROMPT_LENGTH=1024 MAX_RESPONSE_LENGTH=256 PPO_MINI_BATCH_SIZE=2 LR=2e-5 TOTAL_STEPS=40 \
#     NAME=grpo_smollm2_sft_p1024_r256_mb2_lr2e-5 bash experiments/scripts/grpo_smollm2_sft.sh \
#     trainer.save_on_exit=true trainer.val_before_train=false
#                                                      # four actor updates per step (mini-batches of 2 prompts x 4,
#                                                      # ToolRL's ratio 512 / 128) at the same compute per step, and
#                                                      # twice the lr; step 0's validation is the runs' above
#   MAX_PROMPT_LENGTH=1024 MAX_RESPONSE_LENGTH=256 PPO_MINI_BATCH_SIZE=2 LR=1e-5 TOTAL_STEPS=40 TEST_FREQ=-1 \
#     NAME=grpo_smollm2_sft_p1024_r256_mb2_lr1e-5_t0.5 bash experiments/scripts/grpo_smollm2_sft.sh \
#     actor_rollout_ref.rollout.temperature=0.5 trainer.save_on_exit=true trainer.val_before_train=false
#                                                      # rollouts sampled at temperature 0.5 (the log-probs use the
#                                                      # same temperature, so a parameter step moves them about
#                                                      # 1/T = 2x as far: lr 1e-5; at 2e-5 step 2 lost half its
#                                                      # format);
#                                                      # no in-training validation: judged by the sampled evaluation
#   REFINEDREWARD=1 MAX_PROMPT_LENGTH=1024 MAX_RESPONSE_LENGTH=256 PPO_MINI_BATCH_SIZE=2 LR=1e-5 TOTAL_STEPS=40 \
#     TEST_FREQ=-1 NAME=grpo_smollm2_sft_p1024_r256_mb2_lr1e-5_t0.5_refined_klloss \
#     bash experiments/scripts/grpo_smollm2_sft.sh actor_rollout_ref.rollout.temperature=0.5 \
#     trainer.save_on_exit=true trainer.val_before_train=false algorithm.use_kl_in_reward=False \
#     actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.04
#                                                      # the same at 0.5, trained on ToolRL's refined reward (a
#                                                      # surplus or missing call loses the whole name term) with a
#                                                      # KL loss to the start (DeepSeekMath's beta 0.04) in place of
#                                                      # the KL in the reward; judged by the default reward
#   REFINEDREWARD=1 TRAIN_BATCH_SIZE=16 MAX_PROMPT_LENGTH=1024 MAX_RESPONSE_LENGTH=256 PPO_MINI_BATCH_SIZE=4 LR=1e-5 \
#     TOTAL_STEPS=40 TEST_FREQ=-1 NAME=grpo_smollm2_sft_p1024_r256_b16_mb4_lr1e-5_t0.5_refined_klloss \
#     bash experiments/scripts/grpo_smollm2_sft.sh actor_rollout_ref.rollout.temperature=0.5 \
#     trainer.save_on_exit=true trainer.val_before_train=false algorithm.use_kl_in_reward=False \
#     actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.04
#                                                      # the run above with twice the prompts per step (16 x 4) and
#                                                      # still four updates per step (mini-batches of 4 prompts):
#                                                      # twice the data behind each update
set -euo pipefail
cd "$(dirname "$0")/../.."
NAME=${NAME:-grpo_smollm2_sft}
export BASE_MODEL=smollm2-135m-sft MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-768} \
  MAX_RESPONSE_LENGTH=${MAX_RESPONSE_LENGTH:-128} TRAIN_BATCH_SIZE=${TRAIN_BATCH_SIZE:-8} \
  ROLLOUT_N=${ROLLOUT_N:-4} \
  PPO_MINI_BATCH_SIZE=${PPO_MINI_BATCH_SIZE:-8} \
  LR=${LR:-1e-5} TOTAL_STEPS=${TOTAL_STEPS:-40} SAVE_FREQ=5 \
  TEST_FREQ=${TEST_FREQ:-10} EXPERIMENT_NAME=$NAME RUN_DIR=outputs/evidence/$NAME
exec nice -n 19 bash train_grpo.sh trainer.max_actor_ckpt_to_keep=2 "$@"
