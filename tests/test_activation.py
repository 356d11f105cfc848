"""gelu / gelu_tanh / geglu against float64 and against the real modules they replace.

Regimes (shared/docs/op-semantics.md section 2): F.gelu is fp32 math rounded once;
eager GEGLU (`h * F.gelu(g)`) rounds the GELU to x's dtype and then the product.
On CUDA the kernels use ATen's expressions and must be bit-identical. On the CPU,
ATen's GELU uses vectorised erf/tanh approximations, so there the kernels match
within one ulp of the output dtype (and the gated form within the ulp the rounded
GELU can move the product by).
"""

import math

import pytest
import torch
import torch.nn.functional as F

from .util import (
    DEVICES,
    DTYPES,
    HAS_GPU,
    assert_ulp,
    kernel,
    misaligned,
    requires_gpu,
    subnormal_spacing,
    ulp_diff,
    unit_roundoff,
)

pytestmark = pytest.mark.kernels_ci

APPROX = ["none", "tanh"]
DIMS = [1, 7, 63, 127, 768, 769, 1536, 2048, 3420, 3584, 5120, 8192, 8193]


def gelu_fn(approximate):
    return kernel.gelu_tanh if approximate == "tanh" else kernel.gelu


def gelu64(x, approximate):
    x = x.double()
    if approximate == "tanh":
        return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def eager_geglu(x, approximate, gate_first):
    a, b = x.chunk(2, dim=-1)
    if gate_first:
        return F.gelu(a, approximate=approximate) * b
    return a * F.gelu(b, approximate=approximate)


def inputs(shape, dtype, device, scale=3.0):
    x = torch.randn(shape, device=device) * scale
    return x.to(dtype)


def assert_bits_equal(out, expected, what=""):
    assert out.dtype == expected.dtype and out.shape == expected.shape, what
    torch.testing.assert_close(out, expected, rtol=0, atol=0, equal_nan=True, msg=what)


def assert_matches_aten(out, expected, device, scale, what="", gated=False):
    """Bit-exact on CUDA.

    On the CPU, ATen's vectorised erf has an absolute error of up to ~4e-7 * |x| in
    GELU (measured: 1.2e-6 at x = 3.49, fp32, AVX512), far beyond one ulp where the
    output is small, and its fp16 path does not even equal the fp32 one rounded. Our
    CPU kernel uses accurate std::erf/std::tanh instead (the CUDA kernel's math), so
    there it must agree within 1 ulp (gated: 2, the rounded GELU moves the product)
    plus 5e-7 * scale, scale = |x| (gated: |gate| * |value|)."""
    assert out.dtype == expected.dtype and out.shape == expected.shape, what
    if device == "cuda":
        assert_bits_equal(out, expected, what)
        return
    if out.numel() == 0:
        return
    o, e, scale = out.double().cpu(), expected.double().cpu(), scale.double().cpu()
    special = ~e.isfinite()
    assert torch.equal(o[special].isnan(), e[special].isnan()), what
    finite = ~e.isnan()
    assert torch.equal(o[special & finite], e[special & finite]), what
    eps = torch.finfo(out.dtype).eps
    rel = 4 * eps if out.dtype == torch.float32 else (2 if gated else 1) * eps
    # ATen's CPU GELU also differs in subnormal outputs: allow the smallest normal.
    bound = rel * e.abs() + 5e-7 * scale + torch.finfo(out.dtype).tiny
    err = (o - e).abs()
    bad = ~special & ~(err <= bound)
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} elements differ beyond the CPU tolerance; worst "
        f"{float(err[bad].max()):.3e}"
    )


def geglu_scale(x):
    a, b = x.chunk(2, dim=-1)
    return a.double().abs() * b.double().abs()


def error_bound(x, ref, dtype, roundings=1):
    """|out - ref64| allowed: the rounding(s) to dtype, fp32 erf/tanh error, and the fp32
    cancellation in 1 + erf (1 + tanh) for negative x, which is ~|x| * 2^-24."""
    u = unit_roundoff(dtype)
    rel = roundings * u + 1e-6
    x = x.double().abs()
    return rel * ref.abs() + 2 * x * 2.0**-24 + roundings * subnormal_spacing(dtype)


