"""RoPE backward: gradcheck (CPU float64), opcheck, gradients vs autograd of the real
diffusers / transformers functions, grad layouts, torch.compile, bad inputs."""

import pytest
import torch

from .test_rope import (
    diffusers_ltx_apply,
    interleaved_ref64,
    llama_apply,
    llama_tables,
    ltx_tables,
    neox_apply,
    neox_tables,
)
from .util import DEVICES, DTYPES, HAS_GPU, kernel, subnormal_spacing, unit_roundoff, requires_cpu_variant

pytestmark = pytest.mark.kernels_ci

D64 = torch.float64


def opcheck(op, args):
    torch.library.opcheck(op, args)


# ---- layouts under test: (name, make(device, dtype) -> (inputs, tables, fn)) ------------


def inter_case(shape, table_shape, expand=False, device="cpu", dtype=D64, tdtype=None):
    x = torch.randn(shape, device=device, dtype=dtype)
    tdtype = tdtype or (dtype if dtype == D64 else torch.float32)
    c = torch.randn(table_shape, device=device, dtype=tdtype)
    s = torch.randn(table_shape, device=device, dtype=tdtype)
    if expand:  # stride-0 batch, as LTX's CFG halves
        c, s = c[:1].expand(table_shape), s[:1].expand(table_shape)
    return x, c, s


def half_case(q_shape, k_heads, r, u, table_batch, device="cpu", dtype=D64, tdtype=None):
    b, d = q_shape[0], q_shape[3]
    seq = q_shape[2] if u == 1 else q_shape[1]
    hd = 1 if u == 1 else 2
    k_shape = list(q_shape)
    k_shape[hd] = k_heads
    q = torch.randn(q_shape, device=device, dtype=dtype)
    k = torch.randn(k_shape, device=device, dtype=dtype)
    tdtype = tdtype or dtype
    shape = (seq, r) if table_batch is None else (table_batch, seq, r)
    c = torch.randn(shape, device=device, dtype=tdtype)
    s = torch.randn(shape, device=device, dtype=tdtype)
    return q, k, c, s


INTER = [
    ((2, 5, 8), (5, 8), False),
    ((2, 5, 8), (2, 5, 8), False),
    ((2, 5, 8), (2, 5, 8), True),
    ((2, 3, 4, 6), (4, 6), False),
]
HALF = [  # (q_shape, k_heads, R, unsqueeze_dim, table batch or None)
    ((2, 3, 5, 8), 3, 8, 1, 2),
    ((2, 4, 5, 12), 2, 8, 1, None),  # GQA, partial rotary
    ((2, 5, 3, 8), 1, 4, 2, 1),
    ((1, 5, 2, 6), 2, 6, 2, 1),
]


# ---- gradcheck (CPU, float64) ---------------------------------------------------------


@pytest.mark.parametrize("shape,tshape,expand", INTER)
@pytest.mark.parametrize("tables32", [False, True])
@requires_cpu_variant
def test_gradcheck_interleaved(shape, tshape, expand, tables32):
    x, c, s = inter_case(shape, tshape, expand, tdtype=torch.float32 if tables32 else None)
    k = torch.randn(shape, dtype=D64)
    x.requires_grad_(True)
    k.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda x: kernel.rope_interleaved(x, c, s), (x,))
    assert torch.autograd.gradcheck(lambda q, k: kernel.rope_interleaved_qk(q, k, c, s), (x, k))
    # one output unused (a None grad)
    assert torch.autograd.gradcheck(lambda q, k: kernel.rope_interleaved_qk(q, k, c, s)[1], (x, k))


@pytest.mark.parametrize("q_shape,kh,r,u,tb", HALF)
@pytest.mark.parametrize("tables32", [False, True])
@requires_cpu_variant
def test_gradcheck_rotate_half(q_shape, kh, r, u, tb, tables32):
    q, k, c, s = half_case(q_shape, kh, r, u, tb, tdtype=torch.float32 if tables32 else None)
    q.requires_grad_(True)
    k.requires_grad_(True)
    assert torch.autograd.gradcheck(lambda q, k: kernel.rope_rotate_half(q, k, c, s, u), (q, k))
    assert torch.autograd.gradcheck(lambda q, k: kernel.rope_rotate_half(q, k, c, s, u)[0], (q, k))
    assert torch.autograd.gradcheck(lambda q: kernel.rope_rotate_half_single(q, c, s, u), (q,))
    assert torch.autograd.gradcheck(lambda k: kernel.rope_rotate_half_single(k, c, s, u), (k,))


