#!/usr/bin/env bash
# See the router learn: the budgeted router over tools that run (a calculator, BM25 search) on the generated route_qa
# task, from the tiny-route-qa warm start built on first use; ends with the test split's criteria and a plot. Its
# settings are one recipe file: verl/trainer/config/recipe/router_route_qa.yaml (docs/route_qa.md). key=value
# arguments override it (router.budget_B=0.3333 for the budget criterion). Run it again to resume.
set -euo pipefail
cd "$(dirname "$0")"
source scripts/ensure_env.sh || exit 1
exec "$PYTHON" -m verl.trainer.main_ppo recipe=router_route_qa "$@"
