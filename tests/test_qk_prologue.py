"""rmsnorm_rope_qk (fused LTX attention prologue) against torch.nn.RMSNorm + diffusers'
apply_rotary_emb, float64, layouts, bad inputs, opcheck and torch.compile."""

import math

import pytest
import torch

from .util import DEVICES, DTYPES, assert_ulp, kernel, misaligned, requires_gpu, unit_roundoff

pytestmark = pytest.mark.kernels_ci

HALF = [torch.float16, torch.bfloat16]


def apply_rotary(x, cos, sin):
    from diffusers.models.transformers.transformer_ltx import apply_rotary_emb

    return apply_rotary_emb(x, (cos, sin))


def ltx_tables(dim, batch, frames, height, width, device):
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

    rope = LTXVideoRotaryPosEmbed(dim, patch_size=1, patch_size_t=1)
    hs = torch.zeros(batch, frames * height * width, dim, device=device)
    return rope(hs, frames, height, width, rope_interpolation_scale=(8 / 25, 32, 32))


def norms(d, dtype, w_dtype, device, eps=1e-5):
    mods = []
    for _ in range(2):
        m = torch.nn.RMSNorm(d, eps=eps).to(device=device, dtype=w_dtype)
        with torch.no_grad():
            m.weight.copy_(torch.randn(d) * 0.5 + 1)
        mods.append(m)
    return mods


def eager(q, k, nq, nk, cos, sin):
    """The unfused LTXVideoAttnProcessor steps 2-3."""
    with torch.no_grad():
        q, k = nq(q), nk(k)
        if cos is not None:
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
    return q, k


def assert_matches_eager(out, ref, what):
    """Equal up to the fp32 reduction order of the norm: a flipped rounding of the
    normalised value (1 ulp of it) moves an output by at most two ulp of the pair's
    magnitude (the rotation preserves |pair|; with a half weight the flip can carry
    through the second rounding after the weight multiply: 1.28 ulp seen on the H200,
    2026-12-03, at D=2048 with a random seed), and in at most 2% of elements."""
    assert out.dtype == ref.dtype and out.shape == ref.shape, what
    o, r = out.double().cpu(), ref.double().cpu()
    pair = r.unflatten(-1, (-1, 2)).norm(dim=-1, keepdim=True).expand(*r.shape[:-1], -1, 2).flatten(-2)
    eps = torch.finfo(out.dtype).eps
    if out.dtype == torch.float32:
        # the sum of squares' rounding grows with log2(D) under another summation order; a
        # flipped rounding of inv moves each rotation term, so the bound follows the terms'
        # size (the row's mean |value|) where the pair itself cancels (tables not unit)
        terms = pair + r.abs().mean(dim=-1, keepdim=True)
        bound = (8 + 2 * math.log2(out.shape[-1])) * eps * terms + 1e-30
    else:
        differ = float((out.cpu() != ref.cpu()).float().mean())
        assert differ <= 0.02, f"{what}: {differ:.2e} of elements differ"
        bound = 2.01 * eps * pair + torch.finfo(out.dtype).tiny
    err = (o - r).abs()
    assert bool((err <= bound).all()), f"{what}: worst err/bound {float((err / bound).max()):.3f}"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("w_dtype", ["same", torch.float32])
@pytest.mark.parametrize("d", [96, 2048])
def test_matches_eager_ltx(device, dtype, w_dtype, d):
    w_dtype = dtype if w_dtype == "same" else w_dtype
    cos, sin = ltx_tables(d, 2, 2, 3, 4, device)
    q = torch.randn(2, 24, d, device=device).mul(3).to(dtype)
    k = torch.randn(2, 24, d, device=device).to(dtype)
    nq, nk = norms(d, dtype, w_dtype, device)
    rq, rk = eager(q, k, nq, nk, cos, sin)
    oq, ok = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, cos, sin, 1e-5)
    assert_matches_eager(oq, rq, "q")
    assert_matches_eager(ok, rk, "k")
    # every table form gives the same bits: [S, D], stride-0 batch
    for c, s in [(cos[0], sin[0]), (cos[:1].expand(2, -1, -1), sin[:1].expand(2, -1, -1))]:
        a, b = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, c, s, 1e-5)
        ra, rb = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, c.expand_as(cos).contiguous(),
                                        s.expand_as(sin).contiguous(), 1e-5)
        assert torch.equal(a, ra) and torch.equal(b, rb)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF)
