"""rmsnorm against float64 and against the real modules it replaces."""

import pytest
import torch

from .util import (
    DEVICES,
    DTYPES,
    HAS_GPU,
    assert_near_exact,
    assert_ulp,
    kernel,
    misaligned,
    replay_captured,
    requires_gpu,
    unit_roundoff,
)

pytestmark = pytest.mark.kernels_ci

DIMS = [1, 7, 64, 127, 768, 769, 2048, 3072, 4096, 8193, 16384]
W_DTYPES = [None] + DTYPES


def ref64(x, w, eps):
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    return y if w is None else y * w.double()


def rel_bound(x_dtype, w_dtype, semantics):
    """Worst relative error of the module's own rounding sequence, plus fp32 slack."""
    out = kernel.rms_norm_out_dtype(x_dtype, w_dtype, semantics)
    mid = {"diffusers": w_dtype, "torch": None, "llama": x_dtype}[semantics] if w_dtype else None
    u = unit_roundoff(out) + (unit_roundoff(mid) if mid is not None else 0.0)
    return 2 * u + 1e-5  # fp32 reduction over up to 16K elements


def make_weight(d, dtype, device):
    return None if dtype is None else (1 + 0.5 * torch.randn(d, device=device)).to(dtype)


# ---- float64 reference, all dtype pairs, all three rounding semantics -----------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("w_dtype", W_DTYPES)
@pytest.mark.parametrize("semantics", ["diffusers", "torch", "llama"])
def test_matches_float64(device, d, x_dtype, w_dtype, semantics):
    x = torch.randn(3, 5, d, device=device).to(x_dtype)
    w = make_weight(d, w_dtype, device)
    out = kernel.rmsnorm(x, w, 1e-6, semantics=semantics)
    assert out.dtype == kernel.rms_norm_out_dtype(x_dtype, w_dtype, semantics)
    mid = mid_dtype(x_dtype, w_dtype, semantics)
    bound = rel_bound(x_dtype, w_dtype, semantics)
    assert_near_exact(out, ref64(x, w, 1e-6), bound, f"D={d}", atol_dtype=mid, atol_scale=2.0)


# ---- the real modules: exact or within one ulp -----------------------------------


def diffusers_rmsnorm(d, eps, w):
    from diffusers.models.normalization import RMSNorm

    m = RMSNorm(d, eps=eps, elementwise_affine=w is not None)
    if w is not None:
        m.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
    return m.to(w.device) if w is not None else m


def torch_rmsnorm(d, eps, w):
    m = torch.nn.RMSNorm(d, eps=eps, elementwise_affine=w is not None)
    if w is not None:
        m.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
    return m


def llama_rmsnorm(d, eps, w):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    m = LlamaRMSNorm(d, eps=eps)
    m.weight = torch.nn.Parameter(w.clone(), requires_grad=False)
    return m


def rsqrt_of_mean_square(x, eps):
    """1/rms per row as the modules compute it: fp32 mean of squares, torch.rsqrt."""
    return torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)


def round_once(x, w, eps, out_dtype):
    """torch.compile's regime: fp32 throughout, one rounding."""
    y = x.float() * rsqrt_of_mean_square(x, eps)
    return (y if w is None else y * w.float()).to(out_dtype)


MODULES = {
    "diffusers": (diffusers_rmsnorm, W_DTYPES),
    "torch": (torch_rmsnorm, W_DTYPES),
    "llama": (llama_rmsnorm, DTYPES),
}
MODULE_CASES = [(s, w) for s, (_, ws) in MODULES.items() for w in ws]


def mid_dtype(x_dtype, w_dtype, semantics):
    """The dtype the module rounds the normalised value to before the weight multiply."""
    if w_dtype is None or semantics == "torch":
        return None
    mid = w_dtype if semantics == "diffusers" else x_dtype
    return None if mid == torch.float32 else mid


def module_chain(x, w, inv, semantics):
    """The rounding sequence of the diffusers / Llama module, run with a given 1/rms per row."""
    if semantics == "llama":
        return w * (x.float() * inv).to(x.dtype)
    y = x * inv  # diffusers: x promoted to fp32 by the fp32 1/rms
    if w is None:
        return y.to(x.dtype)
    return (y.to(w.dtype) if w.dtype in (torch.float16, torch.bfloat16) else y) * w


