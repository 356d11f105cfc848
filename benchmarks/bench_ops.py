#!/usr/bin/env python3
"""Side-by-side benchmark of every ltx-kernels op against the peers a user would pick.

    python benchmarks/bench_ops.py --out DIR            # full run (GPU; ~7 min on an H200)
    python benchmarks/bench_ops.py --quick --out DIR    # a subset of shapes
    python benchmarks/bench_ops.py --smoke              # tiny shapes, no peers: checks the script
    python benchmarks/bench_ops.py --ops rmsnorm,geglu --dtype bf16

One process: (1) the copy ceiling (a large device-to-device copy, bytes read + written) and
an empty kernel's launch time; (2) per op and shape: ours, PyTorch eager (the module's
expression, plus ``F.rms_norm`` for norms), ``torch.compile(dynamic=False)`` of that
expression, Liger-Kernel and FlashInfer where they have the op and import (else reported
absent, never faked), and a device copy of the same bytes (a reference row, not a peer:
what a call of that size gets from the memory system); (3) medians of single calls timed
with CUDA events, each after a read-only pass over a 256 MB buffer (cold, clean L2:
``Timer``; do_bench's zeroing left dirty lines the timed call had to write back) and, for
shapes moving <= 8 MB, the time per call under CUDA-graph replay (20 calls per graph, so
calls 2..20 see a warm L2); (4) µs, GB/s by the
minimum-bytes model (each input read once, each output written once; broadcast tables and
weights counted once at their own size), % of the copy ceiling, ours / best peer;
(5) every output is checked before it is timed: normwise and max-abs error against a
float64 evaluation of the same expression, plus the max ulp distance from the eager
reference; a peer that fails is reported as "mismatch" and left out of "best peer".

Targets (PASS/FAIL columns; meant for an H200, bf16): traffic >= 64 MB: >= 90% of the
measured copy ceiling; every shape: ours <= best peer present; traffic <= 8 MB: graph time
<= 1.25 x (empty-kernel launch + bytes / copy rate).

Writes ``results.json``, ``results.md`` (the section), ``bench_ops.png`` (if matplotlib
imports) into --out (default benchmarks/out), and prepends the dated section to
benchmarks/RESULTS.md (not with --smoke, nor with --no-results).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import tomllib
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
GENERAL = tomllib.loads((ROOT / "build.toml").read_text())["general"]
REPO_ID = GENERAL["hub"]["repo-id"]

BIG_BYTES = 64e6  # copy-ceiling target applies from here
SMALL_BYTES = 8e6  # graph-replay timing and target up to here
COPY_TARGET = 0.90
GRAPH_SLACK = 1.25
GRAPH_CALLS = 20
SAME_BYTES_COPY = "copy (same bytes)"  # bench_ops' reference row per case
DOC_COPY_GBPS = 4274.0  # H200, 2026-12-02 (shared/docs/performance.md); for reference only
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Normwise / max-abs (relative to max |ref|) error bounds against float64, per output dtype.
TOL = {torch.bfloat16: (8e-3, 3.2e-2), torch.float16: (1e-3, 4e-3), torch.float32: (1e-5, 4e-5)}


# ----------------------------------------------------------------------------- references
# The expressions the ops replace (same as example.py / the tests). Each also runs on
# float64 inputs to give the "exact" reference.


def ref_rms_diffusers(x, w, eps):
    """diffusers RMSNorm.forward (LTX norm1/norm2 without weight; FLUX/Wan per-head with)."""
    var = x.to(torch.float32 if x.dtype != torch.float64 else x.dtype).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(var + eps)
    if w is None:
        return h.to(x.dtype)
    if w.dtype in (torch.float16, torch.bfloat16):
        h = h.to(w.dtype)
    return h * w


def ref_rms_llama(x, w, eps):
    """transformers LlamaRMSNorm.forward."""
    h = x.to(torch.float32 if x.dtype != torch.float64 else x.dtype)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def ref_geglu_tanh(x):
    """gelu_tanh_and_mul (vLLM / FlashInfer / Liger order): gelu_tanh(x[..., :d]) * x[..., d:]."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="tanh") * x[..., d:]


def ref_gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def ref_rope_ltx(x, cos, sin):
    """diffusers transformer_ltx.apply_rotary_emb."""
    x_real, x_imag = x.unflatten(-1, (-1, 2)).unbind(-1)
    x_rot = torch.stack([-x_imag, x_real], dim=-1).flatten(-2)
    up = torch.float32 if x.dtype != torch.float64 else x.dtype
    return (x.to(up) * cos + x_rot.to(up) * sin).to(x.dtype)


def ref_rope_ltx_qk(q, k, cos, sin):
    return ref_rope_ltx(q, cos, sin), ref_rope_ltx(k, cos, sin)


def ref_qk_prologue(q, k, qw, kw, cos, sin, eps=1e-6):
    """LTX-Video attention: norm_q / norm_k (torch.nn.RMSNorm, weighted) then apply_rotary_emb."""
    q = F.rms_norm(q, (q.shape[-1],), qw, eps)
    k = F.rms_norm(k, (k.shape[-1],), kw, eps)
    return ref_rope_ltx_qk(q, k, cos, sin)


def ref_rope_ltx_qk_pair(q, k, cos, sin):
    """The same from pair tables [B, S, D/2]: diffusers' repeat_interleave(2), then apply."""
    return ref_rope_ltx_qk(q, k, cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1))


def ref_qk_prologue_pair(q, k, qw, kw, cos, sin, eps=1e-6):
    """ref_qk_prologue from pair tables [B, S, D/2] (as ref_rope_ltx_qk_pair)."""
    return ref_qk_prologue(q, k, qw, kw, cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1), eps)


def _rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def ref_rope_llama(q, k, cos, sin):
    """transformers apply_rotary_pos_emb (unsqueeze_dim=1)."""
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    return q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin


def ref_adaln_rms(x, scale, shift, eps=1e-6):
    """LTX: norm1(x) * (1 + scale_msa) + shift_msa, norm1 = diffusers RMSNorm, no weight."""
    return ref_rms_diffusers(x, None, eps) * (1 + scale) + shift


def ref_adaln_layer(x, scale, shift, eps=1e-6):
    """FLUX/DiT: LayerNorm(elementwise_affine=False)(x) * (1 + scale) + shift."""
    return F.layer_norm(x, (x.shape[-1],), None, None, eps) * (1 + scale) + shift


def ref_gated_residual(x, y, gate):
    """LTX: hidden_states + attn_output * gate_msa."""
    return x + y * gate


# ----------------------------------------------------------------------------- cases


@dataclass
class Impl:
    name: str
    fn: Callable[[], Any] | None  # the timed call; None when absent
    note: str = ""  # e.g. why absent, or how inputs were prepared
    check_fn: Callable[[], Any] | None = None  # untimed call for the check (default: fn)
    # a reference, not an implementation of the op (the same-bytes copy): timed like the
    # others, never checked, never a peer (status "ref")
    reference: bool = False


@dataclass
class Case:
    op: str
    shape: str  # label
    dtype: torch.dtype
    inputs: Callable[[], dict]  # -> dict of named tensors (built on the device)
    counted: tuple  # names of the inputs whose bytes count (each once)
    ours: Callable[[Any, dict], Any]
    ref: Callable[..., Any]  # eager reference expression, called with inputs in `args` order
    args: tuple  # input names passed to ref (and float64 ref)
    ref_kw: dict = field(default_factory=dict)
    peers: Callable[[dict, "Env"], list] | None = None  # -> list[Impl] (besides eager/compile)
    extra_eager: Callable[[dict], list] | None = None  # more eager peers, e.g. F.rms_norm
    # vs the eager reference, checked on CUDA; None: not checked (the float64 check
    # decides), where a flipped fp32 rounding of the norm meets a cancellation
    # (norm * (1 + scale) + shift near 0) and the ulp distance of the tiny result is unbounded
    ours_max_ulp: int | None = 2
    tables: str = ""  # what the byte model counts beyond x and out
    # our other modes of the same call (e.g. in place, as a peer that works in place), timed and
    # checked like ours but never counted as a peer: -> list[Impl] named "ours (...)"
    ours_extra: Callable[[Any, dict], list] | None = None


