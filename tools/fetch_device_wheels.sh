#!/usr/bin/env bash
# Download into .whl/ (git-ignored) every wheel a GPU-machine call needs that the device
# image lacks: Python 3.12, manylinux x86_64, --no-deps (the image already has torch,
# triton, numpy, matplotlib, transformers, huggingface-hub, ...; see
# /work/.library/device/KINDS.md "Python packages already there").
#
#   bash tools/fetch_device_wheels.sh          # idempotent: pip skips files already there
#
# Then carry ".whl" in the device call; tools/device_run.sh and tools/device_bench.sh
# install them with `pip install --no-index --no-deps --target ...`.
#
# What each is for:
#   kernels, tomlkit, kernel-abi-check   loading the build, the Hub-rule tests
#   diffusers                            the diffusers references (tests, benchmark)
#   liger-kernel                         benchmark peer (Triton; torch + triton are on the image)
#   cryptography, cffi, pycparser        `kernels benchmark` (kernels.cli imports cryptography)
#   flashinfer-python, apache-tvm-ffi    benchmark peer (CUDA JIT path: norm/rope/activation
#                                        compile on first call with the image's nvcc + ninja)
# Not fetched on purpose: flashinfer-cubin (437 MB, only trtllm-gen attention/GEMM/MoE),
# nvidia-cutlass-dsl (only FlashInfer's CuTe DSL norms; we force FLASHINFER_USE_CUDA_NORM=1),
# cuda-tile, nvidia-cudnn-frontend (not imported by the modules the benchmark uses).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
DEST=.whl
mkdir -p "$DEST"

WHEELS=(
  kernels==0.17.2
  tomlkit==0.15.2
  kernel-abi-check==0.14.1
  diffusers==0.42.1
  liger-kernel==0.8.5
  flashinfer-python==0.6.13
  "apache-tvm-ffi==0.1.15.post2"   # flashinfer 0.6.13 wants <0.2, !=0.1.8
  cryptography==46.0.3             # kernels.cli (the `kernels benchmark` command) imports it
  cffi==2.0.0
  pycparser==2.23
)

PLATFORMS=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 \
         manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  PLATFORMS+=(--platform "$p")
done

"$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp "${PLATFORMS[@]}" -d "$DEST" "${WHEELS[@]}"

# One version of each distribution: two stop the whole --no-deps install on the device.
dups=$(ls "$DEST"/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [ -n "$dups" ]; then
  echo "error: several versions in $DEST of: $dups (delete the old ones)" >&2
  exit 1
fi

total=$(du -cb "$DEST"/*.whl | tail -1 | cut -f1)
ls -l "$DEST"/*.whl | awk '{printf "  %8.1f MB  %s\n", $5 / 1e6, $NF}'
printf 'total: %.1f MB in %s (the device tool carries at most 64 MiB per call, tree included)\n' \
  "$(echo "$total / 1000000" | bc -l)" "$DEST"
if [ "$total" -gt 60000000 ]; then
  echo "error: over 60 MB" >&2
  exit 1
fi
