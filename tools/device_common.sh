# Sourced by every tools/device_*.sh script (the GPU machine, through the device tool): the
# environment, $OUT, and the wheels carried in .whl/ (kernels, Liger, FlashInfer, diffusers,
# ...; the machine has no network) installed into /tmp/site on PYTHONPATH. Leaves the working
# directory at the repository root. `device_env` prints the machine (date, GPU, torch, nvcc).
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 HF_HUB_OFFLINE=${HF_HUB_OFFLINE:-1}
# LTX_REQUIRE_CARD=H200: run only on a GPU whose name contains it, else exit 0 at once (a call
# named `nvidia-h200` may land on an H100; exiting before the build costs ~30 s of device time
# instead of a whole bench on the wrong card).
# LTX_ELSE_PEER_CACHE=1 with it: on the wrong card, when no .devcache/ was carried, fill
# FlashInfer's JIT cache instead (~80 s; its sm_90 modules built on an H100 serve an H200) and
# bring it back as $OUT/flashinfer_cache.tgz, then exit 0: copy that to .devcache/ here and
# carry .devcache in the H200 call, whose build then runs without FlashInfer's JIT beside it
# (2026-12-06 17:48, H100: 106 s beside it, 74 s alone).
_ltx_fill_peer_cache=0
if [ -n "${LTX_REQUIRE_CARD:-}" ]; then
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
  if [[ "$card" != *"$LTX_REQUIRE_CARD"* ]]; then
    if [ "${LTX_ELSE_PEER_CACHE:-0}" = 1 ] && [ -n "$card" ] &&
       [ ! -f "$(dirname "${BASH_SOURCE[0]}")/../.devcache/flashinfer_cache.tgz" ]; then
      echo "LTX_REQUIRE_CARD=$LTX_REQUIRE_CARD: this machine has '$card'; filling FlashInfer's JIT cache instead"
      _ltx_fill_peer_cache=1  # after the wheels are installed, at the end of this file
    else
      echo "LTX_REQUIRE_CARD=$LTX_REQUIRE_CARD: this machine has '${card:-no GPU}'; nothing run"
      exit 0
    fi
  fi
fi
OUT=${OUT:-/tmp/ltx-out}
mkdir -p "$OUT"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [[ ":${PYTHONPATH:-}:" == *":/tmp/site:"* ]]; then
  :  # a device script sourcing this already installed them (device_perf.sh -> device_profile.sh)
elif ls .whl/*.whl >/dev/null 2>&1; then
  # Installed once per machine: a warm machine's next call finds the same wheels in place.
  wheels=$(ls -l .whl/*.whl | sha256sum | cut -c1-16)
  if [ "$(cat /tmp/site/.ltx_wheels 2>/dev/null)" != "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/site .whl/*.whl || exit 1
    # pip stamps every file it writes with the current time, so FlashInfer's JIT cache (carried
    # in .devcache, or left by the previous call) looked older than its sources and ninja
    # rebuilt it all in every call: rmsnorm 42-50 s, rope 47-58 s beside our build (warm_peers.log
    # of 2026-12-07 15:13, 18:19 and 18:27, the last on a warm machine with the cache in place).
    # Old times on the installed files leave those outputs current; nothing else reads them.
    find /tmp/site -exec touch -h -d 2000-01-01 {} +
    echo "$wheels" > /tmp/site/.ltx_wheels
  fi
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
  echo "warning: no .whl/ carried: kernels (needed), Liger and FlashInfer (peers) will be missing" >&2
fi

# FlashInfer's JIT modules from an earlier call (carry .devcache/, git-ignored): compiling them
# beside our build tripled its time (2026-12-04: 150 s vs 43 s alone). save_peer_cache puts
# the cache into $OUT; copy it to .devcache/ here and carry that folder in later calls.
FI_CACHE_TGZ=.devcache/flashinfer_cache.tgz
if [ -f "$FI_CACHE_TGZ" ] && [ ! -d "$HOME/.cache/flashinfer" ]; then
  tar -xzf "$FI_CACHE_TGZ" -C "$HOME" && echo "restored FlashInfer JIT cache from $FI_CACHE_TGZ" >&2
fi
save_peer_cache() {
  [ -d "$HOME/.cache/flashinfer" ] || return 0
  tar -czf "$OUT/flashinfer_cache.tgz" -C "$HOME" .cache/flashinfer
  local size
  size=$(stat -c %s "$OUT/flashinfer_cache.tgz")
  if [ "$size" -gt 15000000 ]; then
    echo "FlashInfer cache ${size} B: too large to bring back, dropped" >&2
    rm -f "$OUT/flashinfer_cache.tgz"
  fi
}

# pytest_stage NAME SECONDS -k-EXPRESSION: the GPU tests matching the expression, within
# SECONDS, into $OUT/NAME.log; prints the exit status and the failures. dev.sh builds first:
# for LTX_ARCH, native unless set, so that it reuses a `build.py --arch native` build (unset, it
# rebuilt every arch of build.toml: 268 s of a 300 s stage on an H100, 2026-12-06 22:42).
pytest_stage() {
  local name=$1 secs=$2 expr=$3
  [ "$secs" -gt 15 ] || { echo "$name: no time left"; return; }
  LTX_ARCH=${LTX_ARCH:-native} timeout "$secs" bash tools/dev.sh test -q -rfE --maxfail=20 -k "$expr" > "$OUT/$name.log" 2>&1
  echo "$name rc=$? at ${SECONDS}s"
  grep -E "passed|failed|error" "$OUT/$name.log" | tail -5
  grep -E "^(FAILED|ERROR)" "$OUT/$name.log" | head -20
}

# bundle_logs FILE...: moves the named files of $OUT (those that exist) into $OUT/logs.tgz.
bundle_logs() {
  local have=() f
  for f in "$@"; do [ -f "$OUT/$f" ] && have+=("$f"); done
  [ ${#have[@]} -gt 0 ] || return 0
  tar -czf "$OUT/logs.tgz" -C "$OUT" "${have[@]}" && (cd "$OUT" && rm -f "${have[@]}")
}

device_env() {
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv,noheader
  python3 -c "import torch, sys; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'python', sys.version.split()[0])"
  nvcc --version | tail -1
}

# LTX_ELSE_PEER_CACHE (above): the wrong card's one job.
if [ "$_ltx_fill_peer_cache" = 1 ]; then
  FLASHINFER_USE_CUDA_NORM=1 timeout 240 python3 benchmarks/bench_ops.py --warm-peers
  echo "warm-peers rc=$? at ${SECONDS}s"
  save_peer_cache
  ls -l "$OUT"
  exit 0
fi