def assert_close_to64(out, ref, x_bound, dtype, roundings=1, what=""):
    o = out.double().cpu()
    r = ref.double().cpu()
    bound = error_bound(x_bound.cpu(), r, dtype, roundings)
    err = (o - r).abs()
    bad = ~(err <= bound)
    assert not bool(bad.any()), (
        f"{what}: {int(bad.sum())} elements out of bound, worst err {float(err.max()):.3e}"
    )


# ---- gelu: float64 and F.gelu --------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_matches_float64_and_aten(device, d, dtype, approximate):
    x = inputs((3, 5, d), dtype, device)
    out = gelu_fn(approximate)(x)
    assert out.dtype == dtype and out.shape == x.shape and out.is_contiguous()
    assert_close_to64(out, gelu64(x, approximate), x, dtype, what=f"d={d}")
    assert_matches_aten(out, F.gelu(x, approximate=approximate), device, x.abs(), f"vs F.gelu d={d}")


def check_gelu_all_values(out, x, approximate, device, what):
    """out = gelu(x) for any x, including inf, nan and huge values.

    CUDA: bit-exact vs F.gelu. CPU: ATen's vectorised CPU GELU turns fp32 max into inf
    and inf into nan; the kernel follows the CUDA formula instead, so huge and non-finite
    inputs are checked against the float64 formula, the rest against F.gelu."""
    expected = F.gelu(x, approximate=approximate)
    if device == "cuda":
        assert_bits_equal(out, expected, what)
        return
    huge = ~(x.abs() < 1e30)
    ref = gelu64(x[huge], approximate)
    got = out[huge].double()
    assert torch.equal(got.isnan(), ref.isnan()), what
    ok = ~ref.isnan()
    assert torch.equal(got[ok], ref[ok].to(out.dtype).double()), what
    assert_matches_aten(out[~huge], expected[~huge], device, x[~huge].abs(), what)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_special_values(device, dtype, approximate):
    fi = torch.finfo(dtype)
    vals = [0.0, -0.0, 1.0, -1.0, 5.5, -5.5, 10.0, -10.0, 30.0, -30.0, fi.max, -fi.max,
            fi.tiny, -fi.tiny, fi.tiny * fi.eps, float("inf"), float("-inf"), float("nan")]
    x = torch.tensor(vals, dtype=dtype, device=device)
    check_gelu_all_values(gelu_fn(approximate)(x), x, approximate, device, "specials")
    grid = torch.linspace(-12, 12, 40001, device=device).to(dtype)
    check_gelu_all_values(gelu_fn(approximate)(grid), grid, approximate, device, "grid")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("approximate", APPROX)
def test_gelu_every_half_value(device, dtype, approximate):
    """All 65536 bit patterns of the 16-bit dtype."""
    x = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device=device).to(torch.int16).view(dtype)
    out = gelu_fn(approximate)(x)
    check_gelu_all_values(out, x, approximate, device, "all values")
    # and the fp32-computed value rounded once (the regime measured on H200)
    once = F.gelu(x.float(), approximate=approximate).to(dtype)
    fin = x.isfinite() & (x.abs() < 1e30)
    assert_matches_aten(out[fin], once[fin], device, x[fin].abs(), "vs fp32 gelu rounded once")


@requires_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("table", ["", "compact", "full", "0", "fast"],
                         ids=["table", "compact_table", "full_table", "computed", "fast_tanh"])
