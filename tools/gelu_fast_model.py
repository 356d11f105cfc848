"""Numpy model of the fast GELU-tanh check (activation.cu, gelu_tanh_fast_vec).

For every bf16 / fp16 bit pattern (and for randn inputs) it builds the fast path's fp32
value at the error bounds the kernel's comment assumes (ex2.approx 2^-22, rcp.approx 2^-23
relative, worst-case signs) and eager's value with its tanh rounded and moved by 0, +-2 ulp
(tanhf's bound), then applies the kernel's test: accept v where v - B and v + B round alike,
B = |x| 2^-21 + |v| (|a| + 4) 2^-22. It reports accepted values that round differently from
eager's (must be 0) and how often the exact fallback runs. Run: python tools/gelu_fast_model.py
"""
import itertools

import numpy as np

f32 = np.float32
K_BETA = f32(np.sqrt(2) * 2 / np.sqrt(np.pi) * 0.5)
K_KAPPA = f32(0.044715)
K_SCALED = f32(np.sqrt(2) * 2 / np.sqrt(np.pi) * 0.5 * 2 / np.log(2))  # kBeta2Log2e


def round_bf16(f):
    u = f.view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    r[np.isnan(f)] = 0x7FFF
    return r


def round_fp16(f):
    return f.astype(np.float16).view(np.uint16).astype(np.uint64)


def model(x, rnd):
    wrong, fallback = 0, np.zeros(x.shape, bool)
    with np.errstate(all="ignore"):
        inner = K_BETA * (x + K_KAPPA * (x * x * x))
        tanh0 = np.tanh(inner.astype(np.float64)).astype(f32)
        a = np.clip((x + K_KAPPA * (x * x * x)) * K_SCALED, f32(-64), f32(64))
        for ulps, se, sr in itertools.product((-2, 0, 2), (-1, 1), (-1, 1)):
            t = tanh0
            for _ in range(abs(ulps)):
                t = np.nextafter(t, f32(np.sign(ulps)) * np.inf)
            eager = rnd(f32(0.5) * x * (f32(1) + t))
            e = (np.exp2(a.astype(np.float64)) * (1 + se * 2.0**-22)).astype(f32)
            r = (1 / (e + f32(1)).astype(np.float64) * (1 + sr * 2.0**-23)).astype(f32)
            v = x * (e * r)
            b = np.abs(x) * f32(2**-21) + np.abs(v) * ((np.abs(a) + f32(4)) * f32(2**-22))
            ok = rnd(v - b) == rnd(v + b)
            both_nan = np.isnan(f32(0.5) * x * (f32(1) + t)) & np.isnan(v)
            wrong += int((ok & (rnd(v) != eager) & ~both_nan).sum())
            fallback |= ~ok
    return wrong, fallback


def main():
    pats_bf16 = (np.arange(1 << 16, dtype=np.uint32) << 16).view(f32)
    pats_fp16 = np.arange(1 << 16, dtype=np.uint16).view(np.float16).astype(f32)
    g = np.random.default_rng(0).standard_normal(1 << 21).astype(f32)
    cases = [("bf16 every pattern", pats_bf16, round_bf16), ("fp16 every pattern", pats_fp16, round_fp16),
             ("bf16 randn", (round_bf16(g) << 16).astype(np.uint32).view(f32), round_bf16),
             ("fp16 randn", g.astype(np.float16).astype(f32), round_fp16)]
    bad = 0
    for name, x, rnd in cases:
        wrong, fb = model(x, rnd)
        bad += wrong
        print(f"{name}: wrong {wrong}, fallback: elements {fb.mean():.4f}, vectors of 8 "
              f"{fb.reshape(-1, 8).any(1).mean():.3f}, warp steps of 256 {fb.reshape(-1, 256).any(1).mean():.3f}")
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