def test_float64_bound(device, dtype):
    d = 128
    cos, sin = ltx_tables(d, 1, 2, 2, 3, device)
    q = torch.randn(1, 12, d, device=device).to(dtype)
    k = torch.randn(1, 12, d, device=device).mul(0.01).to(dtype)
    wq, wk = torch.randn(d, device=device).to(dtype), torch.randn(d, device=device).to(dtype)
    oq, ok = kernel.rmsnorm_rope_qk(q, k, wq, wk, cos, sin, 1e-5)
    u = unit_roundoff(dtype)
    for x, w, out in ((q, wq, oq), (k, wk, ok)):
        x64, w64, c, s = x.double().cpu(), w.double().cpu(), cos.double().cpu(), sin.double().cpu()
        n = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * w64
        n0, n1 = n[..., 0::2], n[..., 1::2]
        ref = torch.stack([n0 * c[..., 0::2] - n1 * s[..., 0::2], n1 * c[..., 1::2] + n0 * s[..., 1::2]], -1).flatten(-2)
        mag = torch.stack([n0.abs() * c[..., 0::2].abs() + n1.abs() * s[..., 0::2].abs(),
                           n1.abs() * c[..., 1::2].abs() + n0.abs() * s[..., 1::2].abs()], -1).flatten(-2)
        # n rounds once (u, plus fp32 noise), the rotation once more (u of the result)
        bound = (u + 1e-6) * mag + u * ref.abs() + torch.finfo(dtype).tiny
        err = (out.double().cpu() - ref).abs()
        assert bool((err <= bound * 1.001).all()), float((err / bound).max())


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_only_cross_attention(device, dtype):
    d = 64
    q = torch.randn(2, 30, d, device=device).to(dtype)
    k = torch.randn(2, 7, d, device=device).to(dtype)  # text keys: another row count
    nq, nk = norms(d, dtype, dtype, device)
    rq, rk = eager(q, k, nq, nk, None, None)
    oq, ok = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, None, None, 1e-5)
    assert_matches_eager(oq, rq, "q")
    assert_matches_eager(ok, rk, "k")
    # and equal to the package's own torch-semantics rmsnorm: bit for bit in half precision;
    # in fp32 the two kernels' reduction orders may flip roundings (measured: 3 ulp, H200)
    tol = 0 if dtype != torch.float32 else 4

    def same(out, x, w, what, tol=tol):
        assert_ulp(out, kernel.rmsnorm(x, w, 1e-5, semantics="torch"), max_ulp=tol, what=what)

    same(oq, q, nq.weight, "q vs rmsnorm")
    same(ok, k, nk.weight, "k vs rmsnorm")
    # no weights; odd D without tables. D = 63 is the scalar path of both kernels, whose sums
    # of squares add in different orders, so a rounding of the output may flip in half
    # precision too (H100 2026-12-05, fp16: 1 ulp at 1 of 3780 elements): 1 ulp allowed there.
    a, b = kernel.rmsnorm_rope_qk(q[..., :63], k[..., :63], None, None)
    same(a, q[..., :63], None, "q, D=63", max(tol, 1))
    same(b, k[..., :63], None, "k, D=63", max(tol, 1))


