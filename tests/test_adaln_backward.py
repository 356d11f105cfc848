"""Backward of adaln and gated_residual: float64 gradcheck (CPU), opcheck, gradients
against autograd of the eager reference expressions (diffusers-style RMSNorm /
F.layer_norm, then * (1 + scale) + shift; x + y * gate), grad layouts, compile.

Accuracy rule: ours and the reference, both in the test dtype, are compared with float64
autograd; ours' max error must be within a small multiple of the reference's own error
plus a few eps times the gradient's magnitude.
"""

import pytest
import torch
import torch.nn.functional as F

from .util import DEVICES, HAS_GPU, kernel, requires_gpu, requires_cpu_variant

pytestmark = pytest.mark.kernels_ci

EPS = 1e-6
DT = [torch.float32, torch.float16, torch.bfloat16]
# scale/shift shapes for x [B, S, D] = [2, 3, D] (per batch, per token, [D], a 4-D form
# is tested separately, size-1 last dim)
FORMS = {
    "batch": lambda b, s, d: (b, 1, d),
    "token": lambda b, s, d: (b, s, d),
    "vector": lambda b, s, d: (d,),
    "lastdim1": lambda b, s, d: (b, s, 1),
    "scalar_row": lambda b, s, d: (1, 1, d),
}


def ref_norm(x, weight, eps, norm):
    """diffusers RMSNorm (fp32 statistics, step rounding) or F.layer_norm (no bias)."""
    if norm == "rms":
        var = x.float().pow(2).mean(-1, keepdim=True)
        h = x * torch.rsqrt(var + eps)
        if weight is not None:
            if weight.dtype in (torch.float16, torch.bfloat16):
                h = h.to(weight.dtype)
            return h * weight
        return h.to(x.dtype)
    w = None if weight is None else weight.to(x.dtype)
    return F.layer_norm(x, (x.shape[-1],), w, None, eps)


def ref_adaln(x, scale, shift=None, weight=None, eps=EPS, norm="rms"):
    n = ref_norm(x, weight, eps, norm) * (1 + scale)
    return n if shift is None else n + shift


def leaves(*ts):
    return [None if t is None else t.detach().clone().requires_grad_() for t in ts]


def grads_of(fn, inputs, grad_out):
    out = fn(*inputs)
    req = [t for t in inputs if t is not None]
    return torch.autograd.grad(out, req, grad_out)


def assert_grad_accuracy(ours, ref, exact, dtype, what, factor=4.0, slack=16.0):
    eps = torch.finfo(dtype).eps
    for i, (o, r, e) in enumerate(zip(ours, ref, exact)):
        assert o.dtype == r.dtype and o.shape == r.shape, (what, i, o.dtype, r.dtype, o.shape, r.shape)
        e = e.double().cpu()
        err = (o.double().cpu() - e).abs().max().item()
        ref_err = (r.double().cpu() - e).abs().max().item()
        mag = e.abs().max().item()
        bound = factor * ref_err + slack * eps * mag + 1e-30
        assert err <= bound, f"{what} grad {i}: error {err:.3e} > {bound:.3e} (ref {ref_err:.3e}, |g| {mag:.3e})"


# ---- gradcheck (CPU, float64) ----------------------------------------------------------


@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("opts", ["none", "both"])
@requires_cpu_variant
def test_gradcheck_adaln(norm, form, opts):
    b, s, d = 2, 3, 8
    x = torch.randn(b, s, d, dtype=torch.float64)
    sc = 0.5 * torch.randn(FORMS[form](b, s, d), dtype=torch.float64)
    sh = torch.randn(FORMS[form](b, s, d), dtype=torch.float64) if opts in ("shift", "both") else None
    w = 1 + 0.5 * torch.randn(d, dtype=torch.float64) if opts in ("weight", "both") else None
    inputs = leaves(x, sc, sh, w)
    fn = lambda *a: kernel.adaln(*a, eps=EPS, norm=norm)  # noqa: E731
    assert torch.autograd.gradcheck(fn, inputs, fast_mode=True)


@requires_cpu_variant
def test_gradcheck_adaln_4d_and_strided_modulation():
    x = torch.randn(2, 3, 4, 8, dtype=torch.float64)
    sc = (0.5 * torch.randn(2, 3, 1, 8, dtype=torch.float64)).requires_grad_()
    table = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    fn = lambda x, sc, table: kernel.adaln(x, sc, table.unbind(1)[2][:, None, None], norm="layer")  # noqa: E731
    assert torch.autograd.gradcheck(fn, (x.requires_grad_(), sc, table), fast_mode=True)


