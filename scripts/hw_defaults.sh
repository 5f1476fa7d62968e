# Sourced by the launch scripts: detects GPUs and sets CPU- or GPU-sized defaults that every variable overrides.
# Variables (all optional): the reward switches, N_GPUS, BASE_MODEL, DATA_DIR, EXPERIMENT_NAME, TRAIN_BATCH_SIZE, ROLLOUT_N,
# MAX_PROMPT_LENGTH, MAX_RESPONSE_LENGTH, TOTAL_EPOCHS, TOTAL_STEPS, LR, SAVE_FREQ, TEST_FREQ, ROLLOUT_NAME, SHARED_PROMPT,
# FUSED_KERNELS, SINGLE_PROCESS, PYTHON (default: scripts/ensure_env.sh's choice; on a bare machine it sets up .venv).
source "$(dirname "${BASH_SOURCE[0]}")/ensure_env.sh" || exit 1
# ToolRL's reward switches (off unless set to 1; see README "The ToolRL reward")
export WITHLENGTH=${WITHLENGTH:-0} REFINEDREWARD=${REFINEDREWARD:-0} COARSEREWARD=${COARSEREWARD:-0}
export STRICTMATCH=${STRICTMATCH:-0} CORRECTMAX1=${CORRECTMAX1:-0} MAX1STEP30MAX3=${MAX1STEP30MAX3:-0}
export SCHEDULEREWARD=${SCHEDULEREWARD:-0} SCHEDULELENGTH=${SCHEDULELENGTH:-0}
if [ -z "${N_GPUS+x}" ]; then
  N_GPUS=$("$PYTHON" -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
fi
export N_GPUS
export ROLLOUT_TP_SIZE=${ROLLOUT_TP_SIZE:-1}
if [ "$N_GPUS" -gt 0 ]; then
  # ToolRL's own GPU settings
  : "${BASE_MODEL:=smollm2-135m}" "${TRAIN_BATCH_SIZE:=512}" "${PPO_MINI_BATCH_SIZE:=128}" "${ROLLOUT_N:=4}"
  : "${MAX_PROMPT_LENGTH:=2048}" "${MAX_RESPONSE_LENGTH:=1024}" "${TOTAL_EPOCHS:=15}" "${LR:=1e-6}"
  : "${SAVE_FREQ:=15}" "${TEST_FREQ:=5}" "${MICRO_BATCH_PER_GPU:=8}" "${FILTER_OVERLONG:=False}"
  # shared-prompt layout: exact, measured faster on CPU only (dense mask; not yet measured on a GPU)
  : "${SHARED_PROMPT:=False}"
  # fused LM-head log-probs: needs an unsharded head (FSDP2 shards it on GPUs: the worker would warn and fall back)
  : "${FUSED_KERNELS:=False}"
  # Ray worker actors (verl's layout; N_GPUS workers)
  : "${SINGLE_PROCESS:=False}"
  # vLLM when it is installed, the HF rollout otherwise
  if "$PYTHON" -c "import vllm" >/dev/null 2>&1; then : "${ROLLOUT_NAME:=vllm}"; else : "${ROLLOUT_NAME:=hf}"; fi
else
  # laptop-class CPU: the SFT'd tiny model, small batches, short responses, prompts over 1024 tokens dropped
  : "${BASE_MODEL:=tiny-sft}" "${TRAIN_BATCH_SIZE:=8}" "${PPO_MINI_BATCH_SIZE:=8}" "${ROLLOUT_N:=4}"
  # LR: 1e-4 for the 7M tiny-sft model (measured: 1e-5 left the validation reward flat in 30 steps, 1e-4 raised it;
  # ToolRL's 1e-6 is for 3B-8B models)
  : "${MAX_PROMPT_LENGTH:=1024}" "${MAX_RESPONSE_LENGTH:=128}" "${TOTAL_EPOCHS:=1}" "${LR:=1e-4}"
  : "${SAVE_FREQ:=-1}" "${TEST_FREQ:=10}" "${MICRO_BATCH_PER_GPU:=8}" "${FILTER_OVERLONG:=True}"
  : "${ROLLOUT_NAME:=hf}"
  # each distinct prompt computed once for its ROLLOUT_N samples (exact; benchmarks/bench_shared_prompt.py)
  : "${SHARED_PROMPT:=True}"
  # log-probs/entropy from the final hidden states in chunks: no [tokens, 49k vocab] logits (exact; less memory)
  : "${FUSED_KERNELS:=True}"
  # the one CPU worker inside the trainer's process, no Ray (same results; ~1 GB less RSS: README "The trainer")
  : "${SINGLE_PROCESS:=True}"
fi
: "${TOTAL_STEPS:=null}"
# the variables are checked here, before any data or model work, with their names in the error
_hw_fail() { echo "$1=${!1}: expected $2" >&2; exit 2; }
for _v in N_GPUS TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE ROLLOUT_N MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH TOTAL_EPOCHS \
          SAVE_FREQ TEST_FREQ MICRO_BATCH_PER_GPU ROLLOUT_TP_SIZE; do
  [[ "${!_v}" =~ ^-?[0-9]+$ ]] || _hw_fail "$_v" "an integer"
done
[[ "$TOTAL_STEPS" =~ ^([0-9]+|null)$ ]] || _hw_fail TOTAL_STEPS "a whole number of steps, or null (all epochs)"
[[ "$LR" =~ ^[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?$ ]] || _hw_fail LR "a number such as 1e-4"
for _v in SHARED_PROMPT FUSED_KERNELS SINGLE_PROCESS FILTER_OVERLONG; do
  [[ "${!_v}" =~ ^([Tt]rue|[Ff]alse)$ ]] || _hw_fail "$_v" "True or False"
done
unset _v
export BASE_MODEL TRAIN_BATCH_SIZE PPO_MINI_BATCH_SIZE ROLLOUT_N MAX_PROMPT_LENGTH MAX_RESPONSE_LENGTH TOTAL_EPOCHS
export LR SAVE_FREQ TEST_FREQ MICRO_BATCH_PER_GPU FILTER_OVERLONG ROLLOUT_NAME TOTAL_STEPS PYTHON SHARED_PROMPT
export FUSED_KERNELS SINGLE_PROCESS
# a checkpoint of another model in the run's folder (RESUME_CHECK_DIR, the trainer.default_local_dir the launch script
# passes on): the trainer would refuse to resume from it, but only after the data search and any SFT preset build
# below; refused here in seconds (verl.utils.resume_precheck; "$@" here is the launch script's own arguments, the
# Hydra overrides it passes on)
if [ -z "${RESUME_CHECK_DIR:-}" ]; then
  echo "hw_defaults.sh: the launch script must set RESUME_CHECK_DIR (its trainer.default_local_dir)" >&2; exit 2
fi
"$PYTHON" -m verl.utils.resume_precheck --checkpoint_dir "$RESUME_CHECK_DIR" --model "$BASE_MODEL" -- "$@" || exit $?
# DATA_DIR: unset means "discover" (dataset/rlla_4k, then ../shared/data, then ToolRL's published files)
if [ -z "${DATA_DIR:-}" ]; then
  DATA_DIR=$("$PYTHON" -c "from verl.utils.dataset.rlla_data import resolve_rlla_data_dir; print(resolve_rlla_data_dir())") || exit 1
fi
export DATA_DIR
# an SFT preset is built on first use (tiny-sft ~6 min, smollm2-135m-sft ~40 min on 2 CPU cores) by its own script:
# it reads only SFT_* variables (and PYTHON), never the BASE_MODEL / LR / ... exported above for the trainer
# (the preset fixes its base, data and folder: an SFT_BASE_MODEL / SFT_DATA / SFT_TARGET exported for another build
# must not move it where prepare_model would not find it; the recipe's knobs, SFT_LR, SFT_EPOCHS, ..., still apply)
if [ "$BASE_MODEL" = "tiny-sft" ] || [ "$BASE_MODEL" = "smollm2-135m-sft" ]; then
  env -u SFT_BASE_MODEL -u SFT_DATA -u SFT_TARGET SFT_PRESET="$BASE_MODEL" \
    bash "$(dirname "${BASH_SOURCE[0]}")/prepare_sft_model.sh" || exit 1
fi
