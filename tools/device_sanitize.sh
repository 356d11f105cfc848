#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck, initcheck) over the GPU tests of every op family,
# on the GPU machine (device tool, carry .whl/). The CUDA caching allocator is turned off
# (PYTORCH_NO_CUDA_MEMORY_CACHING=1) so that an out-of-bounds access lands outside any
# allocation instead of inside a cached pool block; torch.compile / CUDA-graph / >2^31 and
# model-level tests are deselected (inductor's Triton kernels and multi-GB tensors are not
# what is checked here, and they take minutes under the tool).
#   LTX_SAN_TOOLS (default "memcheck racecheck initcheck"), LTX_SAN_K (pytest -k expression;
#   racecheck and initcheck add "and bfloat16"),
#   LTX_SAN_FILES (default: the op-family test files incl. backward)
#   LTX_SAN_BUDGET (default 560 s for the whole call): after the build, memcheck gets half of
#   what is left, racecheck and initcheck a quarter each (a tool cut short by its timeout
#   exits 124 and its log says how far it got; only a tool that finished counts as clean).
set -uo pipefail
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=1
OUT=${OUT:-/tmp/ltx-out}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
[ -x "$SAN" ] || { echo "compute-sanitizer not found"; exit 1; }
python3 tools/build.py --backend cuda --arch "${LTX_ARCH:-native}" -j 12 > /tmp/build_cuda.log 2>&1 \
  || { tail -40 /tmp/build_cuda.log; exit 1; }
FILES=${LTX_SAN_FILES:-$(ls tests/test_{rmsnorm,activation,rope,adaln,qk_prologue}*.py)}
K=${LTX_SAN_K:-"cuda and not gpu_ and not compile and not graph and not opcheck"}
rc=0
left=$(( ${LTX_SAN_BUDGET:-560} - SECONDS ))
echo "build done at ${SECONDS}s; ${left}s left for the tools"
for tool in ${LTX_SAN_TOOLS:-memcheck racecheck initcheck}; do
  share=$(( left / 4 )); [ "$tool" = memcheck ] && share=$(( left / 2 ))
  extra=() k=$K
  [ "$tool" = racecheck ] && extra=(--racecheck-report all)
  # racecheck / initcheck are slower: bf16 cases only (the same kernels, one dtype).
  [ "$tool" != memcheck ] && k="$K and bfloat16"
  echo "=== $tool ($(date -u +%T))"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 LOCAL_KERNELS=org/ltx-kernels=$PWD \
    timeout "$share" "$SAN" --tool "$tool" "${extra[@]}" --target-processes all --error-exitcode 9 \
      --print-limit 20 --log-file "$OUT/sanitizer_$tool.log" \
    python3 -m pytest -q -p no:cacheprovider -m kernels_ci -k "$k" $FILES 2>&1 | tail -4
  r=${PIPESTATUS[0]}
  echo "$tool: exit $r; $(grep -c 'ERROR SUMMARY: 0 errors' "$OUT/sanitizer_$tool.log" 2>/dev/null) clean summaries," \
       "$(grep -E 'ERROR SUMMARY: [1-9]' "$OUT/sanitizer_$tool.log" 2>/dev/null | head -3)"
  [ "$r" -eq 0 ] || rc=$r
done
exit $rc