def test_table_path_every_half_value(monkeypatch, dtype, approximate, table):
    """GELU calls large enough for the lookup-table kernel (act_table_kernel: >= 2**22
    elements of a 16-bit dtype; by default bf16 the compact table, 2^-16 <= |x| < 8, every
    other value computed, and fp16 the full one; computed instead on GPUs of little DRAM
    bandwidth per SM, e.g. the H100), with LTX_KERNELS_GELU_TABLE=compact / full
    either table in both dtypes and with LTX_KERNELS_GELU_TABLE=0 the same calls computed:
    every 16-bit pattern many times over, bit-exact vs eager; one long row with a scalar
    tail, a strided row layout; GEGLU beside them (LTX_KERNELS_GEGLU_TABLE=compact in the
    default case: its table candidate; =full in the full-table case, which GEGLU has no
    kernel for, so it must compute). "fast": LTX_KERNELS_GELU_FAST=1, GELU-tanh and GEGLU-tanh
    on ex2 / rcp.approx with the per-element rounding check (erf: no effect)."""
    if table == "fast":
        monkeypatch.setenv("LTX_KERNELS_GELU_FAST", "1")
    elif table:
        monkeypatch.setenv("LTX_KERNELS_GELU_TABLE", table)
    if table in ("", "full"):
        monkeypatch.setenv("LTX_KERNELS_GEGLU_TABLE", "compact" if not table else "full")
    pats = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16)
    many = pats.repeat(66)[torch.randperm(66 << 16, device="cuda")]  # 4 325 376 patterns
    flat = many[: (65 << 16) - 3].view(dtype)  # 3 short of a whole vector: a 5-element tail
    out = torch.full_like(flat, float("nan"))
    gelu_fn(approximate)(flat, out=out)
    assert_bits_equal(out, F.gelu(flat, approximate=approximate), "one long row")
    rows = torch.empty(1040, 4104, dtype=dtype, device="cuda")[:, :4096]  # row stride 4104
    rows.view(torch.int16).copy_(many[: 1040 * 4096].view(1040, 4096))
    assert_bits_equal(gelu_fn(approximate)(rows), F.gelu(rows, approximate=approximate), "strided rows")
    x = torch.empty(1040, 8192, dtype=dtype, device="cuda")
    x[:, :4096].view(torch.int16).copy_(many[: 1040 * 4096].view(1040, 4096))  # the gate (gate_first)
    x[:, 4096:] = torch.randn(1040, 4096, device="cuda").to(dtype)
    for gate_first in (True, False):
        assert_bits_equal(kernel.geglu(x, approximate, gate_first=gate_first),
                          eager_geglu(x, approximate, gate_first), f"geglu gate_first={gate_first}")


@requires_gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("form", [{}, {"LTX_KERNELS_ACT_GRID": "walk"}, {"LTX_KERNELS_ACT_GRID": "rows"},
                                  {"LTX_KERNELS_GEGLU_PACKED": "0"}, {"LTX_KERNELS_GELU_FAST": "1"},
                                  {"LTX_KERNELS_GELU_FAST": "1", "LTX_KERNELS_ACT_GRID": "walk"}],
                         ids=["default", "walk", "block_per_row_256", "fp32_product", "fast_tanh",
                              "fast_tanh_walk"])
def test_geglu_launch_forms(monkeypatch, dtype, approximate, form):
    """GEGLU's computed kernel (2 vectors per operand per thread) on its default grid (a
    block per row group, at most 128 threads) and the others (LTX_KERNELS_ACT_GRID=walk: 32
    blocks per SM walking down the rows, GELU's; =rows: a block per row group of up to 256),
    with its product on packed pairs (the default) and in fp32 (LTX_KERNELS_GEGLU_PACKED=0):
    every 16-bit gate pattern, rows whose tile column ends part-way (d = 8192 + 8, 1000),
    strided rows, a row count that is not a multiple of the grid's, both halves' orders; and
    GELU computed (no table) on the strided rows; bit-exact vs eager. fast_tanh: the same
    with LTX_KERNELS_GELU_FAST=1 (tanh on ex2 / rcp.approx, checked per element)."""
    for name, val in form.items():
        monkeypatch.setenv(name, val)
    pats = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32, device="cuda").to(torch.int16)
    for rows, d, pad in [(1031, 8192, 0), (257, 8200, 0), (4099, 1000, 0), (333, 2048, 24)]:
        x = torch.empty(rows, 2 * d + pad, dtype=dtype, device="cuda")[:, : 2 * d]
        x.view(torch.int16).copy_(pats[torch.randint(0, 1 << 16, (rows, 2 * d), device="cuda")])
        x[:, d:] = torch.randn(rows, d, device="cuda").to(dtype)  # one half finite and tame
        for gate_first in (True, False):
            out = torch.full((rows, d), float("nan"), dtype=dtype, device="cuda")
            kernel.geglu(x, approximate, gate_first=gate_first, out=out)
            assert_bits_equal(out, eager_geglu(x, approximate, gate_first), f"{rows}x{d} gate_first={gate_first}")
        monkeypatch.setenv("LTX_KERNELS_GELU_TABLE", "0")
        assert_bits_equal(gelu_fn(approximate)(x), F.gelu(x, approximate=approximate), f"gelu {rows}x{2 * d}")
        monkeypatch.delenv("LTX_KERNELS_GELU_TABLE")