def explained_by_reduction_order(out, x, w, eps, semantics, max_steps=8):
    """True if every row of out is the module's own rounding sequence run with that row's
    1/rms moved by at most max_steps fp32 ulps: what another fp32 summation order does.

    Where x is quantised to bf16 (8 significant bits) and 1/rms has a short mantissa, x / rms
    lands on rounding ties often, and one ulp of 1/rms flips several percent of that row's
    outputs (up to 2 ulps each after the weight multiply): far more than the rare flip of
    random inputs, concentrated in one row. Such a row is still exactly the module's math.
    Only decided where the sequence, with 1/rms unmoved, reproduces the module bit for bit."""
    if semantics not in ("diffusers", "llama") or (semantics == "llama" and w is None) or eps is None:
        return False
    d = x.shape[-1]
    xr, o = x.reshape(-1, d), out.reshape(-1, d)
    inv = rsqrt_of_mean_square(xr, eps)
    with torch.no_grad():
        if not torch.equal(module_chain(xr, w, inv, semantics), MODULES[semantics][0](d, eps, w)(xr)):
            return False
    bits = inv.view(torch.int32)  # positive: +k steps k ulps up
    ok = torch.zeros(xr.shape[0], dtype=torch.bool, device=x.device)
    for k in range(-max_steps, max_steps + 1):
        ok |= (module_chain(xr, w, (bits + k).view(torch.float32), semantics) == o).all(-1)
    return bool(ok.all())


def subnormal_weight_scale(w, mid):
    """How far the weight multiplies a subnormal `mid` intermediate's rounding: max |w| (at
    least 1), the atol_scale of assert_near_exact. (fp16 x, bf16 weight, Llama: x / rms =
    -2.7e-6 times w = 2.28 erred 6.7e-8 against the 6.0e-8 spacing; CI, LTX_TEST_SEED=
    137482145, 2026-12-08.)"""
    return max(1.0, float(w.abs().max())) if mid is not None and w is not None else 1.0


def assert_matches_module(out, expected, mid, what, chain=None):
    """Equal to the module up to the fp32 reduction order.

    Our fp32 sum of squares adds in another order than PyTorch's, so rsqrt can differ
    in its last bit. That flips a rare rounding: by one ulp of the output, or, where the
    module rounds twice (mid dtype), one ulp of the intermediate, which the weight
    multiply turns into at most two ulps of the output. chain = (x, w, eps, semantics)
    (the module's inputs) also accepts rows explained_by_reduction_order, whatever their
    count: the statistical bounds below assume random 1/rms mantissas.
    """
    assert out.dtype == expected.dtype and out.shape == expected.shape, what
    if out.numel() == 0:
        return
    if out.dtype == torch.float32:
        rel = 1e-5 + (4 * unit_roundoff(mid) if mid is not None else 0.0)
        # a flip of a subnormal intermediate is one of its spacings times the weight
        scale = subnormal_weight_scale(chain[1] if chain is not None else None, mid)
        assert_near_exact(out, expected.double(), rel, what, atol_dtype=mid, atol_scale=scale)
        return
    if chain is not None and explained_by_reduction_order(out, *chain):
        return
    differ = float((out != expected).float().mean())
    assert differ <= 0.02, f"{what}: {differ:.2e} of elements differ"
    if mid is None:
        assert_ulp(out, expected, max_ulp=1, what=what)
    else:
        assert_ulp(out, expected, max_ulp=2, what=what)
        assert_ulp(out, expected, max_ulp=1, max_mismatch_frac=1.0, what=what, ignore_frac=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [64, 769, 2048, 4096])