@requires_cpu_variant
def test_float64_forward_matches_reference():
    x, c, s = inter_case((2, 5, 8), (2, 5, 8))
    # (diffusers computes in fp32 even for float64 input; the float64 expression instead)
    want = interleaved_ref64(x, c, s)[0]
    assert torch.allclose(kernel.rope_interleaved(x, c, s), want, rtol=1e-14, atol=1e-14)
    q, k, c, s = half_case((2, 3, 5, 8), 1, 8, 1, 2)
    for a, b in zip(kernel.rope_rotate_half(q, k, c, s, 1), llama_apply(q, k, c, s, 1)):
        assert a.dtype == D64 and torch.allclose(a, b, rtol=1e-14, atol=1e-14)


# ---- opcheck ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    f32 = torch.float32
    x, c, s = inter_case((2, 5, 8), (5, 8), device=device, dtype=f32)
    k = torch.randn_like(x)
    xr, kr = x.clone().requires_grad_(True), k.clone().requires_grad_(True)
    opcheck(kernel.ops.rope_interleaved.default, (xr, c, s))
    opcheck(kernel.ops.rope_interleaved_qk.default, (xr, kr, c, s))
    opcheck(kernel.ops.rope_interleaved_backward.default, (x, c, s))
    opcheck(kernel.ops.rope_interleaved_qk_backward.default, (x, k, c, s))
    for u, q_shape in ((1, (2, 4, 5, 12)), (2, (2, 5, 4, 12))):
        q, k, c, s = half_case(q_shape, 2, 8, u, 2, device=device, dtype=f32)
        qr, kr = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
        opcheck(kernel.ops.rope_rotate_half.default, (qr, kr, c, s, u))
        opcheck(kernel.ops.rope_rotate_half_single.default, (kr, c, s, u))
        opcheck(kernel.ops.rope_rotate_half_backward.default, (q, k, c, s, u))
        opcheck(kernel.ops.rope_rotate_half_single_backward.default, (k, c, s, u))


# ---- gradients vs autograd of the real functions -------------------------------------


def assert_grad_close(ours, ref, ref64, mag, what):
    """Ours (fp32 math, one rounding) within a small multiple of the reference's own
    error plus a few units of roundoff of the magnitude, against float64 autograd."""
    assert ours.dtype == ref.dtype and ours.shape == ref.shape, what
    u = unit_roundoff(ours.dtype)
    e_ours = (ours.double() - ref64).abs().cpu()
    e_ref = (ref.double() - ref64).abs().cpu()
    bound = 2 * e_ref + 4 * u * mag.cpu() + 2 * subnormal_spacing(ours.dtype)
    bad = ~(e_ours <= bound)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} of {bad.numel()} exceed the bound"