@pytest.mark.parametrize("form", list(FORMS))
@requires_cpu_variant
def test_gradcheck_gated_residual(form):
    b, s, d = 2, 3, 8
    x = torch.randn(b, s, d, dtype=torch.float64, requires_grad=True)
    y = torch.randn(b, s, d, dtype=torch.float64, requires_grad=True)
    g = torch.randn(FORMS[form](b, s, d), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(kernel.gated_residual, (x, y, g), fast_mode=True)
    # y broadcast too
    yb = torch.randn(FORMS[form](b, s, d), dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(kernel.gated_residual, (x, yb, g), fast_mode=True)


# ---- opcheck ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    d = 64
    x, sc, sh, w = leaves(
        torch.randn(2, 5, d, device=device),
        0.5 * torch.randn(2, 1, d, device=device),
        torch.randn(2, 5, d, device=device),
        1 + torch.randn(d, device=device),
    )
    for norm in (0, 1):
        torch.library.opcheck(kernel.ops.adaln.default, (x, sc, sh, w, EPS, norm))
        torch.library.opcheck(kernel.ops.adaln.default, (x, sc, None, None, EPS, norm))
        g = torch.randn(2, 5, d, device=device)
        for mask in ([True] * 4, [False, True, False, True]):
            torch.library.opcheck(
                kernel.ops.adaln_backward.default, (g, x.detach(), sc.detach(), sh.detach(), w.detach(), EPS, norm, mask)
            )
        torch.library.opcheck(
            kernel.ops.adaln_backward.default, (g, x.detach(), sc.detach(), None, None, EPS, norm, [True] * 4)
        )
    xb, yb, gb = leaves(*(torch.randn(2, 5, d, device=device).to(torch.bfloat16) for _ in range(2)),
                        torch.randn(2, 1, d, device=device).to(torch.bfloat16))
    torch.library.opcheck(kernel.ops.gated_residual.default, (xb, yb, gb))
    g = torch.randn(2, 5, d, device=device).to(torch.bfloat16)
    for mask in ([True, True], [False, True], [True, False]):
        torch.library.opcheck(kernel.ops.gated_residual_backward.default, (g, yb.detach(), gb.detach(), mask))


# ---- accuracy vs the eager reference ---------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DT, ids=str)
@pytest.mark.parametrize("norm", ["rms", "layer"])
@pytest.mark.parametrize("form", ["batch", "token", "vector"])
@pytest.mark.parametrize("weight", [False, True])
def test_adaln_grads_vs_reference(device, dtype, norm, form, weight):
    torch.manual_seed(0)
    b, s, d = 2, 37, 256
    x = torch.randn(b, s, d, device=device).to(dtype)
    sc = (0.5 * torch.randn(FORMS[form](b, s, d), device=device)).to(dtype)
    sh = torch.randn(FORMS[form](b, s, d), device=device).to(dtype)
    w = (1 + 0.5 * torch.randn(d, device=device)).to(dtype) if weight else None
    go = torch.randn(b, s, d, device=device).to(dtype)
    ours = grads_of(lambda *a: kernel.adaln(*a, eps=EPS, norm=norm), leaves(x, sc, sh, w), go)
    ref = grads_of(lambda *a: ref_adaln(*a, eps=EPS, norm=norm), leaves(x, sc, sh, w), go)
    ex_in = [None if t is None else t.double() for t in (x, sc, sh, w)]
    exact = grads_of(lambda *a: ref_adaln(*a, eps=EPS, norm=norm), leaves(*ex_in), go.double())
    assert_grad_accuracy(ours, ref, exact, dtype, f"adaln {norm} {form}")


@pytest.mark.parametrize("device", DEVICES)
def test_adaln_grads_fp32_modulation_half_x(device):
    """Wan-style fp32 scale/shift with bf16 x (mixed dtypes take the generic kernel)."""
    b, s, d = 2, 9, 128
    x = torch.randn(b, s, d, device=device).to(torch.bfloat16)
    sc, sh = 0.5 * torch.randn(b, 1, d, device=device), torch.randn(b, 1, d, device=device)
    go = torch.randn(b, s, d, device=device)
    ours = grads_of(lambda *a: kernel.adaln(*a, norm="layer"), leaves(x, sc, sh), go)
    ref = grads_of(lambda *a: ref_adaln(*a, norm="layer"), leaves(x, sc, sh), go)
    exact = grads_of(lambda *a: ref_adaln(*a, norm="layer"), leaves(x.double(), sc.double(), sh.double()), go.double())
    assert_grad_accuracy(ours, ref, exact, torch.bfloat16, "adaln mixed")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DT, ids=str)
@pytest.mark.parametrize("form", ["batch", "token", "lastdim1"])
def test_gated_grads_vs_reference(device, dtype, form):
    torch.manual_seed(0)
    b, s, d = 2, 37, 256
    x = torch.randn(b, s, d, device=device).to(dtype)
    y = torch.randn(b, s, d, device=device).to(dtype)
    g = torch.randn(FORMS[form](b, s, d), device=device).to(dtype)
    go = torch.randn(b, s, d, device=device).to(dtype)
    ref_fn = lambda x, y, g: x + y * g  # noqa: E731
    ours = grads_of(kernel.gated_residual, leaves(x, y, g), go)
    ref = grads_of(ref_fn, leaves(x, y, g), go)
    exact = grads_of(ref_fn, leaves(x.double(), y.double(), g.double()), go.double())
    assert_grad_accuracy(ours, ref, exact, dtype, f"gated {form}")


@pytest.mark.parametrize("device", DEVICES)
def test_long_rows_and_misaligned(device):
    """Rows longer than 512 vectors (re-read path) and odd offsets (scalar kernel)."""
    d = 8192 + 8
    x = torch.randn(3, d, device=device)
    sc = 0.5 * torch.randn(d + 1, device=device)[1:]
    go = torch.randn(3, d, device=device)
    ours = grads_of(lambda *a: kernel.adaln(*a, norm="layer"), leaves(x, sc), go)
    ref = grads_of(lambda *a: ref_adaln(*a, norm="layer"), leaves(x, sc), go)
    exact = grads_of(lambda *a: ref_adaln(*a, norm="layer"), leaves(x.double(), sc.double()), go.double())
    assert_grad_accuracy(ours, ref, exact, torch.float32, "long rows", slack=64.0)


# ---- grad layouts, reuse, no mutation ---------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_grad_layouts_retain_graph_no_mutation(device):
    b, s, d = 2, 6, 64
    x, sc, sh, w = leaves(torch.randn(b, s, d, device=device), 0.5 * torch.randn(b, 1, d, device=device),
                          torch.randn(b, 1, d, device=device), 1 + torch.randn(d, device=device))
    y, gate = leaves(torch.randn(b, s, d, device=device), torch.randn(b, 1, d, device=device))
    snap = [t.detach().clone() for t in (x, sc, sh, w, y, gate)]
    n = kernel.adaln(x, sc, sh, w)
    out = kernel.gated_residual(x, n * y, gate)
    inputs = (x, sc, sh, w, y, gate)
    base = torch.randn(b, s, 2 * d, device=device)
    layouts = {
        "contiguous": base[..., :d].contiguous(),
        "slice": base[..., d:],
        "transposed": torch.randn(s, b, d, device=device).transpose(0, 1),
        "expanded": torch.randn(1, 1, d, device=device).expand(b, s, d),
    }
    for name, go in layouts.items():
        go_snap = go.clone()
        g1 = torch.autograd.grad(out, inputs, go, retain_graph=True)
        g2 = torch.autograd.grad(out, inputs, go, retain_graph=True)
        gc = torch.autograd.grad(out, inputs, go.contiguous(), retain_graph=True)
        for a, bb, c in zip(g1, g2, gc):
            assert torch.equal(a, bb), name
            torch.testing.assert_close(a, c, rtol=1e-5, atol=1e-5)
        assert torch.equal(go, go_snap), name
    for t, t0 in zip(inputs, snap):
        assert torch.equal(t.detach(), t0)


@pytest.mark.parametrize("device", DEVICES)
def test_parameter_grads_deterministic(device):
    x = torch.randn(4, 300, 256, device=device)
    sc, w = 0.5 * torch.randn(4, 1, 256, device=device), torch.randn(256, device=device)
    g = torch.randn_like(x)
    r1 = kernel.ops.adaln_backward(g, x, sc, sc, w, EPS, 0, [True] * 4)
    r2 = kernel.ops.adaln_backward(g, x, sc, sc, w, EPS, 0, [True] * 4)
    for a, b in zip(r1, r2):
        assert torch.equal(a, b)


def test_out_and_inplace_paths_refuse_grad():
    dev = "cuda" if HAS_GPU else "cpu"
    x = torch.randn(2, 4, 16, requires_grad=True, device=dev)
    s = torch.randn(2, 1, 16, device=dev)
    with pytest.raises(RuntimeError, match="inference-only"):
        kernel.adaln(x, s, out=torch.empty(2, 4, 16, device=dev))
    with pytest.raises(RuntimeError, match="inference-only"):
        kernel.gated_residual(x, x, s, out=torch.empty(2, 4, 16, device=dev))
    with pytest.raises(RuntimeError, match="inference-only"):
        kernel.gated_residual(torch.randn(2, 4, 16, device=dev), x, s, inplace=True)
    with torch.no_grad():
        kernel.gated_residual(torch.randn(2, 4, 16, device=dev), x, s, inplace=True)


def test_unused_inputs_and_none_grads():
    dev = "cuda" if HAS_GPU else "cpu"
    x = torch.randn(2, 4, 16, requires_grad=True, device=dev)
    s = torch.randn(2, 1, 16, device=dev)  # no grad
    out = kernel.adaln(x, s, torch.randn(16, device=dev), None)
    (dx,) = torch.autograd.grad(out.sum(), [x])
    assert dx.shape == x.shape
    y = torch.randn(2, 4, 16, device=dev)
    g = torch.randn(2, 1, 16, requires_grad=True, device=dev)
    out = kernel.gated_residual(x, y, g)
    dg, = torch.autograd.grad(out.sum(), [g])
    torch.testing.assert_close(dg, y.sum(1, keepdim=True), rtol=1e-5, atol=1e-5)


# ---- torch.compile ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_compile_forward_backward(device):
    def loss_fn(h, temb, table, y, w):
        b = h.size(0)
        shift, scale, gate = (table[None, None] + temb.reshape(b, -1, 3, h.size(-1))).unbind(2)
        n = kernel.adaln(h, scale, shift, w)
        h2 = kernel.gated_residual(h, n * y, gate)
        return (kernel.adaln(h2, scale, None, None, norm="layer") ** 2).mean()

    b, s, d = 2, 17, 128
    args = [torch.randn(b, s, d, device=device), 0.1 * torch.randn(b, 1, 3 * d, device=device),
            0.1 * torch.randn(3, d, device=device), torch.randn(b, s, d, device=device),
            1 + 0.1 * torch.randn(d, device=device)]
    eager_in = leaves(*args)
    comp_in = leaves(*args)
    eager = torch.autograd.grad(loss_fn(*eager_in), eager_in)
    torch._dynamo.reset()
    compiled = torch.compile(loss_fn, fullgraph=True)
    got = torch.autograd.grad(compiled(*comp_in), comp_in)
    for a, e in zip(got, eager):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)


