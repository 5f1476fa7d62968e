#!/usr/bin/env bash
# The test suite: `bash run_tests.sh` (CI runs exactly this through .ci/run). On a machine where the project is not
# installed it first sets up <checkout>/.venv (scripts/ensure_env.sh: torch's CPU wheel, this project with its test
# and environment extras, SmolLM2's GGUF package); an explicit PYTHON, or a python3 that has all of it, is used as is.
# Arguments go to pytest (default: the whole suite, `tests`), e.g. `bash run_tests.sh tests/router -x`; a first
# argument `--fast` runs the unit tier only (`-m unit`, tests/README.md: about 2.5 minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")"
export RAY_AUTH_MODE=${RAY_AUTH_MODE:-disabled} TOKENIZERS_PARALLELISM=${TOKENIZERS_PARALLELISM:-false}
# the environment tests need gym-sokoban and textworld (whose dependency jericho compiles from source with gcc)
ENSURE_EXTRAS=test,sokoban,textworld source scripts/ensure_env.sh || exit 1
tier=()
if [ "${1:-}" = "--fast" ]; then shift; tier=(-m unit); fi
if [ "$#" -eq 0 ]; then set -- tests; fi
exec "$PYTHON" -m pytest -q ${tier[@]+"${tier[@]}"} "$@"
