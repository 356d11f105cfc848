"""Launch each kernel a few times at the LTX-Video shape, for Nsight Compute.

Not a benchmark (times come from bench_ops.py): this only gives `ncu` (tools/device_profile.sh)
one launch per kernel and dtype to read counters from, ours next to torch.compile's Triton
kernel of the same expression, so the profiles can be compared side by side.

    ncu --clock-control none --section SpeedOfLight ... python3 benchmarks/profile_ops.py
"""

import argparse
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_ops  # noqa: E402  (the reference expressions and the kernel loader)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="adaln,gated_residual,rmsnorm")
    ap.add_argument("--dtypes", default="bfloat16,float16")
    ap.add_argument("--compile", action="store_true", help="also launch torch.compile's kernels")
    args = ap.parse_args()
    k = bench_ops.load_kernel("cuda")
    dev = "cuda"
    # Ops with their own launcher (weighted llama rows next to Liger / inductor, the RoPE calls):
    # each runs when asked and leaves --ops, so the LTX row ops below see only what is left.
    launchers = {op: (lambda op=op: launch_llama_rows(k, args, op, LLAMA_ROW_SETS[op]))
                 for op in LLAMA_ROW_SETS}
    launchers.update(rope_llama=lambda: launch_rope_llama(k, args),
                     rope_ltx_qk_pair=lambda: launch_rope_ltx_qk_pair(k, args),
                     qk_prologue=lambda: launch_qk_prologue(k, args))
    for op, launch in launchers.items():
        if op in args.ops.split(","):
            launch()
            args.ops = ",".join(o for o in args.ops.split(",") if o != op)
    if not args.ops:
        return
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        x = torch.randn(2, 8064, 2048, device=dev, dtype=dt)
        scale = torch.randn(2, 1, 2048, device=dev, dtype=dt) * 0.1
        shift = torch.randn(2, 1, 2048, device=dev, dtype=dt) * 0.1
        y = torch.randn_like(x)
        w = torch.randn(2048, device=dev, dtype=dt)
        xa = torch.randn(2, 8064, 8192, device=dev, dtype=dt)      # GELU-tanh input
        xg = torch.randn(8064, 16384, device=dev, dtype=dt)        # GEGLU input (gate first)
        calls = {
            "adaln": (lambda: k.adaln(x, scale, shift, None, 1e-6, "rms"),
                      lambda a, b, c: bench_ops.ref_adaln_rms(a, b, c)),
            "gated_residual": (lambda: k.gated_residual(x, y, scale),
                               lambda a, b, c: a + b * c),
            # FLUX / DiT's LayerNorm form: 82% of a same-bytes copy on the H200 (RESULTS.md
            # 2026-12-07 18:19; the RMS form 96%)
            "adaln_layer": (lambda: k.adaln(x, scale, shift, None, 1e-6, "layer"),
                            lambda a, b, c: bench_ops.ref_adaln_layer(a, b, c)),
            "rmsnorm": (lambda: k.rmsnorm(x, w, 1e-6),
                        lambda a, b, c: torch.nn.functional.rms_norm(a, (2048,), w, 1e-6)),
            "gelu_tanh": (lambda: k.gelu_tanh(xa), lambda a, b, c: bench_ops.ref_gelu_tanh(xa)),
            "geglu": (lambda: k.geglu(xg, "tanh", gate_first=True),
                      lambda a, b, c: bench_ops.ref_geglu_tanh(xg)),
        }
        for op in args.ops.split(","):
            ours, ref = calls[op]
            for _ in range(2):
                ours()
            if args.compile:
                fn = torch.compile(ref, dynamic=False)
                b = y if op == "gated_residual" else scale
                for _ in range(2):
                    fn(x, b, shift if op.startswith("adaln") else scale)
            torch.cuda.synchronize()
            print(f"launched {op} {dt_name}", flush=True)


# Weighted (llama semantics) rmsnorm shapes where ours trails a peer (RESULTS.md 2026-12-05):
#   rmsnorm_small: decode rows (Llama D = 4096, 1 and 16 rows; per-head 32 x 128), ~0.5 µs per
#     call behind Liger / inductor under graph replay;
#   rmsnorm_llama: D = 8192 rows and the per-head norms, 5-8% behind inductor;
#   rmsnorm_8192: 16384 rows of 8192, 1.04 behind inductor on the H200 (RESULTS.md 2026-12-07
#     18:19; inductor 125.76 µs beats a same-bytes copy, 128.00): bytes or rate?
LLAMA_ROW_SETS = {
    "rmsnorm_small": ((1, 4096), (16, 4096), (1, 32, 128)),
    "rmsnorm_llama": ((4096, 8192), (8064, 32, 128), (8064, 32, 64)),
    "rmsnorm_8192": ((16384, 8192),),
}


def launch_each(fns, label):
    """Each kernel launch twice (the profile reads them in this order), then wait."""
    for fn in fns:
        for _ in range(2):
            fn()
    torch.cuda.synchronize()
    print(f"launched {label}", flush=True)


