"""The kernels torch.compile (inductor) generates for the peer expressions of bench_ops.py,
at the issue's shapes: to read what the peer that beats us does (launch shape, loads, eviction
hints, rows per program), not to time it (bench_ops.py / ab_kernels.py time).

    python benchmarks/inductor_code.py --out DIR [--cases rope_ltx_qk_pair,adaln_token]

Writes DIR/<case>.py (inductor's output code: Triton kernels and the call wrapper),
DIR/best_configs.txt (the autotuned launch configs of this process's kernels, from the
inductor cache) and DIR/triton_ptx.tgz (their PTX and metadata from the Triton cache).
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import glob
import os
import sys
import tarfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ops import (ref_adaln_rms, ref_gated_residual, ref_geglu_tanh, ref_rms_diffusers,  # noqa: E402
                       ref_rms_llama, ref_rope_llama, ref_rope_ltx, ref_rope_ltx_qk_pair)

BF16 = torch.bfloat16


def _r(*shape, dtype=BF16, scale=1.0):
    return torch.randn(*shape, device="cuda", dtype=torch.float32).mul_(scale).to(dtype)


def cases():
    """name -> (function, argument factory), the shapes of bench_ops.py's LTX / Llama cases."""
    b, s, d = 2, 8064, 2048
    f32 = torch.float32

    def llama_qk():
        q = _r(1, 8192, 32, 128).transpose(1, 2)  # transformers' [B, S, H, D] storage
        k = _r(1, 8192, 8, 128).transpose(1, 2)
        return q, k, _r(1, 8192, 128), _r(1, 8192, 128)

    return {
        "rope_ltx_qk_pair": (ref_rope_ltx_qk_pair, lambda: (_r(b, s, d), _r(b, s, d), _r(b, s, d // 2, dtype=f32),
                                                            _r(b, s, d // 2, dtype=f32))),
        "rope_ltx": (ref_rope_ltx, lambda: (_r(b, s, d), _r(b, s, d, dtype=f32), _r(b, s, d, dtype=f32))),
        "adaln_token": (ref_adaln_rms, lambda: (_r(b, s, d), _r(b, s, d, scale=0.1), _r(b, s, d, scale=0.1))),
        "adaln_broadcast": (ref_adaln_rms, lambda: (_r(b, s, d), _r(b, 1, d, scale=0.1), _r(b, 1, d, scale=0.1))),
        "gated_broadcast": (ref_gated_residual, lambda: (_r(b, s, d), _r(b, s, d), _r(b, 1, d, scale=0.1))),
        "gated_token": (ref_gated_residual, lambda: (_r(b, s, d), _r(b, s, d), _r(b, s, d, scale=0.1))),
        "rms_ltx": (lambda x: ref_rms_diffusers(x, None, 1e-6), lambda: (_r(b, s, d),)),
        "rms_llama_8192": (lambda x, w: ref_rms_llama(x, w, 1e-6), lambda: (_r(4096, 8192), _r(8192))),
        "rms_per_head_128": (lambda x, w: ref_rms_llama(x, w, 1e-6), lambda: (_r(8064, 32, 128), _r(128))),
        "rope_llama": (ref_rope_llama, llama_qk),
        "geglu": (ref_geglu_tanh, lambda: (_r(16128, 16384),)),
    }


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="", help="comma list (default: all)")
    args = ap.parse_args(argv)
    from torch._inductor.utils import run_and_get_code

    os.makedirs(args.out, exist_ok=True)
    start = time.time()
    table = cases()
    names = [n for n in args.cases.split(",") if n] or list(table)
    for name in names:
        fn, make = table[name]
        torch._dynamo.reset()
        compiled = torch.compile(fn, dynamic=False)
        with torch.no_grad():
            _, code = run_and_get_code(compiled, *make())
        with open(os.path.join(args.out, f"{name}.py"), "w") as f:
            f.write("\n\n# ---- next module ----\n\n".join(code))
        print(f"{name}: {len(code)} module(s), {sum(c.count('@triton.jit') for c in code)} Triton kernel(s)")
    torch.cuda.synchronize()

    # The launch configs autotuning picked, and the Triton cache entries written by this process.
    from torch._inductor.runtime.runtime_utils import cache_dir

    with open(os.path.join(args.out, "best_configs.txt"), "w") as f:
        for path in sorted(glob.glob(os.path.join(cache_dir(), "**", "*.best_config"), recursive=True)):
            if os.path.getmtime(path) >= start:
                f.write(f"{os.path.basename(path)}: {open(path).read().strip()}\n")
    triton_cache = os.environ.get("TRITON_CACHE_DIR", os.path.expanduser("~/.triton/cache"))
    with tarfile.open(os.path.join(args.out, "triton_ptx.tgz"), "w:gz") as tar:
        for path in glob.glob(os.path.join(triton_cache, "**", "*"), recursive=True):
            if path.endswith((".ptx", ".json")) and os.path.getmtime(path) >= start:
                tar.add(path, arcname=os.path.relpath(path, triton_cache))


if __name__ == "__main__":
    main()