def _g(seed):
    return torch.Generator().manual_seed(seed)


def randn(shape, dtype, device, gen, scale=1.0, offset=0.0):
    return (offset + scale * torch.randn(shape, generator=gen)).to(device=device, dtype=dtype)


def fmt_shape(*shapes):
    return ",".join("x".join(map(str, s)) for s in shapes)


def import_liger():
    """(Liger-Kernel's entry points by op, or None when it does not import; a note saying which)."""
    try:
        import liger_kernel  # noqa: F401
        from liger_kernel.ops.geglu import LigerGELUMulFunction
        from liger_kernel.transformers import functional as lf
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        ops = dict(rms_norm=lf.liger_rms_norm, geglu=LigerGELUMulFunction.apply, rope=liger_rotary_pos_emb,
                   modulated_rms_norm=getattr(lf, "liger_modulated_rms_norm", None))
        return ops, f"liger-kernel {_version('liger-kernel')}"
    except Exception as e:  # absent or broken: reported, never faked
        return None, f"absent ({type(e).__name__}: {str(e)[:120]})"


class Env:
    """Device, kernel, optional peers (imported once)."""

    def __init__(self, device, kernel, with_peers, with_compile):
        self.device = device
        self.kernel = kernel
        self.with_compile = with_compile
        self.liger = self.flashinfer = None
        self.liger_note = self.flashinfer_note = "not tried (--no-peers, --smoke or cpu)"
        if with_peers:
            self._import_peers()

    def _import_peers(self):
        self.liger, self.liger_note = import_liger()
        os.environ.setdefault("FLASHINFER_USE_CUDA_NORM", "1")
        try:
            import flashinfer

            self.flashinfer = flashinfer
            self.flashinfer_note = (f"flashinfer-python {_version('flashinfer-python')} "
                                    f"(FLASHINFER_USE_CUDA_NORM={os.environ['FLASHINFER_USE_CUDA_NORM']})")
        except Exception as e:
            self.flashinfer_note = f"absent ({type(e).__name__}: {str(e)[:160]})"


def _version(dist):
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def absent(name, note):
    return Impl(name, None, note)


# --- rmsnorm -------------------------------------------------------------------------


def rms_case(shape, dtype, device, *, weight, semantics, tag):
    d = shape[-1]
    ref = ref_rms_llama if semantics == "llama" else ref_rms_diffusers
    eps = 1e-6

    def inputs():
        g = _g(1)
        x = randn(shape, dtype, device, g)
        w = randn((d,), dtype, device, g, 0.1, 1.0) if weight else None
        return {"x": x, "w": w}

    def peers(inp, env):
        x, w = inp["x"], inp["w"]
        out = []
        if env.liger:  # casting_mode="llama": (x*rstd).to(dtype) * w == both references here
            out.append(Impl("liger", lambda: env.liger["rms_norm"](x, w, eps, 0.0, "llama", False)))
        else:
            out.append(absent("liger", env.liger_note))
        if env.flashinfer:
            wf = w if w is not None else torch.ones(d, dtype=dtype, device=device)
            xi = x if x.dim() in (2, 3) else x.reshape(-1, d)
            note = "" if w is not None else "weight=ones (no weight-less form)"
            out.append(Impl("flashinfer", lambda: env.flashinfer.rmsnorm(xi, wf, eps).view(x.shape), note))
        else:
            out.append(absent("flashinfer", env.flashinfer_note))
        return out

    def extra(inp):
        x, w = inp["x"], inp["w"]
        return [Impl("F.rms_norm", lambda: F.rms_norm(x, (d,), w, eps))]

    return Case("rmsnorm", f"{fmt_shape(shape)} {tag}", dtype, inputs, ("x", "w"),
                lambda k, i: k.rmsnorm(i["x"], i["w"], eps, semantics=semantics),
                ref, ("x", "w"), {"eps": eps}, peers, extra,
                tables="weight" if weight else "")


# --- activations ---------------------------------------------------------------------


def geglu_case(rows, d, dtype, device):
    shape = (rows, 2 * d)

    def inputs():
        return {"x": randn(shape, dtype, device, _g(2))}

    def peers(inp, env):
        x = inp["x"]
        out = []
        if env.liger:
            a, b = x[..., :d].contiguous(), x[..., d:].contiguous()
            out.append(Impl("liger", lambda: env.liger["geglu"](a, b), "a, b pre-split contiguous"))
        else:
            out.append(absent("liger", env.liger_note))
        if env.flashinfer:
            out.append(Impl("flashinfer", lambda: env.flashinfer.gelu_tanh_and_mul(x)))
        else:
            out.append(absent("flashinfer", env.flashinfer_note))
        return out

    return Case("geglu", f"{fmt_shape(shape)}->{d}", dtype, inputs, ("x",),
                lambda k, i: k.geglu(i["x"], "tanh", gate_first=True),
                ref_geglu_tanh, ("x",), peers=peers)


def gelu_tanh_case(shape, dtype, device):
    def inputs():
        return {"x": randn(shape, dtype, device, _g(3))}

    def peers(inp, env):
        return [absent("liger", "no GELU-only op"), absent("flashinfer", "no GELU-only op")]

    return Case("gelu_tanh", fmt_shape(shape), dtype, inputs, ("x",),
                lambda k, i: k.gelu_tanh(i["x"]), ref_gelu_tanh, ("x",), peers=peers)


# --- rope ----------------------------------------------------------------------------


