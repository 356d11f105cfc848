#!/usr/bin/env bash
# One call on the GPU machine (device tool, carry .whl/) when device time is short: build the
# CUDA variant, a quick GPU test selection (LTX_QUICK_TESTS, a pytest -k expression), the
# fine-tuning run (LTX_FT_STEPS, default 300) and the LTX-Video end-to-end table
# (LTX_FRAMES, default 161; LTX_STEPS, default 10). Each stage has its own timeout so the
# earlier results always come back; the e2e run gets whatever is left of LTX_LIMIT seconds.
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
LIMIT=${LTX_LIMIT:-585}
# exported: tools/dev.sh builds for LTX_ARCH too (unset, it rebuilt every arch of build.toml
# and the test stage's timeout ran out during that build, 2026-12-03 13:50)
export LTX_ARCH=${LTX_ARCH:-native}
device_env | tee "$OUT/env.txt"
timeout 200 python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 16 \
  > "$OUT/build_cuda.log" 2>&1 || { tail -40 "$OUT/build_cuda.log"; exit 1; }
echo "build done at ${SECONDS}s"
if [ -n "${LTX_QUICK_TESTS:-}" ]; then
  timeout "${LTX_QUICK_TESTS_S:-120}" bash tools/dev.sh test -rfE --maxfail=20 -k "$LTX_QUICK_TESTS" \
    > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? at ${SECONDS}s"
  grep -E "passed|failed|error|FAILED|ERROR" "$OUT/pytest.log" | tail -25
fi
timeout "${LTX_FT_S:-220}" python3 benchmarks/finetune.py --steps "${LTX_FT_STEPS:-300}" --out "$OUT" 2>&1 \
  | tail -14
echo "finetune done at ${SECONDS}s"
left=$(( LIMIT - SECONDS ))
timeout "$left" python3 benchmarks/ltx_video.py --num-frames "${LTX_FRAMES:-161}" --steps "${LTX_STEPS:-10}" \
  --quiet --out "$OUT" 2>&1 | tail -30
echo "ltx done at ${SECONDS}s"
