#!/usr/bin/env python3
"""A/B timing of our kernel variants for one op against its peers, in one process.

    python benchmarks/ab_kernels.py [--op rmsnorm|rmsnorm_small|adaln|gated|act|rope|rope_small|qk] [--rounds 3]
        [--methods clean,zero,graph]

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
times with the clean one since 2026-12-04. A third, ``graph``: per call under CUDA-graph
replay (bench_ops.Timer.graph_us, warm L2), the small-shape target; the default for
``--op rmsnorm_small`` / ``rope_small`` (decode-sized calls) with ``clean``.

Our variants are the same op called under the environment each op's VARIANTS names (the
launchers read these per call: LTX_KERNELS_RMS_KERNEL=row forces rms_norm_kernel;
LTX_KERNELS_ADALN_KERNEL=row the AdaLN kernels other than adaln_direct_kernel;
LTX_KERNELS_ADALN_C=2 / 4 forces adaln_direct_kernel's vectors per thread,
LTX_KERNELS_ADALN_MOD=early / late / staged / staged-stream when and how it loads scale / shift
(staged-stream: staged, x loaded without allocating in L1; the per-token default),
LTX_KERNELS_ADALN_LN=two LayerNorm's statistics in two reductions instead of one, =shift
each thread's mean and M2 in one pass about its first element (adaln_direct_kernel; candidate);
LTX_KERNELS_GELU_TABLE=0 computes GELU of 16-bit dtypes instead of reading a table,
=full / =compact reads the full / compact one (defaults: bf16 compact, fp16 full; computed
on GPUs of < 30 GB/s DRAM per SM, e.g. the H100),
LTX_KERNELS_GEGLU_TABLE=compact gives GEGLU the compact table; LTX_KERNELS_ACT_GRID=walk /
rows / rows128 gives the computed GELU / GEGLU kernel 32 blocks per SM walking the rows
(GELU's default) / a block per row group of at most 256 / 128 threads (GEGLU's default);
LTX_KERNELS_GEGLU_PACKED=0 computes GEGLU's product in fp32 instead of on packed pairs;
LTX_KERNELS_PDL=0 launches
rms_norm_direct_kernel and rope_kernel without programmatic dependent launch
(common/pdl.cuh); LTX_KERNELS_RMS_DECODE_C=4 gives decode-sized rows 4 vectors per thread
instead of 2, LTX_KERNELS_RMS_DECODE=loop gives them back the row loop and looped cross-warp
sum (the form before 2026-12-06 10:03); LTX_KERNELS_RMS_W=late loads the weight of weighted rows (grids over one
block per SM) after each reduction instead of queueing it once per block into shared memory;
LTX_KERNELS_RMS_SHORT=0 keeps per-head rows of many tokens on the direct
kernel, =2 gives rms_norm_short_kernel 2 rows per thread instead of 4;
LTX_KERNELS_ROPE_LEAN=0 gives Llama-style RoPE calls (rotate-half, half-dtype tables, no
pass-through channels) to rope_kernel's token walk instead of a thread per (token, head, unit);
the slot and grid switches below act on rope_kernel, so their variants set it too;
LTX_KERNELS_ROPE_WIDE_SLOTS=0 keeps RoPE calls of few tokens to the narrower head split,
=1 / =4 gives them a slot per head pair within 1 / 4 blocks per SM instead of 2;
LTX_KERNELS_GRID=walk gives RoPE, rmsnorm, AdaLN, the gated residual and the q/k prologue
at most 32 (RoPE) / 64 blocks per SM walking the rest instead of a block per token / row
group (`--op rope`, `--op gated`, `--op rmsnorm`, `--op adaln`); LTX_KERNELS_ROPE_SLOTS=0
keeps RoPE calls of many tokens on the power-of-two head split instead of the slot count
that fills every pass of head pairs (Llama's 32 + 8 heads: 8 slots instead of 4; `--op rope`,
`--op rope_small`); LTX_KERNELS_ROPE_ORDER=position walks RoPE's tokens position-major instead
of batch-major (`--op rope`); LTX_KERNELS_ROPE_STREAM=0 loads the interleaved forward's x
and tables through L1 (by default one head with full tables skips it), =1 has every
interleaved forward skip it (`--op rope`); `--op qk` times LTX's q/k prologue
(LTX_KERNELS_QK_TABLES=prefetch / plain force asking for each token's table rows in L2
before the reduction, the default only for tables the batch shares; its rows stay
position-major: batch-major lost 9-17% on the H100, 2026-12-06).
Decided candidates leave their switch behind or are dropped (2026-12-05: adaln_direct_kernel,
the early weight, the GELU table, the packed rotate-half form, then PDL, decode C = 2, the
compact GELU table and per-token AdaLN C = 2, then the short-row rmsnorm kernel and RoPE's
wide slots became defaults; balanced row chunks, the persistent grid, L2 eviction hints and
broadcast AdaLN C = 2 were dropped; then the rmsnorm weight / next-wave prefetches, GEGLU with
one vector per thread and RoPE with 4 heads per pass, all slower on an H100; then GEGLU's
block-per-row grid of 128 threads and packed product became defaults and the re-read rmsnorm
kernel was dropped, H100; then the block per row / token group of RoPE and the row
kernels and the fitted RoPE slots, H100; then RoPE's lane per unit became the default and
the 6-blocks-per-SM pair-table RoPE and AdaLN C = 1 were dropped, H100; then RoPE's
batch-major token walk became the default and the batch folded into heads was dropped,
H100; 2026-12-07: the lean Llama RoPE kernel and the interleaved stream loads for one head
became defaults; the lean kernel's L2 prefetch ahead, GEGLU's pipelined walk and the q/k
prologue's staged tables were dropped, then the interleaved lean kernel (a thread per token
and unit for LTX's 1-2 heads: -0.2% on q/k, +0.9% on x alone), H100); rmsnorm_small still
times the decode shapes against the peers.
Every variant's output is checked against the eager reference
before it is timed (a variant that disagrees is reported and not timed). A copy of the
same bytes (the call's bytes read, the same written) is timed too.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_ops import (Timer, cold_l2_us, import_liger, load_kernel, ref_adaln_layer,  # noqa: E402
                       ref_adaln_rms, ref_geglu_tanh, ref_rms_diffusers, ref_rms_llama, ref_rope_llama,
                       ref_gated_residual, ref_qk_prologue, ref_qk_prologue_pair, ref_rope_ltx,
                       ref_rope_ltx_qk, ref_rope_ltx_qk_pair)

# Llama-style RoPE calls on rope_kernel's packed form instead of rope_half_lean_kernel
LOOP = {"LTX_KERNELS_ROPE_LEAN": "0"}

# Our variants per op: the environment each is called under.
VARIANTS = {
    "rmsnorm": {
        "ours": {},
        "ours (no short rows)": {"LTX_KERNELS_RMS_SHORT": "0"},
        "ours (blocks walk rows)": {"LTX_KERNELS_GRID": "walk"},
        # the weight loaded after each reduction (the default before 2026-12-06 08:00)
        "ours (weight late)": {"LTX_KERNELS_RMS_W": "late"},
        # the default at 4 blocks per SM, its occupancy before x was zeroed first (2026-12-07:
        # sm_90 C = 4 64 -> 47 registers, 5 blocks)
        "ours (4 blocks per SM, as before)": {"LTX_KERNELS_BLOCKS_PER_SM": "4"},
    },
    "rmsnorm_small": {
        "ours": {},
        "ours (no PDL)": {"LTX_KERNELS_PDL": "0"},
        "ours (decode C=4)": {"LTX_KERNELS_RMS_DECODE_C": "4"},
        "ours (decode C=4, no PDL)": {"LTX_KERNELS_RMS_DECODE_C": "4", "LTX_KERNELS_PDL": "0"},
        # the early-weight form with its row loop and looped cross-warp sum (before 2026-12-06)
        "ours (decode loop)": {"LTX_KERNELS_RMS_DECODE": "loop"},
    },
    "adaln": {
        "ours": {},
        "ours (row kernels)": {"LTX_KERNELS_ADALN_KERNEL": "row"},
        "ours (C=4)": {"LTX_KERNELS_ADALN_C": "4"},
        # the default at 4 blocks per SM, its occupancy before x was zeroed first (2026-12-07:
        # sm_90 64 -> 48 registers, 5 blocks)
        "ours (4 blocks per SM, as before)": {"LTX_KERNELS_BLOCKS_PER_SM": "4"},
        # the defaults before staging (2026-12-06): late for broadcast, C = 2 early per token
        "ours (modulation late)": {"LTX_KERNELS_ADALN_MOD": "late"},
        "ours (modulation early)": {"LTX_KERNELS_ADALN_MOD": "early"},
        "ours (C=2, modulation staged)": {"LTX_KERNELS_ADALN_C": "2", "LTX_KERNELS_ADALN_MOD": "staged"},
        # LayerNorm's mean and centred squares in two reductions (before 2026-12-06)
        "ours (LayerNorm two reductions)": {"LTX_KERNELS_ADALN_LN": "two"},
        # candidate (2026-12-08): each thread's LayerNorm statistics in one pass about its
        # first element, two-warp rows merged as one pair (~100 fewer instructions per
        # thread and row of the bf16 D = 2048 kernel; SASS sm_90)
        "ours (LayerNorm one pass)": {"LTX_KERNELS_ADALN_LN": "shift"},
        # staged, x loaded without allocating in L1 (per-token modulation's default since
        # 2026-12-06 08:00) / through L1 (broadcast modulation's default)
        "ours (staged, x no L1)": {"LTX_KERNELS_ADALN_MOD": "staged-stream"},
        "ours (staged, x through L1)": {"LTX_KERNELS_ADALN_MOD": "staged"},
        "ours (blocks walk rows)": {"LTX_KERNELS_GRID": "walk"},
    },
    "gated": {
        "ours": {},
        "ours (blocks walk rows)": {"LTX_KERNELS_GRID": "walk"},
    },
    "act": {
        "ours": {},
        "ours (computed)": {"LTX_KERNELS_GELU_TABLE": "0"},
        "ours (full table)": {"LTX_KERNELS_GELU_TABLE": "full"},
        "ours (compact table)": {"LTX_KERNELS_GELU_TABLE": "compact"},
        "ours (GEGLU compact table)": {"LTX_KERNELS_GEGLU_TABLE": "compact"},
        "ours (GEGLU walking rows)": {"LTX_KERNELS_ACT_GRID": "walk"},
        "ours (GEGLU block per row, 256)": {"LTX_KERNELS_ACT_GRID": "rows"},
        "ours (computed, 128-thread blocks)": {"LTX_KERNELS_GELU_TABLE": "0", "LTX_KERNELS_ACT_GRID": "rows128"},
        "ours (GEGLU fp32 product)": {"LTX_KERNELS_GEGLU_PACKED": "0"},
        # candidate (2026-12-07 23:20): 16-bit tanh GELU / GEGLU on ex2 / rcp.approx, each
        # element checked to round as tanhf's would (else computed by tanhf), no table
        "ours (fast tanh)": {"LTX_KERNELS_GELU_FAST": "1"},
    },
    "rope": {
        "ours": {},
        "ours (no PDL)": {"LTX_KERNELS_PDL": "0"},
        # Llama-style calls on rope_kernel's packed form (before 2026-12-07 08:14) instead of
        # rope_half_lean_kernel, a thread per (token, head, unit); the geometry switches below
        # are rope_kernel's, so they take the Llama rows there too (LTX's rows are its anyway)
        "ours (loop kernel)": LOOP,
        "ours (blocks walk tokens)": {**LOOP, "LTX_KERNELS_GRID": "walk"},
        "ours (power-of-two slots)": {**LOOP, "LTX_KERNELS_ROPE_SLOTS": "0"},
        "ours (position-major tokens)": {"LTX_KERNELS_ROPE_ORDER": "position"},
        # every head pair of a token in one pass (one token per block) at any token count, not
        # only on calls of few tokens: -0.7% at 8192 tokens, +0.8% at 2048 (H100, 2026-12-07)
        "ours (wide slots, any tokens)": {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "all"},
        # the interleaved forward's x and table loads skip L1 for one head with full tables (the
        # default since 2026-12-07 10:20: rope_ltx); =0 for none, =1 for every forward
        "ours (interleaved, loads through L1)": {"LTX_KERNELS_ROPE_STREAM": "0"},
        "ours (interleaved, every forward skips L1)": {"LTX_KERNELS_ROPE_STREAM": "1"},
        # L2 eviction policies of the interleaved forward's loads (not the stream form): the
        # tables and x evict_last by default (q/k pair call: H100 -0.85% for the tables,
        # 2026-12-07 16:35; H200 -1.2% more for x, 18:31); none, or the tables alone
        "ours (hint: none, plain loads)": {"LTX_KERNELS_ROPE_HINT": "none"},
        "ours (hint: tables evict_last only)": {"LTX_KERNELS_ROPE_HINT": "tables_last"},
    },
    "qk": {
        "ours": {},
        "ours (blocks walk tokens)": {"LTX_KERNELS_GRID": "walk"},
        # the default prefetches shared tables' rows to L2 (2026-12-06 09:36); these force
        # either form for every table layout
        "ours (tables prefetched to L2)": {"LTX_KERNELS_QK_TABLES": "prefetch"},
        "ours (tables not prefetched)": {"LTX_KERNELS_QK_TABLES": "plain"},
        # candidate (2026-12-07 19:30): the tables loaded into registers with q and k, before the
        # reduction, at 2 vectors per thread (the H200's 85% of a same-bytes copy)
        "ours (tables early, 2 vectors per thread)": {"LTX_KERNELS_QK_TABLES": "early"},
        # token i -> (b, s) by the 64-bit division instead of DivU32's multiply (before 2026-12-06 22:00)
        "ours (token split divided)": {"LTX_KERNELS_QK_SPLIT": "divide"},
        # at most 2 blocks per SM: the occupancy of the 8-wide forms before Vec::set_zero
        # (2026-12-07 21:30: sm_90 bf16 126-128 registers -> 80, 2 -> 3 blocks of 256 per SM)
        "ours (2 blocks per SM, as before)": {"LTX_KERNELS_BLOCKS_PER_SM": "2"},
    },
    "rope_small": {
        "ours": {},
        "ours (no PDL)": {"LTX_KERNELS_PDL": "0"},
        "ours (loop kernel)": LOOP,
        "ours (no wide slots)": {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "0"},
        "ours (wide slots <= 1/SM)": {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "1"},
        "ours (wide slots <= 4/SM)": {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "4"},
        "ours (power-of-two slots)": {**LOOP, "LTX_KERNELS_ROPE_SLOTS": "0"},
    },
}


def with_env(fn, env):
    def run():
        old = {n: os.environ.get(n) for n in env}
        os.environ.update(env)
        try:
            return fn()
        finally:
            for n, v in old.items():
                if v is None:
                    del os.environ[n]
                else:
                    os.environ[n] = v
    return run


class Case:
    """One shape: our call (out= a preallocated buffer), the eager reference expression
    (compiled too unless --no-compile), optional peers, and the bytes it moves."""

    def __init__(self, name, ours, ref, ref_args, nbytes, peers=None):
        self.name, self.ours, self.ref, self.ref_args = name, ours, ref, ref_args
        self.nbytes, self.peers = nbytes, peers or {}


def nbytes(*ts):
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def rmsnorm_cases(k, dev, g):
    cases = []
    for shape, with_w, sem in [((2, 8064, 2048), False, "diffusers"), ((2, 8064, 4096), False, "diffusers"),
                               ((4096, 8192), True, "llama"), ((16384, 4096), True, "llama"),
                               ((8064, 32, 128), True, "llama"), ((8064, 32, 64), True, "llama"),
                               ((2, 4096, 8192), False, "diffusers"),
                               # bench_ops' 1.04 vs compile on the H200 (2026-12-07 18:19)
                               ((16384, 8192), True, "llama"),
                               # bench_ops' copy misses on the H200 (2026-12-07 18:19: 88.5%, 82.8%)
                               ((2, 6144, 2048), False, "diffusers"), ((4096, 4096), True, "llama")]:
        x = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
        w = (1 + 0.1 * torch.randn(shape[-1], device=dev, generator=g)).to(torch.bfloat16) if with_w else None
        out = torch.empty_like(x)
        ref = {"diffusers": ref_rms_diffusers, "llama": ref_rms_llama}[sem]
        cases.append(Case(
            f"{'x'.join(map(str, shape))} {sem}",
            (lambda x, w, sem, out: lambda: k.rmsnorm(x, w, 1e-6, semantics=sem, out=out))(x, w, sem, out),
            ref, (x, w, 1e-6), 2 * nbytes(x) + nbytes(w),
            {"F.rms_norm": (lambda x, w: lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6))(x, w)}))
    return cases


def rmsnorm_small_cases(k, dev, g, liger_rms):
    """Decode-sized Llama / Qwen rows (weighted, llama semantics): the graph-replay targets,
    where rms_norm_direct_kernel loads the weight with x (grids of <= one block per SM)."""
    cases = []
    for shape in [(1, 4096), (16, 4096), (16, 8192), (256, 4096), (1, 32, 128), (16, 32, 128)]:
        x = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
        w = (1 + 0.1 * torch.randn(shape[-1], device=dev, generator=g)).to(torch.bfloat16)
        out = torch.empty_like(x)
        peers = {"F.rms_norm": (lambda x, w: lambda: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, 1e-6))(x, w)}
        if liger_rms is not None:
            peers["liger"] = (lambda x, w: lambda: liger_rms(x, w, 1e-6, 0.0, "llama", False))(x, w)
        cases.append(Case(
            f"{'x'.join(map(str, shape))} llama",
            (lambda x, w, out: lambda: k.rmsnorm(x, w, 1e-6, semantics="llama", out=out))(x, w, out),
            ref_rms_llama, (x, w, 1e-6), 2 * nbytes(x) + nbytes(w), peers))
    return cases


def adaln_cases(k, dev, g, liger_mod_rms):
    cases = []
    for shape, mod, norm in [((2, 8064, 2048), (2, 1, 2048), "rms"),       # LTX 2B
                             ((2, 8064, 2048), (2, 8064, 2048), "rms"),    # per-token modulation
                             ((2, 8064, 4096), (2, 1, 4096), "rms"),       # LTX 13B
                             ((2, 8064, 2048), (2, 1, 2048), "layer"),     # FLUX / DiT
                             ((1, 4608, 3072), (1, 1, 3072), "layer")]:    # FLUX 1024^2 joint
        x = torch.randn(shape, device=dev, dtype=torch.bfloat16, generator=g)
        sc = 0.1 * torch.randn(mod, device=dev, dtype=torch.bfloat16, generator=g)
        sh = 0.1 * torch.randn(mod, device=dev, dtype=torch.bfloat16, generator=g)
        out = torch.empty_like(x)
        ref = ref_adaln_rms if norm == "rms" else ref_adaln_layer
        peers = {}
        if norm == "rms" and liger_mod_rms is not None:
            peers["liger"] = (lambda x, sc, sh: lambda: liger_mod_rms(x, None, sc, sh, 1e-6, 0.0, "llama", False))(x, sc, sh)
        cases.append(Case(
            f"{'x'.join(map(str, shape))} mod {'x'.join(map(str, mod))} {norm}",
            (lambda x, sc, sh, norm, out: lambda: k.adaln(x, sc, sh, None, 1e-6, norm, out=out))(x, sc, sh, norm, out),
            ref, (x, sc, sh, 1e-6), 2 * nbytes(x) + nbytes(sc, sh), peers))
    return cases


def gated_cases(k, dev, g):
    """LTX's gated residual x + y * gate on [2, 8064, 2048] bf16, gates [2, 1, 2048] and per token."""
    cases = []
    x = torch.randn(2, 8064, 2048, device=dev, generator=g).to(torch.bfloat16)
    y = torch.randn(2, 8064, 2048, device=dev, generator=g).to(torch.bfloat16)
    for gshape in [(2, 1, 2048), (2, 8064, 2048)]:
        gate = (0.5 * torch.randn(gshape, device=dev, generator=g)).to(torch.bfloat16)
        out = torch.empty_like(x)
        cases.append(Case(
            f"gated 2x8064x2048 gate {'x'.join(map(str, gshape))}",
            (lambda gate, out: lambda: k.gated_residual(x, y, gate, out=out))(gate, out),
            ref_gated_residual, (x, y, gate), 3 * nbytes(x) + nbytes(gate)))
    return cases


