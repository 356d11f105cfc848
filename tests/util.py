"""Shared test helpers: the kernel loaded as users load it, devices, ulp checks."""

import json
import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
REPO_ID = "org/ltx-kernels"
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


def load_kernel(backend=None):
    """The kernel through kernels.get_kernel, redirected to this checkout's build/."""
    import kernels

    os.environ.setdefault("LOCAL_KERNELS", f"{REPO_ID}={REPO}")
    kwargs = {} if backend is None else {"backend": backend}
    return kernels.get_kernel(REPO_ID, version=1, **kwargs)


kernel = load_kernel()
BACKEND = json.loads((Path(kernel.__file__).parent / "metadata.json").read_text())["backend"]["type"]
HAS_GPU = BACKEND == "cuda" and torch.cuda.is_available()

DEVICES = [
    pytest.param(
        "cpu", marks=pytest.mark.skipif(BACKEND != "cpu", reason=f"the loaded variant is {BACKEND}")
    ),
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(
            not HAS_GPU, reason=f"needs a CUDA GPU and the CUDA variant (loaded: {BACKEND})"
        ),
    ),
]

requires_gpu = pytest.mark.skipif(not HAS_GPU, reason="needs a CUDA GPU and the CUDA variant")
# float64 gradchecks and other CPU-tensor tests: the CUDA variant has no CPU kernels (a
# kernel-builder variant is one backend), so on the GPU machine they skip; CI runs them.
requires_cpu_variant = pytest.mark.skipif(
    BACKEND != "cpu", reason=f"needs CPU tensors on the CPU variant (loaded: {BACKEND})"
)


def _ordered_bits(t: torch.Tensor) -> torch.Tensor:
    """Float bit patterns mapped to integers that are ordered like the floats."""
    if t.dtype in (torch.float16, torch.bfloat16):
        i = t.view(torch.int16).to(torch.int64)
        mag = i & 0x7FFF
    else:
        i = t.to(torch.float32).view(torch.int32).to(torch.int64)
        mag = i & 0x7FFFFFFF
    return torch.where(i < 0, -mag, mag)


def ulp_diff(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Elementwise distance in units in the last place of a's dtype."""
    assert a.dtype == b.dtype, (a.dtype, b.dtype)
    assert a.shape == b.shape, (a.shape, b.shape)
    d = (_ordered_bits(a) - _ordered_bits(b)).abs()
    nan = a.isnan() | b.isnan()
    return torch.where(nan, torch.full_like(d, 1 << 40), d)


def assert_ulp(out, ref, max_ulp=1, max_mismatch_frac=1.0, what="", ignore_frac=0.0):
    """out equals ref within max_ulp everywhere but a fraction ignore_frac of elements
    (and differs at all in at most max_mismatch_frac of them)."""
    assert out.dtype == ref.dtype, f"{what}: dtype {out.dtype} != {ref.dtype}"
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    if out.numel() == 0:
        return
    d = ulp_diff(out.cpu(), ref.cpu())
    frac = float((d > 0).float().mean())
    over = float((d > max_ulp).float().mean())
    worst = int(d.max()) if over > ignore_frac else max_ulp
    assert worst <= max_ulp, f"{what}: max ulp diff {worst} > {max_ulp} (mismatch fraction {frac:.2e})"
    assert frac <= max_mismatch_frac, f"{what}: {frac:.2e} of elements differ (> {max_mismatch_frac})"


def unit_roundoff(dtype) -> float:
    return torch.finfo(dtype).eps / 2


def subnormal_spacing(dtype) -> float:
    fi = torch.finfo(dtype)
    return fi.smallest_normal * fi.eps


def assert_near_exact(out, ref64, rel, what="", atol_dtype=None, atol_scale=1.0):
    """|out - ref64| <= rel * |ref64| + atol elementwise; atol is the subnormal spacing of
    out's dtype and of atol_dtype (an intermediate rounding dtype), times atol_scale."""
    assert out.shape == ref64.shape, what
    o = out.double().cpu()
    r = ref64.double().cpu()
    atol = subnormal_spacing(out.dtype)
    if atol_dtype is not None:
        atol = max(atol, subnormal_spacing(atol_dtype))
    atol *= atol_scale
    err = (o - r).abs()
    bound = rel * r.abs() + atol
    bad = ~(err <= bound)
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} elements exceed the bound; worst rel err "
        f"{float((err / (r.abs() + atol)).max()):.3e} vs allowed {rel:.3e}"
    )


def misaligned(shape, dtype, device, offset):
    """A tensor of `shape` whose data starts `offset` elements into its storage."""
    n = 1
    for s in shape:
        n *= s
    base = torch.randn(n + offset, device=device).to(dtype)
    return base[offset:].view(shape)


def replay_captured(fn, before_replay=None):
    """fn() warmed up on a side stream, captured into a CUDA graph and replayed once (after
    before_replay(), e.g. poisoning buffers the graph writes). Returns (what the capture
    returned, now filled by the replay; the graph, which the caller keeps while it reads them)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = fn()
    if before_replay is not None:
        before_replay()
    graph.replay()
    torch.cuda.synchronize()
    return out, graph
