#!/usr/bin/env bash
# The main job: the budgeted tool router on the real RLLA data (seed 000 §8, Option A; on CPU the router recipe that
# docs/does_it_learn.md showed, item 6).
# CPU-sized defaults when no GPU is present; ToolRL/seed GPU settings otherwise. Every variable can be overridden from
# the environment (BASE_MODEL, DATA_DIR, EXPERIMENT_NAME, BUDGET_B, TRAIN_BATCH_SIZE, ROLLOUT_N, TOTAL_EPOCHS,
# TOTAL_STEPS, SAVE_FREQ, ...); extra arguments are Hydra overrides (e.g. `bash run_router_training.sh router.dual_lr=0.1`).
# First run: prepares the default model (the SFT'd tiny preset on CPU) and the router data, then trains with a progress
# bar and checkpoints, and finally writes the metric plots. Kill it at any time and run it again to resume.
# ROUTER_RECIPE picks the router's settings (README "The main job"; default: value_ridge without a GPU, option_a with):
#   option_a    the seed's command as written: routes sampled from the head (policy mode), the LM trained jointly by
#               GRPO on the task reward (ROLLOUT_N=4)
#   value_ridge the settings that item 6 of docs/does_it_learn.md showed holding the budget and beating random routing:
#               the router trained alone on the fixed actor (verl's trainer.critic_warmup beyond the run, no reference
#               or KL), every route for every prompt (ROLLOUT_N=3), greedy rollouts, ANSWER copies unable to open a
#               tool call, and the head as the ridge fit of each route's task reward, priced by λ when routing;
#               trained on RLLA plus irrelevance rows (docs/does_it_learn.md, item 11)
# IRRELEVANCE_FRACTION (0 to 1; default 0.25 for value_ridge, 0 for option_a) adds that many irrelevance rows per train
# row with a tool call (python -m verl.router.irrelevance: prompts whose tools cannot answer, ground truth "no call"),
# drawn with IRRELEVANCE_SEED (default 1)
set -euo pipefail
cd "$(dirname "$0")"
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-baseline_router}
export PROJECT_NAME=${PROJECT_NAME:-router_grpo}
: "${SAVE_FREQ:=10}"
case "${ROUTER_RECIPE:-}" in  # checked before any set-up, data or model work
  ""|option_a|value_ridge) ;;
  *) echo "ROUTER_RECIPE=$ROUTER_RECIPE: expected option_a or value_ridge" >&2; exit 2 ;;
esac
if [ -n "${IRRELEVANCE_FRACTION:-}" ] && ! [[ "$IRRELEVANCE_FRACTION" =~ ^(0*\.[0-9]+|0+|1(\.0*)?)$ ]]; then
  echo "IRRELEVANCE_FRACTION=$IRRELEVANCE_FRACTION: expected a number from 0 (no irrelevance rows) to 1" >&2; exit 2
fi
if [ -n "${IRRELEVANCE_SEED:-}" ] && ! [[ "$IRRELEVANCE_SEED" =~ ^[0-9]+$ ]]; then
  echo "IRRELEVANCE_SEED=$IRRELEVANCE_SEED: expected a whole number" >&2; exit 2
fi
USER_ROLLOUT_N=${ROLLOUT_N:-} USER_ROLLOUT_NAME=${ROLLOUT_NAME:-}
RESUME_CHECK_DIR=checkpoints/$PROJECT_NAME/$EXPERIMENT_NAME  # trainer.default_local_dir
source scripts/hw_defaults.sh
BUDGET_B=${BUDGET_B:-0.3}
if [ "$N_GPUS" -gt 0 ]; then : "${ROUTER_RECIPE:=option_a}"; else : "${ROUTER_RECIPE:=value_ridge}"; fi
case "$ROUTER_RECIPE" in
  option_a) RECIPE_ARGS=(); : "${IRRELEVANCE_FRACTION:=0}" ;;
  value_ridge)
    # RLLA's train split plus a quarter as many irrelevance rows (docs/does_it_learn.md, item 11)
    : "${IRRELEVANCE_FRACTION:=0.25}"
    # one copy per route (greedy: a 4th copy would repeat one); the HF rollout, which can ban tool calls on ANSWER
    ROLLOUT_N=${USER_ROLLOUT_N:-3} ROLLOUT_NAME=${USER_ROLLOUT_NAME:-hf}
    RECIPE_ARGS=(trainer.critic_warmup=1000000 algorithm.use_kl_in_reward=False
      actor_rollout_ref.actor.use_kl_loss=False actor_rollout_ref.rollout.do_sample=false
      router.route_sampling=stratified router.answer_forbids_tool_calls=true router.loss_mode=value
      router.value_fit=ridge router.input_norm=running router.entropy_coeff=0 router.sup_coeff=0
      router.value_temperature=0.25 router.lambda_init=3.0 router.dual_lr=1.0) ;;
