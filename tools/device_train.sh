#!/usr/bin/env bash
# One call on the GPU machine (the device tool) for the training work: build the CUDA variant
# for the local GPU (+ the CPU variant beside it), run the backward/training tests on CUDA, the
# forward + backward op benchmark and the short fine-tuning run. Carry .whl/.
#   LTX_TRAIN_TESTS: pytest -k expression (default: backward or training)
#   LTX_FT_STEPS: fine-tuning steps (default 200)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
export LTX_ARCH=${LTX_ARCH:-native}
{
  device_env
  python3 tools/build.py --backend cpu -j 4 > /tmp/build_cpu.log 2>&1 &
  python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 12 > /tmp/build_cuda.log 2>&1 \
    || { tail -40 /tmp/build_cuda.log; exit 1; }
  wait
  echo "build done at ${SECONDS}s"
  bash tools/dev.sh test -q -rfE --maxfail=20 -k "${LTX_TRAIN_TESTS:-backward or training}" 2>&1 | tail -40
  echo "tests done at ${SECONDS}s"
  python3 benchmarks/bench_backward.py --out "$OUT" 2>&1 | tail -20
  echo "bench_backward done at ${SECONDS}s"
  python3 benchmarks/finetune.py --steps "${LTX_FT_STEPS:-200}" --out "$OUT" 2>&1 | tail -20
  echo "finetune done at ${SECONDS}s"
} 2>&1 | tee "$OUT/train.log" | tail -100