@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("semantics,w_dtype", MODULE_CASES)
def test_matches_module(device, d, x_dtype, semantics, w_dtype):
    eps = 1e-5
    x = torch.randn(4, 33, d, device=device).to(x_dtype)
    w = make_weight(d, w_dtype, device)
    module = MODULES[semantics][0](d, eps, w)
    with torch.no_grad():
        expected = module(x)
    out = kernel.rmsnorm(x, w, eps, semantics=semantics)
    mid = mid_dtype(x_dtype, w_dtype, semantics)
    assert_matches_module(out, expected, mid, f"vs {semantics} module", (x, w, eps, semantics))
    # ... and close to the round-once regime torch.compile produces: one ulp of the
    # output, or (fp32 output after a half-precision intermediate) of the intermediate.
    # A half output after a half intermediate (the module rounds x / rms to `mid`, then the
    # product) is two roundings against one: up to 2 ulps of the output (bf16 x, fp16 weight,
    # diffusers: 2 ulps for ~1% of random inputs on the CPU, 2026-12-06; CI's first flake).
    once = round_once(x, w, eps, out.dtype)
    if out.dtype == torch.float32:
        rel = 1e-5 + (2 * unit_roundoff(mid) if mid is not None else 0.0)
        assert_near_exact(out, once.double(), rel, "vs round-once", atol_dtype=mid,
                          atol_scale=subnormal_weight_scale(w, mid))
    else:
        assert_ulp(out, once, max_ulp=1 if mid is None else 2, what="vs round-once")


@requires_gpu
@pytest.mark.parametrize("rows,d", [(4099, 8192), (2051, 4096), (5003, 2048), (40000, 128), (777, 5120)])
@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("semantics,with_weight", [("diffusers", False), ("diffusers", True), ("llama", True), ("torch", True)])
def test_one_dtype_kernel_many_rows(rows, d, x_dtype, semantics, with_weight):
    """rms_norm_direct_kernel (one dtype, 16-byte vectors, D <= 8192) over thousands of
    rows: 2 and 4 vectors per thread, the widest row it takes, a row that leaves threads
    idle in its last vector (D = 5120), every rounding form; out poisoned with NaN.
    (test_many_rows_grid_stride covers its grid-stride loop.)"""
    check_one_dtype_rows(rows, d, x_dtype, semantics, with_weight)


def check_one_dtype_rows(rows, d, x_dtype, semantics, with_weight, pad=0):
    """rows x d of random x (and a weight of x's dtype) through `semantics`' module and
    through ours into a NaN-poisoned out: they must match. pad > 0: x's rows are `pad`
    elements apart beyond their length and out's 2 * pad (slices of wider buffers)."""
    w_dtype = x_dtype if with_weight else None
    x = torch.randn(rows, d + pad, device="cuda").to(x_dtype)[:, :d]
    w = make_weight(d, w_dtype, "cuda")
    module = MODULES[semantics][0](d, 1e-6, w)
    with torch.no_grad():
        expected = module(x)
    out = torch.full((rows, d + 2 * pad), float("nan"), device="cuda", dtype=expected.dtype)[:, :d]
    kernel.rmsnorm(x, w, 1e-6, semantics=semantics, out=out)
    what = f"{rows}x{d}" + (f" rows padded by {pad}" if pad else "")
    assert_matches_module(out, expected, mid_dtype(x_dtype, w_dtype, semantics), what, (x, w, 1e-6, semantics))


@requires_gpu
@pytest.mark.parametrize("rows,d", [(1, 4096), (16, 4096), (16, 8192), (7, 5120), (33, 2048),
                                    (32, 128), (100, 64), (264, 4096), (266, 4096)])
@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("semantics", ["diffusers", "llama", "torch"])
def test_one_dtype_kernel_few_rows_weight_early(rows, d, x_dtype, semantics):
    """rms_norm_direct_kernel's early-weight form (grids of at most one block per SM: the
    weight loaded with x): one row, decode-sized batches, a row leaving threads idle
    (D = 5120), per-head rows, and 264 / 266 rows of 4096 (2 rows per block: 132 blocks,
    one wave on an H200, or one block more); out poisoned with NaN."""
    check_one_dtype_rows(rows, d, x_dtype, semantics, with_weight=True)


