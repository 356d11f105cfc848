"""One robustness matrix applied to every public op (user-needs.md section A).

Each op has an adapter (``OPS``) that builds its inputs for a given last dim, leading
shape and layout, calls the kernel, and gives a float64 reference plus a per-element
magnitude for the error bound. Every case checks the result against

* the same op on contiguous copies of the same inputs: bit-exact for elementwise ops,
  within fp32 reduction-order slack for the norms (the vector width, hence the order of
  the fp32 sum, may follow the alignment), and
* the float64 reference: ``|out - ref| <= a * u(dtype) * |ref| + b * mag + atol``, the
  rounding sequence each op documents plus fp32 slack.

Axes: dtypes x last dims (gated ops take 2x; RoPE even dims only); layouts (contiguous,
``chunk`` halves, fused-QKV slices, transposes, ``expand``ed and ``unbind`` views,
``storage[k:]`` offsets k = 1..7); leading shapes with 0 rows, 1 row, 2-D to 5-D; and a
hypothesis fuzz of shapes and strides. The cross product is sampled, not enumerated.
On the GPU the same tests run through ``DEVICES``; the GPU-only tests at the end cover
>2^31 elements, strided views whose offsets pass 2^31, CUDA graphs, reduce-overhead
compile and a non-default stream.
"""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from .util import DEVICES, DTYPES, HAS_GPU, kernel, requires_gpu, subnormal_spacing, unit_roundoff

pytestmark = pytest.mark.kernels_ci

DIMS = [1, 7, 63, 64, 127, 128, 768, 769, 1536, 2048, 3420, 3584, 4096, 5120, 8192, 8193, 16384, 65536]
U32 = unit_roundoff(torch.float32)
OFFSETS = [f"offset{k}" for k in range(1, 8)]
LAYOUTS = ["contiguous", "chunk", "qkv", "transpose", "expand", "unbind", *OFFSETS]


# ---- layouts ----------------------------------------------------------------------


def make(shape, dtype, device, layout="contiguous", scale=1.0):
    """A tensor of logical ``shape`` laid out as ``layout`` (values ~ N(0, scale))."""
    shape = tuple(shape)
    d = shape[-1]

    def rnd(*s):
        return (scale * torch.randn(*s, device=device)).to(dtype)

    if layout == "contiguous":
        return rnd(*shape)
    if layout == "chunk":  # second half of a [.., 2D] projection: offset D, row stride 2D
        return rnd(*shape[:-1], 2 * d).chunk(2, -1)[1]
    if layout == "qkv":  # q, k or v sliced from a fused [.., 3D] QKV projection
        return rnd(*shape[:-1], 3 * d).split(d, -1)[1]
    if layout == "transpose":  # last dim not contiguous: the copy path
        if len(shape) < 2:
            return rnd(*shape)
        return rnd(*shape[:-2], d, shape[-2]).transpose(-1, -2)
    if layout == "expand":  # every leading dim broadcast (stride 0)
        return rnd(*([1] * (len(shape) - 1)), d).expand(shape)
    if layout == "unbind":  # LTX's (table + temb).unbind(-2) views: row stride 3D, offset D
        return rnd(*shape[:-1], 3, d).unbind(-2)[1]
    if layout.startswith("offset"):  # storage[k:]: a misaligned base pointer
        k = int(layout[len("offset"):])
        n = math.prod(shape)
        return rnd(n + k)[k:].view(shape)
    raise ValueError(layout)


def contiguous_copy(args):
    return tuple(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args)


# ---- op adapters ------------------------------------------------------------------


class Op:
    """name; width: last-dim factor (2 for gated); even: last dim must be even;
    build(lead, d, dtype, device, layout) -> args; call(*args) -> out or tuple;
    ref(*args) -> [(ref64, mag64)] per output; tol(dtype, d) -> (a, b);
    reduces: a row reduction (norms), so the fp32 sum order may follow the layout."""

    def __init__(self, name, build, call, ref, tol, width=1, even=False, reduces=False, rank=None):
        self.name, self.build, self.call, self.ref, self.tol = name, build, call, ref, tol
        self.width, self.even, self.reduces, self.rank = width, even, reduces, rank

    def __repr__(self):
        return self.name