def act_cases(k, dev, g, liger_geglu):
    cases = []
    # "fp16": GELU-tanh in fp16, whose table choice differs from bf16's (full by default;
    # its compact table is 68 KB against bf16's 9.5 KB)
    for shape in [(2, 8064, 8192), (2, 8064, 8192, "erf"), (2, 8064, 8192, "fp16"),
                  (16128, 16384, "geglu"), (2, 4096, 16384, "geglu")]:
        kind = shape[-1] if isinstance(shape[-1], str) else "tanh"
        dtype = torch.float16 if kind == "fp16" else torch.bfloat16
        kind = "tanh" if kind == "fp16" else kind
        dims = tuple(v for v in shape if not isinstance(v, str))
        x = torch.randn(dims, device=dev, generator=g).to(dtype)
        if kind == "geglu":
            d = dims[-1] // 2
            out = torch.empty(*dims[:-1], d, device=dev, dtype=x.dtype)
            peers = {}
            if liger_geglu is not None:
                a, b = x[..., :d].contiguous(), x[..., d:].contiguous()
                peers["liger"] = (lambda a, b: lambda: liger_geglu(a, b))(a, b)
            cases.append(Case(
                f"geglu tanh {'x'.join(map(str, dims))}->{d}",
                (lambda x, out: lambda: k.geglu(x, "tanh", gate_first=True, out=out))(x, out),
                ref_geglu_tanh, (x,), nbytes(x, out), peers))
        else:
            out = torch.empty_like(x)
            approx = "tanh" if kind == "tanh" else "none"
            fn = k.gelu_tanh if kind == "tanh" else k.gelu
            cases.append(Case(
                f"gelu {kind} {'x'.join(map(str, dims))}{' fp16' if dtype == torch.float16 else ''}",
                (lambda x, out, fn: lambda: fn(x, out=out))(x, out, fn),
                (lambda a: lambda x: torch.nn.functional.gelu(x, approximate=a))(approx), (x,), 2 * nbytes(x)))
    return cases


