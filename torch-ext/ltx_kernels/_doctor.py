"""``doctor()``: what was loaded, where it runs, and a quick self-test of every op."""

import platform
import sys
import time
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from . import _arch


def _device_info(device: torch.device) -> Dict[str, object]:
    if device.type != "cuda":
        return {"type": "cpu", "name": platform.processor() or platform.machine()}
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = torch.cuda.get_device_capability(index)
    archs = _arch.built_archs()
    return {
        "type": "cuda",
        "index": index,
        "name": torch.cuda.get_device_name(index),
        "capability": f"{cap[0]}.{cap[1]}",
        "covered_by_build": _arch.supports(archs, cap) if archs else None,
    }


def _pick_device(device) -> torch.device:
    if device is not None:
        return torch.device(device)
    backend = (_arch.variant_metadata().get("backend") or {}).get("type")
    if backend == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


# ---- references (plain eager PyTorch) ----------------------------------------------


def _ref_rms(x, w, eps):
    xf = x.float()
    n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return (n * w.float()).to(x.dtype) if w is not None else n.to(x.dtype)


def _ref_layer(x, eps):
    return F.layer_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _ref_rope_interleaved(x, cos, sin):
    x_real, x_imag = x.unflatten(-1, (-1, 2)).unbind(-1)
    rot = torch.stack([-x_imag, x_real], dim=-1).flatten(-2)
    return (x.float() * cos + rot.float() * sin).to(x.dtype)


def _ref_rotate_half(x, cos, sin):
    h = x.shape[-1] // 2
    rot = torch.cat((-x[..., h:], x[..., :h]), dim=-1)
    return (x.float() * cos.float() + rot.float() * sin.float()).to(x.dtype)


def _cases(k, dtype, device) -> List[Tuple[str, Callable, Callable]]:
    """(name, kernel call, reference call) for every public op, at small LTX-like shapes."""
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dt=dtype):
        return torch.randn(*shape, generator=g).to(device=device, dtype=dt)

    B, S, D, H, Dh = 2, 17, 256, 4, 64
    x = rnd(B, S, D)
    w = (1 + 0.1 * rnd(D, dt=torch.float32)).to(dtype)
    x2 = rnd(B, S, 2 * D)
    cos_i, sin_i = rnd(S, D, dt=torch.float32), rnd(S, D, dt=torch.float32)
    q, kk = rnd(B, H, S, Dh), rnd(B, 2, S, Dh)
    cos_h, sin_h = rnd(B, S, Dh, dt=torch.float32), rnd(B, S, Dh, dt=torch.float32)
    scale, shift, gate = 0.2 * rnd(B, 1, D), rnd(B, 1, D), rnd(B, 1, D)
    y = rnd(B, S, D)
    h, gt = x2.chunk(2, -1)

    def out_call(fn, shape):
        def run():
            out = torch.empty(*shape, device=device, dtype=dtype)
            fn(out, x2)
            return out
        return run

    ch, sh = cos_h[:, None], sin_h[:, None]
    return [
        ("rmsnorm", lambda: k.rmsnorm(x, w, 1e-6, semantics="torch"), lambda: _ref_rms(x, w, 1e-6)),
        ("rmsnorm(weight=None)", lambda: k.rmsnorm(x, None, 1e-6), lambda: _ref_rms(x, None, 1e-6)),
        ("gelu", lambda: k.gelu(x), lambda: F.gelu(x.float()).to(dtype)),
        ("gelu_tanh", lambda: k.gelu_tanh(x), lambda: F.gelu(x.float(), approximate="tanh").to(dtype)),
        ("geglu", lambda: k.geglu(x2), lambda: h * F.gelu(gt)),
        ("gelu_and_mul", out_call(k.gelu_and_mul, (B, S, D)), lambda: F.gelu(h) * gt),
        ("gelu_tanh_and_mul", out_call(k.gelu_tanh_and_mul, (B, S, D)),
         lambda: F.gelu(h, approximate="tanh") * gt),
        ("rope_interleaved", lambda: k.rope_interleaved(x, cos_i, sin_i),
         lambda: _ref_rope_interleaved(x, cos_i, sin_i)),
        ("rope_interleaved_qk", lambda: k.rope_interleaved_qk(x, y, cos_i, sin_i),
         lambda: (_ref_rope_interleaved(x, cos_i, sin_i), _ref_rope_interleaved(y, cos_i, sin_i))),
        ("rope_rotate_half", lambda: k.rope_rotate_half(q, kk, cos_h, sin_h),
         lambda: (_ref_rotate_half(q, ch, sh), _ref_rotate_half(kk, ch, sh))),
        ("rope_rotate_half_single", lambda: k.rope_rotate_half_single(q, cos_h, sin_h),
         lambda: _ref_rotate_half(q, ch, sh)),
        ("adaln(rms)", lambda: k.adaln(x, scale, shift),
         lambda: (_ref_rms(x, None, 1e-6) * (1 + scale) + shift)),
        ("adaln(layer)", lambda: k.adaln(x, scale, shift, None, 1e-6, "layer"),
         lambda: (_ref_layer(x, 1e-6) * (1 + scale) + shift)),
        ("gated_residual", lambda: k.gated_residual(x, y, gate), lambda: x + y * gate),
    ]