def vjp(fn, inputs, grads):
    inputs = [t.detach().requires_grad_(True) for t in inputs]
    outs = fn(*inputs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    return torch.autograd.grad(outs, inputs, grads)


def pair_swap(t):  # (a, b) -> (b, a) within interleaved pairs
    return t.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_interleaved_grads_vs_diffusers(device, dtype):
    cos, sin = ltx_tables(96, 2, 3, 4, 5, (8 / 25, 32, 32), device)
    q = torch.randn(2, 60, 96, device=device).to(dtype)
    k = torch.randn(2, 60, 96, device=device).to(dtype)
    gq = torch.randn_like(q)
    gk = torch.randn_like(k)
    ref = lambda q, k: (diffusers_ltx_apply(q, cos, sin), diffusers_ltx_apply(k, cos, sin))
    r = vjp(ref, (q, k), (gq, gk))
    # diffusers upcasts to fp32 only; the float64 truth is the same expression in float64
    ref64 = lambda q, k: (interleaved_ref64(q, cos, sin)[0], interleaved_ref64(k, cos, sin)[0])
    r64 = vjp(ref64, (q.double(), k.double()), (gq.double(), gk.double()))
    ours = vjp(lambda q, k: kernel.rope_interleaved_qk(q, k, cos, sin), (q, k), (gq, gk))
    single = vjp(lambda x: kernel.rope_interleaved(x, cos, sin), (q,), (gq,))[0]
    assert torch.equal(single, ours[0])
    for o, rr, r6, g, name in zip(ours, r, r64, (gq, gk), "qk"):
        mag = (g.double() * cos.double()).abs() + pair_swap((g.double() * sin.double()).abs())
        assert_grad_close(o, rr, r6, mag, f"d{name}")


def half_mag(g, cos, sin, u):
    c = (cos if cos.dim() == 3 else cos[None]).double().unsqueeze(u)
    s = (sin if sin.dim() == 3 else sin[None]).double().unsqueeze(u)
    r = c.shape[-1]
    g = g.double()
    gs = (g[..., :r] * s).abs()
    swapped = torch.cat([gs[..., r // 2:], gs[..., : r // 2]], -1)
    return torch.cat([(g[..., :r] * c).abs() + swapped, g[..., r:].abs()], -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("u", [1, 2])
@pytest.mark.parametrize("model", ["llama", "neox"])
def test_rotate_half_grads_vs_transformers(device, dtype, u, model):
    b, s_, hq, hk, d = 2, 17, 4, 2, 32
    if model == "llama":
        cos, sin = llama_tables(d, b, s_, dtype, device)
        apply = llama_apply
    else:
        cos, sin = neox_tables(d, 0.25, b, s_, dtype, device)
        apply = neox_apply
    shp = (lambda h: (b, h, s_, d)) if u == 1 else (lambda h: (b, s_, h, d))
    q = torch.randn(shp(hq), device=device).to(dtype)
    k = torch.randn(shp(hk), device=device).to(dtype)
    gq = torch.randn_like(q)
    gk = torch.randn_like(k)
    r = vjp(lambda q, k: apply(q, k, cos, sin, u), (q, k), (gq, gk))
    r64 = vjp(lambda q, k: apply(q, k, cos.double(), sin.double(), u), (q.double(), k.double()),
              (gq.double(), gk.double()))
    ours = vjp(lambda q, k: kernel.rope_rotate_half(q, k, cos, sin, u), (q, k), (gq, gk))
    single = vjp(lambda x: kernel.rope_rotate_half_single(x, cos, sin, u), (k,), (gk,))[0]
    assert torch.equal(single, ours[1])
    for o, rr, r6, g, name in zip(ours, r, r64, (gq, gk), "qk"):
        assert_grad_close(o, rr, r6, half_mag(g, cos, sin, u), f"d{name}")
        rdim = cos.shape[-1]
        assert torch.equal(o[..., rdim:], g[..., rdim:]), "pass-through channels"


# ---- grad layouts, reuse, no mutation ---------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_grad_layouts_interleaved(device):
    bf = torch.bfloat16
    x, c, s = inter_case((2, 6, 64), (2, 6, 64), True, device=device, dtype=bf)
    g = torch.randn(2, 6, 64, device=device).to(bf)
    want = kernel.ops.rope_interleaved_backward(g, c, s)
    wide = torch.randn(2, 6, 192, device=device).to(bf)
    wide[..., 64:128] = g
    views = [
        g.transpose(0, 1).contiguous().transpose(0, 1),  # non-contiguous lead dims
        wide[..., 64:128],  # slice of a wider tensor
        g[:1].expand(2, 6, 64),  # stride-0 batch
        g[:, :1].expand(2, 6, 64),  # stride-0 sequence
        g[..., :1].expand(2, 6, 64),  # stride-0 last dim
    ]
    for i, v in enumerate(views):
        before = v.clone()
        got = kernel.ops.rope_interleaved_backward(v, c, s)
        ref = kernel.ops.rope_interleaved_backward(v.contiguous(), c, s)
        # in grad's memory order, as torch.empty_like(grad) (the forward's rule, rope.cpp empty_in_order)
        assert got.stride() == torch.empty_like(v).stride() and got.dtype == bf and torch.equal(got, ref), i
        assert torch.equal(v, before), "grad must not be written"
        if i == 1:
            assert torch.equal(got, want)
    # through autograd with an expanded grad_output
    xr = x.clone().requires_grad_(True)
    out = kernel.rope_interleaved(xr, c, s)
    out.backward(g[:1].expand_as(out))
    assert torch.equal(xr.grad, kernel.ops.rope_interleaved_backward(g[:1].expand(2, 6, 64).contiguous(), c, s))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("u", [1, 2])
def test_grad_layouts_rotate_half(device, u):
    bf = torch.bfloat16
    q_shape = (2, 4, 6, 32) if u == 1 else (2, 6, 4, 32)
    q, k, c, s = half_case(q_shape, 2, 16, u, 1, device=device, dtype=bf)
    gq = torch.randn(q_shape, device=device).to(bf)
    gk = torch.randn_like(k)
    wq, wk = kernel.ops.rope_rotate_half_backward(gq, gk, c, s, u)
    perm = gq.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    exp_q = gq[:1].expand(q_shape)
    for vq in (perm, exp_q, gq[..., :1].expand(q_shape)):
        before = vq.clone()
        dq, dk = kernel.ops.rope_rotate_half_backward(vq, gk, c, s, u)
        rq, _ = kernel.ops.rope_rotate_half_backward(vq.contiguous(), gk, c, s, u)
        assert torch.equal(dq, rq) and torch.equal(dk, wk) and torch.equal(vq, before)
        assert torch.equal(kernel.ops.rope_rotate_half_single_backward(vq, c, s, u), rq)
    assert torch.equal(kernel.ops.rope_rotate_half_backward(perm, gk, c, s, u)[0], wq)


@pytest.mark.parametrize("device", DEVICES)
def test_retain_graph_reuse_and_no_mutation(device):
    h = torch.float16
    x, c, s = inter_case((2, 6, 64), (6, 64), device=device, dtype=h)
    q, k, hc, hs = half_case((2, 4, 6, 32), 2, 32, 1, 2, device=device, dtype=h)
    inputs = [t.clone() for t in (x, c, s, q, k, hc, hs)]
    xr, qr, kr = (t.clone().requires_grad_(True) for t in (x, q, k))
    o1 = kernel.rope_interleaved(xr, c, s)
    oq, ok = kernel.rope_rotate_half(qr, kr, hc, hs, 1)
    g1, gq, gk = torch.randn_like(o1), torch.randn_like(oq), torch.randn_like(ok)
    saved = [t.clone() for t in (g1, gq, gk)]
    first = torch.autograd.grad((o1, oq, ok), (xr, qr, kr), (g1, gq, gk), retain_graph=True)
    second = torch.autograd.grad((o1, oq, ok), (xr, qr, kr), (g1, gq, gk))
    for a, b in zip(first, second):
        assert torch.equal(a, b)
    for a, b in zip((g1, gq, gk), saved):
        assert torch.equal(a, b), "grad_output changed"
    for a, b in zip((x, c, s, q, k, hc, hs), inputs):
        assert torch.equal(a, b), "input changed"
    assert first[0].dtype == h and first[1].shape == q.shape and first[2].shape == k.shape


# ---- torch.compile ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_compile_forward_backward(device):
    torch._dynamo.reset()
    x, c, s = inter_case((2, 6, 32), (2, 6, 32), True, device=device, dtype=torch.float32)
    q, k, hc, hs = half_case((2, 6, 4, 16), 2, 8, 2, 2, device=device, dtype=torch.float32)
    w = torch.randn(2, 6, 32, device=device)

    def loss(x, q, k):
        a, b = kernel.rope_interleaved_qk(x, x * 2, c, s)
        oq, ok = kernel.rope_rotate_half(q, k, hc, hs, 2)
        single = kernel.rope_rotate_half_single(k, hc, hs, 2)
        return ((a + kernel.rope_interleaved(x, c, s)) * w).sum() + (b * w).sum() + (oq ** 2).sum() + (ok * single).sum()

    def grads(fn):
        ins = [t.clone().requires_grad_(True) for t in (x, q, k)]
        fn(*ins).backward()
        return [t.grad for t in ins]

    eager = grads(loss)
    compiled = grads(torch.compile(loss, fullgraph=True))
    for a, b in zip(eager, compiled):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


# ---- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_naming_the_argument(device):
    bf = torch.bfloat16
    g = torch.randn(2, 5, 64, device=device, dtype=bf)
    c = torch.randn(2, 5, 64, device=device)
    gq = torch.randn(2, 4, 5, 64, device=device, dtype=bf)
    gk = torch.randn(2, 2, 5, 64, device=device, dtype=bf)
    hc = torch.randn(2, 5, 64, device=device, dtype=bf)
    ops = kernel.ops
    cases = [
        (lambda: ops.rope_interleaved_backward(g.to(torch.int32), c, c), "grad must be float32"),
        (lambda: ops.rope_interleaved_backward(g[..., :63], c[..., :63], c[..., :63]), "grad's last dim must be even"),
        (lambda: ops.rope_interleaved_backward(g, c.to(bf), c.to(bf)), "cos must be float32"),
        (lambda: ops.rope_interleaved_backward(g, c, c[..., :32]), "sin must have cos's shape"),
        (lambda: ops.rope_interleaved_backward(g, c[:, :4], c[:, :4]), "cos must have shape .* broadcastable to grad's shape"),
        (lambda: ops.rope_interleaved_qk_backward(g, g[:1], c, c), "grad_k must have grad_q's shape"),
        (lambda: ops.rope_interleaved_qk_backward(g, g.half(), c, c), "grad_k must have grad_q's dtype"),
        (lambda: ops.rope_rotate_half_backward(gq, gk, hc, hc, 3), "unsqueeze_dim must be 1"),
        (lambda: ops.rope_rotate_half_backward(gq[0], gk, hc, hc, 1), "grad_q must be 4-D"),
        (lambda: ops.rope_rotate_half_backward(gq, gk[0], hc, hc, 1), "grad_k must be 4-D"),
        (lambda: ops.rope_rotate_half_backward(gq, gk[..., :32], hc, hc, 1), "grad_k must match grad_q"),
        (lambda: ops.rope_rotate_half_backward(gq, gk, hc.half(), hc.half(), 1), "cos must be float32 or grad_q's dtype"),
        (lambda: ops.rope_rotate_half_backward(gq, gk, hc[..., :31], hc[..., :31], 1), "even rotary dim"),
        (lambda: ops.rope_rotate_half_single_backward(gq.to(torch.int64), hc, hc, 1), "grad must be float32"),
        (lambda: ops.rope_rotate_half_single_backward(gq, hc, hc.float(), 1), "sin must have cos's dtype"),
    ]
    if device == "cuda":
        cases.append((lambda: ops.rope_interleaved_backward(g.double(), c, c), "grad is float64 on cuda"))
        cases.append((lambda: kernel.rope_interleaved(g.double(), c, c), "float64 is supported on the CPU only"))
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()


@pytest.mark.parametrize("device", DEVICES)
def test_table_grad_and_inference_only_paths(device):
    x, c, s = inter_case((2, 5, 8), (5, 8), device=device, dtype=torch.float32)
    q, k, hc, hs = half_case((2, 3, 5, 8), 1, 8, 1, 2, device=device, dtype=torch.float32)
    xr, qr, kr = (t.clone().requires_grad_(True) for t in (x, q, k))
    cr, hcr = c.clone().requires_grad_(True), hc.clone().requires_grad_(True)
    for out in (kernel.rope_interleaved(xr, cr, s), kernel.rope_interleaved_qk(xr, xr, cr, s)[0],
                kernel.rope_rotate_half(qr, kr, hcr, hs)[1], kernel.rope_rotate_half_single(qr, hcr, hs),
                kernel.rope_interleaved(x, cr, s)):
        with pytest.raises(NotImplementedError, match="no gradient for the cos/sin tables"):
            out.sum().backward()
    for fn in (lambda: kernel.rope_interleaved(xr, c, s, out=torch.empty_like(x)),
               lambda: kernel.rope_interleaved_qk(xr, k.clone(), c, s, inplace=True),
               lambda: kernel.rope_rotate_half(qr, kr, hc, hs, inplace=True),
               lambda: kernel.rope_rotate_half_single(qr, hc, hs, inplace=True)):
        with pytest.raises(RuntimeError, match="inference-only"):
            fn()
    with torch.no_grad():  # fine without autograd
        kernel.rope_rotate_half_single(qr, hc, hs, inplace=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [6, 64, 2048])
def test_pair_tables_grads_equal_full_tables(device, dtype, d):
    """Pair tables [.., D/2] give exactly the grads of their repeat_interleave(2)."""
    c = torch.randn(2, 7, d // 2, device=device)
    s = torch.randn(1, 7, d // 2, device=device).expand(2, 7, d // 2)  # stride-0 batch
    cf, sf = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
    q = torch.randn(2, 7, d, device=device).to(dtype)
    k = torch.randn(2, 7, d, device=device).to(dtype)
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    for fn in (lambda c, s: lambda q, k: kernel.rope_interleaved_qk(q, k, c, s),
               lambda c, s: lambda q, k: (kernel.rope_interleaved(q, c, s), kernel.rope_interleaved(k, c, s))):
        pair = vjp(fn(c, s), (q, k), (gq, gk))
        full = vjp(fn(cf, sf), (q, k), (gq, gk))
        assert all(torch.equal(a, b) for a, b in zip(pair, full))


@requires_cpu_variant
def test_gradcheck_pair_tables_cpu_float64():
    q = torch.randn(2, 3, 8, dtype=D64, requires_grad=True)
    k = torch.randn(2, 3, 8, dtype=D64, requires_grad=True)
    c, s = torch.randn(3, 4, dtype=D64), torch.randn(3, 4, dtype=D64)
    assert torch.autograd.gradcheck(lambda q, k: kernel.rope_interleaved_qk(q, k, c, s), (q, k))