def rope_case(k, dev, g, liger_rope, b, hq, hk, seq, dh, pos0=0):
    """Llama rotate-half in transformers' layout (q, k views of [B, S, H, D]), bf16 tables
    [B, S, dh] for positions pos0 .. pos0 + seq - 1 (decode: seq = 1 at a late position)."""
    inv = 1.0 / (500000.0 ** (torch.arange(0, dh, 2, dtype=torch.float32, device=dev) / dh))
    pos = torch.arange(pos0, pos0 + seq, dtype=torch.float32, device=dev)
    fr = pos[:, None] * inv[None, :]
    emb = torch.cat((fr, fr), -1)[None].expand(b, seq, dh)
    cos, sin = emb.cos().to(torch.bfloat16).contiguous(), emb.sin().to(torch.bfloat16).contiguous()
    q = torch.randn(b, seq, hq, dh, device=dev, generator=g).to(torch.bfloat16).transpose(1, 2)
    kk = torch.randn(b, seq, hk, dh, device=dev, generator=g).to(torch.bfloat16).transpose(1, 2)
    # Ours in place on its own copies as well (not checked, like the peers): whether the
    # 2026-12-05 gap to Liger's in-place rotation (45.5 vs 43.5 µs) is the write pattern
    # (writing the lines just read) rather than the kernel. (A function per case: the
    # closures below see this case's tensors; built in a loop, the Liger row saw the last
    # shape's tables until 2026-12-05 07:50.)
    qi, ki = q.clone(), kk.clone()
    peers = {"ours (in place)": lambda: k.rope_rotate_half(qi, ki, cos, sin, inplace=True)[0]}
    if liger_rope is not None:  # rotates in place: its own copies
        ql, kl = q.clone(), kk.clone()
        peers["liger (in place)"] = lambda: liger_rope(ql, kl, cos, sin)
    # Ours and the reference return (q, k): with only q returned, torch.compile drops k's
    # rotation as dead code and its row times half the work (the 03:16 and 10:24-10:35
    # A/B's compile rope rows, RESULTS.md erratum).
    return Case(
        f"rope_llama q{b}x{hq}x{seq}x{dh},k{hk}",
        lambda: k.rope_rotate_half(q, kk, cos, sin),
        ref_rope_llama, (q, kk, cos, sin),
        2 * nbytes(q, kk) + nbytes(cos, sin), peers)