def _d(t):
    return t.double()


def norm_slack(d):
    """fp32 reduction error of a sum of d squares (pairwise/lane-split: ~log2 d roundings)."""
    return 16 * U32 * (1 + math.log2(max(d, 2))) + 1e-7 * math.sqrt(d)


def rms64(x, eps=1e-6):
    x64 = _d(x)
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)


def weight(d, dtype, device):
    return (1 + 0.5 * torch.randn(d, device=device)).to(dtype)


def gelu64(x, approximate):
    x64 = _d(x)
    if approximate == "tanh":
        return 0.5 * x64 * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x64 + 0.044715 * x64 ** 3)))
    return 0.5 * x64 * (1 + torch.erf(x64 / math.sqrt(2)))


def _bcast_shape(lead, d):
    """scale/shift/gate: [B, 1, .., 1, D] for x [B, ..., D]; [D] for 2-D x."""
    return (lead[0], *([1] * (len(lead) - 1)), d) if len(lead) >= 2 else (d,)


def _adaln_ref(x, scale, shift, norm):
    if norm == "rms":
        n = rms64(x)
        nmag = n.abs()
    else:
        x64 = _d(x)
        mean = x64.mean(-1, keepdim=True)
        rstd = torch.rsqrt((x64 - mean).pow(2).mean(-1, keepdim=True) + 1e-6)
        n = (x64 - mean) * rstd
        nmag = (x64.abs() + x64.abs().mean(-1, keepdim=True)) * rstd
    p = n * (1 + _d(scale))
    return [(p + _d(shift), nmag * (1 + _d(scale)).abs() + _d(shift).abs())]


def _interleaved64(x, cos, sin):
    x64 = _d(x)
    xr, xi = x64.unflatten(-1, (-1, 2)).unbind(-1)
    rot = torch.stack([-xi, xr], -1).flatten(-2)
    return x64 * _d(cos) + rot * _d(sin), (x64 * _d(cos)).abs() + (rot * _d(sin)).abs()


def _rotate_half64(x, cos, sin):
    x64 = _d(x)
    h = x.shape[-1] // 2
    rot = torch.cat([-x64[..., h:], x64[..., :h]], -1)
    c, s = _d(cos)[:, None], _d(sin)[:, None]
    return x64 * c + rot * s, (x64 * c).abs() + (rot * s).abs()


def _rope_lead(lead):
    return lead if len(lead) >= 2 else (1, *lead)


def build_x(lead, d, dtype, device, layout, width=1):
    return (make((*lead, width * d), dtype, device, layout),)


def build_rms_w(lead, d, dtype, device, layout):
    return (make((*lead, d), dtype, device, layout), weight(d, dtype, device))


def build_interleaved(lead, d, dtype, device, layout, two=False):
    lead = _rope_lead(lead)
    x = make((*lead, d), dtype, device, layout)
    cos, sin = (make((lead[-1], d), torch.float32, device,  # [S, D] tables
                     "expand" if layout == "expand" else "contiguous") for _ in range(2))
    if two:
        return x, make((*lead, d), dtype, device, layout), cos, sin
    return x, cos, sin


