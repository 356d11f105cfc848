#!/usr/bin/env bash
# One call on the GPU machine (the device tool, carry .whl/): build the CUDA variant for the
# local GPU, then the end-to-end tables (benchmarks/ltx_video.py, then benchmarks/llama.py),
# then the GPU tests with whatever time is left. Each stage has its own timeout so the
# results of the earlier ones always come back. Results (sections + json) land in $OUT.
#   LTX_FRAMES (default 49), LTX_STEPS (default 20), LTX_E2E_LTX_S (default 300; 0: no LTX),
#   LTX_E2E_LIMIT (the whole script's target in seconds, default 570),
#   LTX_PYTEST (pytest arguments for the last stage, e.g. '-k "rmsnorm or rope"'; unset: none)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
export LTX_ARCH=${LTX_ARCH:-native}
LIMIT=${LTX_E2E_LIMIT:-570}
device_env | tee "$OUT/env.txt"
timeout 200 python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 16 \
  > "$OUT/build_cuda.log" 2>&1 || { tail -40 "$OUT/build_cuda.log"; exit 1; }
echo "build done at ${SECONDS}s"
if [ "${LTX_E2E_LTX_S:-300}" -gt 0 ]; then
  timeout "${LTX_E2E_LTX_S:-300}" python3 benchmarks/ltx_video.py --num-frames "${LTX_FRAMES:-49}" \
    --steps "${LTX_STEPS:-20}" --quiet --out "$OUT" > "$OUT/ltx.log" 2>&1
  echo "ltx rc=$? at ${SECONDS}s"
  tail -12 "$OUT/ltx.log"
fi
left=$(( LIMIT - SECONDS ))
if [ "$left" -gt 60 ]; then
  timeout "$left" python3 benchmarks/llama.py --out "$OUT" > "$OUT/llama.log" 2>&1
  echo "llama rc=$? at ${SECONDS}s"
  tail -10 "$OUT/llama.log"
fi
left=$(( LIMIT - SECONDS ))
if [ -n "${LTX_PYTEST:-}" ] && [ "$left" -gt 40 ]; then
  # dev.sh always passes tests/, so "-k expr" selects (a file name would add nothing)
  eval "timeout $left bash tools/dev.sh test -q -rfE $LTX_PYTEST" > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? at ${SECONDS}s"
  tail -8 "$OUT/pytest.log"
fi
bundle_logs env.txt build_cuda.log
