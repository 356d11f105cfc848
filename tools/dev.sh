#!/usr/bin/env bash
# Set up a Python environment, build, and run the example or the test suite.
#
#   bash tools/dev.sh example        # env + build + python example.py
#   bash tools/dev.sh test [ARGS]    # env + build (+ --check-cuda) + pytest -m kernels_ci [ARGS]
#   bash tools/dev.sh env            # only set up the environment; prints the python it chose
#
# Which Python (first match):
#   1. $LTX_PYTHON, used as is;
#   2. .venv/ when it exists (created by an earlier run): missing pins are pip-installed;
#   3. python3 when it already has torch (e.g. the GPU machine: torch+cu130, no network):
#      used directly, no venv, no network while everything needed imports; packages that
#      do not import are installed from wheels in .whl/ (--no-index --no-deps) into
#      .whl/site/, which goes on PYTHONPATH; whatever is already on PYTHONPATH is used;
#   4. otherwise a new .venv/ from python3 with the pinned packages below.
# Idempotent: a second run installs nothing and rebuilds only what changed.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
PINS=(torch==2.13.0 numpy kernels==0.17.2 kernel-abi-check==0.14.1 pytest
      transformers==5.18.0 diffusers==0.42.1 hypothesis)
SITE=$ROOT/.whl/site

log() { printf '[dev] %s\n' "$*" >&2; }
die() { printf '[dev] error: %s\n' "$*" >&2; exit 1; }