def build_rotate_half(lead, d, dtype, device, layout, two=True, table=None):
    # q [B, H, S, Dh] (unsqueeze_dim=1), k with fewer heads (GQA), tables [B, S, Dh]
    b, h, s = (tuple(lead) + (1, 1, 1))[:3] if len(lead) < 3 else lead[:3]
    tdt = table or dtype
    q = make((b, h, s, d), dtype, device, layout)
    cos = make((b, s, d), tdt, device, "expand" if layout == "expand" else "contiguous")
    sin = make((b, s, d), tdt, device, "contiguous")
    if two:
        return q, make((b, max(h // 2, 1) if h else 0, s, d), dtype, device, layout), cos, sin
    return q, cos, sin


def build_adaln(lead, d, dtype, device, layout):
    x = make((*lead, d), dtype, device, layout)
    bs = _bcast_shape(lead, d)
    mod_layout = layout if layout in ("unbind", "expand", "offset3") else "contiguous"
    return x, make(bs, dtype, device, mod_layout, 0.3), make(bs, dtype, device, mod_layout)


def build_gated(lead, d, dtype, device, layout):
    x = make((*lead, d), dtype, device, layout)
    y = make((*lead, d), dtype, device, "qkv" if layout != "contiguous" else layout)
    return x, y, make(_bcast_shape(lead, d), dtype, device, "unbind" if layout == "unbind" else "contiguous")


def _geglu_ref(x, approximate, gate_first):
    a, b = _d(x).chunk(2, -1)
    if gate_first:
        g = gelu64(x[..., : x.shape[-1] // 2], approximate)
        return [(g * b, a.abs() * b.abs())]
    g = gelu64(x[..., x.shape[-1] // 2:], approximate)
    return [(a * g, a.abs() * b.abs())]


def _out_call(fn):
    def run(x):
        out = torch.empty(*x.shape[:-1], x.shape[-1] // 2, device=x.device, dtype=x.dtype)
        fn(out, x)
        return out
    return run


def _rmsnorm_tol(semantics):
    def tol(dtype, d):
        # ~2 roundings of the output dtype (round, weight multiply, round), fp32 sum slack
        return 2.01 if semantics != "torch" else 1.01, norm_slack(d)
    return tol


def _elementwise(n_round, fp32_slack=16):
    def tol(dtype, d):
        return n_round + 0.01, fp32_slack * U32
    return tol


def _rope_tol(step_rounding):
    def tol(dtype, d):
        # products (and their sum) in fp32, or, with tables in x's dtype, rounded each
        return 1.01, (2.01 * unit_roundoff(dtype) if step_rounding else 4 * U32)
    return tol


def _adaln_tol(dtype, d):
    return 1.01, 3.01 * unit_roundoff(dtype) + norm_slack(d) if dtype != torch.float32 else 4 * U32 + norm_slack(d)


OPS = [
    Op("rmsnorm", lambda *a: build_x(*a), lambda x: kernel.rmsnorm(x),
       lambda x: [(rms64(x), rms64(x).abs())], _rmsnorm_tol("diffusers"), reduces=True),
    Op("rmsnorm_torch_w", build_rms_w, lambda x, w: kernel.rmsnorm(x, w, semantics="torch"),
       lambda x, w: [(rms64(x) * _d(w), (rms64(x) * _d(w)).abs())], _rmsnorm_tol("torch"), reduces=True),
    Op("rmsnorm_llama_w", build_rms_w, lambda x, w: kernel.rmsnorm(x, w, semantics="llama"),
       lambda x, w: [(rms64(x) * _d(w), (rms64(x) * _d(w)).abs())], _rmsnorm_tol("llama"), reduces=True),
    Op("gelu", build_x, lambda x: kernel.gelu(x), lambda x: [(gelu64(x, "none"), _d(x).abs())], _elementwise(1)),
    Op("gelu_tanh", build_x, lambda x: kernel.gelu_tanh(x),
       lambda x: [(gelu64(x, "tanh"), _d(x).abs())], _elementwise(1)),
    Op("geglu", lambda *a: build_x(*a, width=2), lambda x: kernel.geglu(x),
       lambda x: _geglu_ref(x, "none", False), _elementwise(2), width=2),
    Op("geglu_tanh_gate_first", lambda *a: build_x(*a, width=2),
       lambda x: kernel.geglu(x, "tanh", gate_first=True), lambda x: _geglu_ref(x, "tanh", True),
       _elementwise(2), width=2),
    Op("gelu_and_mul", lambda *a: build_x(*a, width=2), _out_call(lambda o, x: kernel.gelu_and_mul(o, x)),
       lambda x: _geglu_ref(x, "none", True), _elementwise(2), width=2),
    Op("gelu_tanh_and_mul", lambda *a: build_x(*a, width=2),
       _out_call(lambda o, x: kernel.gelu_tanh_and_mul(o, x)), lambda x: _geglu_ref(x, "tanh", True),
       _elementwise(2), width=2),
    Op("rope_interleaved", build_interleaved, lambda x, c, s: kernel.rope_interleaved(x, c, s),
       lambda x, c, s: [_interleaved64(x, c, s)], _rope_tol(False), even=True),
    Op("rope_interleaved_qk", lambda *a: build_interleaved(*a, two=True),
       lambda q, k, c, s: kernel.rope_interleaved_qk(q, k, c, s),
       lambda q, k, c, s: [_interleaved64(q, c, s), _interleaved64(k, c, s)], _rope_tol(False), even=True),
    Op("rope_rotate_half", build_rotate_half, lambda q, k, c, s: kernel.rope_rotate_half(q, k, c, s),
       lambda q, k, c, s: [_rotate_half64(q, c, s), _rotate_half64(k, c, s)], _rope_tol(True), even=True,
       rank=4),
    Op("rope_rotate_half_single_fp32_tables",
       lambda *a: build_rotate_half(*a, two=False, table=torch.float32),
       lambda q, c, s: kernel.rope_rotate_half_single(q, c, s),
       lambda q, c, s: [_rotate_half64(q, c, s)], _rope_tol(False), even=True, rank=4),
    Op("adaln_rms", build_adaln, lambda x, sc, sh: kernel.adaln(x, sc, sh),
       lambda x, sc, sh: _adaln_ref(x, sc, sh, "rms"), _adaln_tol, reduces=True),
    Op("adaln_layer", build_adaln, lambda x, sc, sh: kernel.adaln(x, sc, sh, None, 1e-6, "layer"),
       lambda x, sc, sh: _adaln_ref(x, sc, sh, "layer"), _adaln_tol, reduces=True),
    Op("gated_residual", build_gated, lambda x, y, g: kernel.gated_residual(x, y, g),
       lambda x, y, g: [(_d(x) + _d(y) * _d(g), _d(x).abs() + (_d(y) * _d(g)).abs())],
       lambda dtype, d: (1.01, 1.01 * unit_roundoff(dtype))),
]
OP_IDS = [op.name for op in OPS]


def _as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def check_case(op, lead, d, dtype, device, layout="contiguous"):
    """Run op on one (lead, d, dtype, layout): vs contiguous copies and vs float64."""
    args = op.build(lead, d, dtype, device, layout)
    what = f"{op.name} lead={tuple(lead)} d={d} {dtype} {layout}"
    outs = _as_list(op.call(*args))
    outs_c = _as_list(op.call(*contiguous_copy(args)))
    refs = op.ref(*args)
    a, b = op.tol(dtype, d * op.width)
    for i, (o, oc, (r, mag)) in enumerate(zip(outs, outs_c, refs)):
        w = f"{what} output {i}"
        assert o.dtype == dtype, f"{w}: dtype {o.dtype}"
        assert o.shape == r.shape, f"{w}: shape {tuple(o.shape)} != {tuple(r.shape)}"
        if o.numel() == 0:
            continue
        o64, oc64, r = o.double().cpu(), oc.double().cpu(), r.cpu()
        atol = 4 * subnormal_spacing(dtype)
        if op.reduces:
            slack = (2 * a * unit_roundoff(dtype) + 2 * norm_slack(d)) * mag.cpu() + atol
            bad = ~((o64 - oc64).abs() <= slack)
            assert not bool(bad.any()), f"{w}: {int(bad.sum())} elements differ from the contiguous copy's result"
        else:
            assert torch.equal(o64, oc64), (
                f"{w}: differs from the result on a contiguous copy (max diff {float((o64 - oc64).abs().max()):.3e})")
        bound = a * unit_roundoff(dtype) * r.abs() + b * mag.cpu() + atol
        err = (o64 - r).abs()
        bad = ~(err <= bound)
        assert not bool(bad.any()), (
            f"{w}: {int(bad.sum())}/{o.numel()} elements off the float64 reference; worst err/bound "
            f"{float((err / bound).max()):.3g}")


def _skip_dim(op, d):
    if op.even and d % 2:
        pytest.skip(f"{op.name}: RoPE rotates pairs, so the last dim must be even (got {d})")


def _rows_for(d):
    return (3,) if d <= 8192 else (2,)


# ---- the matrix ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
@pytest.mark.parametrize("d", DIMS)
def test_last_dims_all_dtypes(device, op, d):
    _skip_dim(op, d)
    for dtype in DTYPES:
        check_case(op, _rows_for(d), d, dtype, device)


LAYOUT_DIMS = [7, 64, 769, 3420, 4096]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_layouts(device, op, layout):
    # sample the cross product: every layout x every op x 5 dims, rotating the dtype
    for i, d in enumerate(LAYOUT_DIMS):
        if op.even and d % 2:
            d += 1
        dtype = DTYPES[(i + LAYOUTS.index(layout)) % 3]
        check_case(op, (2, 3), d, dtype, device, layout)


LEADS = [(0,), (1,), (5,), (2, 0), (2, 3), (2, 3, 4), (1, 2, 3, 2), (2, 1, 2, 1, 3)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
@pytest.mark.parametrize("lead", LEADS, ids=[str(s) for s in LEADS])
def test_rows_and_ranks(device, op, lead):
    if op.rank is not None and len(lead) + 1 != op.rank:
        pytest.skip(f"{op.name} takes exactly {op.rank}-D [B, H, S, Dh] inputs")
    for i, d in enumerate((64, 127 + op.even)):
        for layout in ("contiguous", "qkv"):
            check_case(op, lead, d, DTYPES[i], device, layout)


# ---- property-based fuzzing of shapes and strides (CPU budget: fixed, derandomized) ----


@st.composite
def strided_case(draw):
    op = draw(st.sampled_from(OPS))
    rank = op.rank - 1 if op.rank else draw(st.integers(1, 4))
    lead = tuple(draw(st.lists(st.integers(0, 4), min_size=rank, max_size=rank)))
    d = draw(st.integers(1, 300))
    if op.even:
        d += d % 2
    dtype = draw(st.sampled_from(DTYPES))
    pad = draw(st.integers(0, 9))  # extra columns in the base buffer
    start = draw(st.integers(0, pad))  # where the slice starts in them
    offset = draw(st.integers(0, 7))  # storage offset of the base
    order = (draw(st.integers(0, 3)), draw(st.booleans()))  # leading dims' memory order
    return op, lead, d, dtype, (pad, start, offset, order)


def fuzz_view(shape, dtype, device, spec):
    """A view of logical ``shape``: leading dims permuted in memory, last dim sliced out
    of a wider buffer at ``start``, the buffer at storage offset ``offset``."""
    pad, start, offset, (rot, rev) = spec
    lead, d = shape[:-1], shape[-1]
    perm = list(range(len(lead)))
    if perm:
        perm = perm[rot % len(perm):] + perm[: rot % len(perm)]
        perm = perm[::-1] if rev else perm
    width = d + pad
    mem = [lead[p] for p in perm] + [width]
    n = math.prod(mem)
    base = torch.randn(n + offset, device=device).to(dtype)[offset:].view(mem)
    inv = [perm.index(i) for i in range(len(lead))]
    return base.permute(*inv, len(lead))[..., start:start + d]


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=250, deadline=None, derandomize=True)
@given(case=strided_case())
def test_fuzz_shapes_and_strides(device, case):
    op, lead, d, dtype, spec = case
    args = list(op.build(lead, d, dtype, device, "contiguous"))
    # the main input, and the second one of q/k pairs and of x + y * gate, become fuzzed views
    pair = op.name in ("rope_interleaved_qk", "rope_rotate_half", "gated_residual")
    for i in (0, 1) if pair else (0,):
        args[i] = fuzz_view(tuple(args[i].shape), dtype, device, spec)
    check_generic(op, args, d, dtype)


def check_generic(op, args, d, dtype):
    outs = _as_list(op.call(*args))
    outs_c = _as_list(op.call(*contiguous_copy(args)))
    a, b = op.tol(dtype, d * op.width)
    for o, oc, (r, mag) in zip(outs, outs_c, op.ref(*args)):
        what = f"{op.name} {tuple(args[0].shape)} strides {args[0].stride()} off {args[0].storage_offset()} {dtype}"
        assert o.shape == r.shape and o.dtype == dtype, what
        if o.numel() == 0:
            continue
        o64, oc64, r, mag = o.double().cpu(), oc.double().cpu(), r.cpu(), mag.cpu()
        atol = 4 * subnormal_spacing(dtype)
        if op.reduces:
            assert bool(((o64 - oc64).abs() <= (2 * a * unit_roundoff(dtype) + 2 * norm_slack(d)) * mag + atol).all()), what
        else:
            assert torch.equal(o64, oc64), what
        assert bool(((o64 - r).abs() <= a * unit_roundoff(dtype) * r.abs() + b * mag + atol).all()), what


# ---- GPU only: 64-bit offsets, CUDA graphs, reduce-overhead, streams -----------------

BIG = 1 << 31


def _check_rows(op, out, args, rows, dtype):
    """out[rows] against the float64 reference of the same rows (args sliced alike)."""
    sub = [a[rows] if isinstance(a, torch.Tensor) and a.dim() == args[0].dim() and a.shape[0] == args[0].shape[0]
           else a for a in args]
    (r, mag), = op.ref(*sub)
    a, b = op.tol(dtype, args[0].shape[-1])
    o = out[rows].double().cpu()
    bound = a * unit_roundoff(dtype) * r.abs().cpu() + b * mag.cpu() + 4 * subnormal_spacing(dtype)
    assert bool(((o - r.cpu()).abs() <= bound).all()), f"{op.name}: rows {rows} off the float64 reference"


OP = {op.name: op for op in OPS}


@requires_gpu
def test_gpu_rmsnorm_more_than_2_31_elements():
    d = 2048
    x = torch.randn(BIG // d + 64, d, device="cuda", dtype=torch.bfloat16)
    out = kernel.rmsnorm(x)
    tail = slice(x.shape[0] - 100, x.shape[0])
    _check_rows(OP["rmsnorm"], out, (x,), tail, torch.bfloat16)
    del out
    w = weight(d, torch.bfloat16, "cuda")
    kernel.rmsnorm(x, w, semantics="torch", out=x)  # in place, same offsets
    assert bool(x[tail].isfinite().all())


@requires_gpu
def test_gpu_strided_views_whose_offsets_pass_2_31():
    """Each family on q/k/v slices of a fused QKV buffer: the view has < 2^31 elements but
    its last rows start past element 2^31 of the storage (FlashInfer #3005)."""
    d, dt = 2048, torch.bfloat16
    s = BIG // (3 * d) + 64
    qkv = torch.randn(s, 3 * d, device="cuda", dtype=dt)
    v = qkv[:, 2 * d:]  # rows at 3*d*r + 2*d: the last ones pass 2^31
    assert v.numel() < BIG < v.storage_offset() + (s - 1) * v.stride(0)
    tail = slice(s - 64, s)
    _check_rows(OP["rmsnorm"], kernel.rmsnorm(v), (v,), tail, dt)
    _check_rows(OP["gelu_tanh"], kernel.gelu_tanh(v), (v,), tail, dt)
    gu = qkv[:, d:]  # a [.., 2d] gated input whose second half starts past 2^31 too
    _check_rows(OP["geglu"], kernel.geglu(gu), (gu,), tail, dt)
    scale, shift = 0.3 * torch.randn(d, device="cuda", dtype=dt), torch.randn(d, device="cuda", dtype=dt)
    out = kernel.adaln(v, scale, shift)
    (r, mag), = _adaln_ref(v[tail], scale, shift, "rms")
    a, b = _adaln_tol(dt, d)
    assert bool(((out[tail].double() - r).abs() <= a * unit_roundoff(dt) * r.abs() + b * mag + 1e-30).all())
    g = kernel.gated_residual(v, qkv[:, :d], scale)
    assert torch.equal(g[tail], v[tail] + qkv[tail, :d] * scale)
    del out, g
    cos, sin = torch.randn(1, d, device="cuda"), torch.randn(1, d, device="cuda")
    x3 = v.unsqueeze(0)  # [1, S, D], row-strided
    o3 = kernel.rope_interleaved(x3, cos, sin)
    r3, _ = _interleaved64(x3[:, tail], cos, sin)
    assert bool(((o3[:, tail].double() - r3).abs() <= 1e-2 * (r3.abs() + 1)).all())
    assert torch.equal(o3[:, tail], kernel.rope_interleaved(x3[:, tail].contiguous(), cos, sin))
    del o3
    q4 = qkv.view(1, s, 3, 16, d // 16)[:, :, 2]  # [B, S, H, Dh] for unsqueeze_dim=2
    hc = torch.randn(1, 1, d // 16, device="cuda", dtype=dt)
    o4 = kernel.rope_rotate_half_single(q4, hc, hc, 2)
    assert torch.equal(o4[:, tail], kernel.rope_rotate_half_single(q4[:, tail].contiguous(), hc, hc, 2))


def _small_args(op, dtype=torch.bfloat16, layout="qkv"):
    return op.build((2, 5), 256, dtype, "cuda", layout)


@requires_gpu
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_gpu_cuda_graph_replay_with_new_data(op):
    static = _small_args(op)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up outside the capture
        op.call(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = _as_list(op.call(*static))
    for _ in range(2):
        fresh = _small_args(op)
        for s_arg, f_arg in zip(static, fresh):
            if isinstance(s_arg, torch.Tensor):
                s_arg.copy_(f_arg)
        graph.replay()
        torch.cuda.synchronize()
        for got, want in zip(outs, _as_list(op.call(*static))):
            assert torch.equal(got, want), f"{op.name}: graph replay differs from eager"


@requires_gpu
def test_gpu_compile_reduce_overhead_matches_eager():
    def block(x, w, scale, shift, gate, cos, sin):
        h = kernel.adaln(x, scale, shift)
        q = kernel.rmsnorm(h, w, 1e-5, semantics="torch")
        q = kernel.rope_interleaved(q, cos, sin)
        f = kernel.gelu_tanh(q)
        return kernel.gated_residual(x, f, gate) + kernel.geglu(torch.cat([f, q], -1))

    def inputs():
        b, s, d = 2, 64, 512
        x = torch.randn(b, s, d, device="cuda", dtype=torch.bfloat16)
        mod = torch.randn(b, 1, 3, d, device="cuda", dtype=torch.bfloat16).unbind(2)
        return (x, weight(d, torch.bfloat16, "cuda"), 0.3 * mod[0], mod[1], mod[2],
                torch.randn(s, d, device="cuda"), torch.randn(s, d, device="cuda"))

    torch._dynamo.reset()
    compiled = torch.compile(block, mode="reduce-overhead", fullgraph=True)
    for _ in range(4):  # warm-up runs, then cudagraph replays, each with new data
        args = inputs()
        got = compiled(*args).clone()
        assert torch.equal(got, block(*args)), "reduce-overhead result differs from eager"


@requires_gpu
@pytest.mark.parametrize("op", OPS, ids=OP_IDS)
def test_gpu_non_default_stream(op):
    """Inputs written on a side stream behind a long sleep: a kernel launched on any
    other stream than the current one would read them before they are written."""
    args = _small_args(op, layout="contiguous")
    fresh = _small_args(op, layout="contiguous")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(20_000_000)
        for a, f in zip(args, fresh):
            if isinstance(a, torch.Tensor):
                a.copy_(f)
        outs = [o.clone() for o in _as_list(op.call(*args))]
    side.synchronize()
    for got, want in zip(outs, _as_list(op.call(*fresh))):
        assert torch.equal(got, want), f"{op.name}: wrong result on a non-default stream"