def rope_ltx_cases(k, dev, g):
    """LTX-Video's interleaved RoPE on [2, 8064, 2048] bf16: x alone with fp32 tables [B, S, D]
    (bench_ops' rope_ltx), q, k with the same tables (rope_ltx_qk) and with fp32 pair tables
    [B, S, D/2] (rope_ltx_qk_pair).
    Random table values: the timing and the check against the reference do not need cos/sin."""
    shape = (2, 8064, 2048)
    x = torch.randn(shape, device=dev, generator=g).to(torch.bfloat16)
    kk = torch.randn(shape, device=dev, generator=g).to(torch.bfloat16)
    cos, sin = (torch.randn(shape, device=dev, generator=g) for _ in range(2))
    pc, ps = (torch.randn(2, 8064, 1024, device=dev, generator=g) for _ in range(2))
    return [
        Case("rope_ltx 2x8064x2048", lambda: k.rope_interleaved(x, cos, sin),
             ref_rope_ltx, (x, cos, sin), 2 * nbytes(x) + nbytes(cos, sin)),
        Case("rope_ltx_qk q,k 2x8064x2048", lambda: k.rope_interleaved_qk(x, kk, cos, sin),
             ref_rope_ltx_qk, (x, kk, cos, sin), 2 * nbytes(x, kk) + nbytes(cos, sin)),
        Case("rope_ltx_qk_pair q,k 2x8064x2048", lambda: k.rope_interleaved_qk(x, kk, pc, ps),
             ref_rope_ltx_qk_pair, (x, kk, pc, ps), 2 * nbytes(x, kk) + nbytes(pc, ps)),
    ]


