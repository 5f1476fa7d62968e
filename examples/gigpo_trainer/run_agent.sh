#!/usr/bin/env bash
# Multi-turn agent training (GiGPO by default) on one of the environments of agent_system/environments/.
# Usage: ENV_NAME=sokoban bash examples/gigpo_trainer/run_agent.sh [hydra overrides...]
# Variables (all optional): ENV_NAME (line_world | sokoban | textworld | rlla_multiturn), ESTIMATOR (gigpo | grpo |
# rlvcr ...), BASE_MODEL, TASKS_PER_STEP, GROUP_N, MAX_TURNS, MAX_RESPONSE_LENGTH, MAX_PROMPT_LENGTH, LR,
# TOTAL_STEPS, TEST_FREQ, SAVE_FREQ, VAL_TASKS, N_GPUS, EXPERIMENT_NAME, PYTHON. CPU-sized defaults without a GPU.
set -euo pipefail
cd "$(dirname "$0")/../.."
source scripts/ensure_env.sh || exit 1
ENV_NAME=${ENV_NAME:-sokoban}
ESTIMATOR=${ESTIMATOR:-gigpo}
if [ -z "${N_GPUS+x}" ]; then
  N_GPUS=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
fi
if [ "$N_GPUS" -gt 0 ]; then
  : "${BASE_MODEL:=smollm2-135m}" "${TASKS_PER_STEP:=16}" "${GROUP_N:=8}" "${MAX_RESPONSE_LENGTH:=512}"
  : "${LR:=1e-6}" "${TOTAL_STEPS:=150}" "${VAL_TASKS:=64}" "${MICRO_BATCH:=16}"
else
  : "${BASE_MODEL:=tiny-sft}" "${TASKS_PER_STEP:=2}" "${GROUP_N:=4}" "${MAX_RESPONSE_LENGTH:=48}"
  : "${LR:=1e-5}" "${TOTAL_STEPS:=3}" "${VAL_TASKS:=4}" "${MICRO_BATCH:=8}"
fi
: "${MAX_TURNS:=5}" "${MAX_PROMPT_LENGTH:=1024}" "${TEST_FREQ:=$TOTAL_STEPS}" "${SAVE_FREQ:=-1}"
: "${EXPERIMENT_NAME:=${ESTIMATOR}_${ENV_NAME}}"
RUN_DIR=${RUN_DIR:-outputs/agent/$EXPERIMENT_NAME}
if [ "$BASE_MODEL" = "tiny-sft" ] || [ "$BASE_MODEL" = "smollm2-135m-sft" ]; then
  # reads only SFT_* (never BASE_MODEL / LR); the preset fixes its own base, data and folder
  env -u SFT_BASE_MODEL -u SFT_DATA -u SFT_TARGET SFT_PRESET="$BASE_MODEL" bash scripts/prepare_sft_model.sh || exit 1
fi
"$PYTHON" -m verl.trainer.main_ppo \
    env.env_name=$ENV_NAME \
    env.max_steps=$MAX_TURNS \
    env.val_tasks=$VAL_TASKS \
    algorithm.adv_estimator=$ESTIMATOR \
    algorithm.use_kl_in_reward=False \
    data.train_batch_size=$TASKS_PER_STEP \
    data.max_prompt_length=$MAX_PROMPT_LENGTH \
    data.max_response_length=$MAX_RESPONSE_LENGTH \
    actor_rollout_ref.model.path=$BASE_MODEL \
    actor_rollout_ref.actor.optim.lr=$LR \
    actor_rollout_ref.actor.ppo_mini_batch_size=$TASKS_PER_STEP \
    actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.rollout.n=$GROUP_N \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=$MICRO_BATCH \
    "trainer.logger=[console,jsonl]" \
    trainer.project_name=agent \
    trainer.experiment_name=$EXPERIMENT_NAME \
    trainer.run_dir=$RUN_DIR \
    trainer.n_gpus_per_node=$N_GPUS \
    trainer.total_training_steps=$TOTAL_STEPS \
    trainer.test_freq=$TEST_FREQ \
    trainer.save_freq=$SAVE_FREQ \
    "$@"
"$PYTHON" scripts/plot_metrics.py "$RUN_DIR/metrics.jsonl"