# ---- geglu: float64, eager, modules ----------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", APPROX)
@pytest.mark.parametrize("gate_first", [False, True])
def test_geglu_matches_float64_and_eager(device, d, dtype, approximate, gate_first):
    x = inputs((2, 3, 2 * d), dtype, device)
    out = kernel.geglu(x, approximate, gate_first=gate_first)
    assert out.dtype == dtype and out.shape == (2, 3, d) and out.is_contiguous()
    a, b = x.chunk(2, dim=-1)
    gate, value = (a, b) if gate_first else (b, a)
    ref = value.double() * gelu64(gate, approximate)
    # the GELU rounding is scaled by |value|: bound it with |value| * |gate| terms
    assert_close_to64(out, ref, value.double().abs() * gate.double().abs().clamp(min=1), dtype, roundings=2,
                      what=f"d={d}")
    assert_matches_aten(
        out, eager_geglu(x, approximate, gate_first), device, geglu_scale(x), f"vs eager d={d}", gated=True
    )


def test_geglu_rounds_twice_like_eager():
    """The two-rounding regime is what eager does, and differs from round-once."""
    device = "cuda" if HAS_GPU else "cpu"
    x = inputs((64, 2 * 1024), torch.bfloat16, device)
    out = kernel.geglu(x)
    h, g = x.chunk(2, -1)
    once = (h.float() * F.gelu(g.float())).to(torch.bfloat16)
    assert float((out != once).float().mean()) > 0.01  # two regimes really differ ...
    tame = g.abs() < 3  # (where 1 + erf does not cancel: CPU's F.gelu is inexact there)
    assert_ulp(out[tame], once[tame], max_ulp=2, what="vs round-once")  # ... but stay close
    assert_matches_aten(out, h * F.gelu(g), device, geglu_scale(x), "vs eager", gated=True)


def diffusers_geglu(d):
    from diffusers.models.activations import GEGLU

    m = GEGLU(4, d)
    m.proj = torch.nn.Identity()  # feed the already projected tensor
    return m


def diffusers_gelu(approximate):
    from diffusers.models.activations import GELU

    m = GELU(4, 4, approximate=approximate)
    m.proj = torch.nn.Identity()
    return m


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [320, 1280, 3420])
def test_vs_diffusers_geglu(device, dtype, d):
    x = inputs((2, 77, 2 * d), dtype, device)
    with torch.no_grad():
        expected = diffusers_geglu(d)(x)
    assert_matches_aten(kernel.geglu(x), expected, device, geglu_scale(x), "diffusers GEGLU", gated=True)
    # a real fused projection output (bias, row-strided view handled without copy)
    proj = torch.nn.Linear(64, 2 * d).to(device=device, dtype=dtype)
    y = proj(inputs((2, 9, 64), dtype, device, 1.0)).detach()
    with torch.no_grad():
        expected = diffusers_geglu(d)(y)
    assert_matches_aten(kernel.geglu(y), expected, device, geglu_scale(y), "GEGLU after proj", gated=True)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("approximate", APPROX)