@pytest.mark.parametrize("device", DEVICES)
def test_layouts_fused_projection_misaligned_inplace(device):
    bf, d = torch.bfloat16, 128
    cos, sin = ltx_tables(d, 2, 1, 2, 5, device)
    wq, wk = torch.randn(d, device=device).to(bf), torch.randn(d, device=device).to(bf)
    qkv = torch.randn(2, 10, 3 * d, device=device).to(bf)
    q, k = qkv[..., :d], qkv[..., d:2 * d]
    want = kernel.rmsnorm_rope_qk(q.contiguous(), k.contiguous(), wq, wk, cos, sin)
    got = kernel.rmsnorm_rope_qk(q, k, wq, wk, cos, sin)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    # transposed (rows that do not collapse: copied), misaligned by one element
    qt = q.transpose(0, 1).contiguous().transpose(0, 1)
    assert torch.equal(kernel.rmsnorm_rope_qk(qt, k, wq, wk, cos, sin)[0], want[0])
    qm, km = misaligned(q.shape, bf, device, 1), misaligned(k.shape, bf, device, 3)
    qm.copy_(q), km.copy_(k)
    cm, sm = misaligned(cos.shape, torch.float32, device, 1), misaligned(sin.shape, torch.float32, device, 1)
    cm.copy_(cos), sm.copy_(sin)
    got = kernel.rmsnorm_rope_qk(qm, km, wq, wk, cm, sm)
    assert all(torch.equal(a, b) for a, b in zip(got, want))
    # in place, into the views of the fused projection
    out = kernel.rmsnorm_rope_qk(q, k, wq, wk, cos, sin, inplace=True)
    assert out[0] is q and out[1] is k
    assert torch.equal(q, want[0]) and torch.equal(k, want[1])
    # empty
    e = torch.empty(2, 0, d, device=device, dtype=bf)
    assert kernel.rmsnorm_rope_qk(e, e, wq, wk, None, None)[0].shape == e.shape


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_naming_the_argument(device):
    bf = torch.bfloat16
    q = torch.randn(2, 5, 64, device=device, dtype=bf)
    k = torch.randn(2, 5, 64, device=device, dtype=bf)
    w = torch.ones(64, device=device, dtype=bf)
    c = torch.randn(2, 5, 64, device=device)
    f = kernel.rmsnorm_rope_qk
    cases = [
        # float64 runs on the CPU only (gradcheck), and only as the one dtype of a call
        (lambda: f(q.double(), k, w, w, c, c), "k must have q.s dtype" if device == "cpu" else "float64 is supported on the CPU only"),
        (lambda: f(q, k.half(), w, w, c, c), "k must have q's dtype"),
        (lambda: f(q, k[..., :32], w, w, None, None), "k must have q's last dim"),
        (lambda: f(q, k, w[:32], w, c, c), r"q_weight must have shape \[64\]"),
        (lambda: f(q, k, w, w.to(torch.int32), c, c), "k_weight must be float32"),
        (lambda: f(q, k, w, w, c, None), "pass both cos and sin"),
        (lambda: f(q, k, w, w, c.to(bf), c.to(bf)), "cos must be float32"),
        (lambda: f(q, k, w, w, c[:, :4], c[:, :4]), "cos must have shape"),
        (lambda: f(q, k, w, w, c, c[0]), "sin must have cos's shape"),
        (lambda: f(q, k[:, :4], w, w, c, c), "k must have q's shape"),
        (lambda: f(q[..., :63], k[..., :63], None, None, c[..., :63], c[..., :63]), "must be even"),
        (lambda: f(q, k, w, w, c, c, -1.0), "eps must be"),
        (lambda: kernel.ops.rmsnorm_rope_qk_out(q, q, q, k, w, w, c, c, 1e-5), "overlaps"),
        (lambda: kernel.ops.rmsnorm_rope_qk_out(q.clone(), k[:1].clone(), q, k, w, w, c, c, 1e-5),
         "k_out must have k's shape"),
    ]
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    bf = torch.bfloat16
    q = torch.randn(2, 6, 64, device=device, dtype=bf)
    k = torch.randn(2, 6, 64, device=device, dtype=bf)
    w = torch.randn(64, device=device, dtype=bf)
    c, s = torch.randn(6, 64, device=device), torch.randn(6, 64, device=device)
    ops = kernel.ops
    torch.library.opcheck(ops.rmsnorm_rope_qk.default, (q, k, w, w, c, s, 1e-5))
    torch.library.opcheck(ops.rmsnorm_rope_qk.default, (q, k[:, :3], w.float(), None, None, None, 1e-5))
    torch.library.opcheck(
        ops.rmsnorm_rope_qk_out.default, (torch.empty_like(q), torch.empty_like(k), q, k, w, w, c, s, 1e-5))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    bf = torch.bfloat16

    def prologue(q, k, wq, wk, cos, sin):
        q2, k2 = kernel.rmsnorm_rope_qk(q, k, wq, wk, cos, sin)
        return q2 * 2, k2

    def in_place(q, k, wq, wk, cos, sin):
        kernel.rmsnorm_rope_qk(q, k, wq, wk, cos, sin, inplace=True)
        return q * 2

    q = torch.randn(2, 12, 128, device=device, dtype=bf)
    k = torch.randn(2, 12, 128, device=device, dtype=bf)
    w = torch.randn(128, device=device, dtype=bf)
    cos, sin = torch.randn(12, 128, device=device), torch.randn(12, 128, device=device)
    torch._dynamo.reset()
    c1 = torch.compile(prologue, fullgraph=True)
    for a, b in zip(c1(q, k, w, w, cos, sin), prologue(q, k, w, w, cos, sin)):
        assert torch.equal(a, b)
    c2 = torch.compile(in_place, fullgraph=True)
    qc, kc, qe, ke = q.clone(), k.clone(), q.clone(), k.clone()
    assert torch.equal(c2(qc, kc, w, w, cos, sin), in_place(qe, ke, w, w, cos, sin))
    assert torch.equal(qc, qe) and torch.equal(kc, ke)