# ---- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_backward_bad_inputs_name_the_argument(device):
    x = torch.randn(2, 4, 64, device=device)
    s = torch.randn(2, 1, 64, device=device)
    g = torch.randn(2, 4, 64, device=device)
    m4 = [True] * 4
    ab = kernel.ops.adaln_backward
    gb = kernel.ops.gated_residual_backward
    cases = [
        (lambda: ab(g[:, :3], x, s, None, None, EPS, 0, m4), r"grad must have x's shape"),
        (lambda: ab(g.to(torch.int32), x, s, None, None, EPS, 0, m4), "grad must be float32"),
        (lambda: ab(g, x, torch.randn(3, 1, 64, device=device), None, None, EPS, 0, m4), "scale must broadcast"),
        (lambda: ab(g, x, s, torch.randn(2, 5, 64, device=device), None, EPS, 0, m4), "shift must broadcast"),
        (lambda: ab(g, x, s, None, torch.randn(32, device=device), EPS, 0, m4), r"weight must have shape \[64\]"),
        (lambda: ab(g, x, s, None, None, -1.0, 0, m4), "eps must be"),
        (lambda: ab(g, x, s, None, None, EPS, 3, m4), "norm must be 0"),
        (lambda: ab(g, x.to(torch.int32), s, None, None, EPS, 0, m4), "x must be float32"),
        (lambda: gb(g, torch.randn(2, 4, 63, device=device), s, [True, True]), "y must broadcast"),
        (lambda: gb(g, g, torch.randn(4, 4, 64, device=device), [True, True]), "gate must broadcast"),
        (lambda: gb(g, g.to(torch.int32), s, [True, True]), "y must be float32"),
    ]
    if device == "cuda":
        cases.append((lambda: ab(g.double(), x, s, None, None, EPS, 0, m4), "float64 is supported on the CPU only"))
        cases.append((lambda: gb(g, g, s.double(), [True, True]), "float64 is supported on the CPU only"))
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()


# ---- GPU only --------------------------------------------------------------------------


@requires_gpu
@pytest.mark.parametrize("per_token", [False, True])
def test_gpu_ltx_shape_bf16(per_token):
    b, s, d = 2, 1024, 2048
    x = torch.randn(b, s, d, device="cuda").to(torch.bfloat16)
    shp = (b, s, d) if per_token else (b, 1, d)
    sc = (0.5 * torch.randn(shp, device="cuda")).to(torch.bfloat16)
    sh = torch.randn(shp, device="cuda").to(torch.bfloat16)
    go = torch.randn(b, s, d, device="cuda").to(torch.bfloat16)
    ours = grads_of(kernel.adaln, leaves(x, sc, sh), go)
    ref = grads_of(ref_adaln, leaves(x, sc, sh), go)
    exact = grads_of(ref_adaln, leaves(x.double(), sc.double(), sh.double()), go.double())
    assert_grad_accuracy(ours, ref, exact, torch.bfloat16, "ltx shape")
