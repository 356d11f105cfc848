#!/usr/bin/env bash
# One call on the GPU machine (device tool, carry .whl/) for a kernel-speed iteration on the
# row kernels: build the CUDA variant for the local GPU (FlashInfer's JIT warms beside it),
# SASS instruction mix of the kernels named by LTX_SASS_MATCH, bench_ops.py for LTX_PERF_OPS,
# Nsight Compute counters (tools/device_profile.sh, bf16), then the GPU test suite
# with whatever time is left (LTX_PERF_TESTS: a pytest -k expression, default all).
# Each stage has its own timeout so the results of the earlier ones always come back.
#   LTX_PERF_OPS (default adaln,gated_residual,rmsnorm), LTX_PERF_BENCH_S (default 150),
#   LTX_PERF_NCU (default 1: Nsight Compute stage), LTX_PERF_AB (default 0; 1: the A/B table of
#   benchmarks/ab_kernels.py after the bench)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
export FLASHINFER_USE_CUDA_NORM=1
LIMIT=${LTX_PERF_LIMIT:-570}   # the whole script's target in seconds
OPS=${LTX_PERF_OPS:-adaln,gated_residual,rmsnorm}
{
  device_env
} | tee "$OUT/env.txt"
export LTX_ARCH=${LTX_ARCH:-native}
python3 benchmarks/bench_ops.py --warm-peers > "$OUT/warm_peers.log" 2>&1 &
python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 14 > "$OUT/build_cuda.log" 2>&1 \
  || { tail -40 "$OUT/build_cuda.log"; exit 1; }
wait
echo "build done at ${SECONDS}s"
save_peer_cache
grep -E "registers|spill" "$OUT/build_cuda.log" | head -5

SO=$(ls build/*-cu1*/_ltx_kernels_*.so | head -1)
timeout 60 python3 tools/sass_mix.py "$SO" --match "${LTX_SASS_MATCH:-adaln_kernel|gated_residual_kernel|rms_norm_kernel}" \
  --dump "$OUT/sass.txt" > "$OUT/sass_mix.txt" 2>&1
echo "sass mix: $(grep -c '^==' "$OUT/sass_mix.txt") kernels at ${SECONDS}s"
grep -A2 -E "== .*(adaln_kernel<.*bfloat16, 8>.*1, false, false|adaln_kernel<.*__half, 8>.*1, false, false)" "$OUT/sass_mix.txt" | head -12

timeout "${LTX_PERF_BENCH_S:-150}" python3 benchmarks/bench_ops.py --out "$OUT" --ops "$OPS" --quick \
  --dtype bf16,fp16 --budget-s $(( ${LTX_PERF_BENCH_S:-150} - 40 )) > "$OUT/bench.log" 2>&1
echo "bench rc=$? at ${SECONDS}s"
sed -n '/### Summary/,/### All/p' "$OUT/results.md" 2>/dev/null | head -60

if [ "${LTX_PERF_AB:-0}" = 1 ]; then
  # our kernel variants and peers back to back, both cold-L2 methods (benchmarks/ab_kernels.py)
  timeout 150 python3 benchmarks/ab_kernels.py --rounds 3 > "$OUT/ab.txt" 2>&1
  echo "ab rc=$? at ${SECONDS}s"
  grep -v Warning "$OUT/ab.txt" | tail -60
fi

if [ "${LTX_PERF_NCU:-1}" = 1 ]; then
  # the build is there, so device_profile.sh only profiles
  LTX_PROF_DTYPES=bfloat16 LTX_PROF_OPS="$OPS" LTX_PROF_TIMEOUT=100 LTX_PROF_LAUNCHES=12 \
    bash tools/device_profile.sh | head -80
  echo "ncu done at ${SECONDS}s"
fi

left=$(( LIMIT - SECONDS ))
if [ "$left" -gt 40 ]; then
  timeout "$left" bash tools/dev.sh test -q -rfE --maxfail=30 ${LTX_PERF_TESTS:+-k "$LTX_PERF_TESTS"} \
    > "$OUT/pytest.log" 2>&1
  echo "pytest rc=$? at ${SECONDS}s"
  tail -30 "$OUT/pytest.log"
fi
# The device tool brings back 8 files: the logs go back as one archive.
bundle_logs env.txt warm_peers.log build_cuda.log sass.txt sass_mix.txt bench.log