@requires_gpu
@pytest.mark.parametrize("w_form", ["", "late"], ids=["staged", "late"])
@pytest.mark.parametrize("rows,d", [(4099, 8192), (16387, 4096), (2051, 5120), (3001, 1000), (40000, 256)])
def test_one_dtype_kernel_weight_forms(monkeypatch, w_form, rows, d):
    """rms_norm_direct_kernel's weight read back from shared-memory slots queued once per
    block (staged: the default) or loaded after each reduction (late), over many rows (grid-stride
    walk too): 4 and 2 vectors per thread, rows leaving threads idle (5120, 1000), every dtype
    and rounding form; out poisoned with NaN."""
    monkeypatch.setenv("LTX_KERNELS_RMS_W", w_form)
    for grid in ("", "walk"):
        monkeypatch.setenv("LTX_KERNELS_GRID", grid)
        for x_dtype in DTYPES:
            for semantics in ("llama", "diffusers", "torch"):
                check_one_dtype_rows(rows, d, x_dtype, semantics, with_weight=True)


# Decode-sized rows: the default (programmatic dependent launch on sm_90+, 2 vectors per
# thread where the grid stays within one block per SM) and each switched off (developer
# switches, read per call).
DECODE_CANDIDATES = {
    "default": {},
    "no_pdl": {"LTX_KERNELS_PDL": "0"},
    "decode_c4": {"LTX_KERNELS_RMS_DECODE_C": "4"},
    "no_pdl_decode_c4": {"LTX_KERNELS_PDL": "0", "LTX_KERNELS_RMS_DECODE_C": "4"},
    # at most 64 blocks per SM walking the rows grid-stride (the default is a block per row
    # group: common/dispatch.cuh grid_cap)
    "grid_walk": {"LTX_KERNELS_GRID": "walk"},
    # the early-weight kernel with its row loop and looped cross-warp sum (before 2026-12-06)
    "decode_loop": {"LTX_KERNELS_RMS_DECODE": "loop"},
    "decode_loop_grid_walk": {"LTX_KERNELS_RMS_DECODE": "loop", "LTX_KERNELS_GRID": "walk"},
}


@requires_gpu
@pytest.mark.parametrize("candidate", list(DECODE_CANDIDATES))
@pytest.mark.parametrize("rows,d", [(1, 4096), (16, 4096), (7, 2056), (33, 2048), (131, 4096),
                                    (32, 128), (4099, 8192)])
def test_one_dtype_kernel_decode_candidates(monkeypatch, candidate, rows, d):
    """Each decode form gives the module's results, one call at a time: decode-sized
    grids (a row leaving threads idle: 2056), one at the SM count's edge (131 x 4096 with 2
    vectors per thread: 131 blocks), and shapes they leave to the default (per-head, many rows)."""
    for name, value in DECODE_CANDIDATES[candidate].items():
        monkeypatch.setenv(name, value)
    for x_dtype in DTYPES:
        for semantics in ("llama", "diffusers"):
            check_one_dtype_rows(rows, d, x_dtype, semantics, with_weight=semantics == "llama")


@requires_gpu
@pytest.mark.parametrize("r", ["", "2", "4", "0"], ids=["default", "2", "4", "off"])
@pytest.mark.parametrize("rows,d", [(40000, 128), (9001, 64), (50000, 32), (20011, 200), (20011, 256),
                                    (20011, 120)])
def test_one_dtype_kernel_short_rows(monkeypatch, r, rows, d):
    """rms_norm_short_kernel (r rows per thread, one vector of each; by default 4 for rows
    of <= 16 vectors, LTX_KERNELS_RMS_SHORT=2 / 4 also up to 32, 0 off): the per-head
    widths, a row of 4 vectors, rows leaving lanes idle (D = 200 bf16: 25 of 32; D = 120:
    15 of 16), and the widest the switch takes (32 vectors: D = 256 half, 128 fp32), over
    more than one wave (decode-sized calls keep the direct kernel), with a last partial
    iteration; contiguous, and rows of a wider buffer (x and out)."""
    if r:
        monkeypatch.setenv("LTX_KERNELS_RMS_SHORT", r)
    for x_dtype in DTYPES:
        for semantics in ("llama", "diffusers", "torch"):
            check_one_dtype_rows(rows, d, x_dtype, semantics, with_weight=semantics != "diffusers")
        check_one_dtype_rows(rows, d, x_dtype, "llama", with_weight=True, pad=8)


