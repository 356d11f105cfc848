# Sourced by every tools/device_*.sh script (the GPU machine, through the device tool): the
# environment, $OUT, and the wheels carried in .whl/ (kernels, Liger, FlashInfer, diffusers,
# ...; the machine has no network) installed into /tmp/site on PYTHONPATH. Leaves the working
# directory at the repository root. `device_env` prints the machine (date, GPU, torch, nvcc).
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
OUT=${OUT:-/tmp/ltx-out}
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ":${PYTHONPATH:-}:" == *":/tmp/site:"* ]]; then
  :  # a device script sourcing this already installed them (device_perf.sh -> device_profile.sh)
elif ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  echo "warning: no .whl/ carried: kernels (needed), Liger and FlashInfer (peers) will be missing" >&2
fi

device_env() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version | tail -1
}
