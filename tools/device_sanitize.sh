#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, initcheck) over the GPU tests of every op family,
# on the GPU machine (device tool, carry .whl/). The CUDA caching allocator is turned off
# (PYTORCH_NO_CUDA_MEMORY_CACHING=1) so that an out-of-bounds access lands outside any
# allocation instead of inside a cached pool block; torch.compile / CUDA-graph / >2^31 and
# model-level tests are deselected (inductor's Triton kernels and multi-GB tensors are not
# what is checked here, and they take minutes under the tool).
# The three tools run side by side (one process each: the tools are CPU-bound, the GPU has
# room), each with a timeout; a tool cut short exits 124 and only a tool that finished with
# "ERROR SUMMARY: 0 errors" counts as clean.
#   LTX_SAN_TOOLS (default "memcheck racecheck initcheck")
#   LTX_SAN_K (pytest -k; default: the layout / size / misalignment / broadcast / empty /
#     gradient cases of every family, ~400 tests: where out-of-bounds and uninitialised reads
#     would come from); LTX_SAN_FILES (default: the op-family test files incl. backward)
#   LTX_SAN_BUDGET (default 560 s for the whole call)
#   LTX_SAN_BENCH_OPS: if set, bench_ops.py --quick for these ops first (same build)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$SAN" ] || { echo "compute-sanitizer not found"; exit 1; }
python3 tools/build.py --backend cuda --arch "${LTX_ARCH:-native}" -j 12 > /tmp/build_cuda.log 2>&1 \
  || { tail -40 /tmp/build_cuda.log; exit 1; }
FILES=${LTX_SAN_FILES:-$(ls tests/test_{rmsnorm,activation,rope,adaln,qk_prologue}*.py)}
EDGES="misaligned or odd or shapes or hidden_sizes or broadcast or empty or layout or strided or noncontig or grads_match or grad_vs or out_variant or tail or widths"
K=${LTX_SAN_K:-"cuda and not gpu_ and not compile and not graph and not opcheck and ($EDGES)"}
echo "build done at ${SECONDS}s"
if [ -n "${LTX_SAN_BENCH_OPS:-}" ]; then
  FLASHINFER_USE_CUDA_NORM=1 timeout 120 python3 benchmarks/bench_ops.py --out "$OUT" --ops "$LTX_SAN_BENCH_OPS" \
    --quick --dtype bf16,fp16 --no-peers --no-results --budget-s 80 > "$OUT/bench.log" 2>&1
  echo "bench rc=$? at ${SECONDS}s"
  sed -n '/### Summary/,/### All/p' "$OUT/results.md" 2>/dev/null | head -20
fi
left=$(( ${LTX_SAN_BUDGET:-560} - SECONDS - 10 ))
echo "${left}s left for the tools"
pids=()
for tool in ${LTX_SAN_TOOLS:-memcheck racecheck initcheck}; do
  extra=()
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 LOCAL_KERNELS=org/ltx-kernels=$PWD \
    timeout "$left" "$SAN" --tool "$tool" "${extra[@]}" --target-processes all --error-exitcode 9 \
      --print-limit 20 --log-file "$OUT/sanitizer_$tool.log" \
    python3 -m pytest -q -p no:cacheprovider -m kernels_ci -k "$K" $FILES > "$OUT/pytest_$tool.log" 2>&1 &
  pids+=("$tool:$!")
done
rc=0
for tp in "${pids[@]}"; do
  tool=${tp%%:*}
  wait "${tp##*:}"
  r=$?
  echo "=== $tool: exit $r at ${SECONDS}s; pytest: $(tail -1 "$OUT/pytest_$tool.log")"
  # memcheck/initcheck end with "ERROR SUMMARY: 0 errors", racecheck with "RACECHECK SUMMARY:
  # 0 hazards displayed (0 errors, 0 warnings)"; the summaries are echoed here because the
  # device tool may not bring the logs back.
  echo "    $(grep -cE 'ERROR SUMMARY: 0 errors|SUMMARY: 0 hazards' "$OUT/sanitizer_$tool.log" 2>/dev/null) clean summaries;" \
       "$(grep -E 'SUMMARY: [1-9]|hazards displayed \([1-9]|[1-9][0-9]* warnings\)' "$OUT/sanitizer_$tool.log" 2>/dev/null | head -3)"
  grep -E 'SUMMARY' "$OUT/sanitizer_$tool.log" 2>/dev/null | sort | uniq -c | head -5
  [ "$r" -eq 0 ] || rc=$r
done
exit $rc