@requires_gpu
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_one_dtype_kernel_pdl_chain(monkeypatch, graph):
    """A chain of PDL launches where each call reads the previous call's output and
    overwrites a buffer the call before it read: a kernel that touched memory before its
    pdl_wait would read NaN poison or stale rows. Eagerly and as a CUDA graph (PDL edges),
    against the same chain without PDL (LTX_KERNELS_PDL=0)."""
    w = make_weight(4096, torch.bfloat16, "cuda")
    x = torch.randn(16, 4096, device="cuda", dtype=torch.bfloat16)
    bufs = [torch.empty_like(x) for _ in range(3)]

    def chain():
        src = x
        for i in range(12):
            dst = bufs[i % 3]
            kernel.rmsnorm(src, w, 1e-6, semantics="llama", out=dst)
            # a cheap elementwise step between some of the calls (a non-PDL kernel)
            if i % 4 == 3:
                dst.mul_(1.5)
            src = dst
        return src.clone()

    def poison():
        for b in bufs:
            b.fill_(float("nan"))

    monkeypatch.setenv("LTX_KERNELS_PDL", "0")
    expected = chain()
    monkeypatch.delenv("LTX_KERNELS_PDL")
    if graph:
        got, _graph = replay_captured(chain, poison)
    else:
        poison()
        got = chain()
    assert torch.equal(got, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_torch_eps_none_is_float32_epsilon(device):
    x = torch.randn(8, 256, device=device, dtype=torch.bfloat16) * 1e-4
    w = make_weight(256, torch.bfloat16, device)
    m = torch_rmsnorm(256, None, w)
    with torch.no_grad():
        expected = m(x)
    assert_matches_module(kernel.rmsnorm(x, w, None, semantics="torch"), expected, None, "eps=None")


def test_seed_era_call_keeps_working():
    device = "cuda" if HAS_GPU else "cpu"
    x = torch.randn(2, 16, 64, device=device, dtype=torch.bfloat16)
    w = make_weight(64, torch.bfloat16, device)
    a = kernel.rmsnorm(x, w, eps=1e-6)
    b = kernel.rmsnorm(x, w, 1e-6)
    c = kernel.rmsnorm(x, weight=w)
    assert torch.equal(a, b) and torch.equal(a, c)


# ---- shapes ---------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "shape", [(0, 64), (0, 0), (2, 0, 64), (1, 64), (64,), (2, 3, 4, 5, 96), (3, 2, 5, 128)]
)
def test_shapes(device, shape):
    x = torch.randn(shape, device=device, dtype=torch.bfloat16)
    w = make_weight(shape[-1], torch.bfloat16, device)
    out = kernel.rmsnorm(x, w)
    assert out.shape == x.shape and out.dtype == torch.bfloat16
    assert_matches_module(
        out, diffusers_rmsnorm(shape[-1], 1e-6, w)(x), torch.bfloat16, str(shape), (x, w, 1e-6, "diffusers")
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [65536, 65537, 100000])
def test_long_rows(device, d):
    x = torch.randn(3, d, device=device, dtype=torch.bfloat16)
    out = kernel.rmsnorm(x)
    assert_near_exact(out, ref64(x, None, 1e-6), rel_bound(torch.bfloat16, None, "diffusers"))


@requires_gpu
def test_many_rows_grid_stride():
    x = torch.randn(1_200_000, 64, device="cuda", dtype=torch.bfloat16)
    w = make_weight(64, torch.bfloat16, "cuda")
    out = kernel.rmsnorm(x, w, semantics="torch")
    assert_ulp(out, round_once(x, w, 1e-6, torch.bfloat16), 1, 0.001)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("scale", [1e3, 3e4])
