"""The forward ops' Autograd kernels are C++ (torch-ext/ops/autograd.cpp).

A Python autograd kernel (torch.library.register_autograd) runs on every call outside
torch.inference_mode(), grad or no grad: ~9 µs of host time per call on CI's CPU, more than
a small-shape kernel takes on the GPU. These tests pin the C++ path: a call runs no Python
below the op's own __call__, with grad mode on or off, and still records a graph (a C++
node) when an input requires grad. The gradients themselves are checked per family in
tests/test_*_backward.py.
"""

import sys

import pytest
import torch

from .test_rope_backward import half_case, inter_case
from .util import DEVICES, kernel

pytestmark = pytest.mark.kernels_ci


def cases(device):
    """(op name, args, indices of the differentiable tensor args) for each op with autograd."""
    t = lambda *shape: torch.randn(*shape, device=device)  # noqa: E731
    x, c, s = inter_case((2, 5, 8), (5, 8), device=device, dtype=torch.float32)
    q, k, hc, hs = half_case((2, 4, 5, 12), 2, 8, 1, 2, device=device, dtype=torch.float32)
    return [
        ("rms_norm", (t(4, 8), t(8), 1e-6, 0), (0, 1)),
        ("gelu", (t(4, 8),), (0,)),
        ("gelu_tanh", (t(4, 8),), (0,)),
        ("geglu", (t(4, 8), "tanh", False), (0,)),
        ("rope_interleaved", (x, c, s), (0,)),
        ("rope_interleaved_qk", (x, x.clone(), c, s), (0, 1)),
        ("rope_rotate_half", (q, k, hc, hs, 1), (0, 1)),
        ("rope_rotate_half_single", (k, hc, hs, 1), (0,)),
        ("adaln", (t(2, 3, 8), t(2, 1, 8), t(2, 1, 8), None, 1e-6, 0), (0, 1, 2)),
        ("gated_residual", (t(2, 3, 8), t(2, 3, 8), t(2, 1, 8)), (0, 1, 2)),
        ("rmsnorm_rope_qk", (t(2, 5, 8), t(2, 5, 8), t(8), t(8), t(2, 5, 8), t(2, 5, 8), 1e-6), (0, 1, 2, 3)),
    ]


def python_frames_below(fn):
    """Files of the Python functions that run while fn() runs, minus fn's own call."""
    seen = []

    def profile(frame, event, arg):
        if event == "call":
            seen.append(frame.f_code.co_filename)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    # The first entries are the OpOverload's own __call__ (torch/_ops.py) and the lambda.
    return [f for f in seen if not f.endswith(("torch/_ops.py", __file__))]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("grad_mode", [True, False], ids=["grad", "no_grad"])
def test_no_python_below_the_op(device, grad_mode):
    for name, args, _ in cases(device):
        op = getattr(kernel.ops, name).default
        with torch.set_grad_enabled(grad_mode):
            frames = python_frames_below(lambda: op(*args))
        assert frames == [], f"{name}: Python ran below the op call: {frames}"


@pytest.mark.parametrize("device", DEVICES)
def test_graph_recorded_when_an_input_requires_grad(device):
    for name, args, diff in cases(device):
        for i in diff:
            a = list(args)
            a[i] = a[i].clone().requires_grad_(True)
            out = getattr(kernel.ops, name).default(*a)
            outs = out if isinstance(out, tuple) else (out,)
            assert all(o.grad_fn is not None for o in outs), f"{name}: no graph for input {i}"
            (g,) = torch.autograd.grad(sum(o.float().sum() for o in outs), a[i])
            assert g.shape == a[i].shape and torch.isfinite(g).all(), f"{name}: bad grad for input {i}"
        with torch.no_grad():
            a = [v.clone().requires_grad_(True) if j in diff else v for j, v in enumerate(args)]
            out = getattr(kernel.ops, name).default(*a)
        outs = out if isinstance(out, tuple) else (out,)
        assert all(o.grad_fn is None and not o.requires_grad for o in outs), f"{name}: graph under no_grad"


@pytest.mark.parametrize("device", DEVICES)
def test_compiled_autograd_matches_eager(device):
    """Compiled autograd (a backward inside a torch.compile'd function with
    torch._dynamo.config.compiled_autograd) traces through the C++ Functions' backward and
    gives eager's grads."""
    from torch._dynamo.utils import counters

    x = torch.randn(4, 16, device=device, requires_grad=True)
    w = torch.randn(16, device=device, requires_grad=True)
    cos, sin = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)

    def step(x, w):
        y = kernel.gelu_tanh(kernel.rmsnorm(x, w, 1e-6))
        q, k = kernel.rope_interleaved_qk(y.view(1, 4, 16), (2 * y).view(1, 4, 16), cos, sin)
        return (q.float() ** 2).sum() + k.sum()

    def train(x, w):
        step(x, w).backward()

    step(x, w).backward()
    want = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    torch._dynamo.reset()
    counters.clear()
    # config.patch, not monkeypatch: compiled_autograd is an alias in the config module, and
    # monkeypatch's restore left every later torch.compile without it (AttributeError).
    try:
        with torch._dynamo.config.patch(compiled_autograd=True):
            torch.compile(train)(x, w)
    finally:
        torch._dynamo.reset()
    assert counters["compiled_autograd"]["captures"] >= 1, dict(counters["compiled_autograd"])
    torch.testing.assert_close(x.grad, want[0])
    torch.testing.assert_close(w.grad, want[1])
