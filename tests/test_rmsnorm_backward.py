"""rms_norm backward: gradcheck (float64, CPU), opcheck, gradients against autograd of the
modules the forward reproduces, grad layouts, torch.compile, bad input."""

import pytest
import torch

from .util import DEVICES, DTYPES, kernel, requires_cpu_variant

pytestmark = pytest.mark.kernels_ci

SEMANTICS = ["diffusers", "torch", "llama"]


def ref_forward(x, w, eps, semantics):
    """The module expressions the forward tests use, differentiable."""
    if semantics == "diffusers":
        from diffusers.models.normalization import RMSNorm

        m = RMSNorm(x.shape[-1], eps=eps, elementwise_affine=w is not None).to(x.device)
        if w is None:
            return m(x)
        return torch.func.functional_call(m, {"weight": w}, (x,))
    if semantics == "torch":
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)
    # LlamaRMSNorm-style
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    h = h.to(x.dtype)
    return h if w is None else w * h


def grads(fn, x, w, g):
    x = x.detach().requires_grad_(True)
    w = None if w is None else w.detach().requires_grad_(True)
    out = fn(x, w)
    inputs = [x] if w is None else [x, w]
    return torch.autograd.grad(out, inputs, g.to(out.dtype))


# ---- gradcheck in float64 on the CPU ------------------------------------------------


@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("with_weight", [True, False])
@pytest.mark.parametrize("shape", [(3, 8), (2, 3, 7)])
@requires_cpu_variant
def test_gradcheck_cpu_float64(semantics, with_weight, shape):
    x = torch.randn(*shape, dtype=torch.double, requires_grad=True)
    w = (1 + 0.5 * torch.randn(shape[-1], dtype=torch.double)).requires_grad_(True)
    if with_weight:
        f = lambda x, w: kernel.rmsnorm(x, w, 1e-5, semantics=semantics)  # noqa: E731
        torch.autograd.gradcheck(f, (x, w))
    else:
        torch.autograd.gradcheck(lambda x: kernel.rmsnorm(x, None, 1e-5, semantics=semantics), (x,))


@requires_cpu_variant
def test_gradcheck_strided_rows_cpu_float64():
    base = torch.randn(4, 3 * 8, dtype=torch.double, requires_grad=True)
    w = torch.randn(8, dtype=torch.double, requires_grad=True)
    torch.autograd.gradcheck(lambda b, w: kernel.rmsnorm(b[:, 8:16], w, 1e-6), (base, w))


# ---- opcheck -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    x = torch.randn(4, 6, 32, device=device, requires_grad=True)
    w = torch.randn(32, device=device, requires_grad=True)
    for sem in range(3):
        torch.library.opcheck(kernel.ops.rms_norm.default, (x, w, 1e-6, sem))
    torch.library.opcheck(kernel.ops.rms_norm.default, (x, None, 1e-6, 0))
    g = torch.randn(4, 6, 32, device=device)
    for wg in (True, False):
        torch.library.opcheck(kernel.ops.rms_norm_backward.default, (g, x.detach(), w.detach(), 1e-6, wg))
    torch.library.opcheck(kernel.ops.rms_norm_backward.default, (g, x.detach(), None, 1e-6, True))


# ---- against autograd of the reference modules --------------------------------------