def qk_cases(k, dev, g):
    """LTX-Video's attention prologue (rmsnorm_rope_qk: weighted RMSNorm of q and k, then the
    interleaved rotation) on [2, 8064, 2048] bf16, with fp32 tables shared by the CFG batch
    (stride 0): pair tables [B, S, D/2] and full ones [B, S, D]; and full tables of their own
    per batch entry, as diffusers' LTX pipeline passes them (bench_ops' qk_prologue)."""
    shape = (2, 8064, 2048)
    q = torch.randn(shape, device=dev, generator=g).to(torch.bfloat16)
    kk = torch.randn(shape, device=dev, generator=g).to(torch.bfloat16)
    qw, kw = ((1 + 0.1 * torch.randn(2048, device=dev, generator=g)).to(torch.bfloat16) for _ in range(2))
    cases = []
    for name, d, ref in [("pair tables", 1024, ref_qk_prologue_pair), ("full tables", 2048, ref_qk_prologue)]:
        c, s = (torch.randn(1, 8064, d, device=dev, generator=g).expand(2, -1, -1) for _ in range(2))
        cases.append(Case(f"qk_prologue q,k 2x8064x2048 {name}",
                          (lambda c, s: lambda: k.rmsnorm_rope_qk(q, kk, qw, kw, c, s, 1e-6))(c, s),
                          ref, (q, kk, qw, kw, c, s), 2 * nbytes(q, kk) + nbytes(qw, kw, c[:1], s[:1])))
    c, s = (torch.randn(2, 8064, 2048, device=dev, generator=g) for _ in range(2))
    cases.append(Case("qk_prologue q,k 2x8064x2048 full tables [B,S,D]",
                      lambda: k.rmsnorm_rope_qk(q, kk, qw, kw, c, s, 1e-6),
                      ref_qk_prologue, (q, kk, qw, kw, c, s), 2 * nbytes(q, kk) + nbytes(qw, kw, c, s)))
    return cases


