#!/usr/bin/env bash
# CISPO (MiniMax 2025, "MiniMax-M1", arXiv 2506.13585, eqs. 4-5) on the RLLA data: train_grpo.sh's GRPO line with the
# clipped, stop-gradient importance weight on the log-probability (actor.policy_loss.loss_mode=cispo) and token-mean
# aggregation. The paper sets no lower bound on the weight (clip_ratio_low=1.0: the bound 1 - 1 = 0 never binds) and
# tunes only the upper one without publishing it; 0.28 here is DAPO's clip-higher value (arXiv 2503.14476). Every
# variable of train_grpo.sh applies; extra arguments are Hydra overrides.
set -euo pipefail
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-cispo-qwen-chatml}
exec bash "$(dirname "$0")/../../train_grpo.sh" \
  actor_rollout_ref.actor.policy_loss.loss_mode=cispo \
  actor_rollout_ref.actor.clip_ratio_low=1.0 \
  actor_rollout_ref.actor.clip_ratio_high=0.28 \
  actor_rollout_ref.actor.loss_agg_mode=token-mean \
  "$@"
