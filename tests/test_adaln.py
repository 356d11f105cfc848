"""adaln and gated_residual against float64 and against the real eager expressions
and modules they replace (diffusers RMSNorm / LTX block, nn.LayerNorm (FLUX, PixArt),
Wan's fp32 modulation).

Exactness: the eager chain rounds at known points, which the kernels reproduce. The
only freedom left is the fp32 order of the row reduction, which can move norm(x) by one
ulp in rare elements. Tests that must be bit-exact therefore use "quantised" x (small
multiples of 1/16, power-of-two D): every sum of squares is then exact in fp32 in any
order, so the kernel must equal eager bit for bit. Random x is checked against eager
within one ulp of the terms on a small fraction of elements, and against float64.
"""

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
    unit_roundoff,
)

pytestmark = pytest.mark.kernels_ci

EPS = 1e-6
BF16 = torch.bfloat16


# ---- references --------------------------------------------------------------------


def quantised(shape, dtype, device):
    """Multiples of 1/16 in [-4, 4]: exact in every dtype, exact fp32 sums of squares."""
    return (torch.randint(-64, 65, shape, device=device).float() / 16).to(dtype)


def modulation(shape, dtype, device, scale=0.5):
    return (torch.randn(shape, device=device) * scale).to(dtype)


def eager_norm(x, weight, eps, norm):
    """The real modules: diffusers RMSNorm, or nn.LayerNorm (no bias)."""
    d = x.shape[-1]
    if norm == "rms":
        from diffusers.models.normalization import RMSNorm

        m = RMSNorm(d, eps=eps, elementwise_affine=weight is not None).to(x.device)
        if weight is not None:
            m.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
        with torch.no_grad():
            return m(x)
    if weight is None:
        m = torch.nn.LayerNorm(d, eps=eps, elementwise_affine=False).to(x.device)
        with torch.no_grad():
            return m(x)
    # LayerNorm(bias=False) with that weight; ATen wants an fp32 or same-dtype weight.
    w = weight if weight.dtype == x.dtype else weight.float()
    if w.dtype != x.dtype and x.device.type == "cuda":
        # CUDA's layer_norm refuses a mixed (bf16/fp16 x, fp32 weight) pair that the CPU
        # kernel accepts (fp32 math, one rounding): take the CPU module's answer.
        return F.layer_norm(x.cpu(), (d,), w.cpu(), None, eps).to(x.device)
    return F.layer_norm(x, (d,), w, None, eps)


def eager_adaln(x, scale, shift=None, weight=None, eps=EPS, norm="rms"):
    n = eager_norm(x, weight, eps, norm) * (1 + scale)
    return n if shift is None else n + shift


def ref64(x, scale, shift=None, weight=None, eps=EPS, norm="rms"):
    """(float64 result, float64 magnitude |norm(x) * (1 + scale)| + |shift|)."""
    x64 = x.double()
    if norm == "rms":
        n = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
        nmag = n.abs()
    else:
        mean = x64.mean(-1, keepdim=True)
        rstd = torch.rsqrt(x64.var(-1, unbiased=False, keepdim=True) + eps)
        n = (x64 - mean) * rstd
        # fp32 centring errs relative to |x| and to the mean's own error, ~ mean(|x|)
        nmag = (x64.abs() + x64.abs().mean(-1, keepdim=True)) * rstd
    if weight is not None:
        n = n * weight.double()
        nmag = nmag * weight.double().abs()
    p = n * (1 + scale.double())
    mag = nmag * (1 + scale.double()).abs()
    if shift is not None:
        p = p + shift.double()
        mag = mag + shift.double().abs()
    return p, mag


def assert_near_eager(out, expected, mag, what, max_frac=0.02, ulps=2.0):
    """Equal to eager except, on at most max_frac of the elements, by `ulps` ulps of the
    magnitude of the terms (an fp32 reduction-order flip of one rounding in norm(x)).
    fp32 results allow 16 ulps: there the fp32 reduction order is all that differs."""
    assert out.dtype == expected.dtype, f"{what}: dtype {out.dtype} != {expected.dtype}"
    assert out.shape == expected.shape, f"{what}: shape {tuple(out.shape)} != {tuple(expected.shape)}"
    if out.numel() == 0:
        return
    o, e = out.double().cpu(), expected.double().cpu()
    m = mag.broadcast_to(out.shape).double().cpu()
    diff = (o - e).abs()
    frac = float((diff > 0).double().mean())
    if out.dtype != torch.float32:
        assert frac <= max_frac, f"{what}: {frac:.2e} of elements differ from eager"
    if out.dtype == torch.float32:
        ulps = max(ulps, 16.0)
    bound = 2 * ulps * unit_roundoff(out.dtype) * m + 2 * subnormal_spacing(out.dtype)
    bad = ~(diff <= bound)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} elements beyond {ulps} ulp of the terms"


def assert_near_ref64(out, ref, mag, roundings, what, dtypes=()):
    """|out - ref64| <= (roundings * u + fp32 slack) * magnitude, u the unit roundoff of
    the coarsest dtype rounded to on the way (out's, and `dtypes`)."""
    assert out.shape == ref.shape, what
    u = max(unit_roundoff(t) for t in (out.dtype, *dtypes) if t is not None)
    bound = (roundings * u + 2e-5) * mag.broadcast_to(ref.shape) + 4 * subnormal_spacing(out.dtype)
    err = (out.double() - ref).abs()
    bad = ~(err <= bound)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} elements beyond the float64 bound"


def ltx_ada_values(b, t, d, dtype, device):
    """LTX's six modulation views: (table[None, None] + temb.reshape(B, T, 6, D)).unbind(2)."""
    table = torch.randn(6, d, device=device).to(dtype) / d**0.5
    temb = torch.randn(b, t, 6 * d, device=device).to(dtype)
    return (table[None, None] + temb.reshape(b, t, 6, d)).unbind(dim=2)


# ---- bit-exact against the eager chain (rms, quantised x) --------------------------

# (x, scale, shift, weight) dtypes: same dtype throughout, Wan-style fp32 modulation,
# mixed halves (generic kernel), no shift, and diffusers' weight rule.
DTYPE_CASES = [
    (torch.float32, torch.float32, torch.float32, None),
    (torch.float16, torch.float16, torch.float16, None),
    (BF16, BF16, BF16, None),
    (BF16, torch.float32, torch.float32, None),
    (torch.float32, BF16, BF16, None),
    (torch.float16, BF16, torch.float32, None),
    (BF16, BF16, None, None),
    (BF16, BF16, BF16, BF16),
    (BF16, BF16, BF16, torch.float32),
    (torch.float16, torch.float16, torch.float16, BF16),
    (torch.float32, torch.float32, torch.float32, BF16),
]


