#!/usr/bin/env python3
"""A/B timing of two kernels for one op in one process, under two cold-L2 methods.

    python benchmarks/ab_kernels.py [--rounds 3]

Why: single bench_ops.py runs on the device moved peers by up to 2x between calls
(2026-12-03/04: Liger rmsnorm 30 -> 96 µs, compile 39 -> 51 µs at one shape), so a
kernel change of 10% cannot be judged across calls. Here each round times every
implementation back to back, rounds alternate, and the spread across rounds is printed.

Two cold-L2 methods, side by side:
  - ``zero``: triton.testing.do_bench's (it zeroes a 256 MB buffer before each call). The
    zeroed lines are dirty in L2, so the timed call also pays for writing them back
    (up to L2's size, ~50 MB on an H200, ~12 µs at the copy rate);
  - ``clean``: a read-only pass over a 256 MB buffer before each call, so L2 holds clean
    lines of another buffer: the timed call moves its own bytes only, as the 2 GiB copy
    that sets the copy ceiling does (its own write-backs amortised over 2 GiB).
Each method: bench_ops.cold_l2_us (median of per-call CUDA-event times); bench_ops.py
times with the clean one since 2026-12-04.

Our variants are the same op called under the environment VARIANTS names (the launcher
reads LTX_KERNELS_RMS_KERNEL per call: "row" forces rms_norm_kernel; candidates under test
get their own values while an experiment runs). A size-matched copy (x's bytes read, the
same written) is timed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ops import Timer, cold_l2_us, load_kernel, ref_rms_diffusers, ref_rms_llama  # noqa: E402


# Our variants: the environment each is called under (the launchers read these per call).
VARIANTS = {
    "ours": {},
    "ours (row kernel)": {"LTX_KERNELS_RMS_KERNEL": "row"},
}


def with_env(fn, env):
    def run():
        old = {n: os.environ.get(n) for n in env}
        os.environ.update(env)
        try:
            fn()
        finally:
            for n, v in old.items():
                if v is None:
                    del os.environ[n]
                else:
                    os.environ[n] = v
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-compile", action="store_true")
    args = ap.parse_args(argv)

    k = load_kernel("cuda")
    dev = "cuda"
    timer = Timer(dev, smoke=False)
    methods = {
        "zero": lambda: timer.flush_buf.zero_(),  # do_bench's flush (its values are never read)
        "clean": timer.flush,  # bench_ops'
    }
    g = torch.Generator(device=dev).manual_seed(0)
    cases = []  # (name, x, w, semantics)
    for shape, with_w, sem in [((2, 8064, 2048), False, "diffusers"), ((2, 8064, 4096), False, "diffusers"),
                               ((4096, 8192), True, "llama"), ((16384, 4096), True, "llama"),
                               ((8064, 32, 128), True, "llama"), ((8064, 32, 64), True, "llama"),
                               ((2, 4096, 8192), False, "diffusers")]:
        x = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
        w = (1 + 0.1 * torch.randn(shape[-1], device=dev, generator=g)).to(torch.bfloat16) if with_w else None
        cases.append((f"{'x'.join(map(str, shape))} {sem}", x, w, sem))

    rows = {}
    big_src = torch.empty(1 << 28, device=dev, dtype=torch.float32).fill_(2.0)  # 1 GiB
    big_dst = torch.empty_like(big_src)
    for mname, flush in methods.items():
        t = cold_l2_us(lambda: big_dst.copy_(big_src), flush)
        print(f"copy ceiling (2 GiB moved), {mname} flush: {t:.1f} µs = {(2 << 30) / (t * 1e-6) / 1e9:.0f} GB/s")
    del big_src, big_dst

    for rnd in range(args.rounds):
        for name, x, w, sem in cases:
            out = torch.empty_like(x)
            dst = torch.empty_like(x)
            call = (lambda x, w, sem, out: lambda: k.rmsnorm(x, w, 1e-6, semantics=sem, out=out))(x, w, sem, out)
            impls = {label: with_env(call, env) for label, env in VARIANTS.items()}
            impls.update({
                "F.rms_norm": lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6),
                "copy (same bytes)": lambda: dst.copy_(x),
            })
            if not args.no_compile:
                ref = {"diffusers": ref_rms_diffusers, "llama": ref_rms_llama}[sem]
                impls["compile"] = (lambda c: (lambda: c(x, w, 1e-6)))(torch.compile(ref, dynamic=False))
            for iname, fn in impls.items():
                for mname, flush in methods.items():
                    t = cold_l2_us(fn, flush)
                    rows.setdefault((name, iname, mname), []).append(t)
        print(f"round {rnd + 1} done", flush=True)

    mb = {name: (x.numel() * x.element_size() * 2 + (w.numel() * 2 if w is not None else 0)) / 1e6
          for name, x, w, _ in cases}
    print("\n| shape | impl | " + " | ".join(f"{m} µs (rounds)" for m in methods) + " | clean GB/s |")
    print("|---|---|" + "---|" * len(methods) + "---|")
    for name, *_ in cases:
        for iname in [*VARIANTS, "F.rms_norm", "compile", "copy (same bytes)"]:
            if (name, iname, "zero") not in rows:
                continue
            cells = []
            for m in methods:
                ts = rows[(name, iname, m)]
                cells.append(f"{statistics.median(ts):.2f} ({', '.join(f'{t:.1f}' for t in ts)})")
            gbs = mb[name] * 1e6 / (statistics.median(rows[(name, iname, 'clean')]) * 1e-6) / 1e9
            print(f"| {name} | {iname} | " + " | ".join(cells) + f" | {gbs:.0f} |")


if __name__ == "__main__":
    main()
