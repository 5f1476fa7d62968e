#!/usr/bin/env bash
# GSPO (Zheng et al. 2025, "Group Sequence Policy Optimization", arXiv 2507.18071) on the RLLA data: train_grpo.sh's
# GRPO line with the sequence-level ratio (actor.policy_loss.loss_mode=gspo), the paper's clip range
# (clip_ratio_low=3e-4, clip_ratio_high=4e-4: the sequence ratio is a geometric mean, far closer to 1 than token
# ratios) and its aggregation (seq-mean-token-mean). Every variable of train_grpo.sh applies; extra arguments are
# Hydra overrides.
set -euo pipefail
export EXPERIMENT_NAME=${EXPERIMENT_NAME:-gspo-qwen-chatml}
exec bash "$(dirname "$0")/../../train_grpo.sh" \
  actor_rollout_ref.actor.policy_loss.loss_mode=gspo \
  actor_rollout_ref.actor.clip_ratio_low=3e-4 \
  actor_rollout_ref.actor.clip_ratio_high=4e-4 \
  actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean \
  "$@"
