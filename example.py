#!/usr/bin/env python3
"""Build ltx-kernels for this machine (if needed), load it as users do, check and time each op.

    python example.py              # or, on a fresh machine: bash tools/dev.sh example

The kernel is loaded with ``kernels.get_kernel("org/ltx-kernels", version=1)``, redirected to
this checkout by ``LOCAL_KERNELS``. Each entry of ``CASES`` runs one public op against its
PyTorch reference at a realistic LTX-Video shape, on the GPU when the CUDA variant and a GPU
are present, else on the CPU, and prints the max abs and ulp errors and both timings.
Adding an op is one more ``Case`` in ``CASES``.
"""

from __future__ import annotations

import importlib.util
import math
import os
import statistics
import sys
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent
GENERAL = tomllib.loads((ROOT / "build.toml").read_text())["general"]
REPO_ID = GENERAL["hub"]["repo-id"]

# Shapes: LTX-Video 2B, hidden size 2048, feed-forward width 8192; 8064 tokens is a
# 768x512, 49-frame latent sequence. (cpu shape, gpu shape) per kind of op.
HIDDEN = ((2, 1024, 2048), (2, 8064, 2048))
FF = ((2, 1024, 8192), (2, 8064, 8192))
GATED = ((2, 1024, 2 * 8192), (2, 8064, 2 * 8192))  # input of a gated op: two halves
LLAMA_Q = ((1, 32, 1024, 128), (1, 32, 8192, 128))  # Llama-3-8B q [B, H, S, Dh]; k has 8 heads
LLAMA_KV_HEADS = 8
DTYPE = torch.bfloat16
# A case is flagged above its (cpu, cuda) ulp limit. None: not checked, because the
# reference itself is approximate there (ATen's CPU GELU uses vectorised erf/tanh
# approximations that are far off in the tails; tests/test_activation.py bounds the CPU
# kernels against float64 instead).
CHECKED = (2, 2)
CUDA_ONLY = (None, 2)


# ----------------------------------------------------------------------------- references


def ref_rmsnorm_diffusers(x, weight, eps):
    """diffusers.models.normalization.RMSNorm.forward (non-NPU path)."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(variance + eps)
    if weight is None:
        return h.to(x.dtype)
    if weight.dtype in (torch.float16, torch.bfloat16):
        h = h.to(weight.dtype)
    return h * weight


def ref_rmsnorm_llama(x, weight, eps):
    """transformers LlamaRMSNorm.forward."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return weight * h.to(x.dtype)


def ref_geglu(x, approximate="none"):
    """diffusers GEGLU.forward after its projection: hidden * gelu(gate)."""
    hidden, gate = x.chunk(2, dim=-1)
    return hidden * F.gelu(gate, approximate=approximate)