def test_vs_diffusers_gelu(device, dtype, approximate):
    """LTX's FeedForward activation is diffusers GELU(approximate="tanh")."""
    x = inputs((2, 33, 2048), dtype, device)
    with torch.no_grad():
        expected = diffusers_gelu(approximate)(x)
    assert_matches_aten(gelu_fn(approximate)(x), expected, device, x.abs(), "diffusers GELU")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_vs_transformers_act2fn(device, dtype):
    from transformers.activations import ACT2FN, GELUTanh

    x = inputs((3, 17, 1536), dtype, device)
    with torch.no_grad():
        assert_matches_aten(kernel.gelu_tanh(x), GELUTanh()(x), device, x.abs(), "GELUTanh")
        assert_matches_aten(kernel.gelu_tanh(x), ACT2FN["gelu_pytorch_tanh"](x), device, x.abs(), "pytorch_tanh")
        assert_matches_aten(kernel.gelu(x), ACT2FN["gelu"](x), device, x.abs(), "ACT2FN gelu")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_vs_gemma_gated_mlp(device, dtype):
    """Gemma: down(act(gate_proj(x)) * up_proj(x)) with act = gelu_pytorch_tanh, eager."""
    from transformers.activations import ACT2FN

    act = ACT2FN["gelu_pytorch_tanh"]
    hidden, inter = 64, 640
    gate_proj = torch.nn.Linear(hidden, inter, bias=False).to(device=device, dtype=dtype)
    up_proj = torch.nn.Linear(hidden, inter, bias=False).to(device=device, dtype=dtype)
    x = inputs((2, 11, hidden), dtype, device, 1.0)
    with torch.no_grad():
        gate, up = gate_proj(x), up_proj(x)
        expected = act(gate) * up
    fused = torch.cat([gate, up], dim=-1)
    scale = geglu_scale(fused)
    assert_matches_aten(kernel.geglu(fused, "tanh", gate_first=True), expected, device, scale, "Gemma", gated=True)
    out = torch.empty_like(expected)
    assert kernel.gelu_tanh_and_mul(out, fused) is out
    assert_matches_aten(out, expected, device, scale, "gelu_tanh_and_mul", gated=True)
    with torch.no_grad():
        expected_erf = F.gelu(gate) * up
    assert_matches_aten(kernel.gelu_and_mul(out, fused), expected_erf, device, scale, "gelu_and_mul", gated=True)


