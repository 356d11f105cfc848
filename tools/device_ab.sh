#!/usr/bin/env bash
# One short call on the GPU machine (device tool, carry .whl/) to judge a kernel candidate:
# build the CUDA variant for the local GPU, run the tests that name the candidates first
# (LTX_AB_FIRST, a pytest -k expression), benchmarks/host_overhead.py, then
# benchmarks/ab_kernels.py for each op of
# LTX_AB_OPS (every variant checked against eager, then timed with its peers in one
# process, clean cold-L2 flush), then the wider tests (LTX_AB_TESTS) with whatever time is
# left of LTX_AB_LIMIT seconds. Each stage has its own timeout so earlier results come back.
#   LTX_AB_OPS (default adaln,rmsnorm,rmsnorm_small,act,rope; empty: none; also rope_small; op:match for
#   only the cases whose name contains match, e.g. rmsnorm:x32x or qk:[B,S,D]; the *_small ops
#   under graph replay too), LTX_AB_ROUNDS (3), LTX_AB_S (per op at most, 100; each op gets
#   an equal share of the time left, and one with under 30 s is skipped with a note),
#   LTX_AB_VARIANTS (only our variants whose name contains one of these comma-separated
#   strings, for every op; default all), LTX_AB_FIRST (default: the -k expression of the
#   candidates' tests, FIRST below),
#   LTX_AB_FIRST_S (its time limit, 150), LTX_AB_HOST (0: skip host_overhead.py),
#   LTX_AB_TESTS (default "adaln or rmsnorm or gelu or geglu or rope"), LTX_AB_LIMIT (default 540)
set -uo pipefail
source "$(dirname "$0")/device_common.sh"
LIMIT=${LTX_AB_LIMIT:-540}
FIRST=${LTX_AB_FIRST:-direct_kernel or weight_early or table_path or packed_form or pair_tables or no_python_below or graph_recorded}
device_env | tee "$OUT/env.txt"
export LTX_ARCH=${LTX_ARCH:-native}
python3 tools/build.py --backend cuda --arch "$LTX_ARCH" -j 14 > "$OUT/build_cuda.log" 2>&1 \
  || { tail -40 "$OUT/build_cuda.log"; exit 1; }
echo "build done at ${SECONDS}s"

pytest_stage pytest_first "${LTX_AB_FIRST_S:-150}" "$FIRST"

# Host time per call of every op on this machine's CPU + GPU (the small-shape eager rows).
if [ "${LTX_AB_HOST:-1}" != 0 ]; then
  timeout 60 python3 benchmarks/host_overhead.py --device cuda --calls 5000 > "$OUT/host_overhead.txt" 2>&1
  echo "host_overhead rc=$? at ${SECONDS}s"; tail -14 "$OUT/host_overhead.txt"
fi

# An empty LTX_AB_OPS times nothing (tests only); unset, the default list. (`:-` ran every op
# for an empty value, 2026-12-07 08:49.)
OPS=${LTX_AB_OPS-adaln,rmsnorm,rmsnorm_small,act,rope}
IFS=',' read -ra pieces <<< "$OPS"  # commas only: a match may hold spaces (act:gelu tanh)
# A piece that does not look like an op's name (lower-case word, then ':' or its end) belongs
# to the match before it, which held a comma (qk:[B,S,D]; 2026-12-07 01:37 it became ops "S"
# and "D]"). No list of ops here: ab_kernels.py's --op choices stay the one list, and an
# unknown name still fails there, loudly.
ops=()
for piece in "${pieces[@]}"; do
  if [[ ${#ops[@]} -gt 0 && ! "$piece" =~ ^[a-z_]+(:|$) ]]; then
    ops[-1]+=",$piece"
  else
    ops+=("$piece")
  fi
done
for i in "${!ops[@]}"; do
  # op:match (e.g. rmsnorm:x32x) times only that op's cases whose name contains match.
  op=${ops[$i]%%:*}
  match=""
  [[ "${ops[$i]}" == *:* ]] && match=${ops[$i]#*:}
  # An equal share of the time left (30 s kept for the last tests), at most LTX_AB_S.
  share=$(( (LIMIT - 30 - SECONDS) / (${#ops[@]} - i) ))
  secs=$(( share < ${LTX_AB_S:-100} ? share : ${LTX_AB_S:-100} ))
  [ "$secs" -ge 30 ] || { echo "ab $op: no time left (run it in another call: LTX_AB_OPS=$op)"; continue; }
  methods=clean
  case "$op" in *_small) methods=graph,clean ;; esac  # decode-sized calls: graph replay too
  timeout "$secs" python3 benchmarks/ab_kernels.py --op "$op" --match "$match" \
    --rounds "${LTX_AB_ROUNDS:-3}" --methods "$methods" --variants "${LTX_AB_VARIANTS:-}" > "$OUT/ab_$op.txt" 2>&1
  echo "ab $op rc=$? at ${SECONDS}s"
  grep -v -i warning "$OUT/ab_$op.txt" | tail -48  # the last table printed
done

pytest_stage pytest_rest $(( LIMIT - SECONDS )) "(${LTX_AB_TESTS:-adaln or rmsnorm or gelu or geglu or rope}) and not ($FIRST)"
# The device tool brings back at most 8 files: logs go back as one archive, the A/B tables as is.
bundle_logs env.txt build_cuda.log pytest_first.log pytest_rest.log host_overhead.txt