def ref_gelu_and_mul(x, approximate="none"):
    """vLLM / kernels-community gelu_and_mul: gelu(x[..., :d]) * x[..., d:]."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


def ref_rope_ltx(x, cos, sin):
    """diffusers transformer_ltx.apply_rotary_emb: interleaved pairs over the whole dim."""
    x_real, x_imag = x.unflatten(-1, (-1, 2)).unbind(-1)
    x_rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(-2)
    return (x.float() * cos + x_rotated.float() * sin).to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def ref_rope_llama(x, cos, sin, unsqueeze_dim=1):
    """transformers apply_rotary_pos_emb for one tensor (tables in x's dtype: step-rounded)."""
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return x * cos + rotate_half(x) * sin


def randn(shape, device, gen, scale=1.0, offset=0.0):
    return (offset + scale * torch.randn(shape, generator=gen)).to(device, DTYPE)


def rms_inputs(with_weight: bool):
    def make(shape, device):
        gen = torch.Generator().manual_seed(0)
        x = randn(shape, device, gen)
        return (x, randn(shape[-1], device, gen, 0.1, 1.0) if with_weight else None)

    return make


def x_only(shape, device):
    return (randn(shape, device, torch.Generator().manual_seed(0)),)


def x_and_out(shape, device):
    (x,) = x_only(shape, device)
    return (x, x.new_empty(*shape[:-1], shape[-1] // 2))


def ltx_rope_inputs(with_k: bool):
    def make(shape, device):
        gen = torch.Generator().manual_seed(0)
        b, seq, dim = shape
        theta = torch.rand(b, seq, dim // 2, generator=gen, dtype=torch.float64) * 2 * math.pi
        cos = theta.cos().float().repeat_interleave(2, -1).to(device)
        sin = theta.sin().float().repeat_interleave(2, -1).to(device)
        xs = tuple(randn(shape, device, gen) for _ in range(2 if with_k else 1))
        return (*xs, cos, sin)

    return make


def llama_rope_inputs(with_k: bool):
    def make(shape, device):
        gen = torch.Generator().manual_seed(0)
        b, heads, seq, dh = shape
        inv_freq = 1.0 / (500000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
        freqs = torch.arange(seq, dtype=torch.float32)[:, None] * inv_freq[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)[None].expand(b, seq, dh)
        cos, sin = emb.cos().to(device, DTYPE), emb.sin().to(device, DTYPE)  # as LlamaRotaryEmbedding
        q = randn(shape, device, gen)
        if not with_k:
            return (q, cos, sin)
        return (q, randn((b, LLAMA_KV_HEADS, seq, dh), device, gen), cos, sin)

    return make


@dataclass
class Case:
    label: str  # what is printed
    op: str  # the public function it exercises (an entry of the kernel's __all__)
    shapes: tuple  # (cpu shape, gpu shape) of the first input
    inputs: Callable  # (shape, device) -> tuple of args
    ours: Callable  # (kernel, *args) -> Tensor (or tuple of Tensors)
    ref: Callable  # (*args) -> Tensor (or tuple), the PyTorch reference
    max_ulp: tuple = CHECKED  # (cpu, cuda) limits, see CHECKED


CASES = [
    Case("rmsnorm diffusers, no weight (LTX norm1/norm2)", "rmsnorm", HIDDEN, rms_inputs(False),
         lambda k, x, w: k.rmsnorm(x, w, 1e-6), lambda x, w: ref_rmsnorm_diffusers(x, w, 1e-6)),
    Case("rmsnorm torch, weight (LTX norm_q/norm_k)", "rmsnorm", HIDDEN, rms_inputs(True),
         lambda k, x, w: k.rmsnorm(x, w, 1e-5, semantics="torch"),
         lambda x, w: F.rms_norm(x, (x.shape[-1],), w, 1e-5)),
    Case("rmsnorm diffusers, weight", "rmsnorm", HIDDEN, rms_inputs(True),
         lambda k, x, w: k.rmsnorm(x, w, 1e-6), lambda x, w: ref_rmsnorm_diffusers(x, w, 1e-6)),
    Case("rmsnorm llama, weight", "rmsnorm", HIDDEN, rms_inputs(True),
         lambda k, x, w: k.rmsnorm(x, w, 1e-6, semantics="llama"),
         lambda x, w: ref_rmsnorm_llama(x, w, 1e-6)),
    Case("gelu_tanh (LTX feed-forward)", "gelu_tanh", FF, x_only,
         lambda k, x: k.gelu_tanh(x), lambda x: F.gelu(x, approximate="tanh"), CUDA_ONLY),
    Case("gelu", "gelu", FF, x_only, lambda k, x: k.gelu(x), lambda x: F.gelu(x), CUDA_ONLY),
    Case("geglu (diffusers GEGLU)", "geglu", GATED, x_only,
         lambda k, x: k.geglu(x), lambda x: ref_geglu(x)),
    Case("gelu_and_mul (vLLM order)", "gelu_and_mul", GATED, x_and_out,
         lambda k, x, out: k.gelu_and_mul(out, x), lambda x, out: ref_gelu_and_mul(x)),
    Case("gelu_tanh_and_mul (vLLM order)", "gelu_tanh_and_mul", GATED, x_and_out,
         lambda k, x, out: k.gelu_tanh_and_mul(out, x), lambda x, out: ref_gelu_and_mul(x, "tanh"),
         CUDA_ONLY),
    Case("rope_interleaved (LTX q)", "rope_interleaved", HIDDEN, ltx_rope_inputs(False),
         lambda k, x, cos, sin: k.rope_interleaved(x, cos, sin), ref_rope_ltx),
    Case("rope_interleaved_qk (LTX q and k)", "rope_interleaved_qk", HIDDEN, ltx_rope_inputs(True),
         lambda k, q, kk, cos, sin: k.rope_interleaved_qk(q, kk, cos, sin),
         lambda q, kk, cos, sin: (ref_rope_ltx(q, cos, sin), ref_rope_ltx(kk, cos, sin))),
    Case("rope_rotate_half (Llama q, k; GQA)", "rope_rotate_half", LLAMA_Q, llama_rope_inputs(True),
         lambda k, q, kk, cos, sin: k.rope_rotate_half(q, kk, cos, sin),
         lambda q, kk, cos, sin: (ref_rope_llama(q, cos, sin), ref_rope_llama(kk, cos, sin))),
    Case("rope_rotate_half_single (Llama q)", "rope_rotate_half_single", LLAMA_Q,
         llama_rope_inputs(False), lambda k, x, cos, sin: k.rope_rotate_half_single(x, cos, sin),
         ref_rope_llama),
]
# Public functions that are not tensor ops (nothing to check or time here).
HELPERS = {"rms_norm_out_dtype"}


# ----------------------------------------------------------------------------- measuring


def ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Float bit patterns as integers ordered like the floats (adjacent floats differ by 1)."""
    if t.dtype in (torch.float16, torch.bfloat16):
        i, mask = t.view(torch.int16).to(torch.int64), 0x7FFF
    else:
        i, mask = t.to(torch.float32).view(torch.int32).to(torch.int64), 0x7FFFFFFF
    return torch.where(i < 0, -(i & mask), i & mask)


def errors(out, ref) -> tuple[float, int]:
    """Max abs error and max distance in ulps (adjacent floats of the output dtype) of out
    from ref; tuples (ops with two outputs) are compared pairwise."""
    if isinstance(ref, tuple):
        pairs = [errors(o, r) for o, r in zip(out, ref, strict=True)]
        return max(p[0] for p in pairs), max(p[1] for p in pairs)
    if out.dtype != ref.dtype or out.shape != ref.shape:
        raise AssertionError(f"got {out.dtype}{tuple(out.shape)}, reference {ref.dtype}{tuple(ref.shape)}")
    abs_err = (out.double() - ref.double()).abs().max().item()
    ulp = (ordered_bits(out) - ordered_bits(ref)).abs().max().item()
    return abs_err, int(ulp)


def time_ms(fn: Callable, device: str) -> float:
    """Median wall time of fn() in ms: CUDA events on the GPU, perf_counter on the CPU."""
    if device == "cuda":
        for _ in range(10):
            fn()
        times = []
        for _ in range(50):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)
    fn()
    times = []
    while len(times) < 3 or (len(times) < 15 and sum(times) < 1000.0):  # ~1 s per op on the CPU
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


# ----------------------------------------------------------------------------- main


def build_variant() -> Path:
    """tools/build.py's build(), for the CUDA backend only when a GPU can run it."""
    spec = importlib.util.spec_from_file_location("ltx_tools_build", ROOT / "tools" / "build.py")
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    backend = None if torch.cuda.is_available() else "cpu"  # None: cuda when nvcc is found
    try:
        return builder.build(backend=backend, arch=os.environ.get("LTX_ARCH"))  # e.g. native
    except builder.BuildError as e:
        sys.exit(f"build failed: {e}")


def main() -> int:
    variant = build_variant()
    cuda_variant = "-cpu-" not in variant.name
    os.environ["LOCAL_KERNELS"] = f"{REPO_ID}={ROOT}"
    import kernels

    kw = {"backend": "cpu"} if (not cuda_variant and torch.version.cuda) else {}
    kernel = kernels.get_kernel(REPO_ID, version=GENERAL["version"], **kw)
    if Path(kernel.__file__).parent.resolve() != variant.resolve():
        print(f"warning: loaded {kernel.__file__}, not the variant just built ({variant})")
    device = "cuda" if cuda_variant and torch.cuda.is_available() else "cpu"
    where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
    print(f"{REPO_ID}: {kernel.__name__} from {variant.name}")
    print(f"torch {torch.__version__}, {where}, {str(DTYPE).removeprefix('torch.')}\n")

    untested = [n for n in kernel.__all__ if n not in {c.op for c in CASES} | HELPERS]
    header = f"{'case':<46} {'input shape':<16} {'max abs err':>11} {'max ulp':>7} {'ours ms':>9} {'ref ms':>9} {'speedup':>7}"
    print(header)
    print("-" * len(header))
    failed = []
    for case in CASES:
        shape = case.shapes[device == "cuda"]
        args = case.inputs(shape, device)
        out = case.ours(kernel, *args)
        ref = case.ref(*args)
        abs_err, ulp = errors(out, ref)
        t_ours = time_ms(lambda: case.ours(kernel, *args), device)
        t_ref = time_ms(lambda: case.ref(*args), device)
        limit = case.max_ulp[device == "cuda"]
        flag = "" if limit is None or ulp <= limit else f"  <-- over {limit} ulp"
        if limit is None:
            flag = "  (ulp not checked here: the reference is approximate)"
        elif flag:
            failed.append(case.label)
        print(f"{case.label:<46} {'x'.join(map(str, shape)):<16} {abs_err:>11.3g} {ulp:>7d} {t_ours:>9.3f} {t_ref:>9.3f} "
              f"{t_ref / t_ours:>6.2f}x{flag}")
        del args, out, ref
    if untested:
        print(f"\nno example entry yet for: {', '.join(untested)} (add a Case to CASES)")
    if failed:
        print(f"\n{len(failed)} case(s) over their ulp limit: {failed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
