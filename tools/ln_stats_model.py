"""Numerical model of adaln_direct_kernel's LayerNorm statistics (fp32, as the GPU would
round them) in two forms, against float64, on the GPU tests' rows (randn, a ~96 sigma offset,
a 3000.0 channel at 7 and at 0: the worst case of the shift form) and LTX's widths.
  merge: each thread's mean by a tree sum, its centred squares by a second tree, then
         the Chan butterfly (row_mean_m2); finish (x - mean) * inv.
  shift: one pass about the thread's first element (s = sum d, q = sum d*d by FMA chains,
         d = x - x0), thread mean x0 + s/n and M2 q - s*(s/n); the same butterfly (a row
         of two warps: the warps as one equal pair); the same finish.
Criterion: the GPU tests' (tests/test_adaln.py assert_near_ref64): |y - f64| in units of
u * mag, mag = (|x| + mean|x|) * rstd, u = 2^-8 (bf16) or 2^-11 (fp16). Also how many 16-bit outputs of the
two forms differ (the tests allow 2% of elements to differ from eager, by 2 ulps of mag).
rsqrt is modelled exact and 1/(k+1) (MUFU.RCP) too; CPU eager is not a reference here (its
bf16 layer_norm cancels on offset rows).
  .venv/bin/python tools/ln_stats_model.py [--dtype bf16|fp16]   (a few seconds)"""
import argparse

import numpy as np
import torch
f32 = np.float32

def fma(a, b, c):  # one rounding (float64 product is exact for fp32 inputs)
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(f32)

def tree(v, axis):  # common/reduce.cuh tree_sum over one axis
    v = np.moveaxis(v, axis, -1)
    def rec(v):  # tree_sum's split: lo = first N/2, hi = the rest
        n = v.shape[-1]
        if n == 1:
            return v[..., 0]
        h = n // 2
        return (rec(v[..., :h]) + rec(v[..., h:])).astype(f32)
    return rec(v)

def merge_equal(am, a2, bm, b2, half_n):
    d = (bm - am).astype(f32)
    return (f32(0.5) * (am + bm).astype(f32)).astype(f32), ((a2 + b2).astype(f32) + ((d * d).astype(f32) * half_n).astype(f32)).astype(f32)

def stats(x, tpr, C, N, form):
    # x: [rows, D] float32 (bf16 values); thread l holds vectors l + i*tpr
    rows, D = x.shape
    v = x.reshape(rows, C, tpr, N).transpose(0, 2, 1, 3)  # [rows, tpr, C, N]
    n = f32(C * N)
    if form == "merge":
        s = tree(tree(v, 3), 2)
        m = (s * f32(1.0 / (C * N))).astype(f32)
        d = (v - m[..., None, None]).astype(f32)
        m2 = tree(tree((d * d).astype(f32), 3), 2)
    else:
        k0 = v[:, :, 0, 0][..., None, None]
        d = (v - k0).astype(f32)
        s = np.zeros(v.shape[:3], f32); q = np.zeros(v.shape[:3], f32)
        for k in range(N):
            s = (s + d[..., k]).astype(f32)
            q = fma(d[..., k], d[..., k], q)
        S, Q = tree(s, 2), tree(q, 2)
        dm = (S * f32(1.0 / (C * N))).astype(f32)
        m = (k0[..., 0, 0] + dm).astype(f32)
        m2 = fma(-S, dm, Q)
    # butterfly within each warp (offsets 1..16), then warps in order
    W = min(tpr, 32)
    mm, qq = m.copy(), m2.copy()
    o = 1
    while o < W:
        idx = np.arange(tpr) ^ o
        half_n = f32(n * f32(0.5 * o))
        mm, qq = merge_equal(mm, qq, mm[:, idx], qq[:, idx], half_n)
        o <<= 1
    if tpr == 64 and form == "shift":  # row_mean_m2<true>: two warps as one equal pair
        mm, qq = merge_equal(mm[:, 0], qq[:, 0], mm[:, 32], qq[:, 32], f32(f32(32 * n) * f32(0.5)))
    elif tpr > 32:
        nw = f32(32 * n)
        am, a2 = mm[:, 0], qq[:, 0]
        for k in range(1, tpr // 32):
            bm, b2 = mm[:, 32 * k], qq[:, 32 * k]
            w = f32(1.0 / (k + 1))
            d = (bm - am).astype(f32)
            am = (am + (d * w).astype(f32)).astype(f32)
            a2 = (a2 + (b2 + ((d * d).astype(f32) * (nw * (f32(1) - w)).astype(f32)).astype(f32)).astype(f32)).astype(f32)
        mm, qq = am, a2
    else:
        mm, qq = mm[:, 0], qq[:, 0]
    return mm, qq

def normed(x, tpr, C, N, form, dtype, eps=1e-6):
    D = x.shape[1]
    mean, m2 = stats(x, tpr, C, N, form)
    inv = (1.0 / np.sqrt(((m2 * f32(1.0 / D)).astype(f32) + f32(eps)).astype(np.float64))).astype(f32)
    y = ((x - mean[:, None]).astype(f32) * inv[:, None]).astype(f32)  # two roundings, as the kernel
    return torch.from_numpy(y).to(dtype)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    dtype, u = {"bf16": (torch.bfloat16, 2.0 ** -8), "fp16": (torch.float16, 2.0 ** -11)}[ap.parse_args().dtype]
    g = torch.Generator().manual_seed(0)
    total = {}
    for d in (2048, 3072, 4096, 8192):
        N = 8  # bf16: 16-byte vectors; tpr and C as launch_adaln_direct picks them
        nvec = d // N
        tpr = 1 << (max(1, -(-nvec // 4)) - 1).bit_length()
        C = nvec // tpr
        if C * tpr != nvec:
            print(f"D={d}: unequal counts, merge form not used"); continue
        base = torch.randn(600, d, generator=g)
        offset = base * 0.25 + 24.0
        outlier = base.clone(); outlier[:, 7] = 3000.0
        outlier0 = base.clone(); outlier0[:, 0] = 3000.0   # the shift element itself
        big = base * 40 + 3
        for name, xf in (("randn", base), ("offset", offset), ("outlier7", outlier), ("outlier0", outlier0), ("x40+3", big)):
            xb = xf.to(dtype)
            x64 = xb.double()
            xn = xb.float().numpy()
            line = []
            r64 = (x64 - x64.mean(-1, keepdim=True)) / torch.sqrt(x64.var(-1, unbiased=False, keepdim=True) + 1e-6)
            mag = (x64.abs() + x64.abs().mean(-1, keepdim=True)) / torch.sqrt(x64.var(-1, unbiased=False, keepdim=True) + 1e-6)
            ys = {}
            for form in ("merge", "shift"):
                y = normed(xn, tpr, C, N, form, dtype)
                ys[form] = y
                k = float(((y.double() - r64).abs() / (u * mag)).max())
                line.append(f"{form}: err/(u mag) max {k:.3f}")
                total[form] = max(total.get(form, 0), k)
            dd = (ys["shift"].double() - ys["merge"].double()).abs()
            line.append(f"shift vs merge: {float((dd > 0).double().mean()) * 100:.4f}% differ, max {float((dd / (u * mag)).max()):.3f} u mag")
            print(f"D={d} tpr={tpr} C={C} {name:9s} | " + " | ".join(line))
    print("max err/(u mag) vs float64 (the tests allow 8 + 2e-5/u):", total)


if __name__ == "__main__":
    main()
