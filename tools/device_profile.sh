#!/usr/bin/env bash
# One call on the GPU machine (device tool, carry .whl/): build the CUDA variant for the local
# GPU and profile the row kernels (ours and torch.compile's Triton kernels of the same
# expression) with Nsight Compute at the LTX-Video shape. Counters, not times: the times
# are bench_ops.py's. $OUT/ncu_<dtype>.txt: one report per kernel launch profiled.
#   LTX_PROF_OPS (default adaln,gated_residual,rmsnorm; also gelu_tanh, geglu, rmsnorm_small,
#   rmsnorm_llama, rmsnorm_8192, rope_llama, rope_ltx_qk_pair, qk_prologue, adaln_layer:
#   benchmarks/profile_ops.py), LTX_PROF_DTYPES (bfloat16,float16),
#   LTX_PROF_TIMEOUT (seconds per dtype, default 240), LTX_PROF_LAUNCHES (default 16),
#   LTX_PROF_KERNELS (ncu kernel-name regex, default 'adaln|gated|rms|triton'),
#   LTX_PROF_CACHE (ncu --cache-control: all = caches flushed before each kernel, the default,
#   like bench_ops' cold-L2 timing; none = warm, like its graph replay),
#   LTX_PROF_STALLS (1, the default: also every warp-stall reason per issued instruction, e.g.
#   long_scoreboard = waiting on global memory, barrier, no_instruction = instruction-cache
#   misses, imc_miss = constant-cache misses; 0: the sections only)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
if [ ! -d build ] || [ -z "$(ls build 2>/dev/null)" ] || [ "${LTX_REBUILD:-0}" = 1 ]; then
  python3 tools/build.py --backend cuda --arch "${LTX_ARCH:-native}" -j 12 > "$OUT/build_cuda.log" 2>&1 \
    || { tail -40 "$OUT/build_cuda.log"; exit 1; }
fi
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ncu not found"; exit 1; }
STALLS=()
[ "${LTX_PROF_STALLS:-1}" = 1 ] && STALLS=(--metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio')
SECTIONS=(--section SpeedOfLight --section Occupancy --section LaunchStats
          --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis
          --section ComputeWorkloadAnalysis --section InstructionStats)
for dt in $(echo "${LTX_PROF_DTYPES:-bfloat16,float16}" | tr , ' '); do
  # profile_ops.py launches each kernel twice per op (ours, then inductor's): both reports kept.
  LOCAL_KERNELS=org/ltx-kernels=$PWD timeout "${LTX_PROF_TIMEOUT:-240}" "$NCU" --clock-control none \
    --cache-control "${LTX_PROF_CACHE:-all}" "${SECTIONS[@]}" ${STALLS[@]+"${STALLS[@]}"} --kernel-name-base demangled --kernel-name "regex:${LTX_PROF_KERNELS:-adaln|gated|rms|triton}" \
    --launch-skip 0 --launch-count "${LTX_PROF_LAUNCHES:-16}" \
    python3 benchmarks/profile_ops.py --compile --dtypes "$dt" \
      --ops "${LTX_PROF_OPS:-adaln,gated_residual,rmsnorm}" > "$OUT/ncu_$dt.txt" 2>&1
  echo "$dt: ncu exit $?; $(grep -c 'Duration' "$OUT/ncu_$dt.txt") reports"
  grep -E '^  [a-zA-Z_]|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per|Executed Ipc A|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|stalled_|L1/TEX Hit|L2 Hit' \
    "$OUT/ncu_$dt.txt" | head -400
done
