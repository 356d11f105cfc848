"""rmsnorm_rope_qk backward: gradcheck (float64, CPU), opcheck, gradients against autograd of
torch.nn.RMSNorm + diffusers' LTX apply_rotary_emb, grad layouts, torch.compile, bad input."""

import pytest
import torch

from .util import DEVICES, DTYPES, kernel, requires_cpu_variant

pytestmark = pytest.mark.kernels_ci


def apply_rotary(x, cos, sin):
    from diffusers.models.transformers.transformer_ltx import apply_rotary_emb

    return apply_rotary_emb(x, (cos, sin))


def reference(q, k, qw, kw, cos, sin, eps):
    """norm_q / norm_k (torch.nn.RMSNorm) then the LTX rotation, as the forward tests."""
    q = torch.nn.functional.rms_norm(q, (q.shape[-1],), qw, eps)
    k = torch.nn.functional.rms_norm(k, (k.shape[-1],), kw, eps)
    if cos is not None:
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    return q, k


def tables(b, s, d, device, dtype=torch.float32):
    ang = torch.rand(b, s, d // 2, device=device, dtype=torch.float64) * 6
    cos = ang.cos().repeat_interleave(2, -1).to(dtype)
    sin = ang.sin().repeat_interleave(2, -1).to(dtype)
    return cos, sin


def grads(fn, inputs, gq, gk):
    leaves = [t.detach().requires_grad_(True) if t is not None else None for t in inputs]
    oq, ok = fn(*leaves)
    used = [t for t in leaves if t is not None]
    return torch.autograd.grad((oq, ok), used, (gq.to(oq.dtype), gk.to(ok.dtype)))


# ---- gradcheck in float64 on the CPU ------------------------------------------------


@pytest.mark.parametrize("rope", ["batched", "shared", None])
@pytest.mark.parametrize("weights", [True, False])
@requires_cpu_variant
def test_gradcheck_cpu_float64(rope, weights):
    dbl = torch.double
    q = torch.randn(2, 5, 8, dtype=dbl, requires_grad=True)
    k = torch.randn(2, 5, 8, dtype=dbl, requires_grad=True)
    qw = torch.randn(8, dtype=dbl, requires_grad=True) if weights else None
    kw = torch.randn(8, dtype=dbl, requires_grad=True) if weights else None
    if rope is None:
        c = s = None
    else:
        c, s = tables(2 if rope == "batched" else 1, 5, 8, "cpu", dbl)
        if rope == "shared":
            c, s = c[0], s[0]
    args = (q, k) + ((qw, kw) if weights else ())

    def f(*a):
        ws = a[2:] if weights else (None, None)
        return kernel.rmsnorm_rope_qk(a[0], a[1], *ws, c, s, 1e-5)

    torch.autograd.gradcheck(f, args)


@requires_cpu_variant
def test_gradcheck_cross_attention_and_strided_cpu_float64():
    dbl = torch.double
    qkv = torch.randn(2, 4, 3 * 8, dtype=dbl, requires_grad=True)
    k = torch.randn(3, 6, 8, dtype=dbl, requires_grad=True)
    qw = torch.randn(8, dtype=dbl, requires_grad=True)
    kw = torch.randn(8, dtype=dbl, requires_grad=True)
    torch.autograd.gradcheck(
        lambda a, k, qw, kw: kernel.rmsnorm_rope_qk(a[..., :8], k, qw, kw, None, None, 1e-5),
        (qkv, k, qw, kw),
    )
    # fused-projection views with tables
    c, s = tables(1, 4, 8, "cpu", dbl)
    torch.autograd.gradcheck(
        lambda a, qw: kernel.rmsnorm_rope_qk(a[..., :8], a[..., 8:16], qw, qw, c, s, 1e-5),
        (qkv, qw),
    )


@requires_cpu_variant
def test_single_output_used_cpu_float64():
    dbl = torch.double
    q = torch.randn(2, 5, 8, dtype=dbl, requires_grad=True)
    k = torch.randn(2, 5, 8, dtype=dbl, requires_grad=True)
    qw = torch.randn(8, dtype=dbl, requires_grad=True)
    c, s = tables(2, 5, 8, "cpu", dbl)
    torch.autograd.gradcheck(lambda q, k, w: kernel.rmsnorm_rope_qk(q, k, w, w, c, s, 1e-5)[1], (q, k, qw))


# ---- opcheck -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    q = torch.randn(2, 6, 32, device=device, requires_grad=True)
    k = torch.randn(2, 6, 32, device=device, requires_grad=True)
    qw = torch.randn(32, device=device, requires_grad=True)
    kw = torch.randn(32, device=device, requires_grad=True)
    c, s = tables(2, 6, 32, device)
    op = kernel.ops.rmsnorm_rope_qk.default
    torch.library.opcheck(op, (q, k, qw, kw, c, s, 1e-5))
    torch.library.opcheck(op, (q, k[:, :3], qw, kw, None, None, 1e-5))
    bop = kernel.ops.rmsnorm_rope_qk_backward.default
    gq, gk = torch.randn_like(q), torch.randn_like(k)
    d = [t.detach() for t in (q, k, qw, kw)]
    for wg in (True, False):
        torch.library.opcheck(bop, (gq, gk, *d, c, s, 1e-5, wg))
    torch.library.opcheck(bop, (gq, gk[:, :3], d[0], d[1][:, :3], None, kw.detach(), None, None, 1e-5, True))


# ---- against autograd of the reference ----------------------------------------------


def max_err(a, ref64):
    return float((a.double().cpu() - ref64.double().cpu()).abs().max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("w_dtype", ["same", torch.float32])
@pytest.mark.parametrize("rope", [True, False])
@pytest.mark.parametrize("d", [64, 2048])
def test_grads_match_reference(device, dtype, w_dtype, rope, d):
    w_dtype = dtype if w_dtype == "same" else w_dtype
    torch.manual_seed(d)
    q = torch.randn(2, 12, d, device=device).mul(3).to(dtype)
    k = torch.randn(2, 12 if rope else 7, d, device=device).to(dtype)
    qw = (1 + 0.5 * torch.randn(d, device=device)).to(w_dtype)
    kw = (1 + 0.5 * torch.randn(d, device=device)).to(w_dtype)
    c, s = tables(2, 12, d, device) if rope else (None, None)
    gq, gk = torch.randn(q.shape, device=device), torch.randn(k.shape, device=device)
    eps = 1e-5
    ins = (q, k, qw, kw)
    ours = grads(lambda q, k, qw, kw: kernel.rmsnorm_rope_qk(q, k, qw, kw, c, s, eps), ins, gq, gk)
    ref = grads(lambda q, k, qw, kw: reference(q, k, qw, kw, c, s, eps), ins, gq, gk)
    c64, s64 = (None, None) if c is None else (c.double(), s.double())
    exact = grads(
        lambda q, k, qw, kw: reference(q, k, qw, kw, c64, s64, eps),
        [t.double() for t in ins], gq.to(dtype).double(), gk.to(dtype).double(),
    )
    for name, o, r, e in zip(["dq", "dk", "dq_weight", "dk_weight"], ours, ref, exact):
        assert o.dtype == r.dtype and o.shape == r.shape, name
        mag = float(e.abs().max())
        bound = 4 * max_err(r, e) + 8 * torch.finfo(o.dtype).eps * mag + 1e-30
        assert max_err(o, e) <= bound, f"{name}: {max_err(o, e):.3e} > {bound:.3e} (ref {max_err(r, e):.3e})"


# ---- grad layouts, None grads, reuse, no mutation ----------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_noncontiguous_expanded_and_missing_grads(device):
    q = torch.randn(2, 6, 64, device=device, requires_grad=True)
    k = torch.randn(2, 6, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device, requires_grad=True)
    c, s = tables(1, 6, 64, device)
    oq, ok = kernel.rmsnorm_rope_qk(q, k, w, w, c, s, 1e-5)
    big = torch.randn(2, 6, 128, device=device)
    layouts = {
        "slice": big[..., ::2],
        "transposed": torch.randn(64, 6, 2, device=device).permute(2, 1, 0),
        "expanded": torch.randn(64, device=device).expand(2, 6, 64),
    }
    for name, g in layouts.items():
        keep = g.clone()
        a = torch.autograd.grad((oq, ok), (q, k, w), (g, g), retain_graph=True)
        b = torch.autograd.grad((oq, ok), (q, k, w), (g.contiguous(), g.contiguous()), retain_graph=True)
        assert all(torch.equal(x, y) for x, y in zip(a, b)), name
        assert torch.equal(g, keep), name
    # only one output used: the other's grad is None (zeros)
    g = torch.randn_like(oq)
    a = torch.autograd.grad(oq, (q, k, w), g, retain_graph=True, allow_unused=True)
    b = torch.autograd.grad((oq, ok), (q, k, w), (g, torch.zeros_like(ok)), retain_graph=True)
    assert a[1] is None or torch.equal(a[1], b[1])
    assert torch.equal(a[0], b[0]) and torch.equal(a[2], b[2])


@pytest.mark.parametrize("device", DEVICES)
def test_grad_reused_is_deterministic_and_inputs_untouched(device):
    bf = torch.bfloat16
    q = torch.randn(2, 150, 128, device=device, dtype=bf, requires_grad=True)
    k = torch.randn(2, 150, 128, device=device, dtype=bf, requires_grad=True)
    qw = torch.randn(128, device=device, dtype=bf, requires_grad=True)
    kw = torch.randn(128, device=device, dtype=bf, requires_grad=True)
    c, s = tables(2, 150, 128, device)
    before = [t.detach().clone() for t in (q, k, qw, kw, c, s)]
    oq, ok = kernel.rmsnorm_rope_qk(q, k, qw, kw, c, s, 1e-5)
    gq, gk = torch.randn_like(oq), torch.randn_like(ok)
    gc = (gq.clone(), gk.clone())
    a = torch.autograd.grad((oq, ok), (q, k, qw, kw), (gq, gk), retain_graph=True)
    b = torch.autograd.grad((oq, ok), (q, k, qw, kw), (gq, gk))
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert torch.equal(gq, gc[0]) and torch.equal(gk, gc[1])
    assert all(torch.equal(t.detach(), u) for t, u in zip((q, k, qw, kw, c, s), before))


@pytest.mark.parametrize("device", DEVICES)
def test_tables_requiring_grad_raise(device):
    q = torch.randn(1, 4, 16, device=device, requires_grad=True)
    c, s = tables(1, 4, 16, device)
    c.requires_grad_(True)
    oq, ok = kernel.rmsnorm_rope_qk(q, q.detach(), None, None, c, s, 1e-5)
    with pytest.raises(NotImplementedError, match="no gradient for cos/sin"):
        oq.sum().backward()


# ---- torch.compile ------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_compile_forward_backward_matches_eager(device):
    c, s = tables(1, 8, 64, device)

    def step(q, k, qw, kw):
        oq, ok = kernel.rmsnorm_rope_qk(q, k, qw, kw, c, s, 1e-5)
        return (oq * ok).sum()

    ins = [torch.randn(2, 8, 64, device=device, requires_grad=True) for _ in range(2)]
    ins += [torch.randn(64, device=device, requires_grad=True) for _ in range(2)]
    eager = torch.autograd.grad(step(*ins), ins)
    got = torch.autograd.grad(torch.compile(step, fullgraph=True)(*ins), ins)
    for e, g in zip(eager, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)


# ---- inference-only inplace and bad input -----------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_inplace_is_inference_only(device):
    q = torch.randn(1, 4, 16, device=device, requires_grad=True)
    k = torch.randn(1, 4, 16, device=device)
    with pytest.raises(RuntimeError, match="inference-only"):
        kernel.rmsnorm_rope_qk(q, k, None, None, inplace=True)


@pytest.mark.parametrize("device", DEVICES)
def test_backward_bad_inputs_name_the_argument(device):
    f = kernel.ops.rmsnorm_rope_qk_backward
    q = torch.randn(2, 5, 32, device=device)
    w = torch.randn(32, device=device)
    c, s = tables(2, 5, 32, device)
    g = torch.randn_like(q)
    cases = [
        (lambda: f(g[..., :16], g, q, q, w, w, c, s, 1e-5, True), "grad_q must have q's shape"),
        (lambda: f(g, g[:, :2], q, q, w, w, c, s, 1e-5, True), "grad_k must have k's shape"),
        (lambda: f(g.to(torch.int32), g, q, q, w, w, c, s, 1e-5, True), "grad_q must be float32"),
        (lambda: f(g, g, q, q, w[:8], w, c, s, 1e-5, True), r"q_weight must have shape \[32\]"),
        (lambda: f(g, g, q, q, w, w, c, None, 1e-5, True), "pass both cos and sin"),
        (lambda: f(g, g, q, q, w, w, c.half(), s.half(), 1e-5, True), "cos must be float32"),
        (lambda: f(g, g, q, q, w, w, c, s, -1.0, True), "eps must be"),
    ]
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [6, 64, 2048])
@pytest.mark.parametrize("weights", [True, False])
def test_pair_tables_equal_full_tables(device, dtype, d, weights):
    """Pair tables [.., D/2] (value i for channels 2i, 2i+1) give exactly the outputs and the
    grads (q, k, both weights) of their repeat_interleave(2): forward, in place, backward;
    stride-0 batch and [S, D/2] tables."""
    q = torch.randn(2, 7, d, device=device).to(dtype)
    k = torch.randn(2, 7, d, device=device).to(dtype)
    qw = (1 + 0.1 * torch.randn(d, device=device)).to(dtype) if weights else None
    kw = (1 + 0.1 * torch.randn(d, device=device)).to(dtype) if weights else None
    for c, s in ((torch.randn(2, 7, d // 2, device=device), torch.randn(2, 7, d // 2, device=device)),
                 (torch.randn(7, d // 2, device=device), torch.randn(7, d // 2, device=device)),
                 (torch.randn(1, 7, d // 2, device=device).expand(2, 7, d // 2),
                  torch.randn(1, 7, d // 2, device=device).expand(2, 7, d // 2))):
        cf, sf = c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)
        want = kernel.rmsnorm_rope_qk(q, k, qw, kw, cf, sf, 1e-6)
        got = kernel.rmsnorm_rope_qk(q, k, qw, kw, c, s, 1e-6)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
        qi, ki = q.clone(), k.clone()
        kernel.rmsnorm_rope_qk(qi, ki, qw, kw, c, s, 1e-6, inplace=True)
        assert torch.equal(qi, want[0]) and torch.equal(ki, want[1])
        gq, gk = torch.randn_like(q), torch.randn_like(k)
        inputs = (q, k, qw, kw)
        pair = grads(lambda q, k, qw, kw: kernel.rmsnorm_rope_qk(q, k, qw, kw, c, s, 1e-6), inputs, gq, gk)
        full = grads(lambda q, k, qw, kw: kernel.rmsnorm_rope_qk(q, k, qw, kw, cf, sf, 1e-6), inputs, gq, gk)
        assert all(torch.equal(a, b) for a, b in zip(pair, full))


@requires_cpu_variant
def test_gradcheck_pair_tables_cpu_float64():
    q = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 3, 8, dtype=torch.float64, requires_grad=True)
    qw = torch.randn(8, dtype=torch.float64, requires_grad=True)
    c, s = torch.randn(2, 3, 4, dtype=torch.float64), torch.randn(2, 3, 4, dtype=torch.float64)
    assert torch.autograd.gradcheck(
        lambda q, k, qw: kernel.rmsnorm_rope_qk(q, k, qw, None, c, s, 1e-6), (q, k, qw))