def make_weight(d, dtype, device):
    return None if dtype is None else (1 + 0.5 * torch.randn(d, device=device)).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [64, 2048])
@pytest.mark.parametrize("dtypes", DTYPE_CASES, ids=str)
def test_rms_exact_vs_eager_chain(device, d, dtypes):
    xd, sd, hd, wd = dtypes
    b, s = 2, 9
    x = quantised((b, s, d), xd, device)
    scale = modulation((b, 1, d), sd, device)
    shift = None if hd is None else modulation((b, s, d), hd, device)
    w = make_weight(d, wd, device)
    out = kernel.adaln(x, scale, shift, w, EPS)
    expected = eager_adaln(x, scale, shift, w)
    assert out.dtype == expected.dtype == kernel.adaln_out_dtype(xd, sd, hd, wd)
    assert torch.equal(out, expected)
    ref, mag = ref64(x, scale, shift, w)
    assert_near_ref64(out, ref, mag, 8, "vs float64", dtypes)


@pytest.mark.parametrize("device", DEVICES)
def test_step_rounding_is_not_round_once(device):
    """The exact test has teeth: eager bf16 differs from an fp32 round-once chain."""
    x = quantised((4, 64, 256), BF16, device)
    scale, shift = modulation((4, 1, 256), BF16, device), modulation((4, 1, 256), BF16, device)
    out = kernel.adaln(x, scale, shift)
    ref, mag = ref64(x, scale, shift)
    once = ref.to(BF16)
    assert torch.equal(out, eager_adaln(x, scale, shift))
    assert (out != once).float().mean() > 0.05
    assert_near_eager(out, once, mag, "vs round-once", max_frac=1.0, ulps=3)


# ---- random x: float64 and eager, both norms ----------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [1, 7, 64, 769, 2048, 8193])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("norm", ["rms", "layer"])
def test_random_vs_float64_and_eager(device, d, dtype, norm):
    x = (torch.randn(3, 5, d, device=device) * 2 + 0.3).to(dtype)
    scale, shift = modulation((3, 1, d), dtype, device), modulation((3, 5, d), dtype, device)
    out = kernel.adaln(x, scale, shift, norm=norm)
    ref, mag = ref64(x, scale, shift, norm=norm)
    assert_near_ref64(out, ref, mag, 8, f"{norm} D={d}")
    if d > 1:  # LayerNorm over one element is 0: the eager and fp32 paths agree exactly
        assert_near_eager(out, eager_adaln(x, scale, shift, norm=norm), mag, f"{norm} D={d}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("wd", DTYPES)
@pytest.mark.parametrize("xd", [torch.float32, BF16])
def test_layer_with_weight(device, wd, xd):
    d = 768
    x = torch.randn(2, 7, d, device=device).to(xd)
    w = make_weight(d, wd, device)
    scale, shift = modulation((2, 1, d), xd, device), modulation((2, 1, d), xd, device)
    out = kernel.adaln(x, scale, shift, w, norm="layer")
    assert out.dtype == xd
    ref, mag = ref64(x, scale, shift, w, norm="layer")
    assert_near_ref64(out, ref, mag, 8, "layer+weight")
    assert_near_eager(out, eager_adaln(x, scale, shift, w, norm="layer"), mag, "layer+weight")


# ---- broadcast forms and layouts (exact: rms on quantised x) ------------------------


def forms(device, dtype):
    """name -> (x, scale, shift): every broadcast form and operand layout we accept."""
    b, s, d = 2, 12, 128
    x = quantised((b, s, d), dtype, device)
    out = {}
    out["b1d"] = (x, modulation((b, 1, d), dtype, device), modulation((b, 1, d), dtype, device))
    out["btd"] = (x, modulation((b, s, d), dtype, device), modulation((b, s, d), dtype, device))
    out["d"] = (x, modulation((d,), dtype, device), modulation((d,), dtype, device))
    out["11d"] = (x, modulation((1, 1, d), dtype, device), modulation((1, 1, d), dtype, device))
    out["sd"] = (x, modulation((s, d), dtype, device), None)
    for t in (1, s):
        sh, sc, *_ = ltx_ada_values(b, t, d, dtype, device)
        assert sc.stride()[-2:] == (6 * d, 1) and not sc.is_contiguous()
        out[f"ltx_unbind_T{t}"] = (x, sc, sh)
    flux = torch.randn(b, 6 * d, device=device).to(dtype).chunk(6, dim=1)  # Linear(6D) output
    out["flux_chunk"] = (x, flux[1][:, None], flux[0][:, None])
    ltx_out = torch.randn(2, d, device=device).to(dtype)[None, None] + torch.randn(b, s, 1, d, device=device).to(dtype)
    out["ltx_norm_out"] = (x, ltx_out[:, :, 1], ltx_out[:, :, 0])  # row stride 2D
    out["expanded"] = (x, modulation((b, 1, d), dtype, device).expand(b, s, d), None)
    out["transposed"] = (x, modulation((s, b, d), dtype, device).transpose(0, 1), modulation((d,), dtype, device))
    out["last_dim_1"] = (x, modulation((b, s, 1), dtype, device), modulation((b, 1, 1), dtype, device))
    out["scalar"] = (x, modulation((), dtype, device), None)
    out["strided_last"] = (x, modulation((b, 1, 2 * d), dtype, device)[..., ::2], None)
    f = 3
    x4 = quantised((b, f, 8, d), dtype, device)
    out["bf1d"] = (x4, modulation((b, f, 1, d), dtype, device), modulation((b, f, 1, d), dtype, device))
    x5 = quantised((b, f, 2, 3, d), dtype, device)
    out["5d_bf11d"] = (x5, modulation((b, f, 1, 1, d), dtype, device), modulation((1, f, 2, 1, d), dtype, device))
    x7 = quantised((2, 2, 2, 2, 2, 2, 64), dtype, device)  # 6 non-merging dims: fallback copy
    out["7d_alternating"] = (x7, modulation((2, 1, 2, 1, 2, 1, 64), dtype, device), modulation((1, 2, 1, 2, 1, 2, 64), dtype, device))
    x_t = quantised((s, b, d), dtype, device).transpose(0, 1)  # x itself not row-collapsible
    out["x_transposed"] = (x_t, modulation((b, 1, d), dtype, device), None)
    qkv = quantised((b, s, 3 * d), dtype, device)
    out["x_fused_slice"] = (qkv[..., d : 2 * d], modulation((b, 1, d), dtype, device), None)
    out["x_chunk_half"] = (quantised((b, s, 2 * d), dtype, device).chunk(2, -1)[1], modulation((b, s, d), dtype, device), None)
    out["x_expanded"] = (quantised((1, s, d), dtype, device).expand(b, s, d), modulation((b, 1, d), dtype, device), None)
    return out


FORM_NAMES = list(forms("cpu", torch.float32))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("form", FORM_NAMES)
@pytest.mark.parametrize("dtype", [BF16, torch.float32])
def test_broadcast_forms_exact(device, form, dtype):
    x, scale, shift = forms(device, dtype)[form]
    out = kernel.adaln(x, scale, shift)
    assert out.is_contiguous() and out.shape == x.shape
    assert torch.equal(out, eager_adaln(x, scale, shift)), form
    # layer norm through the same forms, within one ulp of the terms
    out_l = kernel.adaln(x, scale, shift, norm="layer")
    _, mag = ref64(x, scale, shift, norm="layer")
    assert_near_eager(out_l, eager_adaln(x, scale, shift, norm="layer"), mag, form)
    # gated_residual with the same operand as gate, and as y
    y = modulation(x.shape, dtype, device)
    assert torch.equal(kernel.gated_residual(x, y, scale), x + y * scale), form
    assert torch.equal(kernel.gated_residual(x, scale, y), x + scale * y), form


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_storage_offsets(device, offset, dtype):
    b, s, d = 2, 5, 2048
    x = misaligned((b, s, d), dtype, device, offset)
    x.copy_(quantised((b, s, d), dtype, device))
    scale = misaligned((b, 1, d), dtype, device, (offset * 3) % 8) * 0.5
    shift = misaligned((b, s, d), dtype, device, (offset + 5) % 8)
    expected = eager_adaln(x, scale, shift)
    assert torch.equal(kernel.adaln(x, scale, shift), expected)
    out = misaligned((b, s, d), dtype, device, (offset + 1) % 8).fill_(float("nan"))
    assert kernel.adaln(x, scale, shift, out=out) is out
    assert torch.equal(out, expected)
    y = misaligned((b, s, d), dtype, device, (offset + 2) % 8)
    assert torch.equal(kernel.gated_residual(x, y, scale), x + y * scale)
    out.fill_(float("nan"))
    kernel.gated_residual(x, y, shift, out=out)
    assert torch.equal(out, x + y * shift)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [1, 7, 63, 769, 3420, 5120, 16384])