TIMINGS=() STAGE="" STAGE_START=0
timed() {  # timed NAME CMD...: run CMD (errexit stays on), record its wall time under NAME
  STAGE=$1 STAGE_START=$SECONDS
  shift
  "$@"
  TIMINGS+=("$(printf '%-11s %4d s' "$STAGE" $((SECONDS - STAGE_START)))")
  STAGE=""
}
report_timings() {
  local rc=$?
  [ -n "$STAGE" ] && TIMINGS+=("$(printf '%-11s %4d s  (failed)' "$STAGE" $((SECONDS - STAGE_START)))")
  if [ ${#TIMINGS[@]} -gt 0 ]; then
    log "stage timings:"
    local t
    for t in "${TIMINGS[@]}"; do log "  $t"; done
  fi
  return $rc
}
trap report_timings EXIT

# Prints the specs among "$@" (name or name==version) that are not installed.
missing_pins() {
  "$PY" - "$@" <<'EOF'
import sys
from importlib import metadata
missing = []
for spec in sys.argv[1:]:
    name, _, want = spec.partition("==")
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        missing.append(spec)
        continue
    if want and have.split("+")[0] != want:
        missing.append(spec)
print(" ".join(missing))
EOF
}

# Prints the modules among "$@" that do not import.
missing_modules() {
  "$PY" - "$@" <<'EOF'
import importlib, sys
bad = []
for mod in sys.argv[1:]:
    try:
        importlib.import_module(mod)
    except Exception:
        bad.append(mod)
print(" ".join(bad))
EOF
}

install_local_wheels() {  # .whl/*.whl -> .whl/site (only when the wheel set changed)
  local wheels=("$ROOT"/.whl/*.whl)
  [ -e "${wheels[0]}" ] || return 1
  local stamp
  stamp=$(ls -l "${wheels[@]}" | md5sum | cut -d' ' -f1)
  if [ -f "$SITE/.stamp" ] && [ "$(cat "$SITE/.stamp")" = "$stamp" ]; then
    return 0
  fi
  log "installing ${#wheels[@]} local wheel(s) from .whl/ into .whl/site (no network)"
  rm -rf "$SITE"
  "$PY" -m pip install --quiet --no-index --no-deps --disable-pip-version-check \
    --target "$SITE" "${wheels[@]}" || die "pip install of .whl/*.whl failed"
  echo "$stamp" > "$SITE/.stamp"
}

setup_venv() {
  if ! { [ -x .venv/bin/python ] && .venv/bin/python -c '' 2>/dev/null; }; then
    command -v python3 >/dev/null || die "python3 not found"
    log "creating .venv with $(python3 -V 2>&1)"
    python3 -m venv --clear .venv
  fi
  PY=$ROOT/.venv/bin/python
  local missing
  missing=$(missing_pins "${PINS[@]}")
  if [ -n "$missing" ]; then
    log "installing into .venv: $missing"
    "$PY" -m pip install --quiet --disable-pip-version-check "${PINS[@]}" \
      || die "pip install failed (torch==2.13.0 comes from the machine's local wheel store)"
  fi
}

setup_system() {  # python3 already has torch: use it, add only what does not import
  PY=$(command -v python3)
  local need=(kernels) optional=(kernel_abi_check hypothesis transformers diffusers numpy)
  [ "$ACTION" = example ] || need+=(pytest)
  if [ -d "$SITE" ]; then  # from an earlier run: refresh if .whl/ changed, and use it
    install_local_wheels || true
    export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
  fi
  local missing
  missing=$(missing_modules "${need[@]}" "${optional[@]}")
  if [ -n "$missing" ] && install_local_wheels; then
    case ":${PYTHONPATH:-}:" in *":$SITE:"*) ;; *) export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} ;; esac
    missing=$(missing_modules "${need[@]}" "${optional[@]}")
  fi
  if [ -n "$missing" ] && [ "${LTX_ALLOW_PIP:-0}" = 1 ]; then
    local specs=() mod
    for mod in $missing; do specs+=("$(pin_for "$mod")"); done
    log "LTX_ALLOW_PIP=1: pip install --target .whl/site ${specs[*]}"
    "$PY" -m pip install --quiet --disable-pip-version-check --target "$SITE" "${specs[@]}" \
      || die "pip install ${specs[*]} failed"
    case ":${PYTHONPATH:-}:" in *":$SITE:"*) ;; *) export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH} ;; esac
    missing=$(missing_modules "${need[@]}" "${optional[@]}")
  fi
  local mod
  for mod in $missing; do
    case " ${need[*]} " in
      *" $mod "*) die "python3 ($PY) has torch but cannot import '$mod'. Put its wheel(s) in .whl/
       (pip download --no-deps -d .whl $(pin_for "$mod")), add it to PYTHONPATH,
       or rerun with LTX_ALLOW_PIP=1 to pip-install it into .whl/site." ;;
      *) log "note: '$mod' does not import; tests that need it will skip" ;;
    esac
  done
}

pin_for() {  # module name -> the pinned requirement that provides it
  local mod=$1 spec
  for spec in "${PINS[@]}"; do
    local name=${spec%%==*}
    if [ "${name//-/_}" = "$mod" ]; then echo "$spec"; return; fi
  done
  echo "$mod"
}

setup_env() {
  if [ -n "${LTX_PYTHON:-}" ]; then
    PY=$LTX_PYTHON
  elif [ -e .venv/bin/python ]; then
    setup_venv
  elif command -v python3 >/dev/null && python3 -c 'import torch' 2>/dev/null; then
    setup_system
  else
    setup_venv
  fi
  log "python: $PY ($("$PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'))"
}

has_nvcc() {
  command -v nvcc >/dev/null || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ] || [ -x /usr/local/cuda/bin/nvcc ]
}

build() {  # sets VARIANT to the variant dir tools/build.py printed last
  local out
  out=$(mktemp)
  # LTX_ARCH=native (or 9.0,...) builds CUDA only for those capabilities: a quick GPU build.
  "$PY" tools/build.py ${LTX_ARCH:+--arch "$LTX_ARCH"} | tee "$out"
  VARIANT=$(tail -n 1 "$out")
  rm -f "$out"
  [ -d "$VARIANT" ] || die "tools/build.py did not print a variant dir"
}

repo_id() {
  "$PY" -c 'import tomllib; print(tomllib.load(open("build.toml", "rb"))["general"]["hub"]["repo-id"])'
}

run_pytest() {
  local rc=0
  LOCAL_KERNELS="$(repo_id)=$ROOT" PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1} \
    "$PY" -m pytest tests -m kernels_ci -p no:cacheprovider -q "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then
    log "pytest selected no tests (exit 5): every test must carry @pytest.mark.kernels_ci"
    return 1
  fi
  return "$rc"
}

run_check_cuda() { "$PY" tools/build.py --check-cuda || check_rc=$?; }

ACTION=${1:-}
[ $# -gt 0 ] && shift
case "$ACTION" in
  env)
    timed env setup_env
    echo "$PY"
    ;;
  example)
    timed env setup_env
    timed build build
    timed example "$PY" example.py "$@"
    ;;
  test)
    timed env setup_env
    timed build build
    check_rc=0
    if has_nvcc && [[ "$(basename "$VARIANT")" == *-cpu-* ]]; then
      # A failure here (warnings, spills) fails the run, but only after pytest has run too.
      timed check-cuda run_check_cuda
      [ "$check_rc" -eq 0 ] || TIMINGS[-1]+="  (failed)"
    fi
    timed pytest run_pytest "$@"
    [ "$check_rc" -eq 0 ] || die "tools/build.py --check-cuda failed (exit $check_rc, see its output above)"
    ;;
  *)
    echo "usage: bash tools/dev.sh example|test [args]|env" >&2
    exit 2
    ;;
esac