def _ltx_tables(b, s, dim, device, g, pair=False):
    """LTX's fp32 tables [B, S, D] (each value repeated for its pair), or with pair=True the
    [B, S, D/2] values before that repeat_interleave(2)."""
    theta = torch.rand(b, s, dim // 2, generator=g, dtype=torch.float64) * 2 * math.pi
    cos, sin = theta.cos().float(), theta.sin().float()
    if not pair:
        cos, sin = cos.repeat_interleave(2, -1), sin.repeat_interleave(2, -1)
    return cos.to(device), sin.to(device)


def _pair_values(table):
    """The [B, S, D/2] pair values of an LTX table [B, S, D] (each value repeated for its pair)."""
    return table[..., ::2]


def _flashinfer_ltx_rope(inp, shape, device, pair, hd=128):
    """FlashInfer's interleaved RoPE as an exact re-expression of LTX's: every (token,
    128-wide head) is its own "position" whose cos_sin_cache row holds that head's 64
    angles, [cos | sin] in fp32 (the pair values: no repeat_interleave duplication).
    Returns rope(q2, k2) for [n, hd] views and n."""
    b, s, dim = shape
    n = b * s * (dim // hd)
    half = (lambda t: t) if pair else _pair_values
    cache = torch.cat([half(inp["cos"]).reshape(n, hd // 2),
                       half(inp["sin"]).reshape(n, hd // 2)], dim=-1).contiguous()
    pos = torch.arange(n, device=device, dtype=torch.int64)

    def rope(fi, q2, k2):
        qo, ko = fi.apply_rope_with_cos_sin_cache(pos, q2, k2, hd, cache, is_neox=False)
        return qo.view(shape), ko.view(shape)

    return rope, n


def rope_ltx_case(shape, dtype, device, *, qk, pair=False):
    """rope_ltx / rope_ltx_qk; pair=True (qk only): rope_ltx_qk_pair, every implementation
    given the pair tables [B, S, D/2] (ours reads them as they are, eager and compile do
    diffusers' repeat_interleave(2) first, FlashInfer's cache holds the same values)."""
    b, s, dim = shape

    def inputs():
        g = _g(4)
        cos, sin = _ltx_tables(b, s, dim, device, g, pair)
        d = {"q": randn(shape, dtype, device, g), "cos": cos, "sin": sin}
        if qk:
            d["k"] = randn(shape, dtype, device, g)
        return d

    def peers(inp, env):
        if not qk:
            return [absent("liger", "no interleaved RoPE"),
                    absent("flashinfer", "needs q and k (see rope_ltx_qk)")]
        out = [absent("liger", "no interleaved (GPT-J) RoPE")]
        if env.flashinfer:
            # It reads the pair values (half ours' bytes with full tables); bytes are modelled
            # on the problem as given, the same for every impl.
            rope, n = _flashinfer_ltx_rope(inp, shape, device, pair)
            qv, kv = inp["q"].reshape(n, 128), inp["k"].reshape(n, 128)
            fi = (lambda: rope(env.flashinfer, qv, kv))
            out.append(Impl("flashinfer", fi, "cos_sin_cache [tokens*heads, 128] fp32, positions arange"))
        else:
            out.append(absent("flashinfer", env.flashinfer_note))
        return out

    if pair:
        return Case("rope_ltx_qk_pair", f"q,k {fmt_shape(shape)}", dtype, inputs, ("q", "k", "cos", "sin"),
                    lambda k, i: k.rope_interleaved_qk(i["q"], i["k"], i["cos"], i["sin"]),
                    ref_rope_ltx_qk_pair, ("q", "k", "cos", "sin"), peers=peers,
                    tables="fp32 cos+sin [B,S,D/2] pair tables each counted once")
    def pair_tables(kernel, inp):
        # Like for like with FlashInfer's row: its cos_sin_cache holds the pair values, built
        # once from the full tables and not timed; ours takes those pair tables as they are.
        q, k = inp["q"], inp["k"]
        cp, sp = _pair_values(inp["cos"]).contiguous(), _pair_values(inp["sin"]).contiguous()
        return [Impl("ours (pair tables)", lambda: kernel.rope_interleaved_qk(q, k, cp, sp),
                     "pair tables [B,S,D/2] built once from the full ones, untimed")]

    if qk:
        return Case("rope_ltx_qk", f"q,k {fmt_shape(shape)}", dtype, inputs, ("q", "k", "cos", "sin"),
                    lambda k, i: k.rope_interleaved_qk(i["q"], i["k"], i["cos"], i["sin"]),
                    ref_rope_ltx_qk, ("q", "k", "cos", "sin"), peers=peers,
                    tables="fp32 cos+sin [B,S,D] each counted once", ours_extra=pair_tables)
    return Case("rope_ltx", fmt_shape(shape), dtype, inputs, ("q", "cos", "sin"),
                lambda k, i: k.rope_interleaved(i["q"], i["cos"], i["sin"]),
                ref_rope_ltx, ("q", "cos", "sin"), peers=peers,
                tables="fp32 cos+sin [B,S,D] each counted once")


def qk_prologue_case(shape, dtype, device):
    """rmsnorm_rope_qk, LTX-Video's q/k prologue as patch_ltx_video calls it (weights in the
    model dtype, fp32 [B, S, D] tables). Peers: eager and compile of the module sequence,
    FlashInfer's rmsnorm twice then its RoPE (three launches)."""
    b, s, dim = shape

    def inputs():
        g = _g(7)
        cos, sin = _ltx_tables(b, s, dim, device, g)
        return {"q": randn(shape, dtype, device, g), "k": randn(shape, dtype, device, g),
                "qw": randn((dim,), dtype, device, g, 0.1, 1.0), "kw": randn((dim,), dtype, device, g, 0.1, 1.0),
                "cos": cos, "sin": sin}

    def peers(inp, env):
        out = [absent("liger", "no fused q/k norm + interleaved RoPE")]
        if env.flashinfer:
            rope, n = _flashinfer_ltx_rope(inp, shape, device, pair=False)
            q2, k2 = inp["q"].reshape(-1, dim), inp["k"].reshape(-1, dim)

            def fi():
                nq = env.flashinfer.rmsnorm(q2, inp["qw"], 1e-6).view(n, 128)
                nk = env.flashinfer.rmsnorm(k2, inp["kw"], 1e-6).view(n, 128)
                return rope(env.flashinfer, nq, nk)

            out.append(Impl("flashinfer", fi, "rmsnorm x2 + cos_sin_cache RoPE (three launches)"))
        else:
            out.append(absent("flashinfer", env.flashinfer_note))
        return out

    return Case("qk_prologue", f"q,k {fmt_shape(shape)}", dtype, inputs, ("q", "k", "qw", "kw", "cos", "sin"),
                lambda k, i: k.rmsnorm_rope_qk(i["q"], i["k"], i["qw"], i["kw"], i["cos"], i["sin"], 1e-6),
                ref_qk_prologue, ("q", "k", "qw", "kw", "cos", "sin"), peers=peers,
                tables="weights and fp32 cos+sin [B,S,D] each counted once",
                # a norm rounding flipped by the summation order, then x*cos - y*sin cancelling:
                # unbounded ulp (H200 2026-12-05: 30010 ulp, normwise error = eager's)
                ours_max_ulp=None)


def rope_llama_case(b, hq, hk, s, dh, dtype, device):
    def inputs():
        g = _g(5)
        inv = 1.0 / (500000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32) / dh))
        fr = torch.arange(s, dtype=torch.float32)[:, None] * inv[None, :]
        emb = torch.cat((fr, fr), -1)[None].expand(b, s, dh)
        # q, k in transformers' physical layout: proj(x).view(B, S, H, D).transpose(1, 2)
        q = randn((b, s, hq, dh), dtype, device, g).transpose(1, 2)
        k = randn((b, s, hk, dh), dtype, device, g).transpose(1, 2)
        return {"q": q, "k": k, "cos": emb.cos().to(device, dtype).contiguous(),
                "sin": emb.sin().to(device, dtype).contiguous()}

    def peers(inp, env):
        out = []
        if env.liger:  # rotates q, k in place: give it its own copies
            ql, kl = inp["q"].clone(), inp["k"].clone()  # clone keeps the [B,S,H,D] strides
            cos, sin = inp["cos"], inp["sin"]
            out.append(Impl("liger", lambda: env.liger["rope"](ql, kl, cos, sin), "in place",
                            check_fn=lambda: env.liger["rope"](inp["q"].clone(), inp["k"].clone(), cos, sin)))
        else:
            out.append(absent("liger", env.liger_note))
        if env.flashinfer and b == 1:
            cache = torch.cat([inp["cos"][0, :, : dh // 2], inp["sin"][0, :, : dh // 2]], -1).float().contiguous()
            pos = torch.arange(s, device=device, dtype=torch.int64)
            qv = inp["q"].transpose(1, 2).reshape(s, hq * dh)  # views, no copy
            kv = inp["k"].transpose(1, 2).reshape(s, hk * dh)

            def fi():
                qo, ko = env.flashinfer.apply_rope_with_cos_sin_cache(pos, qv, kv, dh, cache, is_neox=True)
                return (qo.view(b, s, hq, dh).transpose(1, 2), ko.view(b, s, hk, dh).transpose(1, 2))

            out.append(Impl("flashinfer", fi, "fp32 cos_sin_cache from the bf16 tables"))
        elif env.flashinfer:
            out.append(absent("flashinfer", "batch > 1 not mapped"))
        else:
            out.append(absent("flashinfer", env.flashinfer_note))
        return out

    def in_place(kernel, inp):  # like for like with Liger's in-place rotation
        qi, ki = inp["q"].clone(), inp["k"].clone()  # clone keeps the [B,S,H,D] strides
        cos, sin = inp["cos"], inp["sin"]
        return [Impl("ours (in place)", lambda: kernel.rope_rotate_half(qi, ki, cos, sin, inplace=True), "in place",
                     check_fn=lambda: kernel.rope_rotate_half(inp["q"].clone(), inp["k"].clone(), cos, sin,
                                                              inplace=True))]

    return Case("rope_llama", f"q{fmt_shape((b, hq, s, dh))},k{hk}", dtype, inputs, ("q", "k", "cos", "sin"),
                lambda k, i: k.rope_rotate_half(i["q"], i["k"], i["cos"], i["sin"]),
                ref_rope_llama, ("q", "k", "cos", "sin"), peers=peers,
                tables="cos+sin [B,S,Dh] in q's dtype, counted once", ours_extra=in_place)


# --- adaln / gated residual ----------------------------------------------------------


def adaln_case(shape, mod_shape, dtype, device, norm):
    def inputs():
        g = _g(6)
        return {"x": randn(shape, dtype, device, g), "scale": randn(mod_shape, dtype, device, g, 0.1),
                "shift": randn(mod_shape, dtype, device, g, 0.1)}

    def peers(inp, env):
        out = []
        if norm == "rms" and env.liger and env.liger.get("modulated_rms_norm"):
            x, sc, sh = inp["x"], inp["scale"], inp["shift"]
            out.append(Impl("liger", lambda: env.liger["modulated_rms_norm"](x, None, sc, sh, 1e-6, 0.0, "llama", False)))
        else:
            out.append(absent("liger", env.liger_note if not env.liger else "no modulated LayerNorm"))
        out.append(absent("flashinfer", "fused_dit_* ops add a residual: not this op"))
        return out

    return Case("adaln", f"{fmt_shape(shape)} mod {fmt_shape(mod_shape)} {norm}", dtype, inputs,
                ("x", "scale", "shift"),
                lambda k, i: k.adaln(i["x"], i["scale"], i["shift"], None, 1e-6, norm),
                ref_adaln_rms if norm == "rms" else ref_adaln_layer, ("x", "scale", "shift"),
                peers=peers, tables="scale, shift at their own size", ours_max_ulp=None)


def gated_case(shape, gate_shape, dtype, device):
    def inputs():
        g = _g(7)
        return {"x": randn(shape, dtype, device, g), "y": randn(shape, dtype, device, g),
                "gate": randn(gate_shape, dtype, device, g, 0.1)}

    def peers(inp, env):
        return [absent("liger", "no such op"), absent("flashinfer", "no such op")]

    return Case("gated_residual", f"{fmt_shape(shape)} gate {fmt_shape(gate_shape)}", dtype, inputs,
                ("x", "y", "gate"), lambda k, i: k.gated_residual(i["x"], i["y"], i["gate"]),
                ref_gated_residual, ("x", "y", "gate"), peers=peers, tables="gate at its own size")


OPS = ("rmsnorm", "geglu", "gelu_tanh", "rope_ltx", "rope_ltx_qk", "rope_ltx_qk_pair", "qk_prologue",
       "rope_llama", "adaln", "gated_residual")


def build_cases(ops, dtypes, device, quick, smoke):
    """The issue's shapes, most important first (bf16, then fp16/fp32 spot checks)."""
    cases = []
    main = dtypes[0]
    spot = dtypes[1:]

    def add(op, make_all, make_spot=None):
        if op not in ops:
            return
        cases.extend(make_all(main))
        for dt in spot:
            cases.extend((make_spot or make_all)(dt))

    if smoke:
        add("rmsnorm", lambda dt: [rms_case((2, 8, 64), dt, device, weight=False, semantics="diffusers", tag="ltx"),
                                   rms_case((16, 64), dt, device, weight=True, semantics="llama", tag="llama")])
        add("geglu", lambda dt: [geglu_case(8, 64, dt, device)])
        add("gelu_tanh", lambda dt: [gelu_tanh_case((2, 8, 64), dt, device)])
        add("rope_ltx", lambda dt: [rope_ltx_case((2, 8, 64), dt, device, qk=False)])
        add("rope_ltx_qk", lambda dt: [rope_ltx_case((2, 8, 64), dt, device, qk=True)])
        add("rope_ltx_qk_pair", lambda dt: [rope_ltx_case((2, 8, 64), dt, device, qk=True, pair=True)])
        add("qk_prologue", lambda dt: [qk_prologue_case((2, 8, 64), dt, device)])
        add("rope_llama", lambda dt: [rope_llama_case(1, 4, 2, 8, 16, dt, device)])
        add("adaln", lambda dt: [adaln_case((2, 8, 64), (2, 1, 64), dt, device, "rms"),
                                 adaln_case((2, 8, 64), (2, 8, 64), dt, device, "layer")])
        add("gated_residual", lambda dt: [gated_case((2, 8, 64), (2, 1, 64), dt, device)])
        return cases

    ltx_tokens = (6144, 8064) if quick else (2688, 6144, 8064)
    batches = (2,) if quick else (1, 2)
    llama_d = (4096, 8192) if quick else (4096, 5120, 8192)
    llama_m = (16, 4096, 16384) if quick else (1, 16, 256, 4096, 16384)
    heads_t = (8064,) if quick else (8064, 16128)

    def rms_all(dt):
        out = []
        for hidden in (2048, 4096):  # LTX-Video 2B / 13B; norm1/norm2 have no weight
            for t in ltx_tokens:
                for b in batches:
                    out.append(rms_case((b, t, hidden), dt, device, weight=False, semantics="diffusers",
                                        tag="ltx2b" if hidden == 2048 else "ltx13b"))
        for d in llama_d:
            for m in llama_m:
                out.append(rms_case((m, d), dt, device, weight=True, semantics="llama", tag="llama"))
        for t in heads_t:
            for dh in (64, 128):  # per-head q/k norm (FLUX/Wan style, bf16 weight)
                out.append(rms_case((t, 32, dh), dt, device, weight=True, semantics="diffusers", tag="per-head"))
        return out

    def rms_spot(dt):
        return [rms_case((2, 8064, 2048), dt, device, weight=False, semantics="diffusers", tag="ltx2b"),
                rms_case((4096, 4096), dt, device, weight=True, semantics="llama", tag="llama")]

    add("rmsnorm", rms_all, rms_spot)
    geglu_rows = (256, 8064, 16128) if quick else (16, 256, 4096, 8064, 16128)
    add("geglu", lambda dt: [geglu_case(r, 8192, dt, device) for r in geglu_rows],
        lambda dt: [geglu_case(8064, 8192, dt, device)])
    add("gelu_tanh", lambda dt: [gelu_tanh_case(s, dt, device) for s in
                                 ([(2, 8064, 8192)] if quick else [(1, 256, 8192), (2, 2688, 8192), (2, 8064, 8192)])],
        lambda dt: [gelu_tanh_case((2, 8064, 8192), dt, device)])
    rope_shapes = [(2, 8064, 2048)] if quick else [(1, 256, 2048), (2, 2688, 2048), (2, 8064, 2048)]
    add("rope_ltx", lambda dt: [rope_ltx_case(s, dt, device, qk=False) for s in rope_shapes],
        lambda dt: [rope_ltx_case((2, 8064, 2048), dt, device, qk=False)])
    add("rope_ltx_qk", lambda dt: [rope_ltx_case(s, dt, device, qk=True) for s in rope_shapes],
        lambda dt: [])
    add("rope_ltx_qk_pair", lambda dt: [rope_ltx_case(s, dt, device, qk=True, pair=True) for s in rope_shapes],
        lambda dt: [])
    add("qk_prologue", lambda dt: [qk_prologue_case(s, dt, device) for s in rope_shapes],
        lambda dt: [qk_prologue_case((2, 8064, 2048), dt, device)])
    llama_s = (8192,) if quick else (256, 2048, 8192)
    add("rope_llama", lambda dt: [rope_llama_case(1, 32, 8, s, 128, dt, device) for s in llama_s],
        lambda dt: [rope_llama_case(1, 32, 8, 8192, 128, dt, device)])
    hid = (2, 8064, 2048)

    def adaln_all(dt):
        out = [adaln_case(hid, (2, 1, 2048), dt, device, "rms"),
               adaln_case(hid, hid, dt, device, "rms"),
               adaln_case(hid, (2, 1, 2048), dt, device, "layer")]
        if not quick:
            out += [adaln_case((2, 2688, 2048), (2, 1, 2048), dt, device, "rms"),
                    adaln_case((1, 256, 2048), (1, 1, 2048), dt, device, "rms")]
        return out

    add("adaln", adaln_all, lambda dt: [adaln_case(hid, (2, 1, 2048), dt, device, "rms")])

    def gated_all(dt):
        out = [gated_case(hid, (2, 1, 2048), dt, device), gated_case(hid, hid, dt, device)]
        if not quick:
            out += [gated_case((2, 2688, 2048), (2, 1, 2048), dt, device),
                    gated_case((1, 256, 2048), (1, 1, 2048), dt, device)]
        return out

    add("gated_residual", gated_all, lambda dt: [gated_case(hid, (2, 1, 2048), dt, device)])
    return cases


# ----------------------------------------------------------------------------- checking


def _as_tuple(o):
    return tuple(o) if isinstance(o, (tuple, list)) else (o,)


def _ordered_bits(t):
    if t.dtype in (torch.float16, torch.bfloat16):
        i, mask = t.view(torch.int16).to(torch.int64), 0x7FFF
    else:
        i, mask = t.to(torch.float32).view(torch.int32).to(torch.int64), 0x7FFFFFFF
    return torch.where(i < 0, -(i & mask), i & mask)


def max_ulp(out, ref):
    worst = 0
    for o, r in zip(_as_tuple(out), _as_tuple(ref), strict=True):
        if o.dtype != r.dtype or o.shape != r.shape:
            return None
        d = (_ordered_bits(o) - _ordered_bits(r)).abs()
        worst = max(worst, int(d.max()) if d.numel() else 0)
    return worst


def check(out, ref64, want_dtypes):
    """(ok, message, normwise rel err, max-abs err / max |ref|) of out against float64."""
    outs, refs = _as_tuple(out), _as_tuple(ref64)
    if len(outs) != len(refs):
        return False, f"{len(outs)} outputs, expected {len(refs)}", None, None
    worst_rel = worst_max = 0.0
    for o, r, dt in zip(outs, refs, want_dtypes):
        if tuple(o.shape) != tuple(r.shape):
            return False, f"shape {tuple(o.shape)} != {tuple(r.shape)}", None, None
        if o.dtype != dt:
            return False, f"dtype {o.dtype} != {dt}", None, None
        od = o.double()
        if not bool(torch.isfinite(od).all()):
            return False, "non-finite values (unwritten output?)", None, None
        err = od - r
        rn = float(r.norm()) or 1.0
        rel = float(err.norm()) / rn
        mx = float(err.abs().max()) / (float(r.abs().max()) or 1.0)
        worst_rel, worst_max = max(worst_rel, rel), max(worst_max, mx)
    tol_rel, tol_max = TOL[want_dtypes[0]]
    ok = worst_rel <= tol_rel and worst_max <= tol_max
    msg = "" if ok else f"error {worst_rel:.2e} (norm) / {worst_max:.2e} (max) > {tol_rel:.0e} / {tol_max:.0e}"
    return ok, msg, worst_rel, worst_max


def poison_allocator(nbytes, device):
    """Leave a freed NaN-filled block in the caching allocator so that an output allocated
    next most likely starts as NaN (0xFF bytes are NaN in fp32/fp16/bf16): an unwritten
    element then fails the finiteness check."""
    if device == "cuda" and nbytes > 0:
        torch.empty(int(nbytes), dtype=torch.uint8, device=device).fill_(0xFF)


# ----------------------------------------------------------------------------- timing


FLUSH_BYTES = 256 << 20  # > 4x an H200's L2


_SPIN_CYCLES_PER_US = None


def spin_cycles_per_us():
    """Clock cycles of torch.cuda._sleep per µs on this GPU (timed once with events)."""
    global _SPIN_CYCLES_PER_US
    if _SPIN_CYCLES_PER_US is None:
        cycles = 2_000_000
        torch.cuda._sleep(cycles)  # warm up the launch path and the clocks
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.cuda._sleep(cycles)
        e.record()
        torch.cuda.synchronize()
        _SPIN_CYCLES_PER_US = cycles / max(s.elapsed_time(e) * 1e3, 1.0)
    return _SPIN_CYCLES_PER_US


# The host lead of the last cold_l2_us call: (host µs per call of fn, spin µs per call).
last_host_lead = (0.0, 0.0)


def cold_l2_us(fn, flush, warmup_ms=25, rep_ms=100):
    """Median µs of CUDA-event times around single calls of fn, each after flush().

    do_bench's loop (warm up for warmup_ms, then as many timed calls as fit rep_ms, the
    median), with the L2 flush passed in: bench_ops passes a read-only pass over a 256 MB
    buffer (see Timer).

    Host lead: the events time what the GPU does between them, so fn's kernels must already
    be queued when the start event runs, or the time includes the host's launch path (Python
    wrappers, guards, Triton's launcher). On the H200 host of 2026-12-07 18:19 that path took
    40-140 µs per call for torch.compile and Liger (a 16 x 4096 rmsnorm "took" 67 and 145 µs,
    runs 41-72 / 134-148 µs, where graph replay gave 2.1 µs), longer than the flush, so the
    queue ran dry and their times were the host's. Where the host's time per iteration
    comes within 2x of the GPU's, a spin kernel (torch.cuda._sleep) between the flush and
    the start event pads the GPU's iteration to twice the host's, and one 2 ms spin before
    the timed loop gives the host its first lead. The spin touches no memory: L2 stays as
    the flush left it. Implementations whose host path is short (ours, eager, the copies)
    get no spin, so their loop is unchanged."""
    global last_host_lead
    flush()
    fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    s.record()
    for _ in range(5):
        flush()
        fn()
    e.record()
    host_us = (time.perf_counter() - t0) * 1e6 / 5  # enqueue time per iteration
    torch.cuda.synchronize()
    gpu_us = s.elapsed_time(e) * 1e3 / 5
    spin_us = max(0.0, 2.0 * host_us - gpu_us)
    spin_cycles = int(spin_us * spin_cycles_per_us()) if spin_us > 0 else 0
    last_host_lead = (host_us, spin_us)

    def step():
        flush()
        if spin_cycles:
            torch.cuda._sleep(spin_cycles)

    est_ms = max((gpu_us + spin_us) * 1e-3, 1e-3)
    for _ in range(max(1, int(warmup_ms / est_ms))):
        step()
        fn()
    n = min(max(10, int(rep_ms / est_ms)), 2000)
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    if spin_cycles:
        torch.cuda._sleep(int(2000 * spin_cycles_per_us()))
    for a, b in zip(starts, ends):
        step()
        a.record()
        fn()
        b.record()
    torch.cuda.synchronize()
    return statistics.median(a.elapsed_time(b) for a, b in zip(starts, ends)) * 1e3


class Timer:
    """Cold-L2 medians of single calls (cold_l2_us) and CUDA-graph replay times.

    The L2 flush before each timed call reads a 256 MB buffer (a sum), so L2 is left
    holding clean lines of another buffer. triton.testing.do_bench zeroes the buffer
    instead, which leaves up to L2's size of dirty lines that the timed call then pays to
    write back: 3-7 µs on every implementation at the 67-270 MB shapes (2026-12-04, H200,
    benchmarks/ab_kernels.py, both methods side by side; RESULTS.md), which the 2 GiB copy
    that sets the ceiling amortises. RESULTS.md sections before 2026-12-04 17:33 used do_bench's."""

    def __init__(self, device, smoke):
        self.device = device
        self.smoke = smoke
        self.do_bench = None
        if device == "cuda":
            from triton.testing import do_bench

            self.do_bench = do_bench
            self.flush_buf = torch.ones(FLUSH_BYTES // 4, device=device)
            self.flush_sink = torch.empty((), device=device)

    def flush(self):
        torch.sum(self.flush_buf, dim=0, out=self.flush_sink)

    def sync(self):
        if self.device == "cuda":
            torch.cuda.synchronize()

    def us(self, fn):
        """Median µs per call (cold L2 on CUDA)."""
        if self.device == "cuda":
            return cold_l2_us(fn, self.flush)
        fn()
        times = []
        budget = 0.05 if self.smoke else 0.5
        t_end = time.perf_counter() + budget
        while len(times) < 3 or (len(times) < 50 and time.perf_counter() < t_end):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e6)
        return statistics.median(times)

    def graph_us(self, fn, calls=GRAPH_CALLS):
        """Median µs per call under CUDA-graph replay (calls per graph; warm L2 after the first)."""
        if self.device != "cuda":
            return None
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                fn()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(calls):
                fn()
        g.replay()
        torch.cuda.synchronize()
        t = float(self.do_bench(g.replay, warmup=25, rep=100, return_mode="median")) * 1e3 / calls
        del g
        return t


def copy_ceiling(timer, device, nbytes):
    """GB/s of a device-to-device copy of nbytes (read + write counted)."""
    n = int(nbytes) // 4
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    t = timer.us(lambda: dst.copy_(src))
    del src, dst
    return 2 * n * 4 / (t * 1e-6) / 1e9, t


def empty_kernel_us(timer, device):
    """Launch time of an empty kernel under graph replay (torch.cuda._sleep(0); else a
    one-element add)."""
    if device != "cuda":
        return None, "cpu: none"
    try:
        return timer.graph_us(lambda: torch.cuda._sleep(0)), "torch.cuda._sleep(0)"
    except Exception:
        one = torch.zeros(1, device=device)
        return timer.graph_us(lambda: one.add_(1)), "1-element add_"


# ----------------------------------------------------------------------------- running


def nbytes_of(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def summarize(rows, total, ceiling, empty_us, device):
    """One case's summary: ours (rows[0]) vs the best peer that passed its check, and the
    issue's targets. The peer ratio takes the fastest of our rows: rows[0], or one of its
    like-for-like forms ("ours (in place)" against Liger's in-place RoPE, "ours (pair
    tables)" against FlashInfer's pair cache), named in `ratio_by`. Shared with
    benchmarks/median_runs.py (medians of several runs)."""
    ours = rows[0]
    peers_ok = [r for r in rows[1:] if r.get("status") == "ok" and "us" in r
                and not r["impl"].startswith("ours")]  # our other modes are not peers
    best = min(peers_ok, key=lambda r: r["us"]) if peers_ok else None
    ours_forms = [r for r in rows if r["impl"].startswith("ours") and r.get("status") == "ok" and "us" in r]
    fastest = min(ours_forms, key=lambda r: r["us"]) if ours_forms else None
    summary = dict(op=ours["op"], shape=ours["shape"], dtype=ours["dtype"], bytes=total,
                   ours_status=ours.get("status"), ours_us=ours.get("us"), ours_gbps=ours.get("gbps"),
                   ours_pct=ours.get("pct_copy"), ours_graph_us=ours.get("graph_us"),
                   best_peer=best["impl"] if best else None, best_us=best["us"] if best else None)
    ok_ours = ours.get("status") == "ok" and "us" in ours
    summary["ratio"] = fastest["us"] / best["us"] if (ok_ours and best) else None
    summary["ratio_by"] = fastest["impl"] if (ok_ours and best and fastest is not ours) else None
    graph_best = [r for r in peers_ok if r.get("graph_us")]
    if ok_ours and ours.get("graph_us") and graph_best:
        gb = min(graph_best, key=lambda r: r["graph_us"])
        summary["graph_ratio"] = ours["graph_us"] / gb["graph_us"]
        summary["graph_best_peer"] = gb["impl"]
    ref = next((r for r in rows if r["impl"] == SAME_BYTES_COPY and r.get("us")), None)
    summary["copy_same_us"] = ref["us"] if ref else None
    # ours as a share of the same-bytes copy's rate (100: as fast as that copy)
    summary["pct_copy_same"] = 100.0 * ref["us"] / ours["us"] if (ref and ok_ours) else None
    summary["t_copy"] = None
    if total >= BIG_BYTES:
        summary["t_copy"] = "PASS" if ok_ours and ours["pct_copy"] >= 100 * COPY_TARGET else "FAIL"
    summary["t_peer"] = None if best is None else ("PASS" if summary["ratio"] is not None and summary["ratio"] <= 1.0 else "FAIL")
    summary["t_graph"] = None
    if total <= SMALL_BYTES and device == "cuda" and empty_us is not None:
        bound = GRAPH_SLACK * (empty_us + total / (ceiling * 1e9) * 1e6)
        summary["graph_bound_us"] = bound
        summary["t_graph"] = "PASS" if ok_ours and ours.get("graph_us") and ours["graph_us"] <= bound else "FAIL"
    return summary


def same_bytes_copy(total, device):
    """A device copy moving the call's bytes (half read, half written): what the memory
    system gives a call of this size under the same timer. The copy ceiling is a 2 GiB
    copy; at tens of MB a copy's own start and drain are a larger share of its time, so
    this row tells a size limit from a kernel's. Not a peer (Impl.reference)."""
    n = max(int(total) // 2, 1)
    src = torch.empty(n, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    return Impl(SAME_BYTES_COPY, lambda: dst.copy_(src), reference=True,
                note="reference, not a peer: a copy of the call's bytes (half read, half written)")


def run_case(case, env, timer, ceiling, empty_us, args):
    inp = case.inputs()
    ref_args = [inp[n] for n in case.args]
    with torch.no_grad():
        ref = case.ref(*ref_args, **case.ref_kw)
        ref64 = case.ref(*[None if t is None else t.double() for t in ref_args], **case.ref_kw)
    want = tuple(r.dtype for r in _as_tuple(ref))
    out_bytes = nbytes_of(_as_tuple(ref))
    in_bytes = nbytes_of([inp[n] for n in case.counted])
    total = in_bytes + out_bytes

    impls = [Impl("ours", lambda: case.ours(env.kernel, inp))]
    if case.ours_extra:  # smoke too: it checks the script
        impls += case.ours_extra(env.kernel, inp)
    impls.append(Impl("eager", lambda: case.ref(*ref_args, **case.ref_kw)))
    if not args.smoke:
        if case.extra_eager:
            impls += case.extra_eager(inp)
        if env.with_compile:
            torch._dynamo.reset()
            compiled = torch.compile(case.ref, dynamic=False)
            impls.append(Impl("compile", lambda: compiled(*ref_args, **case.ref_kw)))
        if case.peers:
            impls += case.peers(inp, env)
    impls.append(same_bytes_copy(total, env.device))

    rows = []
    for impl in impls:
        row = dict(op=case.op, shape=case.shape, dtype=str(case.dtype).removeprefix("torch."),
                   impl=impl.name, bytes=total, tables=case.tables, note=impl.note)
        rows.append(row)
        if impl.fn is None:
            row["status"] = "absent"
            continue
        try:
            if impl.reference:  # timed like the others; nothing to check
                row.update(status="ref", tables="")
            else:
                poison_allocator(out_bytes, env.device)
                with torch.no_grad():
                    out = (impl.check_fn or impl.fn)()
                timer.sync()
                ok, msg, rel, mx = check(out, _as_tuple(ref64), want)
                row.update(rel_err=rel, max_err=mx)
                u = max_ulp(out, ref)
                row["ulp_vs_eager"] = u
                # fp32: eager's reduction order differs from ours by a few ulp; the float64 check
                # above is the criterion there.
                if (ok and impl.name.startswith("ours") and env.device == "cuda" and case.dtype != torch.float32
                        and case.ours_max_ulp is not None and (u is None or u > case.ours_max_ulp)):
                    ok, msg = False, f"{u} ulp from the eager reference (> {case.ours_max_ulp})"
                row["status"] = "ok" if ok else "mismatch"
                if msg:
                    row["note"] = (row["note"] + "; " if row["note"] else "") + msg
                del out
            with torch.no_grad():
                t = timer.us(impl.fn)
                row["us"] = t
                if env.device == "cuda":
                    host_us, spin_us = last_host_lead
                    row.update(host_us=host_us, spin_us=spin_us)
                    if spin_us > 0:
                        row["note"] = ((row["note"] + "; " if row["note"] else "")
                                       + f"host lead: {host_us:.0f} µs host per call, {spin_us:.0f} µs spin")
                if env.device == "cuda" and total <= SMALL_BYTES:
                    try:
                        row["graph_us"] = timer.graph_us(impl.fn)
                    except Exception as e:  # keep the eager-launch time; say why no graph time
                        row["note"] = (row["note"] + "; " if row["note"] else "") + f"graph capture failed: {type(e).__name__}"
        except Exception as e:
            row["status"] = "error"
            row["note"] = (row["note"] + "; " if row["note"] else "") + f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
            if args.verbose:
                traceback.print_exc()
        if "us" in row:
            row["gbps"] = total / (row["us"] * 1e-6) / 1e9
            row["pct_copy"] = 100.0 * row["gbps"] / ceiling
    summary = summarize(rows, total, ceiling, empty_us, env.device)
    del inp, ref, ref64, impls
    if env.device == "cuda":
        torch.cuda.empty_cache()
    return rows, summary


# ----------------------------------------------------------------------------- reporting


def _f(v, nd=1):
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def env_info(device):
    info = dict(date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                torch=torch.__version__, cuda=torch.version.cuda, python=platform.python_version(),
                host=platform.node())
    # The kernels' A/B switches (read per call from the environment) change what "ours" is.
    info["switches"] = " ".join(f"{k}={v}" for k, v in sorted(os.environ.items())
                                if k.startswith("LTX_KERNELS_"))
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name()
        try:
            info["driver"] = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
        except Exception:
            info["driver"] = "?"
        try:
            import triton

            info["triton"] = triton.__version__
        except Exception:
            pass
    else:
        info["gpu"] = f"none (CPU, {torch.get_num_threads()} threads)"
    return info


def render(meta, rows, summaries):
    L = []
    title = meta.get("title") or ("smoke run (script check, not a measurement)" if meta["smoke"] else "bench_ops.py")
    L.append(f"## {meta['info']['date'][:10]} — {title} on {meta['info']['gpu']}")
    L.append("")
    i = meta["info"]
    L.append(f"- GPU: {i['gpu']}, driver {i.get('driver', '—')}; torch {i['torch']} (CUDA {i['cuda']}), "
             f"Python {i['python']}, triton {i.get('triton', '—')}; kernel {meta['kernel']}"
             + (f", with `{i['switches']}` set" if i.get("switches") else "") + ".")
    L.append(f"- Peers: {meta['liger']}; {meta['flashinfer']}; torch.compile: "
             f"{'dynamic=False, default mode' if meta['compile'] else 'not run'}.")
    L.append(f"- Command: `{meta['command']}`; {meta['date_full']}.")
    L.append(f"- Method: {meta['timer']}. Copy ceiling, same process: **{meta['ceiling']:.0f} GB/s** "
             f"({meta['copy_bytes'] / 2**30:.2f} GiB copy, read + write; docs' H200 figure {DOC_COPY_GBPS:.0f}). "
             f"Empty kernel under graph replay: {_f(meta['empty_us'], 2)} µs ({meta['empty_how']}).")
    L.append("- Bytes: minimum model, each input once and each output once; weights, broadcast "
             "scale/shift/gate and RoPE tables counted once at their own size (column `tables`). "
             "GB/s = bytes / median time for every impl alike.")
    L.append(f"- Checks: every output against float64 (normwise / max-abs error, bf16 "
             f"{TOL[torch.bfloat16][0]:.0e} / {TOL[torch.bfloat16][1]:.0e}) and, for ours on CUDA, "
             "≤ 2 ulp from the eager reference; `mismatch` rows are timed but never count as best peer.")
    L.append(f"- Targets: ≥ 64 MB: ≥ {COPY_TARGET:.0%} of the copy ceiling (`copy`); ours ≤ best peer (`peer`); "
             f"≤ 8 MB: graph time ≤ {GRAPH_SLACK} × (empty kernel + bytes / copy rate) (`graph`).")
    L.append(f"- `{SAME_BYTES_COPY}`: a device copy moving the call's bytes (half read, half written), same timer; "
             "a reference, not a peer (the column beside `% copy`: its time, and ours as a % of its rate).")
    if meta.get("skipped"):
        L.append(f"- **Not run (time budget)**: {meta['skipped']} case(s); see results.json.")
    L.append("")
    L.append("### Summary (ours vs best peer)")
    L.append("")
    L.append("| op | shape | dtype | MB | ours µs | GB/s | % copy | same-bytes copy µs (ours % of it) | best peer | peer µs | ours/best (our fastest form, if not ours) | graph µs | graph bound | copy | peer | graph |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summaries:
        L.append(f"| {s['op']} | {s['shape']} | {s['dtype']} | {s['bytes'] / 1e6:.1f} | "
                 f"{_f(s['ours_us'], 2)}{'' if s['ours_status'] == 'ok' else ' (' + str(s['ours_status']) + ')'} | "
                 f"{_f(s['ours_gbps'], 0)} | {_f(s['ours_pct'])} | "
                 f"{_f(s.get('copy_same_us'), 2)}{' (' + format(s['pct_copy_same'], '.1f') + ')' if s.get('pct_copy_same') else ''} | "
                 f"{s['best_peer'] or '—'} | {_f(s['best_us'], 2)} | "
                 f"{_f(s['ratio'], 2)}{' ' + s['ratio_by'].removeprefix('ours ') if s.get('ratio_by') else ''} | "
                 f"{_f(s['ours_graph_us'], 2)} | {_f(s.get('graph_bound_us'), 2)} | "
                 f"{s['t_copy'] or '—'} | {s['t_peer'] or '—'} | {s['t_graph'] or '—'} |")
    counts = {}
    for s in summaries:
        for k in ("t_copy", "t_peer", "t_graph"):
            if s[k]:
                counts.setdefault(k, [0, 0])[s[k] == "FAIL"] += 1
    if counts:
        L.append("")
        L.append("Targets: " + "; ".join(f"{k[2:]}: {p} PASS / {f} FAIL" for k, (p, f) in counts.items()) + ".")
    L.append("")
    L.append("### All implementations")
    L.append("")
    L.append("| op | shape | dtype | impl | status | µs | GB/s | % copy | graph µs | ulp vs eager | err (norm) | tables | note |")
    L.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        L.append(f"| {r['op']} | {r['shape']} | {r['dtype']} | {r['impl']} | {r.get('status', '—')} | "
                 f"{_f(r.get('us'), 2)} | {_f(r.get('gbps'), 0)} | {_f(r.get('pct_copy'))} | {_f(r.get('graph_us'), 2)} | "
                 f"{_f(r.get('ulp_vs_eager'))} | {'—' if r.get('rel_err') is None else format(r['rel_err'], '.1e')} | "
                 f"{r.get('tables') or ''} | {(r.get('note') or '').replace('|', '/')} |")
    L.append("")
    return "\n".join(L)


def prepend_results(section, path):
    """Insert the section after RESULTS.md's preamble (newest first)."""
    text = path.read_text() if path.exists() else "# Measured results\n\n"
    idx = text.find("\n## ")
    if idx < 0:
        new = text.rstrip("\n") + "\n\n" + section
    else:
        new = text[: idx + 1] + section + "\n" + text[idx + 1:]
    path.write_text(new)


def plot(rows, ceiling, path, dtype):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        print(f"plot skipped: matplotlib does not import ({type(e).__name__}: {e})")
        return None
    ops = [o for o in OPS if any(r["op"] == o and r["dtype"] == dtype and "gbps" in r for r in rows)]
    if not ops:
        print("plot skipped: no timed rows")
        return None
    ncol = 2
    nrow = (len(ops) + 1) // 2
    fig, axes = plt.subplots(nrow, ncol, figsize=(12, 3.6 * nrow), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        sel = [r for r in rows if r["op"] == op and r["dtype"] == dtype and "gbps" in r]
        for impl in dict.fromkeys(r["impl"] for r in sel):
            pts = sorted((r["bytes"] / 1e6, r["gbps"]) for r in sel if r["impl"] == impl)
            xs, ys = zip(*pts)
            ax.plot(xs, ys, marker="o", lw=2.5 if impl == "ours" else 1.2, label=impl,
                    color="black" if impl == "ours" else None)
        ax.axhline(ceiling, ls="--", color="grey", lw=1)
        ax.set_xscale("log")
        ax.set_title(f"{op} ({dtype})")
        ax.set_xlabel("MB moved (minimum model)")
        ax.set_ylabel("GB/s")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(ops):]:
        ax.axis("off")
    fig.suptitle(f"GB/s vs problem size; dashed: copy ceiling {ceiling:.0f} GB/s (cold clean L2, event median)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- main


def warm_peers():
    """JIT-compile FlashInfer's norm / activation / rope modules (and Triton's Liger kernels)
    on tiny inputs, so that a later run finds them in the cache; run it beside the build."""
    env = Env("cuda", None, True, False)
    print(f"warm-peers: {env.liger_note}; {env.flashinfer_note}", flush=True)
    dev, bf = "cuda", torch.bfloat16
    jobs = []
    if env.flashinfer:
        fi = env.flashinfer
        x, w = torch.randn(64, 2048, device=dev, dtype=bf), torch.ones(2048, device=dev, dtype=bf)
        h = torch.randn(64, 32, 128, device=dev, dtype=bf)
        q, k = torch.randn(64, 32 * 128, device=dev, dtype=bf), torch.randn(64, 8 * 128, device=dev, dtype=bf)
        cache = torch.randn(64, 128, device=dev)
        pos = torch.arange(64, device=dev, dtype=torch.int64)
        jobs += [("flashinfer.rmsnorm", lambda: fi.rmsnorm(x, w, 1e-6)),
                 ("flashinfer.rmsnorm 3D", lambda: fi.rmsnorm(h, w[:128].contiguous(), 1e-6)),
                 ("flashinfer.gelu_tanh_and_mul", lambda: fi.gelu_tanh_and_mul(torch.randn(64, 2 * 8192, device=dev, dtype=bf))),
                 ("flashinfer.rope neox", lambda: fi.apply_rope_with_cos_sin_cache(pos, q, k, 128, cache, is_neox=True)),
                 ("flashinfer.rope interleaved", lambda: fi.apply_rope_with_cos_sin_cache(pos, q, k, 128, cache, is_neox=False))]
    rc = 0
    for name, fn in jobs:
        t0 = time.perf_counter()
        try:
            fn()
            torch.cuda.synchronize()
            print(f"warm-peers: {name} ok ({time.perf_counter() - t0:.1f} s)", flush=True)
        except Exception as e:
            rc = 1
            print(f"warm-peers: {name} FAILED ({type(e).__name__}: {str(e)[:300]})", flush=True)
    return rc


def load_kernel(device):
    os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={ROOT}")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import kernels

    kw = {"backend": "cpu"} if (device == "cpu" and torch.version.cuda) else {}
    return kernels.get_kernel(REPO_ID, version=GENERAL["version"], **kw)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list of {','.join(OPS)}")
    p.add_argument("--dtype", default=None,
                   help="comma list of bf16,fp16,fp32; first = full shape set, others = spot checks "
                        "(default bf16,fp16,fp32; --smoke: bf16)")
    p.add_argument("--quick", action="store_true", help="a subset of the shapes")
    p.add_argument("--smoke", action="store_true", help="tiny shapes, no peers, no compile (checks the script)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--out", default=None, help="output folder (default benchmarks/out)")
    p.add_argument("--results", default=str(ROOT / "benchmarks" / "RESULTS.md"),
                   help="RESULTS.md to prepend the section to")
    p.add_argument("--no-results", action="store_true", help="do not touch RESULTS.md")
    p.add_argument("--no-compile", action="store_true")
    p.add_argument("--no-peers", action="store_true", help="skip Liger / FlashInfer")
    p.add_argument("--budget-s", type=float, default=None,
                   help="start no new case after this many seconds (the rest is listed as not run)")
    p.add_argument("--copy-gib", type=float, default=None, help="copy-ceiling size (default 2 GiB on CUDA)")
    p.add_argument("--warm-peers", action="store_true",
                   help="only JIT-compile the peers' kernels on tiny inputs (no kernel needed), then exit")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args(argv)
    if args.warm_peers:
        return warm_peers()
    t_start = time.perf_counter()

    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    bad = [o for o in ops if o not in OPS]
    if bad:
        p.error(f"unknown op(s) {bad}; choose from {OPS}")
    dts = args.dtype or ("bf16" if args.smoke else "bf16,fp16,fp32")
    try:
        dtypes = [DTYPES[d.strip()] for d in dts.split(",")]
    except KeyError as e:
        p.error(f"unknown dtype {e}; choose from {list(DTYPES)}")
    out_dir = Path(args.out) if args.out else ROOT / "benchmarks" / "out"
    out_dir.mkdir(parents=True, exist_ok=True)

    kernel = load_kernel(device)
    variant = Path(kernel.__file__).parent.name
    if device == "cuda" and "-cpu-" in variant:
        sys.exit(f"error: the loaded variant is {variant}; build the CUDA variant first")
    with_peers = device == "cuda" and not args.smoke and not args.no_peers
    with_compile = device == "cuda" and not args.smoke and not args.no_compile
    if with_compile:
        torch._dynamo.config.recompile_limit = 1 << 16  # one fresh compile per case (reset)
        torch._dynamo.config.cache_size_limit = 1 << 16
    env = Env(device, kernel, with_peers, with_compile)
    timer = Timer(device, args.smoke)

    copy_bytes = (args.copy_gib if args.copy_gib else (2.0 if device == "cuda" else 0.0625)) * 2**30
    ceiling, t_copy = copy_ceiling(timer, device, copy_bytes)
    empty_us, empty_how = empty_kernel_us(timer, device)
    print(f"device {device}; kernel {variant}; copy ceiling {ceiling:.0f} GB/s "
          f"({copy_bytes / 2**30:.2f} GiB in {t_copy:.1f} µs); empty kernel (graph) {_f(empty_us, 2)} µs")
    print(f"peers: {env.liger_note}; {env.flashinfer_note}; compile: {with_compile}", flush=True)

    cases = build_cases(ops, dtypes, device, args.quick, args.smoke)
    rows, summaries, skipped = [], [], []
    for n, case in enumerate(cases):
        if args.budget_s is not None and time.perf_counter() - t_start > args.budget_s:
            skipped.append(f"{case.op} {case.shape} {case.dtype}")
            continue
        t0 = time.perf_counter()
        r, s = run_case(case, env, timer, ceiling, empty_us, args)
        rows += r
        summaries.append(s)
        print(f"[{n + 1}/{len(cases)} {time.perf_counter() - t0:5.1f}s] {s['op']:<14} {s['shape']:<34} "
              f"{s['dtype']:<8} ours {_f(s['ours_us'], 2):>9} µs {_f(s['ours_gbps'], 0):>6} GB/s "
              f"({s['ours_status']})  best {s['best_peer'] or '—'} {_f(s['best_us'], 2)} µs  "
              f"ratio {_f(s['ratio'], 2)}  [{s['t_copy'] or '-'} {s['t_peer'] or '-'} {s['t_graph'] or '-'}]",
              flush=True)
        for row in r:
            if row.get("status") in ("mismatch", "error"):
                print(f"      {row['impl']}: {row['status']}: {row.get('note')}", flush=True)

    timer_desc = ("median of CUDA-event times of single calls, each after a read-only pass over a 256 MB "
                  "buffer (cold, clean L2; bench_ops.Timer), warmup 25 ms, rep 100 ms, a spin kernel before "
                  "the start event where the host's launch path would otherwise be timed (host lead: "
                  "bench_ops.cold_l2_us; the row's note says so); graph: "
                  f"{GRAPH_CALLS} calls per CUDA graph, do_bench median of replays / {GRAPH_CALLS}"
                  if device == "cuda" else "CPU perf_counter median (not comparable to GPU numbers)")
    meta = dict(info=env_info(device), smoke=args.smoke, kernel=variant, liger=env.liger_note,
                flashinfer=env.flashinfer_note, compile=with_compile, ceiling=ceiling,
                copy_bytes=copy_bytes, empty_us=empty_us, empty_how=empty_how, timer=timer_desc,
                command="python benchmarks/bench_ops.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                date_full=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                skipped=len(skipped), elapsed_s=time.perf_counter() - t_start)
    section = render(meta, rows, summaries)
    (out_dir / "results.md").write_text(section)
    (out_dir / "results.json").write_text(json.dumps(
        dict(meta=meta, rows=rows, summaries=summaries, skipped=skipped), indent=1, default=str))
    png = plot(rows, ceiling, out_dir / "bench_ops.png", str(dtypes[0]).removeprefix("torch."))
    if not args.smoke and not args.no_results:
        prepend_results(section, Path(args.results))
        print(f"section prepended to {args.results}")
    print(f"wrote {out_dir / 'results.md'}, {out_dir / 'results.json'}" + (f", {png}" if png else ""))
    bad_ours = [s for s in summaries if s["ours_status"] != "ok"]
    print(f"{len(summaries)} case(s) in {time.perf_counter() - t_start:.1f} s; "
          f"ours not ok in {len(bad_ours)}; not run (budget): {len(skipped)}")
    return 1 if bad_ours else 0


if __name__ == "__main__":
    sys.exit(main())