def test_hidden_sizes(device, d):
    x = quantised((3, 4, d), BF16, device)
    scale, shift = modulation((3, 1, d), BF16, device), modulation((3, 4, d), BF16, device)
    out = kernel.adaln(x, scale, shift)
    # Bit-exact only where the fp32 sum of squares is exact in any order: multiples of
    # 1/256 up to 16 per element need 2**8 * 16 * d < 2**24, i.e. d <= 4096.
    if d & (d - 1) == 0 and d <= 4096:
        assert torch.equal(out, eager_adaln(x, scale, shift))
    else:
        _, mag = ref64(x, scale, shift)
        assert_near_eager(out, eager_adaln(x, scale, shift), mag, f"D={d}")
    y = modulation(x.shape, BF16, device)
    assert torch.equal(kernel.gated_residual(x, y, scale), x + y * scale)


# Many rows with broadcast modulation: the CUDA path for [B, 1, D] / [B, F, 1, D] runs
# persistent blocks over contiguous row chunks, caches 1 + scale and shift per thread
# and queues the next rows' x with cp.async (3 row stages, or 2 where 3 would pass 48 KB
# of shared memory: D = 5120 bf16, Wan's width); small shapes give every block one row
# only, so these shapes make chunks of many rows that cross batch / frame boundaries, odd
# row counts (a short last chunk and idle groups), short rows (many rows per block) and a
# row too wide for the streaming kernel's shared memory (D = 8192 bf16: adaln_kernel).
MANY_ROWS = [
    ((2, 8064, 2048), BF16, "b1d"),
    ((3, 4099, 1024), torch.float16, "b1d"),
    ((2, 1537, 2048), torch.float32, "b1d"),
    ((2, 5, 577, 256), BF16, "bf1d"),
    ((3, 2311, 128), BF16, "b1d"),
    ((2, 1031, 8192), BF16, "b1d"),
    ((2, 777, 5120), BF16, "b1d"),
    ((5000, 2048), BF16, "d"),
]


@requires_gpu
@pytest.mark.parametrize("shape,dtype,form", MANY_ROWS, ids=str)
def test_broadcast_many_rows(shape, dtype, form):
    x = quantised(shape, dtype, "cuda")
    d = shape[-1]
    if form == "d":
        mod_shape = (d,)
    elif form == "b1d":
        mod_shape = (shape[0], 1, d)
    else:
        mod_shape = (*shape[:2], 1, d)
    scale, shift = modulation(mod_shape, dtype, "cuda"), modulation(mod_shape, dtype, "cuda")

    def check(out, sc, sh):
        expected = eager_adaln(x, sc, sh)
        if d <= 4096:  # quantised x: exact fp32 sums of squares (see test_hidden_sizes)
            assert torch.equal(out, expected), (shape, form)
        else:
            assert_near_eager(out, expected, ref64(x, sc, sh)[1], str(shape))

    out = torch.full_like(x, float("nan"))
    kernel.adaln(x, scale, shift, out=out)
    check(out, scale, shift)
    check(kernel.adaln(x, scale, None), scale, None)
    out_l = kernel.adaln(x, scale, shift, norm="layer")
    _, mag = ref64(x, scale, shift, norm="layer")
    assert_near_eager(out_l, eager_adaln(x, scale, shift, norm="layer"), mag, str(shape))
    # Wan-style fp32 modulation on half x (fp32 out)
    if dtype != torch.float32:
        s32, h32 = scale.float(), shift.float()
        check(kernel.adaln(x, s32, h32), s32, h32)