def test_fp16_large_values_do_not_overflow(device, scale):
    x = (torch.randn(4, 4096, device=device) * scale).clamp(-65504, 65504).half()
    w = make_weight(4096, torch.float16, device)
    out = kernel.rmsnorm(x, w)
    assert out.isfinite().all()
    # Tiny normalised values land in fp16's subnormal range, where each of the two
    # roundings (before and after the weight multiply) costs up to half a spacing * |w|.
    atol_scale = 2 * float(w.abs().max()) + 2
    assert_near_exact(out, ref64(x, w, 1e-6), rel_bound(torch.float16, torch.float16, "diffusers"),
                      atol_dtype=torch.float16, atol_scale=atol_scale)


# ---- layouts --------------------------------------------------------------------


def check_layout(x, w, device):
    out = kernel.rmsnorm(x, w, 1e-6)
    expected = kernel.rmsnorm(x.contiguous(), w, 1e-6)
    assert out.is_contiguous()
    # Another layout may pick another vector width, hence another fp32 summation order.
    mid = mid_dtype(x.dtype, w.dtype, "diffusers")
    assert_matches_module(out, expected, mid, "layout vs contiguous", (x, w, 1e-6, "diffusers"))
    with torch.no_grad():
        expected_module = diffusers_rmsnorm(x.shape[-1], 1e-6, w)(x)
    assert_matches_module(out, expected_module, mid, "layout", (x, w, 1e-6, "diffusers"))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lead", [(6,), (2, 5), (2, 3, 4)])
def test_strided_rows_of_fused_qkv(device, lead):
    d = 2048
    qkv = torch.randn(*lead, 3 * d, device=device, dtype=torch.bfloat16)
    w = make_weight(d, torch.bfloat16, device)
    for part in qkv.split(d, dim=-1):
        check_layout(part, w, device)


