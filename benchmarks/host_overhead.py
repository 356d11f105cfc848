#!/usr/bin/env python3
"""Host time per call of each op on tiny inputs: what a small-shape eager call costs
before any kernel time (the dispatcher, the Python wrapper, the autograd kernel, the
launcher's checks).

    python benchmarks/host_overhead.py [--device cpu|cuda] [--calls 20000] [--rounds 5]

Each op runs on inputs of a few elements, so its kernel takes well under a microsecond
and the loop is host-bound: wall time over `calls` calls (CUDA: one synchronize at the
end; the launch queue never fills at these sizes), median over `rounds`. Three modes:
grad enabled with no input requiring grad (a plain forward outside no_grad, as
diffusers pipelines call it under no_grad but many users do not), torch.no_grad(), and
torch.inference_mode() (which skips the Autograd dispatch key). References in the same
run: torch.empty_like (one allocation through the dispatcher: a floor) and the eager
PyTorch expression of the op where it is one call (F.rms_norm, F.gelu).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tests.util import load_kernel  # noqa: E402  (the build users load, via get_kernel)


def cases(k, dev):
    t = lambda *s: torch.randn(*s, device=dev)  # noqa: E731
    x, w = t(4, 8), t(8)
    x3, sc, sh = t(2, 3, 8), t(2, 1, 8), t(2, 1, 8)
    cos, sin = t(3, 8), t(3, 8)
    q, kk = t(1, 2, 3, 8), t(1, 2, 3, 8)
    hc, hs = t(1, 3, 8), t(1, 3, 8)
    return [
        ("empty_like (floor)", lambda: torch.empty_like(x)),
        ("F.rms_norm", lambda: F.rms_norm(x, (8,), w, 1e-6)),
        ("rmsnorm", lambda: k.rmsnorm(x, w, 1e-6)),
        ("F.gelu tanh", lambda: F.gelu(x, approximate="tanh")),
        ("gelu_tanh", lambda: k.gelu_tanh(x)),
        ("geglu", lambda: k.geglu(x)),
        ("rope_interleaved", lambda: k.rope_interleaved(x3, cos, sin)),
        ("rope_rotate_half", lambda: k.rope_rotate_half(q, kk, hc, hs)),
        ("adaln", lambda: k.adaln(x3, sc, sh)),
        ("gated_residual", lambda: k.gated_residual(x3, x3, sc)),
        ("rmsnorm_rope_qk", lambda: k.rmsnorm_rope_qk(x3, x3, w, w, x3, x3)),
    ]


def per_call_us(fn, calls, rounds, sync):
    for _ in range(min(calls, 1000)):
        fn()
    sync()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(times)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    dev = args.device
    k = load_kernel()
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    modes = {
        "grad on": contextlib.nullcontext,
        "no_grad": torch.no_grad,
        "inference_mode": torch.inference_mode,
    }
    where = torch.cuda.get_device_name() if dev == "cuda" else f"CPU ({os.cpu_count()} cores)"
    print(f"host time per call, µs (median of {args.rounds} x {args.calls} calls); {where}; "
          f"torch {torch.__version__}")
    print("| op | " + " | ".join(modes) + " |")
    print("|---|" + "---|" * len(modes))
    rows = {}
    for mode, ctx in modes.items():
        with ctx():
            for name, fn in cases(k, dev):  # inputs made inside the mode (inference tensors)
                rows.setdefault(name, []).append(per_call_us(fn, args.calls, args.rounds, sync))
    for name, us in rows.items():
        print(f"| {name} | " + " | ".join(f"{u:.2f}" for u in us) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
