"""Forward + backward op times on the GPU: ours (the functional ops with their backward
kernels) vs PyTorch eager autograd of the reference, torch.compile of it, and Liger-Kernel
where it has the op. One table into benchmarks/RESULTS.md.

    python benchmarks/bench_backward.py            # H200, bf16, the issue's shapes
    python benchmarks/bench_backward.py --quick    # fewer shapes

Method: triton.testing.do_bench (median, its L2 flush between runs) of one closure that runs
the forward and `backward(grad)` with fresh .grad each time (grad_to_none); every
implementation's gradients are first checked against float64 autograd of the reference
(max error relative to the largest gradient, <= 3x eager's own error + 2 ulp of the dtype).
Bytes (min model, for GB/s): forward reads the inputs and writes the output once; backward
reads grad + the saved inputs and writes each input gradient once.
"""

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
import e2e_common as common  # noqa: E402


def ltx_rope(x, cos, sin):
    """diffusers LTX apply_rotary_emb (interleaved pairs)."""
    real, imag = x.unflatten(2, (-1, 2)).unbind(-1)
    rotated = torch.stack([-imag, real], dim=-1).flatten(2)
    return (x.float() * cos + rotated.float() * sin).to(x.dtype)


def rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


def llama_rope(q, k, cos, sin):
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def diffusers_rms(x, w, eps=1e-6):
    var = x.float().pow(2).mean(-1, keepdim=True)
    h = x.float() * torch.rsqrt(var + eps)
    return h.to(w.dtype) * w


def adaln_ref(x, scale, shift, eps=1e-6):
    var = x.float().pow(2).mean(-1, keepdim=True)
    n = (x.float() * torch.rsqrt(var + eps)).to(x.dtype)
    return n * (1 + scale) + shift


def cases(kernel, quick, dtype, dev):
    """(name, shape text, make inputs -> list of tensors (grad where differentiable), impls dict)."""
    def rn(*s, grad=True, dt=dtype):
        return torch.randn(*s, device=dev, dtype=dt).requires_grad_(grad)

    out = []
    rms_shapes = [(2, 8064, 2048)] if quick else [(2, 8064, 2048), (4, 4096, 3072), (16384, 4096)]
    for s in rms_shapes:
        out.append(("rmsnorm", s, lambda s=s: [rn(*s), (1 + 0.1 * rn(s[-1], grad=False)).requires_grad_(True)],
                    dict(ours=lambda x, w: kernel.rmsnorm(x, w, 1e-6, semantics="diffusers"),
                         eager=diffusers_rms),
                    "liger_rms"))
    out.append(("gelu_tanh", (2, 8064, 8192), lambda: [rn(2, 8064, 8192)],
                dict(ours=kernel.gelu_tanh, eager=lambda x: F.gelu(x, approximate="tanh")), None))
    out.append(("geglu", (16128, 16384), lambda: [rn(16128, 16384)],
                dict(ours=lambda x: kernel.geglu(x, "tanh"),
                     eager=lambda x: (lambda h, g: h * F.gelu(g, approximate="tanh"))(*x.chunk(2, -1))),
                None))
    out.append(("rope_interleaved", (2, 8064, 2048),
                lambda: [rn(2, 8064, 2048), *_tables((2, 8064, 2048), dev)],
                dict(ours=kernel.rope_interleaved, eager=ltx_rope), None))
    if not quick:
        out.append(("rope_rotate_half", (1, 32, 8192, 128),
                    lambda: [rn(1, 32, 8192, 128), rn(1, 8, 8192, 128), *_tables((1, 8192, 128), dev, dtype)],
                    dict(ours=lambda q, k, c, s: kernel.rope_rotate_half(q, k, c, s),
                         eager=llama_rope), "liger_rope"))
        out.append(("adaln", (2, 8064, 2048),
                    lambda: [rn(2, 8064, 2048), rn(2, 1, 2048), rn(2, 1, 2048)],
                    dict(ours=lambda x, sc, sh: kernel.adaln(x, sc, sh, None, 1e-6),
                         eager=adaln_ref), None))
    return out