# adaln_direct_kernel (one half dtype, no weight, 16-byte vectors, D <= 8192), the default
# for those calls (on sm_80+ the modulation staged in shared memory with x's loads, 4
# vectors per thread; elsewhere loaded with x for per-token rows, after the reduction for
# broadcast ones, 2 vectors per thread for per-token rows of D <= 4096, else 4); the
# kernels that take every other call (developer switch, read per call:
# LTX_KERNELS_ADALN_KERNEL=row); the load order forced (LTX_KERNELS_ADALN_MOD=early / late /
# staged / staged-stream); the vectors per thread forced (LTX_KERNELS_ADALN_C=2 / 4). Each on every shape: thousands of rows
# (grid-stride loop), per-token and broadcast modulation, no shift, a width that leaves
# threads idle in the last vector (5120), the widest it takes (8192), short rows (many rows
# per block), LayerNorm, and rows enough for its grid-stride loop on an H200 (D = 8: 256
# rows per block, 132 * 64 blocks).
DIRECT_SHAPES = [((2, 4099, 2048), "btd"), ((2, 4099, 2048), "b1d"), ((3, 777, 5120), "b1d"),
                 ((2, 531, 8192), "btd"), ((2, 2311, 128), "b1d"), ((5003, 64), "btd"),
                 ((2, 1081347, 8), "b1d")]


DIRECT_CHOICES = {
    "default": {},
    "row": {"LTX_KERNELS_ADALN_KERNEL": "row"},
    # the load order forced either way, and the vectors per thread (2 only for D <= 4096)
    "early": {"LTX_KERNELS_ADALN_MOD": "early"},
    "late": {"LTX_KERNELS_ADALN_MOD": "late"},
    "c2": {"LTX_KERNELS_ADALN_C": "2"},
    "c2_early": {"LTX_KERNELS_ADALN_C": "2", "LTX_KERNELS_ADALN_MOD": "early"},
    "c2_late": {"LTX_KERNELS_ADALN_C": "2", "LTX_KERNELS_ADALN_MOD": "late"},
    "c4": {"LTX_KERNELS_ADALN_C": "4"},
    "c4_early": {"LTX_KERNELS_ADALN_C": "4", "LTX_KERNELS_ADALN_MOD": "early"},
    # the default held to 4 blocks per SM (its occupancy before x was zeroed first: the A/B
    # baseline; dynamic shared memory asked for only to cap it, common/row_order.cuh)
    "blocks4": {"LTX_KERNELS_BLOCKS_PER_SM": "4"},
    # the modulation queued with x into shared memory (cp.async), at both vector counts
    "staged": {"LTX_KERNELS_ADALN_MOD": "staged"},
    "c2_staged": {"LTX_KERNELS_ADALN_C": "2", "LTX_KERNELS_ADALN_MOD": "staged"},
    "c4_staged": {"LTX_KERNELS_ADALN_C": "4", "LTX_KERNELS_ADALN_MOD": "staged"},
    # staged, x loaded without allocating in L1 (the per-token default where staged fits)
    "staged_stream": {"LTX_KERNELS_ADALN_MOD": "staged-stream"},
    "c2_staged_stream": {"LTX_KERNELS_ADALN_C": "2", "LTX_KERNELS_ADALN_MOD": "staged-stream"},
    # at most 64 blocks per SM walking the rows grid-stride (the default is a block per row
    # group: common/dispatch.cuh grid_cap)
    "grid_walk": {"LTX_KERNELS_GRID": "walk"},
    # LayerNorm's mean and centred squares in two reductions (the default merges each
    # thread's mean and M2 in one where every thread holds as many elements: not at 5120)
    "ln_two": {"LTX_KERNELS_ADALN_LN": "two"},
    # candidate: each thread's mean and M2 in one pass about its first element, two-warp
    # rows merged as one pair (adaln.cu shifted_mean_m2, reduce.cuh row_mean_m2<true>); in
    # the default forms and in the register forms at both vector counts
    "ln_shift": {"LTX_KERNELS_ADALN_LN": "shift"},
    "ln_shift_c2_early": {"LTX_KERNELS_ADALN_LN": "shift", "LTX_KERNELS_ADALN_C": "2",
                          "LTX_KERNELS_ADALN_MOD": "early"},
    "ln_shift_c4_late": {"LTX_KERNELS_ADALN_LN": "shift", "LTX_KERNELS_ADALN_C": "4",
                         "LTX_KERNELS_ADALN_MOD": "late"},
}