def launch_llama_rows(k, args, op, shapes):
    """Ours, Liger's and (with --compile) inductor's kernel for each shape, so their counters
    (instructions, stall reasons, L1 / L2 hit rates) can be read side by side."""
    liger, _ = bench_ops.import_liger()
    liger_rms = (liger or {}).get("rms_norm")
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        for shape in shapes:
            x = torch.randn(*shape, device="cuda", dtype=dt)
            w = torch.randn(shape[-1], device="cuda", dtype=dt)
            fns = [lambda: k.rmsnorm(x, w, 1e-6, semantics="llama")]
            if liger_rms is not None:
                fns.append(lambda: liger_rms(x, w, 1e-6, 0.0, "llama", False))
            if args.compile:
                fns.append(torch.compile(lambda: bench_ops.ref_rms_llama(x, w, 1e-6), dynamic=False))
            launch_each(fns, f"{op} {shape} {dt_name}")


def launch_rope_llama(k, args):
    """Llama's rotate-half RoPE next to Liger: q [1, 32, S, 128] with k 8 heads (S = 8192, 2048) and
    q / k 32 heads of 64 at 4096 tokens, in transformers' [B, S, H, D] storage, tables in q's
    dtype. Ours out of place and in place, Liger (in place), inductor. At 2048 tokens and head_dim
    64 ours out of place trails ours in place by 2-5% (H100, RESULTS.md 2026-12-07 08:46), at 8192
    not: the counters of both launches side by side."""
    liger, _ = bench_ops.import_liger()
    liger_rope = (liger or {}).get("rope")
    shapes = ((32, 8, 8192, 128), (32, 8, 2048, 128), (32, 32, 4096, 64))
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        for hq, hk, seq, dh in shapes:
            # bench_ops' own case builds the inputs, so the profile sees the timed call's tensors
            inp = bench_ops.rope_llama_case(1, hq, hk, seq, dh, dt, "cuda").inputs()
            q, kk, cos, sin = inp["q"], inp["k"], inp["cos"], inp["sin"]
            qi, ki = q.clone(), kk.clone()  # clone keeps the [B, S, H, D] strides
            fns = [lambda: k.rope_rotate_half(q, kk, cos, sin),
                   lambda: k.rope_rotate_half(qi, ki, cos, sin, inplace=True)]
            if liger_rope is not None:
                fns.append(lambda: liger_rope(qi, ki, cos, sin))
            if args.compile:
                fns.append(torch.compile(lambda: bench_ops.ref_rope_llama(q, kk, cos, sin), dynamic=False))
            launch_each(fns, f"rope_llama q{hq}x{seq}x{dh},k{hk} {dt_name}")


def launch_rope_ltx_qk_pair(k, args):
    """LTX's interleaved RoPE on q and k [2, 8064, 2048] with fp32 pair tables [B, S, D/2]
    (bench_ops' rope_ltx_qk_pair inputs): ours (rope_kernel's interleaved pair form) and
    inductor's kernel of diffusers' expression, 1.03x faster on the H100 (RESULTS.md 2026-12-07
    10:04): their counters side by side."""
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        inp = bench_ops.rope_ltx_case((2, 8064, 2048), dt, "cuda", qk=True, pair=True).inputs()
        q, kk, cos, sin = inp["q"], inp["k"], inp["cos"], inp["sin"]
        fns = [lambda: k.rope_interleaved_qk(q, kk, cos, sin)]
        if args.compile:
            fns.append(torch.compile(lambda: bench_ops.ref_rope_ltx_qk_pair(q, kk, cos, sin), dynamic=False))
        launch_each(fns, f"rope_ltx_qk_pair {dt_name}")


def launch_qk_prologue(k, args):
    """LTX's q/k prologue (RMSNorm of q and k, then interleaved RoPE with fp32 [B, S, D] tables)
    on bench_ops' [2, 8064, 2048] inputs: ours (rmsnorm_rope_qk_kernel) and inductor's kernels
    of the module sequence. 85% of a same-bytes copy on the H200, 96% on the H100 (RESULTS.md
    2026-12-07 18:19, 15:13): the table round trip after the reduction is the suspect."""
    for dt_name in args.dtypes.split(","):
        dt = getattr(torch, dt_name)
        inp = bench_ops.qk_prologue_case((2, 8064, 2048), dt, "cuda").inputs()
        q, kk, qw, kw, cos, sin = (inp[n] for n in ("q", "k", "qw", "kw", "cos", "sin"))
        fns = [lambda: k.rmsnorm_rope_qk(q, kk, qw, kw, cos, sin, 1e-6)]
        if args.compile:
            fns.append(torch.compile(lambda: bench_ops.ref_qk_prologue(q, kk, qw, kw, cos, sin), dynamic=False))
        launch_each(fns, f"qk_prologue {dt_name}")


if __name__ == "__main__":
    main()