def rope_cases(k, dev, g, liger_rope):
    return [rope_case(k, dev, g, liger_rope, 1, hq, hk, seq, dh)
            for hq, hk, seq, dh in [(32, 8, 8192, 128), (32, 8, 2048, 128), (32, 32, 4096, 64)]
            ] + rope_ltx_cases(k, dev, g)


def rope_small_cases(k, dev, g, liger_rope):
    """Decode-sized rotations (one token of batch 1 and 16 at position 4095; 256- and
    512-token prompts): the graph-replay shapes (PDL, the slots per token)."""
    return [rope_case(k, dev, g, liger_rope, b, 32, 8, seq, 128, pos0)
            for b, seq, pos0 in [(1, 1, 4095), (16, 1, 4095), (1, 256, 0), (1, 512, 0)]]


def check(got, want):
    """Max abs difference and the fraction of elements that differ from eager's output (a
    tuple of outputs: over all of them)."""
    if isinstance(want, tuple):
        d = torch.cat([(g.float() - w.float()).abs().flatten() for g, w in zip(got, want, strict=True)])
    else:
        d = (got.float() - want.float()).abs()
    return d.max().item(), (d > 0).float().mean().item()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--op", choices=sorted(VARIANTS), default="rmsnorm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--methods", default=None,
                    help="comma list of zero,clean,graph (default: graph,clean for the *_small ops, "
                         "else zero,clean)")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--match", default="", help="only cases whose name contains one of these "
                    "comma-separated strings (e.g. 'x1x2048 rms')")
    ap.add_argument("--variants", default="", help="only our variants whose name contains one of "
                    "these comma-separated strings ('ours' is always timed), e.g. 'GEGLU,row'")
    args = ap.parse_args(argv)

    k = load_kernel("cuda")
    dev = "cuda"
    timer = Timer(dev, smoke=False)
    all_methods = {
        "zero": lambda: timer.flush_buf.zero_(),  # do_bench's flush (its values are never read)
        "clean": timer.flush,  # bench_ops'
        "graph": None,  # per call under CUDA-graph replay (bench_ops' graph target; warm L2)
    }
    names = args.methods or ("graph,clean" if args.op.endswith("_small") else "zero,clean")
    methods = {m: all_methods[m] for m in names.split(",")}
    g = torch.Generator(device=dev).manual_seed(0)
    variants = {n: env for n, env in VARIANTS[args.op].items()
                if n == "ours" or not args.variants or any(v in n for v in args.variants.split(","))}
    liger, liger_note = import_liger()
    print(f"liger: {liger_note}")
    liger = liger or {}
    if args.op == "rmsnorm":
        cases = rmsnorm_cases(k, dev, g)
    elif args.op == "rmsnorm_small":
        cases = rmsnorm_small_cases(k, dev, g, liger.get("rms_norm"))
    elif args.op == "adaln":
        cases = adaln_cases(k, dev, g, liger.get("modulated_rms_norm"))
    elif args.op == "act":
        cases = act_cases(k, dev, g, liger.get("geglu"))
    elif args.op == "gated":
        cases = gated_cases(k, dev, g)
    elif args.op == "qk":
        cases = qk_cases(k, dev, g)
    elif args.op == "rope_small":
        cases = rope_small_cases(k, dev, g, liger.get("rope"))
    else:
        cases = rope_cases(k, dev, g, liger.get("rope"))
    if args.match:
        cases = [c for c in cases if any(m in c.name for m in args.match.split(","))]

    big_src = torch.empty(1 << 28, device=dev, dtype=torch.float32).fill_(2.0)  # 1 GiB
    big_dst = torch.empty_like(big_src)
    for mname, flush in methods.items():
        if flush is None:
            continue
        t = cold_l2_us(lambda: big_dst.copy_(big_src), flush)
        print(f"copy ceiling (2 GiB moved), {mname} flush: {t:.1f} µs = {(2 << 30) / (t * 1e-6) / 1e9:.0f} GB/s")
    del big_src, big_dst

    # Build and check every implementation once, before any timing.
    impls_of = {}
    for c in cases:
        want = c.ref(*c.ref_args)
        impls = {}
        for label, env in variants.items():
            fn = with_env(c.ours, env)
            err, frac = check(fn(), want)
            scale = max(w.abs().max().item() for w in (want if isinstance(want, tuple) else (want,)))
            ok = err <= 0.02 * max(1.0, scale)
            print(f"check {c.name} | {label}: max |ours - eager| {err:.3g}, {100 * frac:.2f}% differ: "
                  f"{'ok' if ok else 'WRONG, not timed'}")
            if ok:
                impls[label] = fn
        impls["eager"] = (lambda c: lambda: c.ref(*c.ref_args))(c)
        impls.update(c.peers)
        # nbytes counts what the call reads and writes: the copy reads half of it and writes
        # half (fp32 elements of nbytes / 2 bytes; until 2026-12-05 15:20 it read and wrote
        # nbytes each, twice the call's traffic: RESULTS.md erratum).
        src = torch.empty(c.nbytes // 8, device=dev, dtype=torch.float32).fill_(1.0)
        impls["copy (same bytes)"] = (lambda s, d: lambda: d.copy_(s))(src, torch.empty_like(src))
        if not args.no_compile:
            impls["compile"] = (lambda f, a: lambda: f(*a))(torch.compile(c.ref, dynamic=False), c.ref_args)
        impls_of[c.name] = impls

    rows = {}
    for rnd in range(args.rounds):
        for c in cases:
            for iname, fn in impls_of[c.name].items():
                for mname, flush in methods.items():
                    t = timer.graph_us(fn) if flush is None else cold_l2_us(fn, flush)
                    rows.setdefault((c.name, iname, mname), []).append(t)
        # The table so far after every round: a run cut short by a time limit keeps its rounds.
        print_table(args.op, cases, impls_of, methods, rows, f"after round {rnd + 1} of {args.rounds}")


def print_table(op, cases, impls_of, methods, rows, when):
    print(f"\nop {op}, bf16, median (rounds) in µs, {when}; GB/s = bytes read + written once / "
          "median of the last method", flush=True)
    print("\n| shape | impl | " + " | ".join(f"{m} µs (rounds)" for m in methods) + " | GB/s |")
    print("|---|---|" + "---|" * len(methods) + "---|")
    last = list(methods)[-1]
    for c in cases:
        for iname in impls_of[c.name]:
            cells = []
            for m in methods:
                ts = rows[(c.name, iname, m)]
                cells.append(f"{statistics.median(ts):.2f} ({', '.join(f'{t:.1f}' for t in ts)})")
            gbs = c.nbytes / (statistics.median(rows[(c.name, iname, last)]) * 1e-6) / 1e9
            print(f"| {c.name} | {iname} | " + " | ".join(cells) + f" | {gbs:.0f} |")
    print(flush=True)


if __name__ == "__main__":
    main()