def _tables(shape, dev, dtype=torch.float32):
    ang = torch.rand(*shape[:-1], shape[-1] // 2, device=dev) * 6.28
    ang = ang.repeat_interleave(2, dim=-1) if len(shape) == 3 and shape[-1] > 128 else torch.cat([ang, ang], -1)
    return [ang.cos().to(dtype), ang.sin().to(dtype)]


def first(y):
    return y[0] if isinstance(y, tuple) else y


def run_once(fn, inputs, grads_out):
    ys = fn(*inputs)
    ys = ys if isinstance(ys, tuple) else (ys,)
    torch.autograd.backward(ys, grads_out)


def check(fn, inputs, grads_out, ref64, dtype):
    for t in inputs:
        t.grad = None
    run_once(fn, inputs, grads_out)
    errs = []
    for t, r in zip(inputs, ref64):
        if r is None:
            continue
        errs.append(((t.grad.double() - r).abs().max() / r.abs().max().clamp(min=1e-30)).item())
    return max(errs) if errs else 0.0


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dtype", default="bf16", choices=sorted(common.DTYPES))
    p.add_argument("--results", default=str(common.REPO / "benchmarks" / "RESULTS.md"))
    p.add_argument("--no-results", action="store_true")
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    import triton.testing

    dev = "cuda"
    dtype = common.DTYPES[args.dtype]
    kernel = common.load_kernel(dev)
    liger = {}
    try:
        from liger_kernel.transformers import functional as lf
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        liger = dict(liger_rms=lambda x, w: lf.liger_rms_norm(x, w, 1e-6, 0.0, "llama", False),
                     liger_rope=lambda q, k, c, s: liger_rotary_pos_emb(q, k, c, s))
    except Exception as e:  # absent peers are reported, never faked
        print(f"liger absent: {type(e).__name__}: {e}")
    rows, data = [], []
    torch.manual_seed(0)
    for name, shape, make, impls, liger_key in cases(kernel, args.quick, dtype, dev):
        inputs = make()
        ys = impls["eager"](*inputs)
        ys = ys if isinstance(ys, tuple) else (ys,)
        grads_out = [torch.randn_like(y) for y in ys]
        # float64 reference gradients
        in64 = [t.detach().double().requires_grad_(t.requires_grad) for t in inputs]
        y64 = impls["eager"](*in64)
        y64 = y64 if isinstance(y64, tuple) else (y64,)
        torch.autograd.backward(y64, [g.double() for g in grads_out])
        ref64 = [t.grad if t.requires_grad else None for t in in64]
        del in64, y64
        all_impls = dict(impls)
        all_impls["compile"] = torch.compile(impls["eager"], dynamic=False)
        if liger_key and liger_key in liger:
            all_impls["liger"] = liger[liger_key]
        diff = [t for t in inputs if t.requires_grad]
        times, errs = {}, {}
        for label, fn in all_impls.items():
            try:
                errs[label] = check(fn, inputs, grads_out, ref64, dtype)
                times[label] = triton.testing.do_bench(lambda: run_once(fn, inputs, grads_out),
                                                       grad_to_none=diff, return_mode="median") * 1e3
            except Exception as e:
                print(f"{name} {label}: failed: {type(e).__name__}: {str(e)[:200]}")
        ulp = torch.finfo(dtype).eps
        ok = "ours" in errs and errs["ours"] <= 3 * errs.get("eager", 0) + 2 * ulp
        peers = [t for k, t in times.items() if k not in ("ours",)]
        best = min(peers) if peers else None
        ratio = times["ours"] / best if best and "ours" in times else None
        cells = [f"{times[k]:.1f}" if k in times else "—" for k in ("ours", "eager", "compile", "liger")]
        rows.append([name, "x".join(map(str, shape)), *cells, common.fmt(ratio, ".2f"),
                     f"{'ok' if ok else 'FAIL'} ({errs.get('ours', float('nan')):.1e} vs eager "
                     f"{errs.get('eager', float('nan')):.1e})"])
        data.append(dict(op=name, shape=shape, times_us=times, rel_err=errs, ok=ok))
        print(rows[-1], flush=True)
        del inputs, grads_out, ref64
        torch.cuda.empty_cache()
    table = common.markdown_table(["op", "shape", "ours µs", "eager µs", "compile µs", "liger µs",
                                   "ours / best peer", "grad check vs float64"], rows)
    print("\n" + table)
    env = common.environment(dev)
    body = "\n".join([
        f"- GPU: {env.get('gpu')}; torch {env['torch']}, CUDA {env.get('cuda')}; dtype {args.dtype}.",
        "- Method: triton.testing.do_bench median of forward + backward(grad) (fresh .grad each run, "
        "L2 flushed by do_bench); compile = torch.compile(dynamic=False) of the eager reference; "
        "grad check: max |grad - float64 grad| / max |float64 grad| over the inputs' gradients, "
        "ok when <= 3x eager's + 2 eps.",
        f"- Command: `python benchmarks/bench_backward.py {' '.join(sys.argv[1:])}`", "", table])
    if not args.no_results:
        common.write_results("bench_backward", f"{env['date'][:10]} — forward + backward op times "
                             f"({env.get('gpu')}, {args.dtype})", body, {"env": env, "rows": data},
                             args.results, args.out)


if __name__ == "__main__":
    main()
