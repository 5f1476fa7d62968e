#!/usr/bin/env bash
# Issue 19 §3.2-3.3: the budgeted router trained alone on a fixed actor (smollm2-135m-sft, not updated:
# trainer.critic_warmup beyond the run, verl's switch), with every route tried on every prompt
# (router.route_sampling=stratified: 3 copies per prompt, one per route; the head learns from the expectation over
# routes and λ's dual step reads the policy's expected cost). 8 prompts x 3 copies per step, prompts <= 768 tokens,
# 128 response tokens, ANSWER copies cannot open a tool call, router lr 3e-4, no weak labels, no KL (the actor is the
# reference). The fixed routing policies are evaluated on the same actor (router_frontier.sh), so the comparison
# isolates the router.
#   BUDGET_B=0.3 NAME=router_frozen_bnorm bash experiments/scripts/router_frozen_actor.sh router.lambda_init=2.0 \
#     router.dual_lr=0.5 trainer.val_before_train=False                         # steps 1-26 (plain dual ascent), then
#   BUDGET_B=0.3 NAME=router_frozen_bnorm TOTAL_STEPS=50 bash experiments/scripts/router_frozen_actor.sh \
#     router.lambda_init=2.0 router.dual_lr=0.5 trainer.val_before_train=False router.dual_kp=4.0  # resumed: PI, to 50
#   BUDGET_B=0.3 NAME=fixed_penalty bash experiments/scripts/router_frozen_actor.sh router.dual_lr=0 router.lambda_init=L
# Route values (router.loss_mode=value, docs/router.md "Route values": the head regresses each route's task reward,
# λ prices the routes when routing):
#   BUDGET_B=0.3 NAME=router_value_norm TOTAL_STEPS=36 TEST_FREQ=100 bash experiments/scripts/router_frozen_actor.sh \
#     router.loss_mode=value router.input_norm=running router.entropy_coeff=0 router.value_temperature=0.5 \
#     router.optim.lr=1e-3 router.lambda_init=2.0 router.dual_lr=1.0 trainer.val_before_train=False
# The ridge fit (router.value_fit=ridge, docs/router.md "Ridge fit"; greedy rollouts, so each (prompt, route) has the
# one reward validation will see; one epoch of the 324 prompts <= 1,024 tokens):
#   BUDGET_B=0.3 NAME=router_ridge MAX_PROMPT_LENGTH=1024 TOTAL_STEPS=41 TEST_FREQ=100 \
#     bash experiments/scripts/router_frozen_actor.sh router.loss_mode=value router.value_fit=ridge \
#     router.input_norm=running router.entropy_coeff=0 router.value_temperature=0.25 router.lambda_init=3.0 \
#     router.dual_lr=1.0 actor_rollout_ref.rollout.do_sample=false trainer.val_before_train=False
# The same on the GRPO-trained actor (BASE_MODEL: the actor's huggingface folder of a train_grpo checkpoint; the
# seed-2 16-prompt run of grpo_smollm2_sft.sh in experiments/notebook.md, "GRPO from the warm start"):
#   BUDGET_B=0.3 NAME=router_ridge_grpo_actor BASE_MODEL=CKPT/actor/huggingface MAX_PROMPT_LENGTH=1024 TOTAL_STEPS=41 \
#     TEST_FREQ=100 bash experiments/scripts/router_frozen_actor.sh ...the ridge command's router overrides...
# Niced; running the same command again resumes exactly (checkpoints/router_grpo/<experiment>).
# Metrics: outputs/evidence/<experiment>/metrics.jsonl.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUDGET_B=${BUDGET_B:-0.3}
NAME=${NAME:-router_frozen}
# ROUTER_RECIPE=option_a: the router settings are the ones written here and in the commands above (the main job's
# CPU default, ROUTER_RECIPE=value_ridge, is the ridge command's settings)
export ROUTER_RECIPE=option_a BUDGET_B BASE_MODEL=${BASE_MODEL:-smollm2-135m-sft} MAX_PROMPT_LENGTH=${MAX_PROMPT_LENGTH:-768} \
  MAX_RESPONSE_LENGTH=128 \
  TRAIN_BATCH_SIZE=8 ROLLOUT_N=3 PPO_MINI_BATCH_SIZE=8 TOTAL_STEPS=${TOTAL_STEPS:-30} SAVE_FREQ=5 \
  TEST_FREQ=${TEST_FREQ:-10} EXPERIMENT_NAME=${NAME}_smollm2_sft_b${BUDGET_B}
export RUN_DIR=outputs/evidence/$EXPERIMENT_NAME
exec nice -n 19 bash run_router_training.sh \
  router.route_sampling=stratified router.answer_forbids_tool_calls=true router.sup_coeff=0 router.optim.lr=3e-4 \
  trainer.critic_warmup=1000000 algorithm.use_kl_in_reward=False actor_rollout_ref.actor.use_kl_loss=False \
  trainer.max_actor_ckpt_to_keep=2 "$@"