@requires_gpu
@pytest.mark.parametrize("choice", list(DIRECT_CHOICES))
@pytest.mark.parametrize("shape,form", DIRECT_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_direct_kernel_choices(monkeypatch, choice, shape, form, dtype):
    for name, value in DIRECT_CHOICES[choice].items():
        monkeypatch.setenv(name, value)
    d = shape[-1]
    x = quantised(shape, dtype, "cuda")
    mod_shape = shape if form == "btd" else (shape[0], 1, d)
    scale, shift = modulation(mod_shape, dtype, "cuda"), modulation(mod_shape, dtype, "cuda")
    for sh in (shift, None):
        out = torch.full_like(x, float("nan"))
        kernel.adaln(x, scale, sh, out=out)
        expected = eager_adaln(x, scale, sh)
        if d <= 4096:  # quantised x: exact fp32 sums of squares (see test_hidden_sizes)
            assert torch.equal(out, expected), (shape, form, choice)
        else:
            assert_near_eager(out, expected, ref64(x, scale, sh)[1], f"{shape} {choice}")
    out_l = torch.full_like(x, float("nan"))
    kernel.adaln(x, scale, shift, norm="layer", out=out_l)
    _, mag = ref64(x, scale, shift, norm="layer")
    assert_near_eager(out_l, eager_adaln(x, scale, shift, norm="layer"), mag, f"{shape} layer {choice}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("stats", ["one_reduction", "two_reductions", "shift"])
@pytest.mark.parametrize("d", [2048, 3072, 4096, 8192])
@pytest.mark.parametrize("dtype", [BF16, torch.float16])
def test_layer_stats_offset_and_outlier(monkeypatch, device, stats, d, dtype):
    """LayerNorm's statistics where a naive sum-of-squares variance would cancel: rows whose
    mean is ~100 standard deviations (an offset), and rows with one massive channel (as LLM /
    DiT activations have), against float64 and eager; in one reduction (each thread's mean and
    M2 merged, the default where threads hold equal counts), in two (LTX_KERNELS_ADALN_LN=two)
    and with each thread's statistics in one pass about its first element (=shift, the
    candidate; its worst case is that element being the massive one: channel 0)."""
    if stats != "one_reduction":
        monkeypatch.setenv("LTX_KERNELS_ADALN_LN", "two" if stats == "two_reductions" else "shift")
    g = torch.Generator(device="cpu").manual_seed(d)
    base = torch.randn(2, 300, d, generator=g)
    offset = base * 0.25 + 24.0  # mean ~96 sigma (the variance is ~1e-4 of the mean square)
    outlier = base.clone()
    outlier[..., 7] = 3000.0
    outlier0 = base.clone()
    outlier0[..., 0] = 3000.0
    for name, xf in (("offset", offset), ("outlier", outlier), ("outlier0", outlier0)):
        x = xf.to(dtype).to(device)
        for form in ("btd", "b1d"):
            mod_shape = x.shape if form == "btd" else (2, 1, d)
            scale, shift = modulation(mod_shape, dtype, device), modulation(mod_shape, dtype, device)
            out = kernel.adaln(x, scale, shift, norm="layer")
            ref, mag = ref64(x, scale, shift, norm="layer")
            assert_near_ref64(out, ref, mag, 8, f"{name} {form} D={d}")
            assert_near_eager(out, eager_adaln(x, scale, shift, norm="layer"), mag, f"{name} {form} D={d}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [65536, 100000])
def test_long_rows(device, d):
    """Rows longer than the registers hold: the remainder is re-read."""
    x = (torch.randn(2, d, device=device) + 0.5).to(BF16)
    scale, shift = modulation((d,), BF16, device), modulation((2, d), BF16, device)
    for norm in ("rms", "layer"):
        out = kernel.adaln(x, scale, shift, norm=norm)
        ref, mag = ref64(x, scale, shift, norm=norm)
        assert_near_ref64(out, ref, mag, 8, f"{norm} D={d}")
        assert_near_eager(out, eager_adaln(x, scale, shift, norm=norm), mag, f"{norm} D={d}")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64), (0,), (3, 0), (1, 64), (64,)])
def test_empty_and_small(device, shape):
    x = quantised(shape, BF16, device)
    d = shape[-1]
    scale = modulation((d,), BF16, device)
    out = kernel.adaln(x, scale, scale, norm="layer")
    assert out.shape == x.shape and out.dtype == BF16
    out = kernel.adaln(x, scale, scale)
    assert torch.equal(out, eager_adaln(x, scale, scale))
    assert torch.equal(kernel.gated_residual(x, x, scale), x + x * scale)
    y = x.clone()
    assert kernel.gated_residual(y, x, scale, inplace=True) is y