# ---- shapes -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape", [(0, 64), (0, 0), (2, 0, 64), (1, 64), (64,), (2, 3, 4, 5, 96), (3, 1, 5, 2)]
)
def test_shapes(device, shape):
    x = inputs(shape, torch.bfloat16, device)
    for approximate in APPROX:
        out = gelu_fn(approximate)(x)
        assert out.shape == x.shape and out.dtype == x.dtype
        assert_matches_aten(out, F.gelu(x, approximate=approximate), device, x.abs(), str(shape))
        g = kernel.geglu(x, approximate)
        assert g.shape == (*shape[:-1], shape[-1] // 2)
        assert_matches_aten(g, eager_geglu(x, approximate, False), device, geglu_scale(x), str(shape), gated=True)


@pytest.mark.parametrize("device", DEVICES)
def test_zero_dim_gelu(device):
    x = torch.tensor(0.75, device=device, dtype=torch.float16)
    out = kernel.gelu_tanh(x)
    assert out.shape == () and out.dtype == torch.float16
    assert_matches_aten(out, F.gelu(x, approximate="tanh"), device, x.abs())
    kernel.gelu(x, out=x)
    assert_matches_aten(x, F.gelu(torch.tensor(0.75, device=device, dtype=torch.float16)), device, x.abs())


@requires_gpu
def test_many_rows_grid_stride():
    x = inputs((1_500_000, 2 * 24), torch.bfloat16, "cuda")
    assert_bits_equal(kernel.geglu(x, "tanh"), eager_geglu(x, "tanh", False))
    y = x[:, :40]  # row-strided, not dense: the 2-D path
    assert_bits_equal(kernel.gelu(y), F.gelu(y))


@requires_gpu
def test_more_than_2_to_31_elements():
    n = (1 << 31) + 8 * 1021 + 3  # odd total: vector body plus a scalar tail
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = kernel.gelu_tanh(x)
    torch.cuda.synchronize()
    for sl in (slice(0, 4096), slice(n - 5000, n), slice((1 << 31) - 100, (1 << 31) + 100)):
        assert_bits_equal(out[sl], F.gelu(x[sl], approximate="tanh"), str(sl))
    del out
    # 2-D: rows whose offsets pass 2^31 elements, second half at a misaligned offset
    d = 3420
    rows = n // (2 * d)
    assert rows * 2 * d > (1 << 31)
    xg = x[: rows * 2 * d].view(rows, 2 * d)
    outg = kernel.geglu(xg)
    for r in (0, rows // 2, rows - 1):
        assert_bits_equal(outg[r], eager_geglu(xg[r], "none", False), f"row {r}")


@requires_gpu
@pytest.mark.parametrize("d", [8192, 16384])
def test_ltx_feedforward_shapes(d):
    """LTX FF activation [2, 8064, 4*D]; GEGLU at an SDXL-like width."""
    x = inputs((2, 8064, d), torch.bfloat16, "cuda")
    assert_bits_equal(kernel.gelu_tanh(x), F.gelu(x, approximate="tanh"))
    assert_bits_equal(kernel.geglu(x), eager_geglu(x, "none", False))


# ---- layouts -----------------------------------------------------------------------


def check_gelu_layout(x, device):
    for approximate in APPROX:
        out = gelu_fn(approximate)(x)
        assert out.is_contiguous()
        assert torch.equal(out, gelu_fn(approximate)(x.contiguous()))
        assert_matches_aten(out, F.gelu(x, approximate=approximate), device, x.abs(), "layout")


def check_geglu_layout(x, device):
    for approximate in APPROX:
        for gate_first in (False, True):
            out = kernel.geglu(x, approximate, gate_first=gate_first)
            assert out.is_contiguous()
            assert torch.equal(out, kernel.geglu(x.contiguous(), approximate, gate_first=gate_first))
            expected = eager_geglu(x, approximate, gate_first)
            assert_matches_aten(out, expected, device, geglu_scale(x), "layout", gated=True)


@pytest.mark.parametrize("device", DEVICES)
def test_chunk_halves_and_fused_projection_slices(device):
    """kernels-community #106: GELU on ModernBERT's chunk(2) halves."""
    x = inputs((4, 9, 2 * 1536), torch.bfloat16, device)
    for half in x.chunk(2, dim=-1):
        check_gelu_layout(half, device)
    qkv_mlp = inputs((2, 5, 3 * 512 + 2 * 3420), torch.bfloat16, device)  # FLUX-single-like fused proj
    check_geglu_layout(qkv_mlp[..., 3 * 512:], device)  # row stride 8376, odd 16-byte offset
    check_gelu_layout(qkv_mlp[..., :512], device)
    for lead in [(6,), (2, 5), (2, 3, 4)]:
        fused = inputs((*lead, 3 * 256), torch.float16, device)
        check_geglu_layout(fused[..., 256:], device)
        check_geglu_layout(fused[..., :512], device)


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_expanded_and_strided(device):
    x = inputs((7, 3, 768), torch.bfloat16, device)
    check_gelu_layout(x.transpose(0, 1), device)  # copied
    check_gelu_layout(x[:1].expand(4, 3, 768), device)  # copied (not collapsible)
    check_gelu_layout(x[:, :1].expand(7, 5, 768), device)
    check_gelu_layout(x[:, :, ::2], device)  # strided last dim: copied
    check_gelu_layout(x.transpose(1, 2), device)
    check_geglu_layout(x.transpose(0, 1), device)
    check_geglu_layout(x[0].expand(5, 3, 768), device)
    check_geglu_layout(x[:, :, ::3], device)
    row = inputs((1, 2 * 640), torch.float32, device)
    check_geglu_layout(row.expand(12, 2 * 640), device)  # stride-0 rows, no copy


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_storage_offsets(device, offset, dtype):
    x = misaligned((5, 2048), dtype, device, offset)
    check_gelu_layout(x, device)
    out = misaligned((5, 2048), dtype, device, (offset + 3) % 8).fill_(float("nan"))
    kernel.gelu_tanh(x, out=out)
    assert torch.equal(out, kernel.gelu_tanh(x.contiguous()))
    odd = misaligned((3, 1001), dtype, device, offset)  # one long row with a scalar tail
    check_gelu_layout(odd, device)
    g = misaligned((5, 2 * 1032), dtype, device, offset)
    check_geglu_layout(g, device)
    out = misaligned((5, 1032), dtype, device, (offset * 5) % 8).fill_(float("nan"))
    kernel.geglu(g, out=out)
    assert torch.equal(out, kernel.geglu(g.contiguous()))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("d", [3420, 24, 12, 2, 1])
def test_geglu_half_width_alignment(device, dtype, d):
    """FlashInfer #5013 / TensorRT-LLM #19056: the second half is only 8 (or 4, 2) byte aligned."""
    x = inputs((37, 2 * d), dtype, device)
    check_geglu_layout(x, device)
    check_geglu_layout(x[1:], device)
    check_geglu_layout(x[:1], device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_out_variants_write_every_element(device, dtype):
    x = inputs((3, 17, 2 * 1536), dtype, device)
    for approximate in APPROX:
        fn = gelu_fn(approximate)
        expected = fn(x)
        out = torch.full_like(expected, float("nan"))
        assert fn(x, out=out) is out
        assert torch.equal(out, expected)
        for gate_first in (False, True):
            expected = kernel.geglu(x, approximate, gate_first=gate_first)
            out = torch.full_like(expected, float("nan"))
            assert kernel.geglu(x, approximate, gate_first=gate_first, out=out) is out
            assert torch.equal(out, expected)
    rows = torch.full((3, 17, 2 * 1536), float("nan"), device=device, dtype=dtype)
    kernel.geglu(x, out=rows[..., :1536])  # row-strided out
    assert torch.equal(rows[..., :1536], kernel.geglu(x))
    assert rows[..., 1536:].isnan().all()


@pytest.mark.parametrize("device", DEVICES)
def test_in_place(device):
    x = inputs((9, 4096), torch.bfloat16, device)
    expected = kernel.gelu_tanh(x)
    assert kernel.gelu_tanh(x, out=x) is x
    assert torch.equal(x, expected)
    y = inputs((9, 2 * 512), torch.bfloat16, device)
    expected = kernel.geglu(y)
    kernel.geglu(y, out=y[:, :512])  # into the value half: each element read before written
    assert torch.equal(y[:, :512], expected)


# ---- bad input -----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_naming_the_argument(device):
    x = inputs((4, 64), torch.bfloat16, device)
    odd = inputs((4, 63), torch.bfloat16, device)
    # float64 runs on the CPU (gradcheck); on CUDA it is rejected with its own message.
    bad = x.double() if device == "cuda" else x.to(torch.int64)
    cases = [
        (lambda: kernel.gelu(bad), "ltx_kernels.gelu: x (must be float32, float16 or bfloat16|is float64)"),
        (lambda: kernel.gelu_tanh(x.to(torch.int32)), "ltx_kernels.gelu_tanh: x must be float32"),
        (lambda: kernel.geglu(bad), "ltx_kernels.geglu: x (must be float32|is float64)"),
        (lambda: kernel.geglu(odd), "ltx_kernels.geglu: x's last dim must be even"),
        (lambda: kernel.gelu_and_mul(torch.empty(4, 31, device=device, dtype=odd.dtype), odd), "x's last dim must be even"),
        (lambda: kernel.geglu(torch.tensor(1.0, device=device)), "x must have at least one dimension"),
        (lambda: kernel.ops.geglu(x, "erf", False), "approximate must be 'none' or 'tanh'"),
        (lambda: kernel.gelu(x, out=torch.empty_like(x, dtype=torch.float32)), "gelu: out must have x's dtype"),
        (lambda: kernel.gelu_tanh(x, out=torch.empty(4, 65, device=device, dtype=x.dtype)), "out must have shape \\[4, 64\\]"),
        (lambda: kernel.geglu(x, out=torch.empty_like(x)), "geglu: out must have shape \\[4, 32\\]"),
        (lambda: kernel.geglu(x, out=torch.empty(4, 32, device=device)), "out must have x's dtype"),
        (lambda: kernel.gelu(x, out=torch.empty(64, 4, device=device, dtype=x.dtype).t()), "out must have a contiguous last dim"),
        (lambda: kernel.gelu(x, out=torch.empty(1, 64, device=device, dtype=x.dtype).expand(4, 64)), "out must have a contiguous last dim and non-overlapping"),
        (lambda: kernel.gelu(x[1:], out=x[:-1]), "out partially overlaps x"),
        (lambda: kernel.geglu(x, out=x.view(-1)[:128].view(4, 32)), "out partially overlaps x"),
    ]
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        kernel.geglu(x, "erf")


@requires_gpu
def test_mixed_devices_raise():
    x = inputs((4, 64), torch.bfloat16, "cuda")
    with pytest.raises(RuntimeError, match="out is on cpu but x is on cuda"):
        kernel.gelu(x, out=torch.empty(4, 64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="out is on cpu but x is on cuda"):
        kernel.geglu(x, out=torch.empty(4, 32, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="out is on cuda:0 but x is on cpu"):
        kernel.geglu(x.cpu(), out=torch.empty(4, 32, device="cuda", dtype=torch.bfloat16))


@requires_gpu
def test_cpu_tensor_on_cuda_build_raises():
    with pytest.raises(RuntimeError, match="CUDA variant and has no kernels for that device"):
        kernel.gelu_tanh(torch.randn(2, 64))


@requires_gpu
def test_runs_on_the_inputs_device_and_current_stream():
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    x = inputs((64, 2 * 1024), torch.bfloat16, "cuda:1")
    s = torch.cuda.Stream(device="cuda:1")
    with torch.cuda.stream(s):
        out = kernel.geglu(x)
    s.synchronize()
    assert out.device == x.device
    assert_bits_equal(out, eager_geglu(x, "none", False))


# ---- torch.library / torch.compile -----------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    for dtype in DTYPES:
        x = inputs((3, 7, 256), dtype, device)
        torch.library.opcheck(kernel.ops.gelu.default, (x,))
        torch.library.opcheck(kernel.ops.gelu_tanh.default, (x[..., 1:],))
        torch.library.opcheck(kernel.ops.gelu_out.default, (torch.empty_like(x), x))
        torch.library.opcheck(kernel.ops.gelu_tanh_out.default, (torch.empty_like(x), x))
        for approximate, gate_first in [("none", False), ("tanh", True)]:
            torch.library.opcheck(kernel.ops.geglu.default, (x, approximate, gate_first))
            out = x.new_empty(3, 7, 128)
            torch.library.opcheck(kernel.ops.geglu_out.default, (out, x, approximate, gate_first))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    # Only the ops' own outputs are compared: inductor would fuse arithmetic between
    # them without eager's intermediate roundings.
    def block(x):
        a = kernel.gelu_tanh(x)
        b = kernel.gelu(a)
        g = kernel.geglu(b, "tanh", gate_first=True)
        out = torch.empty_like(g)
        kernel.gelu_and_mul(out, x)
        kernel.gelu_tanh(a, out=a)
        return a, g, out, kernel.geglu(x)

    x = inputs((2, 33, 2 * 640), torch.bfloat16, device)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        got = compiled(x)
        got2 = compiled(torch.randn_like(x))
    for a, b in zip(got, block(x)):
        assert torch.equal(a, b)
    assert got2[1].shape == (2, 33, 640)