@requires_gpu
def test_gpu_grid_walk(monkeypatch):
    """With at most 64 blocks per SM walking the token groups grid-stride (LTX_KERNELS_GRID=walk;
    the default is a block per token group)."""
    monkeypatch.setenv("LTX_KERNELS_GRID", "walk")
    test_gpu_real_shape_and_tail()


@requires_gpu
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [2048, 4096, 128])
def test_gpu_tables_prefetch(monkeypatch, dtype, d):
    """The form that asks for the token's table rows in L2 before the reduction
    (LTX_KERNELS_QK_TABLES=prefetch; the default for tables the batch shares) gives the plain
    form's bits (LTX_KERNELS_QK_TABLES=plain), and the candidate that loads them into registers
    with q and k (=early, 2 vectors per thread) the plain form's values up to the norm's
    reduction order, for every table form:
    [B, S, D] full tables, a stride-0 batch, [S, D], pair tables [B, S, D/2], and table rows
    that start 16 bytes past a 128-byte line (its last line prefetched too); the default with
    the token split by the 64-bit division (LTX_KERNELS_QK_SPLIT=divide) and held to 2 blocks
    per SM (LTX_KERNELS_BLOCKS_PER_SM=2); and eager's result with the full tables."""
    dev = "cuda"
    batch, seq = 2, 1031
    q = torch.randn(batch, seq, d, device=dev).mul(3).to(dtype)
    k = torch.randn(batch, seq, d, device=dev).to(dtype)
    nq, nk = norms(d, dtype, dtype, dev)
    angle = torch.randn(batch, seq, d // 2, device=dev).mul(10)
    pc, ps = angle.cos(), angle.sin()
    fc, fs = pc.repeat_interleave(2, -1), ps.repeat_interleave(2, -1)
    wide = torch.randn(batch, seq, d + 4, device=dev)
    wide[..., 4:] = fc
    forms = {"full": (fc, fs), "stride-0 batch": (fc[:1].expand(batch, -1, -1), fs[:1].expand(batch, -1, -1)),
             "[S, D]": (fc[0], fs[0]), "pair": (pc, ps),
             "pair, stride-0 batch": (pc[:1].expand(batch, -1, -1), ps[:1].expand(batch, -1, -1)),
             "offset rows": (wide[..., 4:], fs)}
    for name, (c, s) in forms.items():
        outs = []
        for switch in ("plain", "prefetch", "early", ""):  # "": the default's choice
            monkeypatch.setenv("LTX_KERNELS_QK_TABLES", switch)
            outs.append(kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, c, s, 1e-5))
        (dq, dk), (pq, pk), (eq, ek), (fq, fk) = outs
        # the token split by the 64-bit division (LTX_KERNELS_QK_SPLIT=divide) instead of DivU32's multiply
        monkeypatch.setenv("LTX_KERNELS_QK_TABLES", "")
        monkeypatch.setenv("LTX_KERNELS_QK_SPLIT", "divide")
        vq, vk = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, c, s, 1e-5)
        monkeypatch.delenv("LTX_KERNELS_QK_SPLIT")
        assert torch.equal(vq, fq) and torch.equal(vk, fk), f"{name}: divided token split differs from DivU32's"
        assert torch.equal(dq, pq) and torch.equal(dk, pk), f"{name}: prefetch form differs from the plain one"
        # the early form holds 2 vectors per thread, not 4: twice the threads per row, so its sums of
        # squares add in another order (H100 2026-12-07 22:12: not bit-exact at D = 128-4096 in
        # bf16 / fp16); equal up to that order
        assert_matches_eager(eq, dq, f"{name}: early-table form, q")
        assert_matches_eager(ek, dk, f"{name}: early-table form, k")
        assert torch.equal(dq, fq) and torch.equal(dk, fk), f"{name}: the default differs from the plain form"
        # the default held to 2 blocks per SM (LTX_KERNELS_BLOCKS_PER_SM: dynamic shared memory
        # asked for only to cap occupancy; its A/B baseline)
        monkeypatch.setenv("LTX_KERNELS_BLOCKS_PER_SM", "2")
        bq, bk = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, c, s, 1e-5)
        monkeypatch.delenv("LTX_KERNELS_BLOCKS_PER_SM")
        assert torch.equal(bq, fq) and torch.equal(bk, fk), f"{name}: 2 blocks per SM differs from the default"
        if name == "full":
            rq, rk = eager(q, k, nq, nk, c, s)
            assert_matches_eager(pq, rq, "q")
            assert_matches_eager(pk, rk, "k")