# ---- the out / in-place variants ----------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtypes", DTYPE_CASES[:7], ids=str)
def test_out_variants_write_every_element(device, dtypes):
    xd, sd, hd, _ = dtypes
    x = quantised((3, 17, 1536), xd, device)
    scale = modulation((3, 1, 1536), sd, device)
    shift = None if hd is None else modulation((1536,), hd, device)
    expected = kernel.adaln(x, scale, shift)
    out = torch.full_like(expected, float("nan"))
    assert kernel.adaln(x, scale, shift, out=out) is out
    assert torch.equal(out, expected)
    if expected.dtype == xd:  # in place into x
        x2 = x.clone()
        kernel.adaln(x2, scale, shift, out=x2)
        assert torch.equal(x2, expected)
    gate = scale
    y = modulation(x.shape, xd, device)
    expected = x + y * gate
    out = torch.full_like(expected, float("nan"))
    assert kernel.gated_residual(x, y, gate, out=out) is out
    assert torch.equal(out, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", ["contiguous", "row_strided", "transposed"])
def test_gated_residual_inplace(device, layout):
    b, s, d = 2, 10, 256
    base = modulation((b, s, 2 * d), BF16, device)
    x = {
        "contiguous": base[..., :d].contiguous(),
        "row_strided": base[..., d:],
        "transposed": base.transpose(0, 1).contiguous().transpose(0, 1)[..., :d],
    }[layout]
    *_, gate_msa, _, _, _ = ltx_ada_values(b, 1, d, BF16, device)
    y = modulation((b, s, d), BF16, device)
    expected = x + y * gate_msa
    before = base.clone()
    assert kernel.gated_residual(x, y, gate_msa, inplace=True) is x
    assert torch.equal(x, expected)
    if layout == "row_strided":  # the other half of the buffer is untouched
        assert torch.equal(base[..., :d], before[..., :d])


# ---- gated_residual numerics ---------------------------------------------------------

GATE_DTYPES = [
    (BF16, BF16, BF16),
    (torch.float16,) * 3,
    (torch.float32,) * 3,
    (torch.float32, BF16, torch.float32),  # Wan: x.float() + attn_out * gate (fp32)
    (BF16, BF16, torch.float32),
    (torch.float16, BF16, BF16),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtypes", GATE_DTYPES, ids=str)
@pytest.mark.parametrize("d", [7, 64, 2048])
def test_gated_residual_exact_vs_eager(device, dtypes, d):
    xd, yd, gd = dtypes
    x = torch.randn(3, 6, d, device=device).to(xd)
    y = torch.randn(3, 6, d, device=device).to(yd)
    gate = modulation((3, 1, d), gd, device)
    out = kernel.gated_residual(x, y, gate)
    expected = x + y * gate
    assert out.dtype == expected.dtype == kernel.gated_residual_out_dtype(xd, yd, gd)
    assert torch.equal(out, expected)
    ref = x.double() + y.double() * gate.double()
    mag = x.double().abs() + (y.double() * gate.double()).abs()
    assert_near_ref64(out, ref, mag, 3, "vs float64", (yd, gd))


@requires_gpu
@pytest.mark.parametrize("grid", ["", "walk"], ids=["default", "grid_walk"])
def test_gated_residual_gpu_ltx_shape(monkeypatch, grid):
    """LTX's gated residual ([2, 8064, 2048] bf16, broadcast and per-token gates, and fp32 x
    with a bf16 update: Wan's form) with a block for every row group (the default) and over
    enough rows for the grid-stride walk of at most 64 blocks per SM (LTX_KERNELS_GRID=walk):
    equal to eager."""
    if grid:
        monkeypatch.setenv("LTX_KERNELS_GRID", grid)
    x = torch.randn(2, 8064, 2048, device="cuda").to(BF16)
    y = torch.randn_like(x)
    for gate in (modulation((2, 1, 2048), BF16, "cuda"), modulation((2, 8064, 2048), BF16, "cuda")):
        assert torch.equal(kernel.gated_residual(x, y, gate), x + y * gate)
    xf = x.float()
    gf = modulation((2, 1, 2048), torch.float32, "cuda")
    assert torch.equal(kernel.gated_residual(xf, y, gf), xf + y * gf)


# ---- models: FLUX / PixArt / Wan / LTX ------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_flux_ada_layer_norm_zero(device):
    from diffusers.models.normalization import AdaLayerNormZero

    d = 256
    m = AdaLayerNormZero(d).to(device, BF16)
    x = torch.randn(2, 33, d, device=device).to(BF16)
    emb = torch.randn(2, d, device=device).to(BF16)
    with torch.no_grad():
        expected, *_ = m(x, emb=emb)
        shift, scale, *_ = m.linear(m.silu(emb)).chunk(6, dim=1)
    out = kernel.adaln(x, scale[:, None], shift[:, None], eps=1e-6, norm="layer")
    _, mag = ref64(x, scale[:, None], shift[:, None], norm="layer")
    assert_near_eager(out, expected, mag, "AdaLayerNormZero")


@pytest.mark.parametrize("device", DEVICES)
def test_pixart_ada_norm_single(device):
    b, s, d = 2, 40, 192
    norm1 = torch.nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
    table = torch.randn(6, d, device=device).to(BF16) / d**0.5
    temb = torch.randn(b, 6 * d, device=device).to(BF16)
    shift, scale, gate, *_ = (table[None] + temb.reshape(b, 6, -1)).chunk(6, dim=1)
    h = torch.randn(b, s, d, device=device).to(BF16)
    expected = norm1(h) * (1 + scale) + shift
    out = kernel.adaln(h, scale, shift, norm="layer")
    _, mag = ref64(h, scale, shift, norm="layer")
    assert_near_eager(out, expected, mag, "PixArt")
    attn = torch.randn_like(h)
    assert torch.equal(kernel.gated_residual(h, attn, gate), h + gate * attn)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_token", [False, True])
def test_wan_fp32_modulation(device, per_token):
    from diffusers.models.normalization import FP32LayerNorm

    b, s, d = 2, 24, 256
    norm1 = FP32LayerNorm(d, 1e-6, elementwise_affine=False)
    table = torch.randn(1, 6, d, device=device) / d**0.5  # kept in fp32
    if per_token:  # Wan 2.2 TI2V: temb [B, S, 6, D]
        temb = torch.randn(b, s, 6, d, device=device).to(BF16)
        mods = (table.unsqueeze(0) + temb.float()).chunk(6, dim=2)
        shift, scale, gate = (m.squeeze(2) for m in mods[:3])
    else:
        temb = torch.randn(b, 6, d, device=device).to(BF16)
        shift, scale, gate, *_ = (table + temb.float()).chunk(6, dim=1)
    h = torch.randn(b, s, d, device=device).to(BF16)
    expected = (norm1(h.float()) * (1 + scale) + shift).type_as(h)
    out32 = kernel.adaln(h.float(), scale, shift, eps=1e-6, norm="layer")
    assert out32.dtype == torch.float32
    _, mag = ref64(h, scale, shift, norm="layer")
    assert_near_eager(out32, norm1(h.float()) * (1 + scale) + shift, mag, "Wan fp32", ulps=4)
    assert_near_eager(out32.type_as(h), expected, mag, "Wan bf16", max_frac=0.005)
    attn = torch.randn(b, s, d, device=device).to(BF16)
    expected = (h.float() + attn * gate).type_as(h)
    assert torch.equal(kernel.gated_residual(h.float(), attn, gate).type_as(h), expected)


def tiny_ltx_block(device, dtype):
    from diffusers.models.transformers.transformer_ltx import LTXVideoTransformerBlock

    torch.manual_seed(torch.initial_seed() % (1 << 31))
    blk = LTXVideoTransformerBlock(
        dim=64, num_attention_heads=4, attention_head_dim=16, cross_attention_dim=64
    ).to(device, dtype)
    with torch.no_grad():  # non-trivial modulation table
        blk.scale_shift_table.normal_(0, 0.5)
    return blk.eval()


def block_with_kernels(blk, h, enc, temb, rotary, mask):
    """LTXVideoTransformerBlock.forward with norm+modulation as adaln and both gated
    residuals as gated_residual; attn1/attn2/ff are the block's own submodules."""
    b = h.size(0)
    ada = blk.scale_shift_table[None, None] + temb.reshape(b, temb.size(1), 6, -1)
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = ada.unbind(dim=2)
    n = kernel.adaln(h, scale_msa, shift_msa, None, blk.norm1.eps)
    attn = blk.attn1(hidden_states=n, encoder_hidden_states=None, image_rotary_emb=rotary)
    h = kernel.gated_residual(h, attn, gate_msa)
    h = h + blk.attn2(h, encoder_hidden_states=enc, image_rotary_emb=None, attention_mask=mask)
    n = kernel.adaln(h, scale_mlp, shift_mlp, None, blk.norm2.eps)
    return kernel.gated_residual(h, blk.ff(n), gate_mlp, inplace=True)


def capture_inputs(blk):
    """Records the hidden_states each of attn1 / attn2 / ff receives, per forward."""
    seen = {"attn1": [], "attn2": [], "ff": []}
    handles = []
    for name in seen:
        def hook(mod, args, kwargs, name=name):
            seen[name].append(args[0] if args else kwargs["hidden_states"])
        handles.append(getattr(blk, name).register_forward_pre_hook(hook, with_kwargs=True))
    return seen, handles


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("per_token", [False, True])
def test_ltx_block_bf16(device, per_token):
    """A real diffusers LTXVideoTransformerBlock (bf16, random weights) against the same
    block with norm1/norm2 + modulation as adaln and both gated residuals as
    gated_residual. h is quantised, so norm1's reduction is exact: attn1 and attn2 must
    see bit-identical inputs. norm2 reduces an arbitrary h, where an fp32 order flip
    may move a rare element of norm2(h) by one ulp: each such difference must be exactly
    that flip carried through the modulation; where there is none, the block output is
    bit-identical."""
    b, s, l, d = 2, 24, 7, 64
    blk = tiny_ltx_block(device, BF16)
    h = quantised((b, s, d), BF16, device)
    enc = torch.randn(b, l, d, device=device).to(BF16)
    temb = torch.randn(b, s if per_token else 1, 6 * d, device=device).to(BF16)
    angles = torch.rand(b, s, d, device=device) * 6
    rotary = (angles.cos(), angles.sin())
    mask = torch.zeros(b, 1, l, device=device).to(BF16)
    seen, handles = capture_inputs(blk)
    try:
        with torch.no_grad():
            expected = blk(h, enc, temb, rotary, mask)
            got = block_with_kernels(blk, h, enc, temb, rotary, mask)
    finally:
        for hd in handles:
            hd.remove()
    assert got.dtype == expected.dtype == BF16
    (a1_eager, a1_ours), (a2_eager, a2_ours), (ff_eager, ff_ours) = (seen[k] for k in ("attn1", "attn2", "ff"))
    assert torch.equal(a1_ours, a1_eager), "adaln(norm1) differs from the block's modulated norm1"
    assert torch.equal(a2_ours, a2_eager), "gated_residual differs from h + attn1(n) * gate_msa"
    if torch.equal(ff_ours, ff_eager):
        assert torch.equal(got, expected)
        return
    with torch.no_grad():
        h2 = a2_eager + blk.attn2(a2_eager, encoder_hidden_states=enc, image_rotary_emb=None, attention_mask=mask)
        scale_mlp, shift_mlp, _ = ltx_mlp_mods(blk, temb)
        n = blk.norm2(h2)  # eager's rounded norm2(h2)
    # The block's own op sequence (bf16 ops): norm2(h) * (1 + scale_mlp) + shift_mlp.
    chain = lambda nv: nv * (1 + scale_mlp) + shift_mlp  # noqa: E731
    assert torch.equal(chain(n), ff_eager), "the block's norm2 chain, rebuilt, differs from what ff saw"
    # Where ours differs, norm2(h)'s rounding flipped by one ulp (the fp32 reduction order near a
    # bf16 midpoint) must explain it exactly: the chain from n's neighbour gives our value. (A
    # bound in ulps of the terms does not hold: n = 1.14453137, 2^-24 above a midpoint, flipped
    # to 1.140625, and the product's rounding made that 2.1 ulps of the terms; CPU,
    # LTX_TEST_SEED=438311974, 2026-12-08.)
    differ = ff_ours != ff_eager
    assert float(differ.double().mean()) <= 0.01, "adaln(norm2): too many elements differ from eager"
    bits = n.view(torch.int16)
    explained = torch.zeros_like(differ)
    for step in (-1, 1):  # n's two bf16 neighbours (same sign, one ulp down / up in magnitude)
        explained |= chain((bits + step).view(BF16)) == ff_ours
    assert bool((~differ | explained).all()), "adaln(norm2): a difference no one-ulp flip of norm2(h) explains"
    # The rest of the block from our norm2 output is eager's bits: ff on it, then the gated
    # residual with the block's own ops. (An ulps-of-the-terms bound on the block output does
    # not hold either: ff's linear layers spread the flip over the token's whole row.)
    with torch.no_grad():
        rest = h2 + blk.ff(ff_ours) * ltx_mlp_mods(blk, temb)[2]
    assert torch.equal(got, rest), "LTX block: the block's tail from our norm2 output differs from ours"


def ltx_mlp_mods(blk, temb):
    ada = blk.scale_shift_table[None, None] + temb.reshape(temb.size(0), temb.size(1), 6, -1)
    _, _, _, shift_mlp, scale_mlp, gate_mlp = ada.unbind(dim=2)
    return scale_mlp, shift_mlp, gate_mlp


# ---- bad input -------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_naming_the_argument(device):
    x = torch.randn(2, 4, 64, device=device).to(BF16)
    s = modulation((2, 1, 64), BF16, device)
    # float64 is accepted on the CPU (gradcheck) and refused on GPUs.
    dbl = None if device == "cpu" else "float64 is supported on the CPU only"
    cases = [
        (lambda: kernel.adaln(x, modulation((3, 1, 64), BF16, device)), r"scale must broadcast to x's shape \[2, 4, 64\], got \[3, 1, 64\]"),
        (lambda: kernel.adaln(x, modulation((2, 1, 32), BF16, device)), "scale must broadcast"),
        (lambda: kernel.adaln(x, modulation((1, 2, 4, 64), BF16, device)), "scale must broadcast"),
        (lambda: kernel.adaln(x, s, modulation((2, 5, 64), BF16, device)), "shift must broadcast"),
        (lambda: kernel.adaln(x, s.double()), dbl),
        (lambda: kernel.adaln(x, s, s.to(torch.int32)), "shift must be float32"),
        (lambda: kernel.adaln(x.double(), s), dbl),
        (lambda: kernel.adaln(x, s, s, make_weight(32, BF16, device)), r"weight must have shape \[64\]"),
        (lambda: kernel.adaln(x, s, s, make_weight(64, torch.float64, device)), dbl),
        (lambda: kernel.adaln(x, s, s, None, -1.0), "eps must be"),
        (lambda: kernel.adaln(x, s, s, None, float("nan")), "eps must be"),
        (lambda: kernel.ops.adaln(x, s, s, None, 1e-6, 2), "norm must be 0"),
        (lambda: kernel.adaln(torch.tensor(1.0, device=device), s), "x must have at least one dimension"),
        (lambda: kernel.adaln(x, s, out=torch.empty_like(x, dtype=torch.float32)), "out must have dtype"),
        (lambda: kernel.adaln(x, s, out=torch.empty(2, 4, 65, device=device, dtype=BF16)), "out must have x's shape"),
        (lambda: kernel.adaln(x, s, out=torch.empty(64, 4, 2, device=device, dtype=BF16).permute(2, 1, 0)), "out must have a contiguous last dim"),
        (lambda: kernel.gated_residual(x, modulation((2, 4, 63), BF16, device), s), "y must broadcast"),
        (lambda: kernel.gated_residual(x, x, modulation((4, 4, 64), BF16, device)), "gate must broadcast"),
        (lambda: kernel.gated_residual(x, x, s.double()), dbl),
        (lambda: kernel.gated_residual(x, x.half(), s), "in place|x must have the result dtype"),
        (lambda: kernel.gated_residual(x, x, s, out=torch.empty_like(x, dtype=torch.float16)), "out must have dtype"),
        (lambda: kernel.gated_residual(x[:1].expand(2, 4, 64), x, s, inplace=True), "cannot be updated in place"),
        (lambda: kernel.gated_residual(x, x, s.float(), inplace=True), "x must have the result dtype"),
    ]
    for i, (fn, msg) in enumerate(cases):
        if i == 19:  # a valid mixed call (fp32 result), not an error
            assert kernel.gated_residual(x, x.half(), s).dtype == torch.float32
            continue
        if msg is None:  # float64 on the CPU: a valid call
            assert fn().dtype == torch.float64
            continue
        with pytest.raises(RuntimeError, match=msg):
            fn()
    with pytest.raises(ValueError, match="norm must be one of"):
        kernel.adaln(x, s, norm="group")
    with pytest.raises(ValueError, match="either out or inplace"):
        kernel.gated_residual(x, x, s, out=torch.empty_like(x), inplace=True)


@requires_gpu
def test_mixed_devices_raise():
    x = torch.randn(2, 4, 64, device="cuda", dtype=BF16)
    s = torch.randn(2, 1, 64, dtype=BF16)
    with pytest.raises(RuntimeError, match="scale is on cpu but x is on cuda"):
        kernel.adaln(x, s)
    with pytest.raises(RuntimeError, match="gate is on cpu but x is on cuda"):
        kernel.gated_residual(x, x, s)
    with pytest.raises(RuntimeError, match="shift is on cpu but x is on cuda"):
        kernel.adaln(x, s.cuda(), s)


@requires_gpu
def test_cpu_tensor_on_cuda_build_raises():
    with pytest.raises(RuntimeError, match="CUDA variant and has no kernels for that device"):
        kernel.adaln(torch.randn(2, 64), torch.randn(64))


# ---- torch.library / torch.compile ------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    d = 128
    for xd, sd, hd, wd in DTYPE_CASES[::2]:
        x = torch.randn(2, 5, d, device=device).to(xd)
        sh, sc, *_ = ltx_ada_values(2, 1, d, sd, device)
        shift = None if hd is None else sh.to(hd)
        w = make_weight(d, wd, device)
        for norm in (0, 1):
            torch.library.opcheck(kernel.ops.adaln.default, (x, sc, shift, w, 1e-6, norm))
            out = kernel.ops.adaln(x, sc, shift, w, 1e-6, norm)
            torch.library.opcheck(kernel.ops.adaln_out.default, (torch.empty_like(out), x, sc, shift, w, 1e-6, norm))
    for xd, yd, gd in GATE_DTYPES:
        x = torch.randn(2, 5, d, device=device).to(xd)
        y = torch.randn(2, 5, d, device=device).to(yd)
        g = modulation((2, 1, d), gd, device)
        torch.library.opcheck(kernel.ops.gated_residual.default, (x, y, g))
        out = kernel.ops.gated_residual(x, y, g)
        torch.library.opcheck(kernel.ops.gated_residual_out.default, (torch.empty_like(out), x, y, g))
        if out.dtype == x.dtype:
            torch.library.opcheck(kernel.ops.gated_residual_inplace.default, (x.clone(), y, g))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    def block(h, temb, table, y):
        b = h.size(0)
        shift, scale, gate, shift2, scale2, gate2 = (table[None, None] + temb.reshape(b, -1, 6, h.size(-1))).unbind(2)
        n = kernel.adaln(h, scale, shift)
        h = kernel.gated_residual(h, n * y, gate)
        n = kernel.adaln(h, scale2, shift2, norm="layer")
        return kernel.gated_residual(h, n, gate2, inplace=True)

    b, s, d = 2, 33, 256
    table = torch.randn(6, d, device=device).to(BF16)
    temb = torch.randn(b, 1, 6 * d, device=device).to(BF16)
    h = torch.randn(b, s, d, device=device).to(BF16)
    y = torch.randn(b, s, d, device=device).to(BF16)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        got = compiled(h.clone(), temb, table, y)
        got2 = compiled(torch.randn_like(h), temb, table, y)
    assert torch.equal(got, block(h.clone(), temb, table, y))
    assert got2.shape == h.shape


# ---- GPU-only: real LTX shapes, 64-bit offsets -------------------------------------------


@requires_gpu
@pytest.mark.parametrize("per_token", [False, True])
def test_gpu_ltx_2b_shape(per_token):
    b, s, d = 2, 8064, 2048
    h = torch.randn(b, s, d, device="cuda", dtype=BF16)
    shift, scale, gate, *_ = ltx_ada_values(b, s if per_token else 1, d, BF16, "cuda")
    out = kernel.adaln(h, scale, shift)
    _, mag = ref64(h, scale, shift)
    assert_near_eager(out, eager_adaln(h, scale, shift), mag, "LTX 2B")
    y = torch.randn_like(h)
    assert torch.equal(kernel.gated_residual(h, y, gate), h + y * gate)


@requires_gpu
def test_gpu_offsets_beyond_int32():
    d = 2048
    s = (1 << 31) // d + 64  # x has more than 2^31 elements
    h = torch.randn(1, s, d, device="cuda", dtype=BF16)
    scale = torch.randn(1, s, d, device="cuda", dtype=BF16)[..., :]  # per-token, row offsets > 2^31
    out = kernel.adaln(h, scale, None)
    tail = slice(s - 300, s)
    expected = eager_adaln(h[:, tail], scale[:, tail])
    _, mag = ref64(h[:, tail], scale[:, tail])
    assert_near_eager(out[:, tail], expected, mag, "tail rows")
    del out
    g = kernel.gated_residual(h, h, scale)
    assert torch.equal(g[:, tail], h[:, tail] + h[:, tail] * scale[:, tail])


@requires_gpu
def test_gpu_many_rows_grid_stride():
    x = quantised((1_500_000, 64), BF16, "cuda")
    scale = modulation((64,), BF16, "cuda")
    shift = modulation((1_500_000, 64), BF16, "cuda")
    assert torch.equal(kernel.adaln(x, scale, shift), eager_adaln(x, scale, shift))
