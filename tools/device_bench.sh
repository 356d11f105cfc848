#!/usr/bin/env bash
# One call on the GPU machine (the device tool): build the CUDA variant for the local GPU,
# install the carried wheels, run benchmarks/bench_ops.py, copy the results to $OUT.
#
#   bash tools/fetch_device_wheels.sh      # here, once: fills .whl/ (~27 MB)
#   device tool: command "bash tools/device_bench.sh", carry [".whl"]
#   extra arguments go to bench_ops.py:  bash tools/device_bench.sh --quick --ops rmsnorm
#
# Fits one 600 s call: FlashInfer's JIT modules compile (bench_ops.py --warm-peers) while
# our CUDA variant builds, and bench_ops.py gets a --budget-s that stops it starting new
# cases in time to write its tables (cases not run are listed). LTX_BENCH_BUDGET (default
# 560) is the whole script's target in seconds.
# LTX_BENCH_TESTS (a pytest -k expression): those GPU tests first, after the build, within
# LTX_BENCH_TESTS_S seconds (default 150), log in logs.tgz (tests.log); the bench gets the rest.
# LTX_BENCH_RUNS=3: three runs in the call's time and their medians (benchmarks/median_runs.py),
# e.g. LTX_BENCH_RUNS=3 bash tools/device_bench.sh --quick --dtype bf16 --ops rmsnorm,adaln.
# $OUT afterwards: results.md (the dated section), results.json, bench_ops.png, RESULTS.md
# (benchmarks/RESULTS.md with the section prepended: copy it into the repo), and logs.tgz
# (env.txt, build_cuda.log, warm_peers.log, bench.log, kernels_benchmark.log when time was left).
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
export FLASHINFER_USE_CUDA_NORM=1   # FlashInfer's CUDA JIT norm (no cutlass-dsl carried)
BUDGET=${LTX_BENCH_BUDGET:-560}
{
  device_env
  python3 -m pip list 2>/dev/null | grep -iE '^(kernels|liger|flashinfer|apache-tvm|triton|diffusers|transformers|matplotlib) '
} | tee "$OUT/env.txt"

export LTX_ARCH=${LTX_ARCH:-native}
python3 benchmarks/bench_ops.py --warm-peers > "$OUT/warm_peers.log" 2>&1 &
warm_pid=$!
python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 12 > "$OUT/build_cuda.log" 2>&1
build_rc=$?
wait "$warm_pid"
echo "build rc=$build_rc at ${SECONDS}s; warm-peers:"; cat "$OUT/warm_peers.log"
if [ "$build_rc" -ne 0 ]; then
  tail -40 "$OUT/build_cuda.log"
  exit 1
fi

[ -n "${LTX_BENCH_TESTS:-}" ] && pytest_stage tests "${LTX_BENCH_TESTS_S:-150}" "$LTX_BENCH_TESTS"

left=$((BUDGET - SECONDS - 45))   # 45 s for the last case, tables, plot, copies
[ "$left" -lt 60 ] && left=60
set -o pipefail
RUNS=${LTX_BENCH_RUNS:-1}
if [ "$RUNS" -gt 1 ]; then
  # The issue's medians over runs: RUNS separate processes, each with an equal share of the
  # time, then benchmarks/median_runs.py (their medians, the targets on those) prepends the
  # section. Back: run<i>/results.json, results.md / .json of the medians, RESULTS.md, logs.tgz.
  per=$(( left / RUNS ))
  # Each run needs time for its process, the copy ceiling and torch.compile's first
  # compiles before its first case: under ~60 s a run times nothing (13:16, 2026-12-05).
  [ "$per" -ge 60 ] || echo "warning: $per s per run (LTX_BENCH_BUDGET=$BUDGET): runs may time nothing; raise it or pass fewer --ops"
  for r in $(seq 1 "$RUNS"); do
    python3 benchmarks/bench_ops.py --out "$OUT/run$r" --no-results --budget-s $(( per > 40 ? per - 30 : 10 )) "$@" \
      > "$OUT/bench$r.log" 2>&1
    echo "run $r rc=$? at ${SECONDS}s"
    rm -f "$OUT/run$r/results.md" "$OUT/run$r/bench_ops.png"
  done
  python3 benchmarks/median_runs.py "$OUT"/run*/results.json --out "$OUT" 2>&1 | tee "$OUT/bench.log"
  bench_rc=$?
  cp benchmarks/RESULTS.md "$OUT/RESULTS.md" 2>/dev/null
  sed -n '/### Summary/,/### All/p' "$OUT/results.md" 2>/dev/null | head -100
  bundle_logs env.txt warm_peers.log build_cuda.log tests.log bench.log $(cd "$OUT" && ls bench[0-9]*.log 2>/dev/null)
  exit "$bench_rc"
fi
python3 benchmarks/bench_ops.py --out "$OUT" --budget-s "$left" "$@" 2>&1 | tee "$OUT/bench.log"
bench_rc=$?
cp benchmarks/RESULTS.md "$OUT/RESULTS.md" 2>/dev/null

# The Hub's `kernels benchmark` format on the same build, if time is left (~30 s).
if [ $((BUDGET - SECONDS)) -gt 60 ]; then
  timeout $((BUDGET - SECONDS - 10)) python3 tools/kernels_cli_offline.py \
    benchmark ./ --iterations 20 --warmup 3 > "$OUT/kernels_benchmark.log" 2>&1 \
    || echo "kernels benchmark: rc=$? (see kernels_benchmark.log)"
  tail -25 "$OUT/kernels_benchmark.log"
fi
echo "--- summary (full tables in \$OUT/results.md) at ${SECONDS}s"
sed -n '/### Summary/,/### All/p' "$OUT/results.md" 2>/dev/null | head -100
# At most 8 files come back: the logs as one archive.
bundle_logs env.txt build_cuda.log warm_peers.log tests.log bench.log kernels_benchmark.log
exit "$bench_rc"
