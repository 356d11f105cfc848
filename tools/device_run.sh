#!/usr/bin/env bash
# One call on the GPU machine (the device tool): build the CUDA variant for the
# local GPU and the CPU variant, run the whole test suite on CUDA, then the
# example; logs go to $OUT. Usage: bash tools/device_run.sh [extra pytest args]
# Carry .whl/ (kernels, tomlkit, diffusers wheels): the machine has no network.
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
{
  device_env
} | tee "$OUT/env.txt"

export LTX_ARCH=${LTX_ARCH:-native}  # dev.sh and example.py build with it
# The CPU variant (for the wrong-variant test) builds beside the README's test command.
python3 tools/build.py --backend cpu -j 6 > "$OUT/build_cpu.log" 2>&1 &
bash tools/dev.sh test -rfEs --durations=15 "$@" 2>&1 | tee "$OUT/pytest.log" | tail -60
wait
bash tools/dev.sh example 2>&1 | tee "$OUT/example.log" | tail -30