def _max_err(got, ref) -> Tuple[float, float]:
    """(max |got - ref|, max |ref|) over a tensor or a tuple of tensors."""
    if isinstance(ref, torch.Tensor):
        got, ref = (got,), (ref,)
    err = mag = 0.0
    for a, b in zip(got, ref):
        if a.shape != b.shape or a.dtype != b.dtype:
            raise AssertionError(f"got {a.dtype}{list(a.shape)}, expected {b.dtype}{list(b.shape)}")
        err = max(err, float((a.double() - b.double()).abs().max()))
        mag = max(mag, float(b.double().abs().max()))
    return err, mag


def self_test(k, device, dtypes=(torch.float32, torch.bfloat16)) -> List[Dict[str, object]]:
    """Run every op once per dtype against its eager reference; one record per run."""
    # Allowed max error, relative to max |ref|: a few roundings of the dtype.
    tol = {torch.float32: 1e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}
    results = []
    for dtype in dtypes:
        for name, fn, ref in _cases(k, dtype, device):
            rec = {"op": name, "dtype": str(dtype).replace("torch.", ""), "passed": False,
                   "max_abs_err": None, "error": None}
            try:
                got = fn()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
                err, mag = _max_err(got, ref())
                rec["max_abs_err"] = err
                rec["passed"] = err <= tol[dtype] * max(mag, 1.0)
            except Exception as e:  # a failing op is a finding, not a crash of doctor()
                rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            results.append(rec)
    return results


def doctor(device=None, verbose: bool = True, kernel=None) -> Dict[str, object]:
    """Print what was loaded (variant id, backend, archs), torch / CUDA versions and the
    device, then self-test every public op against an eager PyTorch reference.

    ``device``: where to test (default: the current GPU for a CUDA variant, else CPU).
    Returns ``{"variant", "torch", "device", "results": [...], "passed", "failed"}``;
    nothing is raised for a failing op (its record carries the error)."""
    k = kernel if kernel is not None else sys.modules[__package__]
    meta = _arch.variant_metadata()
    dev = _pick_device(device)
    info = {
        "variant": {
            "id": meta.get("id"),
            "name": meta.get("name"),
            "version": meta.get("version"),
            "backend": (meta.get("backend") or {}).get("type"),
            "archs": _arch.built_archs(),
            "path": str(_arch._METADATA.parent),
        },
        "torch": {
            "version": torch.__version__,
            "cuda": torch.version.cuda,
            "hip": torch.version.hip,
            "cuda_available": torch.cuda.is_available(),
            "python": sys.version.split()[0],
        },
        "device": _device_info(dev),
    }
    out = print if verbose else (lambda *a, **kw: None)
    v, t, d = info["variant"], info["torch"], info["device"]
    out(f"ltx-kernels doctor")
    out(f"  variant : {v['id']}  backend={v['backend']}  archs={v['archs'] or '-'}")
    out(f"            {v['path']}")
    out(f"  torch   : {t['version']}  CUDA {t['cuda'] or '-'}  (GPU available: {t['cuda_available']})"
        f"  Python {t['python']}")
    cover = "" if d.get("covered_by_build") in (None, True) else "  NOT COVERED BY THIS BUILD"
    out(f"  device  : {d['type']}: {d['name']}"
        + (f"  capability {d['capability']}{cover}" if d["type"] == "cuda" else ""))
    t0 = time.perf_counter()
    results = self_test(k, dev)
    info["results"] = results
    info["passed"] = sum(r["passed"] for r in results)
    info["failed"] = len(results) - info["passed"]
    info["ok"] = info["failed"] == 0
    for r in results:
        err = "" if r["max_abs_err"] is None else f"max err {r['max_abs_err']:.3g}"
        out(f"  {'PASS' if r['passed'] else 'FAIL'}  {r['op']:<24} {r['dtype']:<9} {err} {r['error'] or ''}".rstrip())
    out(f"  {info['passed']}/{len(results)} passed in {time.perf_counter() - t0:.2f} s")
    return info