@requires_gpu
def test_gpu_real_shape_and_tail():
    """LTX 2B shape (B=2, 2688 tokens, D=2048) and D=4096 (13B) vs eager; plus a row longer
    than the register cache (tail re-read) and fp32."""
    dev = "cuda"
    for d, frames in [(2048, 7), (4096, 2)]:
        cos, sin = ltx_tables(d, 2, frames, 16, 24, dev)
        q = torch.randn(2, cos.shape[1], d, device=dev, dtype=torch.bfloat16)
        k = torch.randn_like(q)
        nq, nk = norms(d, torch.bfloat16, torch.bfloat16, dev)
        rq, rk = eager(q, k, nq, nk, cos, sin)
        oq, ok = kernel.rmsnorm_rope_qk(q, k, nq.weight, nk.weight, cos, sin)
        assert_matches_eager(oq, rq, f"q d={d}")
        assert_matches_eager(ok, rk, f"k d={d}")
    d = 32768
    # Unit rotations (an angle per pair, as LTX's tables): the bound assumes |out pair| =
    # |in pair|; random N(0, 1) tables (entries up to ~4) scaled a flipped rounding past it
    # (H100, 2026-12-06: 1.59x the bound in fp16).
    angle = torch.randn(3, d // 2, device=dev).mul(10).repeat_interleave(2, dim=-1)
    cos, sin = angle.cos(), angle.sin()
    for dtype in DTYPES:
        q = torch.randn(2, 3, d, device=dev).to(dtype)
        nq, nk = norms(d, dtype, dtype, dev)
        rq, rk = eager(q, q, nq, nk, cos, sin)
        oq, ok = kernel.rmsnorm_rope_qk(q, q, nq.weight, nk.weight, cos, sin)
        assert_matches_eager(oq, rq, f"tail q {dtype}")
        assert_matches_eager(ok, rk, f"tail k {dtype}")
