#!/usr/bin/env bash
# One call on the GPU machine (the device tool): build the CUDA variant for the local GPU,
# then the end-to-end tables (benchmarks/ltx_video.py, benchmarks/llama.py) and a SASS
# summary of the row kernels. Carry .whl/. Results (sections + json) land in $OUT.
#   LTX_FRAMES (default 49), LTX_STEPS (default 20), LTX_PYTEST (pytest arguments: when set,
#   the suite runs first with them; dev.sh always passes tests/, so "-k qk" selects, a file
#   name adds nothing)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
export LTX_ARCH=${LTX_ARCH:-native}
{
  device_env
  # The CPU variant too: tests/test_e2e_smoke.py loads it on CPU.
  python3 tools/build.py --backend cpu -j 4 > /tmp/build_cpu.log 2>&1 &
  python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 12 > /tmp/build_cuda.log 2>&1 \
    || { tail -40 /tmp/build_cuda.log; exit 1; }
  wait
  echo "build done at ${SECONDS}s"
  if [ -n "${LTX_PYTEST:-}" ]; then
    bash tools/dev.sh test -q -rfE $LTX_PYTEST 2>&1 | tail -25
    echo "pytest done at ${SECONDS}s"
  fi
  # SASS: 16-byte global accesses and local-memory use per kernel (bf16 vs fp16 instantiations).
  so=$(ls build/torch*-cu1*/_ltx_kernels*.so | head -1)
  cuobjdump --dump-sass "$so" > /tmp/sass.txt 2>/dev/null
  python3 - > "$OUT/sass_summary.txt" <<'PY'
import re, collections
cur = None; stats = collections.OrderedDict()
for line in open("/tmp/sass.txt"):
    m = re.match(r"\s+Function : (\S+)", line)
    if m:
        cur = m.group(1); stats[cur] = collections.Counter(); continue
    if cur is None: continue
    for op in ("LDG.E.128", "STG.E.128", "LDG.E.64", "STG.E.64", "LDG.E.U16", "STG.E.U16", "LDG.E ", "STG.E ",
               "LDL", "STL", "F2F", "F2FP", "PRMT", "I2F", "BAR.SYNC", "SHFL"):
        if op in line: stats[cur][op.strip()] += 1
    stats[cur]["insns"] += 1 if re.search(r"/\*[0-9a-f]{4}\*/", line) else 0
for k, c in stats.items():
    print(k[:160]); print("   ", dict(c))
PY
  gzip -c /tmp/sass.txt > "$OUT/sass.txt.gz"
  echo "sass done at ${SECONDS}s"
  python3 benchmarks/llama.py --out "$OUT" 2>&1 | tail -30
  echo "llama done at ${SECONDS}s"
  python3 benchmarks/ltx_video.py --num-frames "${LTX_FRAMES:-49}" --steps "${LTX_STEPS:-20}" \
    --quiet --out "$OUT" 2>&1 | tail -40
  echo "ltx done at ${SECONDS}s"
} 2>&1 | tee "$OUT/e2e.log" | tail -120