esac
if [ ! -f "$DATA_DIR/train_router.parquet" ] || [ ! -f "$DATA_DIR/test_router.parquet" ]; then
  "$PYTHON" -m verl.router.preprocess --data_dir "$DATA_DIR"
fi
# irrelevance rows (docs/router.md): a train file of their own beside train_router.parquet, made once, remade only when
# its input changed; validation stays test_router.parquet
TRAIN_FILE=$DATA_DIR/train_router.parquet
if ! [[ "$IRRELEVANCE_FRACTION" =~ ^[0.]+$ ]]; then
  TRAIN_FILE=$("$PYTHON" -m verl.router.irrelevance --data_dir "$DATA_DIR" --fraction "$IRRELEVANCE_FRACTION" \
    --seed "${IRRELEVANCE_SEED:-1}")
fi
RUN_DIR=${RUN_DIR:-outputs/$PROJECT_NAME/$EXPERIMENT_NAME}
# The trainer runs as a child so that `kill <this script>` (SIGTERM) reaches it: it finishes the step in flight, saves
# a checkpoint and exits non-zero (trainer.save_on_exit). Ctrl-C reaches it directly through the terminal.
"$PYTHON" -m verl.trainer.main_ppo \
  algorithm.adv_estimator=grpo \
  data.train_files=${TRAIN_FILE} \
  data.val_files=${DATA_DIR}/test_router.parquet \
  data.train_batch_size=$TRAIN_BATCH_SIZE \
  data.val_batch_size=128 \
  data.max_prompt_length=$MAX_PROMPT_LENGTH \
  data.max_response_length=$MAX_RESPONSE_LENGTH \
  data.filter_overlong_prompts=$FILTER_OVERLONG \
  actor_rollout_ref.model.path=${BASE_MODEL} \
  actor_rollout_ref.actor.optim.lr=$LR \
  actor_rollout_ref.actor.ppo_mini_batch_size=$PPO_MINI_BATCH_SIZE \
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=$MICRO_BATCH_PER_GPU \
  actor_rollout_ref.model.use_remove_padding=True \
  actor_rollout_ref.model.use_shared_prompt=$SHARED_PROMPT \
  actor_rollout_ref.model.use_fused_kernels=$FUSED_KERNELS \
  trainer.single_process=${SINGLE_PROCESS:-False} \
  actor_rollout_ref.rollout.name=$ROLLOUT_NAME \
  actor_rollout_ref.rollout.tensor_model_parallel_size=1 \
  actor_rollout_ref.rollout.n=$ROLLOUT_N \
  router.enable=true \
  router.budget_B=$BUDGET_B \
  router.cost_weights.any_tool=1.0 \
  trainer.save_freq=$SAVE_FREQ \
  trainer.save_on_exit=true \
  trainer.test_freq=$TEST_FREQ \
  trainer.project_name=$PROJECT_NAME \
  trainer.experiment_name=$EXPERIMENT_NAME \
  trainer.run_dir=$RUN_DIR \
  "trainer.logger=[console,jsonl,tensorboard]" \
  trainer.n_gpus_per_node=$N_GPUS \
  trainer.nnodes=1 \
  trainer.total_epochs=$TOTAL_EPOCHS \
  trainer.total_training_steps=$TOTAL_STEPS \
  ${RECIPE_ARGS[@]+"${RECIPE_ARGS[@]}"} \
  "$@" &
TRAIN_PID=$!
trap 'kill -TERM $TRAIN_PID 2>/dev/null' TERM
set +e
wait "$TRAIN_PID"; status=$?
# a trapped signal interrupts `wait` (status > 128) while the trainer is still finishing its step: wait again
while [ "$status" -gt 128 ] && kill -0 "$TRAIN_PID" 2>/dev/null; do wait "$TRAIN_PID"; status=$?; done
set -e
if [ "$status" -ne 0 ]; then
  echo "training stopped with status $status; run the same command again to resume from the last checkpoint" >&2
  exit "$status"
fi
"$PYTHON" scripts/plot_metrics.py "$RUN_DIR/metrics.jsonl"