@pytest.mark.parametrize("device", DEVICES)
def test_transposed_and_expanded(device):
    x = torch.randn(7, 3, 768, device=device, dtype=torch.bfloat16)
    w = make_weight(768, torch.bfloat16, device)
    check_layout(x.transpose(0, 1), w, device)  # not collapsible: copied
    check_layout(x[:1].expand(4, 3, 768), w, device)  # stride-0 rows
    check_layout(x[:, :, ::2], make_weight(384, torch.bfloat16, device), device)  # strided last dim
    heads = torch.randn(2, 9, 4, 64, device=device, dtype=torch.float16).transpose(1, 2)
    check_layout(heads, make_weight(64, torch.float16, device), device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("dtype", DTYPES)
def test_misaligned_storage_offsets(device, offset, dtype):
    x = misaligned((5, 2048), dtype, device, offset)
    w_full = misaligned((2048,), dtype, device, (offset * 3) % 8)
    check_layout(x, w_full, device)
    out = misaligned((5, 2048), dtype, device, (offset + 1) % 8).fill_(float("nan"))
    kernel.rmsnorm(x, w_full, out=out)
    expected = kernel.rmsnorm(x.contiguous(), w_full.contiguous())
    assert_matches_module(
        out, expected, mid_dtype(dtype, dtype, "diffusers"), "misaligned out", (x, w_full, 1e-6, "diffusers")
    )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("w_dtype", W_DTYPES)
def test_out_variant_writes_every_element(device, x_dtype, w_dtype):
    x = torch.randn(3, 17, 1536, device=device).to(x_dtype)
    w = make_weight(1536, w_dtype, device)
    expected = kernel.rmsnorm(x, w)
    out = torch.full_like(expected, float("nan"))
    assert kernel.rmsnorm(x, w, out=out) is out
    assert torch.equal(out, expected)


@pytest.mark.parametrize("device", DEVICES)
def test_in_place(device):
    x = torch.randn(9, 4096, device=device, dtype=torch.bfloat16)
    expected = kernel.rmsnorm(x)
    kernel.rmsnorm(x, out=x)
    assert torch.equal(x, expected)


# ---- bad input -------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_naming_the_argument(device):
    x = torch.randn(4, 64, device=device, dtype=torch.bfloat16)
    w = make_weight(64, torch.bfloat16, device)
    cases = [
        (lambda: kernel.rmsnorm(x, make_weight(32, torch.bfloat16, device)), "weight must have shape \\[64\\]"),
        (lambda: kernel.rmsnorm(x, w.view(8, 8)), "weight must have shape"),
        # float64 runs on the CPU only (gradcheck), and only as the one dtype of a call
        (lambda: kernel.rmsnorm(x.double(), w), "float64 is all-or-nothing" if device == "cpu" else "float64 is supported on the CPU only"),
        (lambda: kernel.rmsnorm(x.to(torch.int32), None), "x must be float32"),
        (lambda: kernel.rmsnorm(x, w.double()), "float64 is all-or-nothing" if device == "cpu" else "weight is float64"),
        (lambda: kernel.rmsnorm(x, w, -1e-6), "eps must be"),
        (lambda: kernel.rmsnorm(x, w, float("nan")), "eps must be"),
        (lambda: kernel.rmsnorm(x, w, float("inf")), "eps must be"),
        (lambda: kernel.rmsnorm(x, w, out=torch.empty_like(x, dtype=torch.float32)), "out must have dtype"),
        (lambda: kernel.rmsnorm(x, w, out=torch.empty(4, 65, device=device, dtype=x.dtype)), "out must have x's shape"),
        (lambda: kernel.rmsnorm(x, w, out=torch.empty(64, 4, device=device, dtype=x.dtype).t()), "out must have a contiguous last dim"),
        (lambda: kernel.ops.rms_norm(x, w, 1e-6, 7), "semantics must be"),
        (lambda: kernel.rmsnorm(torch.tensor(1.0, device=device), None), "at least one dimension"),
    ]
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()
    with pytest.raises(ValueError, match="semantics must be one of"):
        kernel.rmsnorm(x, w, semantics="gemma")


@requires_gpu
def test_mixed_devices_raise():
    x = torch.randn(4, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="weight is on cpu but x is on cuda"):
        kernel.rmsnorm(x, torch.ones(64, dtype=torch.bfloat16))
    with pytest.raises(RuntimeError, match="weight is on cuda:0 but x is on cpu"):
        kernel.rmsnorm(x.cpu(), torch.ones(64, device="cuda", dtype=torch.bfloat16))


@requires_gpu
def test_cpu_tensor_on_cuda_build_raises():
    with pytest.raises(RuntimeError, match="CUDA variant and has no kernels for that device"):
        kernel.rmsnorm(torch.randn(2, 64))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU to make a CUDA tensor")
def test_cuda_tensor_on_cpu_build_raises():
    from .util import load_kernel

    try:
        cpu_kernel = load_kernel(backend="cpu")
    except Exception as e:  # the CPU variant is not built on this machine
        pytest.skip(f"no CPU variant built here: {e}")
    with pytest.raises(RuntimeError, match="CPU variant and has no kernels for that device"):
        cpu_kernel.rmsnorm(torch.randn(2, 64, device="cuda"))


# ---- torch.library / torch.compile -------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    for x_dtype, w_dtype, sem in [
        (torch.bfloat16, torch.bfloat16, 0),
        (torch.bfloat16, None, 0),
        (torch.float16, torch.float32, 2),
        (torch.float32, torch.bfloat16, 1),
    ]:
        x = torch.randn(3, 7, 256, device=device).to(x_dtype)
        w = make_weight(256, w_dtype, device)
        torch.library.opcheck(kernel.ops.rms_norm.default, (x, w, 1e-6, sem))
        out = kernel.rmsnorm(x, w, semantics=["diffusers", "torch", "llama"][sem])
        torch.library.opcheck(kernel.ops.rms_norm_out.default, (torch.empty_like(out), x, w, 1e-6, sem))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    def block(x, w):
        return kernel.rmsnorm(x, w, 1e-6) * 2 + kernel.rmsnorm(x, None, 1e-5, semantics="torch")

    x = torch.randn(2, 33, 2048, device=device, dtype=torch.bfloat16)
    w = make_weight(2048, torch.bfloat16, device)
    torch._dynamo.reset()
    compiled = torch.compile(block, fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        got = compiled(x, w)
        got2 = compiled(torch.randn_like(x), w)
    assert torch.equal(got, block(x, w))
    assert got2.shape == x.shape