def max_err(a, ref64):
    return float((a.double().cpu() - ref64.cpu()).abs().max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("semantics", SEMANTICS)
@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("w_dtype", ["same", torch.float32, None])
@pytest.mark.parametrize("d", [64, 1000, 2048])
def test_grads_match_reference(device, semantics, x_dtype, w_dtype, d):
    w_dtype = x_dtype if w_dtype == "same" else w_dtype
    torch.manual_seed(d)
    x = torch.randn(6, 5, d, device=device).mul(2).to(x_dtype)
    w = None if w_dtype is None else (1 + 0.5 * torch.randn(d, device=device)).to(w_dtype)
    g = torch.randn(6, 5, d, device=device)
    eps = 1e-6
    ours = grads(lambda x, w: kernel.rmsnorm(x, w, eps, semantics=semantics), x, w, g)
    ref = grads(lambda x, w: ref_forward(x, w, eps, semantics), x, w, g)
    x64, w64 = x.double(), None if w is None else w.double()
    g64 = g.to(ref_forward(x, w, eps, semantics).dtype).double()
    exact = grads(lambda x, w: ref_forward(x, w, eps, "torch"), x64, w64, g64)
    for name, o, r, e in zip(["dx", "dweight"], ours, ref, exact):
        assert o.dtype == r.dtype and o.shape == r.shape, name
        mag = float(e.abs().max())
        # fp32 math with one final rounding; dweight sums rows in fp32
        bound = 4 * max_err(r, e) + 8 * torch.finfo(o.dtype).eps * mag + 1e-30
        assert max_err(o, e) <= bound, f"{name}: {max_err(o, e):.3e} > {bound:.3e} (ref {max_err(r, e):.3e})"


# ---- grad layouts, reuse, no mutation -----------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_noncontiguous_and_expanded_grad(device):
    x = torch.randn(4, 7, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device, requires_grad=True)
    y = kernel.rmsnorm(x, w, 1e-6, semantics="torch")
    big = torch.randn(4, 7, 128, device=device)
    cases = {
        "slice": big[..., ::2],
        "narrow": big[..., 32:96],
        "transposed": torch.randn(64, 7, 4, device=device).permute(2, 1, 0),
        "expanded": torch.randn(64, device=device).expand(4, 7, 64),
        "expanded_rows": torch.randn(1, 7, 64, device=device).expand(4, 7, 64),
    }
    for name, g in cases.items():
        keep = g.clone()
        dx, dw = torch.autograd.grad(y, (x, w), g, retain_graph=True)
        dx2, dw2 = torch.autograd.grad(y, (x, w), g.contiguous(), retain_graph=True)
        assert torch.equal(dx, dx2) and torch.equal(dw, dw2), name
        assert torch.equal(g, keep), name


@pytest.mark.parametrize("device", DEVICES)
def test_grad_reused_is_deterministic_and_inputs_untouched(device):
    x = torch.randn(300, 256, device=device, dtype=torch.bfloat16, requires_grad=True)
    w = torch.randn(256, device=device, dtype=torch.bfloat16, requires_grad=True)
    xc, wc = x.detach().clone(), w.detach().clone()
    y = kernel.rmsnorm(x, w, 1e-6)
    g = torch.randn_like(y)
    gc = g.clone()
    a = torch.autograd.grad(y, (x, w), g, retain_graph=True)
    b = torch.autograd.grad(y, (x, w), g)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
    assert torch.equal(g, gc) and torch.equal(x.detach(), xc) and torch.equal(w.detach(), wc)


# ---- torch.compile ------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_compile_forward_backward_matches_eager(device):
    def step(x, w):
        return (kernel.rmsnorm(x, w, 1e-6, semantics="torch").float() ** 2).sum()

    x = torch.randn(4, 8, 128, device=device, requires_grad=True)
    w = torch.randn(128, device=device, requires_grad=True)
    eager = torch.autograd.grad(step(x, w), (x, w))
    compiled = torch.compile(step, fullgraph=True)
    got = torch.autograd.grad(compiled(x, w), (x, w))
    for e, c in zip(eager, got):
        torch.testing.assert_close(c, e, rtol=1e-5, atol=1e-5)


# ---- inference-only out= and bad input --------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_out_path_is_inference_only(device):
    x = torch.randn(2, 16, device=device, requires_grad=True)
    with pytest.raises(RuntimeError, match="inference-only"):
        kernel.rmsnorm(x, None, out=torch.empty(2, 16, device=device))
    with torch.no_grad():
        kernel.rmsnorm(x, None, out=torch.empty(2, 16, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_backward_bad_inputs_name_the_argument(device):
    f = kernel.ops.rms_norm_backward
    x = torch.randn(4, 32, device=device)
    g = torch.randn(4, 32, device=device)
    w = torch.randn(32, device=device)
    cases = [
        (lambda: f(g[:, :16], x, w, 1e-6, True), "grad must have x's shape"),
        (lambda: f(g.to(torch.int32), x, w, 1e-6, True), "grad must be float32"),
        (lambda: f(g, x.to(torch.int32), w, 1e-6, True), "x must be float32"),
        (lambda: f(g, x, w[:16], 1e-6, True), r"weight must have shape \[32\]"),
        (lambda: f(g, x, w, -1.0, True), "eps must be"),
    ]
    if device == "cpu":
        cases.append((lambda: f(g.double(), x, w, 1e-6, True), "float64 is all-or-nothing"))
    else:
        cases.append((lambda: f(g.double(), x, w, 1e-6, True), "grad is float64"))
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()
