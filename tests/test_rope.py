"""RoPE (interleaved and rotate-half) against float64 and against the real functions."""

import itertools

import pytest
import torch

from .util import (
    DEVICES,
    DTYPES,
    HAS_GPU,
    kernel,
    misaligned,
    replay_captured,
    requires_gpu,
    subnormal_spacing,
    unit_roundoff,
)

pytestmark = pytest.mark.kernels_ci

HALF_DTYPES = [torch.float16, torch.bfloat16]


# ---- references ---------------------------------------------------------------------


def diffusers_ltx_apply(x, cos, sin):
    from diffusers.models.transformers.transformer_ltx import apply_rotary_emb

    return apply_rotary_emb(x, (cos, sin))


def ltx_tables(dim, batch, frames, height, width, scale=None, device="cpu"):
    """cos/sin from a real LTXVideoRotaryPosEmbed: fp32 [B, F*H*W, dim]."""
    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed

    rope = LTXVideoRotaryPosEmbed(dim, patch_size=1, patch_size_t=1)
    hs = torch.zeros(batch, frames * height * width, dim, device=device)
    return rope(hs, frames, height, width, rope_interpolation_scale=scale)


def llama_apply(q, k, cos, sin, unsqueeze_dim=1):
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def neox_apply(q, k, cos, sin, unsqueeze_dim=1):
    from transformers.models.gpt_neox.modeling_gpt_neox import apply_rotary_pos_emb

    return apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=unsqueeze_dim)


def llama_tables(head_dim, batch, seq, dtype, device, offset=0):
    """cos/sin from a real LlamaRotaryEmbedding (tiny config), cast to `dtype` by it."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = LlamaConfig(
        hidden_size=4 * head_dim, num_attention_heads=4, num_key_value_heads=2, head_dim=head_dim,
        max_position_embeddings=4096,
    )
    rope = LlamaRotaryEmbedding(cfg).to(device)
    pos = (torch.arange(seq, device=device) + offset)[None].expand(batch, seq)
    return rope(torch.zeros(1, device=device, dtype=dtype), pos)


def neox_tables(head_dim, pct, batch, seq, dtype, device):
    from transformers import GPTNeoXConfig
    from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding

    cfg = GPTNeoXConfig(
        hidden_size=4 * head_dim, num_attention_heads=4, rotary_pct=pct, intermediate_size=64,
        num_hidden_layers=1,
    )
    rope = GPTNeoXRotaryEmbedding(cfg).to(device)
    pos = torch.arange(seq, device=device)[None].expand(batch, seq)
    return rope(torch.zeros(1, device=device, dtype=dtype), pos)


def interleaved_ref64(x, cos, sin):
    """(value, magnitude |x*cos| + |rot(x)*sin|) in float64."""
    x64 = x.double()
    xr = x64.unflatten(-1, (-1, 2))
    rot = torch.stack([-xr[..., 1], xr[..., 0]], -1).flatten(-2)
    c, s = cos.double(), sin.double()
    return x64 * c + rot * s, (x64 * c).abs() + (rot * s).abs()


def table3(t):
    return t if t.dim() == 3 else t[None]


def half_ref64(x, cos, sin, u):
    c = table3(cos).double().unsqueeze(u)
    s = table3(sin).double().unsqueeze(u)
    r = c.shape[-1]
    xr, xp = x[..., :r].double(), x[..., r:].double()
    rot = torch.cat([-xr[..., r // 2 :], xr[..., : r // 2]], -1)
    val = torch.cat([xr * c + rot * s, xp], -1)
    mag = torch.cat([(xr * c).abs() + (rot * s).abs(), xp.abs()], -1)
    return val, mag


def half_once(x, cos, sin, u):
    """fp32 math, one rounding: the regime for float32 tables (eager fp32 ops, no FMA)."""
    c = table3(cos).float().unsqueeze(u)
    s = table3(sin).float().unsqueeze(u)
    r = c.shape[-1]
    xr, xp = x[..., :r].float(), x[..., r:]
    rot = torch.cat([-xr[..., r // 2 :], xr[..., : r // 2]], -1)
    return torch.cat([(xr * c + rot * s).to(x.dtype), xp], -1)


def assert_close64(out, ref, mag, step, what=""):
    """|out - ref| <= u_out |ref| + k u (|a| + |b|) + tiny: one rounding of the result, plus
    the rounding of the two products (step regime: in the output dtype; else fp32)."""
    u = unit_roundoff(out.dtype)
    u_mid = u if step else unit_roundoff(torch.float32)
    err = (out.double().cpu() - ref.cpu()).abs()
    bound = u * ref.abs().cpu() + 2.5 * u_mid * mag.cpu() + 2 * subnormal_spacing(out.dtype)
    bad = ~(err <= bound)
    assert not bool(bad.any()), f"{what}: {int(bad.sum())} of {err.numel()} exceed the bound"


# ---- interleaved: the real LTX-Video function and tables ------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dim", [2048, 96, 100, 130, 64])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scale", [None, (8 / 25, 32, 32)])
def test_interleaved_matches_ltx(device, dim, dtype, scale):
    cos, sin = ltx_tables(dim, 2, 3, 4, 5, scale, device)
    pad = dim % 6
    assert bool((cos[..., :pad] == 1).all()) and bool((sin[..., :pad] == 0).all())
    x = torch.randn(2, 60, dim, device=device).to(dtype)
    out = kernel.rope_interleaved(x, cos, sin)
    assert out.dtype == dtype and out.shape == x.shape
    assert torch.equal(out, diffusers_ltx_apply(x, cos, sin)), "not bit-exact vs diffusers"
    assert torch.equal(out[..., :pad], x[..., :pad]), "padding channels must pass through"
    ref, mag = interleaved_ref64(x, cos, sin)
    assert_close64(out, ref, mag, step=False, what="vs float64")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_interleaved_qk_matches_ltx(device, dtype):
    d = 2048
    cos, sin = ltx_tables(d, 2, 2, 3, 4, (8 / 25, 32, 32), device)
    q = torch.randn(2, 24, d, device=device).to(dtype)
    k = torch.randn(2, 24, d, device=device).to(dtype)
    q_out, k_out = kernel.rope_interleaved_qk(q, k, cos, sin)
    assert torch.equal(q_out, diffusers_ltx_apply(q, cos, sin))
    assert torch.equal(k_out, diffusers_ltx_apply(k, cos, sin))
    q2, k2 = q.clone(), k.clone()
    r = kernel.rope_interleaved_qk(q2, k2, cos, sin, inplace=True)
    assert r[0] is q2 and r[1] is k2
    assert torch.equal(q2, q_out) and torch.equal(k2, k_out)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("lead", [(6,), (2, 5), (2, 3, 4)])
def test_interleaved_fused_projection_slices(device, lead):
    """q/k/v = qkv.split(D, -1): row-strided views, run without copies."""
    d = 256
    s = lead[-1]
    qkv = torch.randn(*lead, 3 * d, device=device, dtype=torch.bfloat16)
    cos = torch.randn(s, d, device=device)
    sin = torch.randn(s, d, device=device)
    q, k, _ = qkv.split(d, dim=-1)
    q_out, k_out = kernel.rope_interleaved_qk(q, k, cos, sin)  # [S, D] lead: one batch
    assert torch.equal(q_out, diffusers_ref_any(q, cos, sin))
    assert torch.equal(k_out, diffusers_ref_any(k, cos, sin))
    before = qkv.clone()
    kernel.rope_interleaved_qk(q, k, cos, sin, inplace=True)
    assert torch.equal(qkv[..., :d], q_out) and torch.equal(qkv[..., d : 2 * d], k_out)
    assert torch.equal(qkv[..., 2 * d :], before[..., 2 * d :]), "v must be untouched"


def diffusers_ref_any(x, cos, sin):
    """diffusers' formula for any rank (its function unflattens dim 2, i.e. wants 3-D)."""
    if x.dim() == 3:
        return diffusers_ltx_apply(x, cos, sin)
    flat = x.reshape(-1, x.shape[-2], x.shape[-1])
    c = cos.expand(x.shape).reshape(flat.shape)
    s = sin.expand(x.shape).reshape(flat.shape)
    return diffusers_ltx_apply(flat, c, s).view(x.shape)


@pytest.mark.parametrize("device", DEVICES)
def test_interleaved_table_broadcasts(device):
    d, s = 128, 9
    x = torch.randn(3, s, d, device=device, dtype=torch.bfloat16)
    cos = torch.randn(s, d, device=device)
    sin = torch.randn(s, d, device=device)
    expected = diffusers_ltx_apply(x, cos.expand(3, s, d), sin.expand(3, s, d))
    for c, sn in [
        (cos, sin),  # [S, D]
        (cos[None], sin[None]),  # [1, S, D]
        (cos[None].expand(3, s, d), sin[None].expand(3, s, d)),  # stride-0 batch
        (cos.expand(3, s, d).contiguous(), sin[None].expand(3, s, d)),  # mixed strides
    ]:
        assert torch.equal(kernel.rope_interleaved(x, c, sn), expected)
    # 4-D x with a table that broadcasts over the outer dim only (copied internally).
    x4 = torch.randn(2, 3, s, d, device=device, dtype=torch.float16)
    c3, s3 = torch.randn(3, s, d, device=device), torch.randn(3, s, d, device=device)
    assert torch.equal(kernel.rope_interleaved(x4, c3, s3), diffusers_ref_any(x4, c3, s3))
    # A single position broadcast over the sequence.
    c1, s1 = torch.randn(1, d, device=device), torch.randn(1, d, device=device)
    assert torch.equal(kernel.rope_interleaved(x, c1, s1), diffusers_ref_any(x, c1, s1))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d", [2, 6, 14, 62, 130, 2046])
@pytest.mark.parametrize("dtype", DTYPES)
def test_interleaved_odd_widths(device, d, dtype):
    x = torch.randn(2, 5, d, device=device).to(dtype)
    cos, sin = torch.randn(2, 5, d, device=device), torch.randn(2, 5, d, device=device)
    assert torch.equal(kernel.rope_interleaved(x, cos, sin), diffusers_ltx_apply(x, cos, sin))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("dtype", DTYPES)
def test_interleaved_misaligned(device, offset, dtype):
    shape = (2, 6, 256)
    x = misaligned(shape, dtype, device, offset)
    cos = misaligned(shape, torch.float32, device, (offset * 3) % 8)
    sin = misaligned(shape, torch.float32, device, (offset * 5) % 8)
    expected = diffusers_ltx_apply(x, cos, sin)
    assert torch.equal(kernel.rope_interleaved(x, cos, sin), expected)
    out = misaligned(shape, dtype, device, (offset + 1) % 8).fill_(float("nan"))
    assert kernel.rope_interleaved(x, cos, sin, out=out) is out
    assert torch.equal(out, expected)
    q2 = misaligned(shape, dtype, device, (offset + 2) % 8)
    q_out, k_out = kernel.rope_interleaved_qk(x, q2, cos, sin)
    assert torch.equal(q_out, expected) and torch.equal(k_out, diffusers_ltx_apply(q2, cos, sin))


# ---- pair tables: [S, D/2] / [B, S, D/2], value i for channels 2i and 2i+1 -----------------


def pair_tables(shape, device, offset=0):
    """Pair tables of `shape` (last dim D/2), their full [.., D] equivalents (LTX's
    repeat_interleave(2)); data starting `offset` floats into storage (misaligned)."""
    c = misaligned(shape, torch.float32, device, offset)
    s = misaligned(shape, torch.float32, device, (offset + 3) % 8)
    return c, s, c.repeat_interleave(2, -1), s.repeat_interleave(2, -1)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("d", [2, 6, 10, 64, 128, 2048])
@pytest.mark.parametrize("tables", ["SD", "BSD", "B1D", "expanded", "offset1", "strided"])
def test_interleaved_pair_tables_equal_full_tables(device, dtype, d, tables):
    """Pair tables give exactly the result of their repeat_interleave(2) (every kernel
    form: 16-byte units, narrow units, scalar), for rope_interleaved (also out= and
    in place) and rope_interleaved_qk; broadcast, stride-0, misaligned and row-strided
    tables."""
    b, s = 2, 7
    x = torch.randn(b, s, d, device=device).to(dtype)
    k = torch.randn(b, s, d, device=device).to(dtype)
    shape = {"SD": (s, d // 2), "B1D": (1, s, d // 2)}.get(tables, (b, s, d // 2))
    c, sn, cf, sf = pair_tables(shape, device, offset=1 if tables == "offset1" else 0)
    if tables == "expanded":  # stride-0 batch (LTX's CFG halves)
        c, sn = c[:1].expand(shape), sn[:1].expand(shape)
        cf, sf = c.repeat_interleave(2, -1), sn.repeat_interleave(2, -1)
    if tables == "strided":  # rows of a wider buffer: row stride != D/2
        wide_c = torch.randn(b, s, d // 2 + 3, device=device)
        wide_s = torch.randn(b, s, d // 2 + 3, device=device)
        c, sn = wide_c[..., : d // 2], wide_s[..., : d // 2]
        cf, sf = c.repeat_interleave(2, -1), sn.repeat_interleave(2, -1)
    want = kernel.rope_interleaved(x, cf, sf)
    assert torch.equal(kernel.rope_interleaved(x, c, sn), want)
    assert torch.equal(want, diffusers_ltx_apply(x, cf, sf))
    out = torch.full_like(x, float("nan"))
    assert torch.equal(kernel.rope_interleaved(x, c, sn, out=out), want)
    xi = x.clone()
    kernel.rope_interleaved(xi, c, sn, out=xi)
    assert torch.equal(xi, want)
    q_out, k_out = kernel.rope_interleaved_qk(x, k, c, sn)
    assert torch.equal(q_out, want) and torch.equal(k_out, kernel.rope_interleaved(k, cf, sf))


@pytest.mark.parametrize("device", DEVICES)
def test_interleaved_pair_tables_bad_shapes_name_the_argument(device):
    x = torch.randn(2, 5, 12, device=device)
    good = torch.randn(5, 6, device=device)
    for bad in (torch.randn(5, 5, device=device), torch.randn(5, 7, device=device),
                torch.randn(3, 6, device=device), torch.randn(6, device=device)):
        with pytest.raises(RuntimeError, match=r"ltx_kernels.rope_interleaved: cos must have shape .*D/2"):
            kernel.rope_interleaved(x, bad, bad)
    with pytest.raises(RuntimeError, match="sin must have cos's shape"):
        kernel.rope_interleaved(x, good, torch.randn(5, 12, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_interleaved_layouts(device):
    d = 64
    base = torch.randn(7, 3, d, device=device, dtype=torch.bfloat16)
    cos, sin = torch.randn(3, 7, d, device=device), torch.randn(3, 7, d, device=device)
    xt = base.transpose(0, 1)  # [3, 7, d], batch/sequence strides swapped: no copy needed
    assert torch.equal(kernel.rope_interleaved(xt, cos, sin), diffusers_ltx_apply(xt, cos, sin))
    # strided last dim: copied
    wide = torch.randn(3, 7, 2 * d, device=device, dtype=torch.bfloat16)
    xs = wide[..., ::2]
    assert torch.equal(kernel.rope_interleaved(xs, cos, sin), diffusers_ltx_apply(xs, cos, sin))
    # tables with a strided last dim / transposed
    ct = torch.randn(3, d, 7, device=device).transpose(1, 2)
    assert torch.equal(kernel.rope_interleaved(xt, ct, sin), diffusers_ltx_apply(xt, ct, sin))
    # 4-D x whose leading dims do not collapse; in place into it and into a strided out
    x4 = torch.randn(3, 2, 7, d, device=device, dtype=torch.float16).transpose(0, 1)
    c4, s4 = torch.randn(7, d, device=device), torch.randn(7, d, device=device)
    expected = diffusers_ref_any(x4.contiguous(), c4, s4)
    assert torch.equal(kernel.rope_interleaved(x4, c4, s4), expected)
    out = torch.empty(3, 2, 7, d, device=device, dtype=torch.float16).transpose(0, 1)
    kernel.rope_interleaved(x4, c4, s4, out=out)
    assert torch.equal(out, expected)
    kernel.rope_interleaved(x4, c4, s4, out=x4)
    assert torch.equal(x4, expected)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_interleaved_in_place(device, dtype):
    cos, sin = ltx_tables(2048, 1, 2, 2, 3, None, device)
    x = torch.randn(1, 12, 2048, device=device).to(dtype)
    expected = diffusers_ltx_apply(x, cos, sin)
    assert kernel.rope_interleaved(x, cos, sin, out=x) is x
    assert torch.equal(x, expected)


# ---- rotate-half: transformers' functions and tables ------------------------------------


def make_heads(b, h, s, d, dtype, device, u):
    """q in the unsqueeze_dim layout: [B, H, S, D] (u=1) or [B, S, H, D] (u=2)."""
    shape = (b, h, s, d) if u == 1 else (b, s, h, d)
    return torch.randn(shape, device=device).to(dtype)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("u", [1, 2])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_rotate_half_matches_llama(device, dtype, u, head_dim):
    b, s, hq, hk = 2, 11, 8, 2  # GQA
    cos, sin = llama_tables(head_dim, b, s, dtype, device, offset=37)
    assert cos.dtype == dtype
    q = make_heads(b, hq, s, head_dim, dtype, device, u)
    k = make_heads(b, hk, s, head_dim, dtype, device, u)
    eq, ek = llama_apply(q, k, cos, sin, u)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin, u)
    assert oq.dtype == dtype and ok.dtype == dtype
    assert torch.equal(oq, eq) and torch.equal(ok, ek), "not bit-exact vs Llama eager"
    rq, mq = half_ref64(q, cos, sin, u)
    assert_close64(oq, rq, mq, step=dtype != torch.float32, what="q vs float64")
    # (No ulp bound against the round-once regime: where the two products nearly cancel,
    # the step regime's product roundings are many ulps of the result. float64 bounds both.)
    if dtype == torch.float32:
        assert torch.equal(oq, half_once(q, cos, sin, u))
    assert torch.equal(kernel.rope_rotate_half_single(k, cos, sin, u), ok)


@requires_gpu
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("u", [1, 2])
@pytest.mark.parametrize("head_dim,pct", [(128, 1.0), (64, 1.0), (64, 0.5), (80, 0.4)])
def test_rotate_half_packed_form(dtype, u, head_dim, pct):
    """The packed rotate-half form (rope_kernel's kPacked), taken by half x with tables of
    its dtype on 16-byte units: bit-exact vs Llama / GPT-NeoX eager, GQA, partial rotary,
    both layouts, in place, many tokens."""
    b, s, hq, hk = 2, 1031, 8, 2
    if pct == 1.0:
        cos, sin = llama_tables(head_dim, b, s, dtype, device="cuda", offset=5)
        apply = llama_apply
    else:
        cos, sin = neox_tables(head_dim, pct, b, s, dtype, "cuda")
        apply = neox_apply
    assert cos.dtype == dtype
    q = make_heads(b, hq, s, head_dim, dtype, "cuda", u)
    k = make_heads(b, hk, s, head_dim, dtype, "cuda", u)
    eq, ek = apply(q, k, cos, sin, u)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin, u)
    assert torch.equal(oq, eq) and torch.equal(ok, ek), "not bit-exact vs eager"
    kernel.rope_rotate_half(q, k, cos, sin, u, inplace=True)
    assert torch.equal(q, eq) and torch.equal(k, ek), "in place"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("u", [1, 2])
def test_rotate_half_fp32_tables_round_once(device, dtype, u):
    b, s, hq, hk, d = 2, 9, 4, 1, 64
    cos, sin = llama_tables(d, b, s, torch.float32, device)
    q = make_heads(b, hq, s, d, dtype, device, u)
    k = make_heads(b, hk, s, d, dtype, device, u)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin, u)
    assert oq.dtype == dtype and ok.dtype == dtype, "outputs keep the input dtype"
    # Llama eager promotes to fp32 here; rounding its result once is exactly our regime.
    eq, ek = llama_apply(q, k, cos, sin, u)
    assert eq.dtype == torch.float32
    assert torch.equal(oq, eq.to(dtype)) and torch.equal(ok, ek.to(dtype))
    rq, mq = half_ref64(q, cos, sin, u)
    assert_close64(oq, rq, mq, step=False, what="vs float64")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("head_dim,pct", [(64, 0.25), (64, 0.5), (80, 0.4), (40, 0.6), (32, 1.0)])
def test_rotate_half_partial_matches_neox(device, dtype, head_dim, pct):
    b, s, h = 2, 7, 4
    cos, sin = neox_tables(head_dim, pct, b, s, dtype, device)
    r = cos.shape[-1]
    assert r == int(head_dim * pct)
    q = make_heads(b, h, s, head_dim, dtype, device, 1)
    k = make_heads(b, 2, s, head_dim, dtype, device, 1)
    eq, ek = neox_apply(q, k, cos, sin)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin)
    assert torch.equal(oq, eq) and torch.equal(ok, ek), "not bit-exact vs GPT-NeoX eager"
    assert torch.equal(oq[..., r:], q[..., r:]), "pass-through channels changed"
    q2, k2 = q.clone(), k.clone()
    kernel.rope_rotate_half(q2, k2, cos, sin, inplace=True)
    assert torch.equal(q2, eq) and torch.equal(k2, ek)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("d,r", [(2, 2), (6, 6), (10, 4), (24, 24), (96, 96), (256, 256), (128, 2), (64, 0)])
@pytest.mark.parametrize("table_dtype", ["same", "float32"])
def test_rotate_half_widths(device, d, r, table_dtype):
    dtype = torch.bfloat16
    tdt = dtype if table_dtype == "same" else torch.float32
    q = torch.randn(2, 3, 5, d, device=device).to(dtype)
    k = torch.randn(2, 1, 5, d, device=device).to(dtype)
    cos = torch.randn(2, 5, r, device=device).to(tdt)
    sin = torch.randn(2, 5, r, device=device).to(tdt)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin)
    if tdt == dtype:
        eq, ek = neox_apply(q, k, cos, sin)
    else:
        eq, ek = half_once(q, cos, sin, 1), half_once(k, cos, sin, 1)
    assert torch.equal(oq, eq) and torch.equal(ok, ek)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotate_half_shared_and_expanded_tables(device, dtype):
    b, s, d = 3, 6, 64
    cos, sin = llama_tables(d, 1, s, dtype, device)  # [1, S, D]
    q = make_heads(b, 4, s, d, dtype, device, 2)
    k = make_heads(b, 2, s, d, dtype, device, 2)
    eq, ek = llama_apply(q, k, cos, sin, 2)
    for c, sn in [(cos, sin), (cos[0], sin[0]), (cos.expand(b, s, d), sin.expand(b, s, d))]:
        oq, ok = kernel.rope_rotate_half(q, k, c, sn, 2)
        assert torch.equal(oq, eq) and torch.equal(ok, ek)
    # one position for every token (decode step), broadcast over S
    c1, s1 = cos[:, :1], sin[:, :1]
    oq, ok = kernel.rope_rotate_half(q, k, c1, s1, 2)
    assert torch.equal(oq, llama_apply(q, k, c1, s1, 2)[0])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("u", [1, 2])
def test_rotate_half_layouts(device, u):
    """Transposes between the two layouts, fused-qkv slices, strided last dim."""
    dtype = torch.bfloat16
    b, s, hq, hk, d = 2, 7, 4, 2, 64
    cos, sin = llama_tables(d, b, s, dtype, device)
    # fused projection [B, S, (hq + 2 hk) * d] -> heads views
    qkv = torch.randn(b, s, (hq + 2 * hk) * d, device=device, dtype=dtype)
    q = qkv[..., : hq * d].view(b, s, hq, d)
    k = qkv[..., hq * d : (hq + hk) * d].view(b, s, hk, d)
    if u == 1:
        q, k = q.transpose(1, 2), k.transpose(1, 2)  # [B, H, S, D] views, not contiguous
    eq, ek = llama_apply(q, k, cos, sin, u)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin, u)
    assert torch.equal(oq, eq) and torch.equal(ok, ek)
    v_before = qkv[..., (hq + hk) * d :].clone()
    kernel.rope_rotate_half(q, k, cos, sin, u, inplace=True)
    assert torch.equal(q, eq) and torch.equal(k, ek)
    assert torch.equal(qkv[..., (hq + hk) * d :], v_before)
    # strided last dim (copied in; for in place, computed aside and copied back)
    wide = torch.randn(b, hq, s, 2 * d, device=device, dtype=dtype)
    qs = wide[..., ::2] if u == 1 else wide[..., ::2].transpose(1, 2)
    es = kernel.rope_rotate_half_single(qs.contiguous(), cos, sin, u)
    assert torch.equal(kernel.rope_rotate_half_single(qs, cos, sin, u), es)
    assert torch.equal(es, llama_apply(qs, qs, cos, sin, u)[0])
    kernel.rope_rotate_half_single(qs, cos, sin, u, inplace=True)
    assert torch.equal(qs, es)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("offset", range(1, 8))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("table_dtype", ["same", "float32"])
def test_rotate_half_misaligned(device, offset, dtype, table_dtype):
    tdt = dtype if table_dtype == "same" else torch.float32
    b, s, d = 2, 5, 128
    q = misaligned((b, 4, s, d), dtype, device, offset)
    k = misaligned((b, 2, s, d), dtype, device, (offset + 3) % 8)
    cos = misaligned((b, s, d), tdt, device, (offset * 3) % 8)
    sin = misaligned((b, s, d), tdt, device, (offset * 5) % 8)
    expected = (half_once(q, cos, sin, 1), half_once(k, cos, sin, 1))
    if tdt == dtype:
        expected = llama_apply(q, k, cos, sin)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin)
    assert torch.equal(oq, expected[0]) and torch.equal(ok, expected[1])
    outs = [misaligned(t.shape, dtype, device, (offset + 1) % 8).fill_(float("nan")) for t in (q, k)]
    kernel.ops.rope_rotate_half_out(outs[0], outs[1], q, k, cos, sin, 1)
    assert torch.equal(outs[0], expected[0]) and torch.equal(outs[1], expected[1])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_rotate_half_in_place_and_out_of_place_agree(device, dtype):
    cos, sin = llama_tables(64, 2, 9, dtype, device)
    q = make_heads(2, 8, 9, 64, dtype, device, 1)
    k = make_heads(2, 1, 9, 64, dtype, device, 1)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin)
    q2, k2 = q.clone(), k.clone()
    rq, rk = kernel.rope_rotate_half(q2, k2, cos, sin, inplace=True)
    assert rq is q2 and rk is k2
    assert torch.equal(q2, oq) and torch.equal(k2, ok)
    x = q.clone()
    assert kernel.rope_rotate_half_single(x, cos, sin, inplace=True) is x
    assert torch.equal(x, oq)


# ---- shapes and bad input --------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_empty_inputs(device):
    bf = torch.bfloat16
    for shape in [(0, 5, 64), (2, 0, 64), (2, 5, 0)]:
        x = torch.randn(shape, device=device, dtype=bf)
        c = torch.randn(shape[1:], device=device)
        assert kernel.rope_interleaved(x, c, c).shape == shape
        qo, ko = kernel.rope_interleaved_qk(x, x, c, c)
        assert qo.shape == shape and ko.shape == shape
    for q_shape, k_shape in [((0, 4, 5, 64), (0, 2, 5, 64)), ((2, 4, 0, 64), (2, 2, 0, 64)),
                             ((2, 0, 5, 64), (2, 0, 5, 64)), ((2, 4, 5, 64), (2, 0, 5, 64))]:
        q = torch.randn(q_shape, device=device, dtype=bf)
        k = torch.randn(k_shape, device=device, dtype=bf)
        c = torch.randn(q_shape[0], q_shape[2], 64, device=device, dtype=bf)
        oq, ok = kernel.rope_rotate_half(q, k, c, c)
        assert oq.shape == q_shape and ok.shape == k_shape
        assert torch.equal(oq, llama_apply(q, q, c, c)[0])
        assert kernel.rope_rotate_half_single(k, c, c).shape == k_shape


@pytest.mark.parametrize("device", DEVICES)
def test_bad_inputs_raise_naming_the_argument(device):
    bf = torch.bfloat16
    x = torch.randn(2, 5, 64, device=device, dtype=bf)
    c = torch.randn(2, 5, 64, device=device)
    q = torch.randn(2, 4, 5, 64, device=device, dtype=bf)
    k = torch.randn(2, 2, 5, 64, device=device, dtype=bf)
    hc = torch.randn(2, 5, 64, device=device, dtype=bf)
    buf = torch.randn(11 * 64, device=device, dtype=bf)
    k2, k3 = x.clone(), torch.empty_like(x)
    cases = [
        (lambda: kernel.rope_interleaved(x.to(torch.int32), c, c), "x must be float32"),
        (lambda: kernel.rope_interleaved(x[..., :63], c[..., :63], c[..., :63]), "last dim must be even"),
        (lambda: kernel.rope_interleaved(x[0, 0], c[0, 0], c[0, 0]), "at least 2 dims"),
        (lambda: kernel.rope_interleaved(x, c.to(bf), c.to(bf)), "cos must be float32"),
        (lambda: kernel.rope_interleaved(x, c, c.double()), "sin must be float32"),
        (lambda: kernel.rope_interleaved(x, c[..., :30], c[..., :30]), "cos must have shape"),  # neither D nor D/2
        (lambda: kernel.rope_interleaved(x, c[:, :4], c[:, :4]), "cos must have shape"),
        (lambda: kernel.rope_interleaved(x, torch.randn(3, 5, 64, device=device), torch.randn(3, 5, 64, device=device)), "cos must have shape"),
        (lambda: kernel.rope_interleaved(x, c, c[0]), "sin must have cos's shape"),
        (lambda: kernel.rope_interleaved(x, c, c, out=torch.empty_like(x, dtype=torch.float32)), "out must have x's dtype"),
        (lambda: kernel.rope_interleaved(x, c, c, out=x[:1]), "out must have x's shape"),
        (lambda: kernel.rope_interleaved(x, c, c, out=x[:1].expand(2, 5, 64)), "out must not overlap itself"),
        (lambda: kernel.rope_interleaved(buf[64:].view(2, 5, 64), c, c, out=buf[:640].view(2, 5, 64)), "out partially overlaps x"),
        (lambda: kernel.rope_interleaved_qk(x, x[:1], c, c), "k must have q's shape"),
        (lambda: kernel.rope_interleaved_qk(x, x.half(), c, c), "k must have q's dtype"),
        (lambda: kernel.ops.rope_interleaved_qk_out(k2, torch.empty_like(x), x, k2, c, c), "q_out overlaps k"),
        (lambda: kernel.ops.rope_interleaved_qk_out(torch.empty_like(x), x, x, k2, c, c), "k_out overlaps q"),
        (lambda: kernel.ops.rope_interleaved_qk_out(k3, k3, x, k2, c, c), "k_out overlaps|q_out overlaps"),
        (lambda: kernel.rope_rotate_half(q, k, hc, hc, 3), "unsqueeze_dim must be 1"),
        (lambda: kernel.rope_rotate_half(q[0], k[0], hc, hc), "q must be 4-D"),
        (lambda: kernel.rope_rotate_half(q, k[0], hc, hc), "k must be 4-D"),
        (lambda: kernel.rope_rotate_half(q, k.half(), hc, hc), "k must have q's dtype"),
        (lambda: kernel.rope_rotate_half(q, k[..., :32], hc, hc), "k must match q in batch, sequence and head_dim"),
        (lambda: kernel.rope_rotate_half(q, k[:1], hc, hc), "k must match q"),
        (lambda: kernel.rope_rotate_half(q, k, hc.half(), hc.half()), "cos must be float32 or q's dtype"),
        (lambda: kernel.rope_rotate_half(q, k, hc, hc.float()), "sin must have cos's dtype"),
        (lambda: kernel.rope_rotate_half(q, k, hc[..., :31], hc[..., :31]), "even rotary dim R <= head_dim 64"),
        (lambda: kernel.rope_rotate_half(q, k, torch.cat([hc, hc], -1), torch.cat([hc, hc], -1)), "cos must have shape"),
        (lambda: kernel.rope_rotate_half(q, k, hc[:, :3], hc[:, :3]), "S = 5"),
        (lambda: kernel.rope_rotate_half(q, k, hc[0, 0], hc[0, 0]), "cos must have shape"),
        (lambda: kernel.rope_rotate_half(q, q.clone(), hc, hc, 2), "cos must have shape"),  # S is dim 1
        (lambda: kernel.rope_rotate_half_single(q.to(torch.int64), hc, hc), "x must be float32"),
        (lambda: kernel.rope_rotate_half_single(q, hc.half(), hc.half()), "cos must be float32 or x's dtype"),
        (lambda: kernel.rope_rotate_half(q, q, hc, hc, inplace=True), "overlaps"),
        (lambda: kernel.ops.rope_rotate_half_out(q.clone(), q.clone(), q, k, hc, hc, 1), "k_out must have k's shape"),
        (lambda: kernel.ops.rope_rotate_half_single_out(q.clone().float(), q, hc, hc, 1), "out must have x's dtype"),
    ]
    if device == "cuda":  # float64 runs on the CPU (gradcheck), not on GPUs
        cases.append((lambda: kernel.rope_interleaved(x.double(), c, c), "float64 is supported on the CPU only"))
        cases.append((lambda: kernel.rope_rotate_half_single(q.double(), hc, hc), "x is float64"))
    else:
        assert kernel.rope_interleaved(x.double(), c, c).dtype == torch.float64
        cases.append((lambda: kernel.rope_interleaved(x.double(), c.half(), c.half()), "cos must be float32 or float64"))
    for fn, msg in cases:
        with pytest.raises(RuntimeError, match=msg):
            fn()


@requires_gpu
def test_mixed_devices_raise():
    x = torch.randn(2, 5, 64, device="cuda", dtype=torch.bfloat16)
    c = torch.randn(2, 5, 64)
    with pytest.raises(RuntimeError, match="cos is on cpu but x is on cuda"):
        kernel.rope_interleaved(x, c, c.cuda())
    q = torch.randn(2, 4, 5, 64, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(RuntimeError, match="k is on cpu but q is on cuda"):
        kernel.rope_rotate_half(q, q.cpu(), c.cuda().bfloat16(), c.cuda().bfloat16())
    with pytest.raises(RuntimeError, match="different devices|on cpu"):
        kernel.rope_rotate_half(q.cpu(), q.cpu(), c.cuda(), c.cuda())


@requires_gpu
def test_cpu_tensor_on_cuda_build_raises():
    with pytest.raises(RuntimeError, match="CUDA variant and has no kernels for that device"):
        kernel.rope_interleaved(torch.randn(2, 4, 8), torch.randn(4, 8), torch.randn(4, 8))


# ---- torch.library / torch.compile ----------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(device):
    bf = torch.bfloat16
    x = torch.randn(2, 6, 64, device=device, dtype=bf)
    k = torch.randn(2, 6, 64, device=device, dtype=bf)
    c = torch.randn(6, 64, device=device)
    s = torch.randn(6, 64, device=device)
    ops = kernel.ops
    torch.library.opcheck(ops.rope_interleaved.default, (x, c, s))
    torch.library.opcheck(ops.rope_interleaved_out.default, (torch.empty_like(x), x, c, s))
    torch.library.opcheck(ops.rope_interleaved_qk.default, (x, k, c, s))
    torch.library.opcheck(
        ops.rope_interleaved_qk_out.default, (torch.empty_like(x), torch.empty_like(k), x, k, c, s)
    )
    q4 = torch.randn(2, 4, 6, 64, device=device, dtype=bf)
    k4 = torch.randn(2, 2, 6, 64, device=device, dtype=bf)
    for hc, u in [(torch.randn(2, 6, 64, device=device, dtype=bf), 1), (torch.randn(6, 32, device=device), 1)]:
        torch.library.opcheck(ops.rope_rotate_half.default, (q4, k4, hc, hc, u))
        torch.library.opcheck(
            ops.rope_rotate_half_out.default,
            (torch.empty_like(q4), torch.empty_like(k4), q4, k4, hc, hc, u),
        )
        torch.library.opcheck(ops.rope_rotate_half_single.default, (k4, hc, hc, u))
        torch.library.opcheck(ops.rope_rotate_half_single_out.default, (torch.empty_like(k4), k4, hc, hc, u))
    q2 = torch.randn(2, 6, 4, 64, device=device, dtype=bf)
    torch.library.opcheck(ops.rope_rotate_half.default, (q2, q2[:, :, :2], c.to(bf), s.to(bf), 2))


@pytest.mark.parametrize("device", DEVICES)
def test_outputs_keep_memory_order(device):
    """Outputs come back in the input's memory order, as eager's expression and torch.empty_like
    give them (transformers' q and k are [B, H, S, D] views of [B, S, H, D] storage), and the fake
    implementations say so (opcheck compares their strides with the real ones); where the kernel
    could not write that order directly (a last dim that is not contiguous), a contiguous output.
    The backward ops follow grad's order the same way."""
    bf = torch.bfloat16
    ops = kernel.ops
    base_q = torch.randn(2, 6, 4, 64, device=device, dtype=bf)
    base_k = torch.randn(2, 6, 2, 64, device=device, dtype=bf)
    fused = torch.randn(2, 6, 8 * 64, device=device, dtype=bf)  # a fused q/k/v projection
    hc = torch.randn(2, 6, 64, device=device, dtype=bf)
    layouts = {
        "bhsd": (base_q.transpose(1, 2).contiguous(), base_k.transpose(1, 2).contiguous()),
        "bshd storage": (base_q.transpose(1, 2), base_k.transpose(1, 2)),
        "fused slices": (fused[..., :256].unflatten(-1, (4, 64)).transpose(1, 2),
                         fused[..., 256:384].unflatten(-1, (2, 64)).transpose(1, 2)),
        "strided last dim": (torch.randn(2, 4, 6, 128, device=device, dtype=bf)[..., ::2],
                             torch.randn(2, 2, 6, 128, device=device, dtype=bf)[..., ::2]),
    }
    for name, (q, k) in layouts.items():
        want_q, want_k = llama_apply(q, k, hc, hc)
        oq, ok = kernel.rope_rotate_half(q, k, hc, hc)
        direct = name != "strided last dim"
        for o, x, w in ((oq, q, want_q), (ok, k, want_k)):
            assert torch.equal(o, w.to(bf)), name
            assert o.stride() == (torch.empty_like(x).stride() if direct else x.contiguous().stride()), name
        assert kernel.rope_rotate_half_single(q, hc, hc).stride() == oq.stride(), name
        torch.library.opcheck(ops.rope_rotate_half.default, (q, k, hc, hc, 1))
        torch.library.opcheck(ops.rope_rotate_half_single.default, (q, hc, hc, 1))
        torch.library.opcheck(ops.rope_rotate_half_backward.default, (q, k, hc, hc, 1))
        torch.library.opcheck(ops.rope_rotate_half_single_backward.default, (q, hc, hc, 1))
    # interleaved: [B, S, D] with its batch and sequence swapped in storage, a slice of a wider row
    c, s = torch.randn(6, 64, device=device), torch.randn(6, 64, device=device)
    x = torch.randn(6, 2, 64, device=device, dtype=bf).transpose(0, 1)
    xk = torch.randn(2, 6, 192, device=device, dtype=bf)[..., 64:128]
    # and leading dims that do not collapse into one batch stride: contiguous (the temporary's case)
    xp = torch.randn(2, 3, 6, 64, device=device, dtype=bf).permute(1, 0, 2, 3)
    for v in (x, xk, xp):
        out = kernel.rope_interleaved(v, c, s)
        want_stride = (v.contiguous() if v is xp else torch.empty_like(v)).stride()
        assert out.stride() == want_stride and torch.equal(out, diffusers_ref_any(v, c, s))
        torch.library.opcheck(ops.rope_interleaved.default, (v, c, s))
        torch.library.opcheck(ops.rope_interleaved_qk.default, (v, v, c, s))
        torch.library.opcheck(ops.rope_interleaved_backward.default, (v, c, s))
        torch.library.opcheck(ops.rope_interleaved_qk_backward.default, (v, v, c, s))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_matches_eager(device):
    bf = torch.bfloat16

    def ltx_block(q, k, cos, sin):
        q2, k2 = kernel.rope_interleaved_qk(q, k, cos, sin)
        return q2 * 2 + kernel.rope_interleaved(k2, cos, sin)

    # Surrounding math is exact (x2, or one rounding either way), so compiled must equal eager.
    def llama_block(q, k, cos, sin):
        q2, k2 = kernel.rope_rotate_half(q, k, cos, sin)
        return q2 * 2, kernel.rope_rotate_half_single(k2, cos, sin)

    def in_place(q, k, cos, sin, hq, hk, hc):
        kernel.rope_interleaved_qk(q, k, cos, sin, inplace=True)
        kernel.rope_rotate_half(hq, hk, hc, hc, inplace=True)
        kernel.rope_rotate_half_single(hk, hc, hc, inplace=True)
        return q + 1

    q = torch.randn(2, 12, 128, device=device, dtype=bf)
    k = torch.randn(2, 12, 128, device=device, dtype=bf)
    cos, sin = torch.randn(12, 128, device=device), torch.randn(12, 128, device=device)
    hq = torch.randn(2, 4, 12, 64, device=device, dtype=bf)
    hk = torch.randn(2, 2, 12, 64, device=device, dtype=bf)
    hc = torch.randn(2, 12, 64, device=device, dtype=bf)
    torch._dynamo.reset()
    with torch._dynamo.config.patch(error_on_recompile=True):
        c1 = torch.compile(ltx_block, fullgraph=True)
        assert torch.equal(c1(q, k, cos, sin), ltx_block(q, k, cos, sin))
        assert c1(torch.randn_like(q), k, cos, sin).shape == q.shape
        c2 = torch.compile(llama_block, fullgraph=True)
        for got, want in zip(c2(hq, hk, hc, hc), llama_block(hq, hk, hc, hc)):
            assert torch.equal(got, want)
        c3 = torch.compile(in_place, fullgraph=True)
        args_c = [t.clone() for t in (q, k, cos, sin, hq, hk, hc)]
        args_e = [t.clone() for t in (q, k, cos, sin, hq, hk, hc)]
        assert torch.equal(c3(*args_c), in_place(*args_e))
        for a, b in zip(args_c, args_e):
            assert torch.equal(a, b), "in-place results differ under torch.compile"


# ---- GPU-only: real shapes, grid-stride, 64-bit offsets ------------------------------------


@requires_gpu
def test_ltx_real_shape():
    cos, sin = ltx_tables(2048, 1, 21, 16, 24, (8 / 25, 32, 32), "cuda")  # S = 8064
    cos2, sin2 = cos.expand(2, -1, -1), sin.expand(2, -1, -1)  # CFG batch, stride 0
    q = torch.randn(2, 8064, 2048, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(q)
    oq, ok = kernel.rope_interleaved_qk(q, k, cos2, sin2)
    assert torch.equal(oq, diffusers_ltx_apply(q, cos2, sin2))
    assert torch.equal(ok, diffusers_ltx_apply(k, cos2, sin2))
    cos13, sin13 = ltx_tables(4096, 2, 3, 16, 24, (8 / 25, 32, 32), "cuda")  # 13B: pad 4
    x = torch.randn(2, 1152, 4096, device="cuda", dtype=torch.bfloat16)
    assert torch.equal(kernel.rope_interleaved(x, cos13, sin13), diffusers_ltx_apply(x, cos13, sin13))


def interleaved_forms_on_gpu():
    """The interleaved table-form, broadcast and layout tests on the GPU, for tests that run them
    under a kernel switch."""
    for dtype, d, tables in itertools.product(DTYPES, [2, 6, 10, 64, 128, 2048],
                                              ["SD", "BSD", "B1D", "expanded", "offset1", "strided"]):
        test_interleaved_pair_tables_equal_full_tables("cuda", dtype, d, tables)
    test_interleaved_table_broadcasts("cuda")
    test_interleaved_layouts("cuda")


@requires_gpu
def test_position_major_walk(monkeypatch):
    """LTX_KERNELS_ROPE_ORDER=position (tokens position-major, the walk before batch-major
    became the default): LTX's q/k call with pair and full tables at [2, 8064, 2048] (CFG
    stride-0 tables) equal to the default walk and eager, then the table-form, layout and
    backward tests of both layouts under it."""
    from . import test_rope_backward  # imports this module: not at the top

    c, sn, cf, sf = pair_tables((1, 8064, 1024), "cuda")
    c, sn = c.expand(2, -1, -1), sn.expand(2, -1, -1)
    cf, sf = cf.expand(2, -1, -1), sf.expand(2, -1, -1)
    for dtype in (torch.bfloat16, torch.float16):
        q = torch.randn(2, 8064, 2048, device="cuda", dtype=dtype)
        k = torch.randn_like(q)
        want = kernel.rope_interleaved_qk(q, k, c, sn)
        want_full = kernel.rope_interleaved_qk(q, k, cf, sf)
        monkeypatch.setenv("LTX_KERNELS_ROPE_ORDER", "position")
        got = kernel.rope_interleaved_qk(q, k, c, sn)
        got_full = kernel.rope_interleaved_qk(q, k, cf, sf)
        got_one = kernel.rope_interleaved(q, c, sn)
        monkeypatch.delenv("LTX_KERNELS_ROPE_ORDER")
        for g, w in zip(got + got_full + (got_one,), want + want_full + want[:1]):
            assert torch.equal(g, w)
        assert torch.equal(got[0], diffusers_ltx_apply(q, cf, sf))
        assert torch.equal(got[1], diffusers_ltx_apply(k, cf, sf))
    monkeypatch.setenv("LTX_KERNELS_ROPE_ORDER", "position")
    interleaved_forms_on_gpu()
    test_interleaved_in_place("cuda", torch.bfloat16)
    for dtype, u in itertools.product(DTYPES, [1, 2]):
        test_rotate_half_shared_and_expanded_tables("cuda", dtype)
        test_rotate_half_layouts("cuda", u)
    test_rope_backward.test_interleaved_grads_vs_diffusers("cuda", torch.bfloat16)
    test_rope_backward.test_grad_layouts_interleaved("cuda")
    test_rope_backward.test_rotate_half_grads_vs_transformers("cuda", torch.bfloat16, 2, "llama")


@requires_gpu
@pytest.mark.parametrize("table_dtype", [torch.bfloat16, torch.float32])
def test_llama_real_shape(table_dtype):
    cos, sin = llama_tables(128, 1, 8192, table_dtype, "cuda")
    q = torch.randn(1, 32, 8192, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(1, 8, 8192, 128, device="cuda", dtype=torch.bfloat16)
    oq, ok = kernel.rope_rotate_half(q, k, cos, sin)
    eq, ek = llama_apply(q, k, cos, sin)
    assert torch.equal(oq, eq.to(q.dtype)) and torch.equal(ok, ek.to(k.dtype))


# Llama-style calls take rope_half_lean_kernel by default; LTX_KERNELS_ROPE_LEAN=0 gives them to
# rope_kernel's packed form, whose geometry switches (slots, grid) the other cases exercise.
LOOP = {"LTX_KERNELS_ROPE_LEAN": "0"}


@requires_gpu
@pytest.mark.parametrize("env", [{}, {"LTX_KERNELS_PDL": "0"}, LOOP, {**LOOP, "LTX_KERNELS_PDL": "0"},
                                 {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "0"},
                                 {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "1"},
                                 {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "4"},
                                 {**LOOP, "LTX_KERNELS_GRID": "walk"}, {**LOOP, "LTX_KERNELS_ROPE_SLOTS": "0"},
                                 {**LOOP, "LTX_KERNELS_ROPE_WIDE_SLOTS": "all"},
                                 {"LTX_KERNELS_ROPE_STREAM": "0"}, {"LTX_KERNELS_ROPE_STREAM": "1"},
                                 {"LTX_KERNELS_ROPE_HINT": "none"},
                                 {"LTX_KERNELS_ROPE_HINT": "tables_last"}],
                         ids=["pdl", "no_pdl", "loop_kernel", "loop_kernel_no_pdl", "no_wide_slots",
                              "wide_slots_1", "wide_slots_4", "grid_walk", "no_slots_fit", "wide_slots_all",
                              "interleaved_through_l1", "interleaved_stream_all", "hint_none",
                              "hint_tables_last"])
def test_pdl_launch_real_shapes(monkeypatch, env):
    """Llama-style calls on rope_half_lean_kernel (the default: one thread per (token, head,
    unit)) with programmatic dependent launch (the default on sm_90+) and without it
    (LTX_KERNELS_PDL=0); then on rope_kernel's packed form (LTX_KERNELS_ROPE_LEAN=0) with and
    without PDL, without the wide slots of few-token calls (every head pair in one
    pass, by default while the grid stays within 2 blocks per SM; LTX_KERNELS_ROPE_WIDE_SLOTS=0
    keeps the narrower split) and with them within 1 or 4 blocks per SM (=1 / =4; the 256-token
    prompt takes them at 2 and 4, the 2 x 257-token one at 4), with at most 32 blocks per SM
    walking the tokens (LTX_KERNELS_GRID=walk; the default is a block per token group),
    without the slot count that fills every pass of head pairs in calls of many tokens
    (LTX_KERNELS_ROPE_SLOTS=0; by default Llama's 32 + 8 heads take 4 slots instead of 8, an
    odd 5 + 3 heads 4 instead of 8 from ~1000 tokens), and with the wide slots at any token
    count (=all); the interleaved calls with every load through L1 (LTX_KERNELS_ROPE_STREAM=0;
    by default one head with full tables skips it) and with every forward skipping it (=1), and
    with plain loads instead of the tables' and x's evict_last ones (LTX_KERNELS_ROPE_HINT=none)
    or the tables alone evict_last (=tables_last): the
    RoPE kernels give the same results in both layouts, decode-sized and large, out of place
    and in place."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    test_llama_real_shape(torch.bfloat16)
    # decode-sized calls and a prompt; Llama's 32 + 8 heads, Qwen's 28 + 4, an odd 5 + 3
    for (b, s), (hq, hk) in itertools.product([(1, 1), (16, 1), (3, 1), (1, 256), (2, 257), (1, 2048),
                                                (3, 701)],
                                               [(32, 8), (28, 4), (5, 3)]):
        cos, sin = llama_tables(128, b, s, torch.bfloat16, "cuda")
        q = torch.randn(b, s, hq, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        k = torch.randn(b, s, hk, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
        oq, ok = kernel.rope_rotate_half(q, k, cos, sin)
        eq, ek = llama_apply(q, k, cos, sin)
        assert torch.equal(oq, eq.to(q.dtype)) and torch.equal(ok, ek.to(k.dtype)), (b, s, hq, hk)
        qi, ki = q.clone(), k.clone()  # clone keeps the [B, S, H, D] strides
        kernel.rope_rotate_half(qi, ki, cos, sin, inplace=True)
        assert torch.equal(qi, oq) and torch.equal(ki, ok), ("in place", b, s, hq, hk)
    x = torch.randn(2, 1152, 4096, device="cuda", dtype=torch.bfloat16)
    c, s = torch.randn(1152, 4096, device="cuda"), torch.randn(1152, 4096, device="cuda")
    assert torch.equal(kernel.rope_interleaved(x, c, s), diffusers_ref_any(x, c, s))
    # q and k with pair tables [B, S, D/2] (LTX's pair form)
    y = torch.randn_like(x)
    cp, sp = torch.randn(2, 1152, 2048, device="cuda"), torch.randn(2, 1152, 2048, device="cuda")
    ox, oy = kernel.rope_interleaved_qk(x, y, cp, sp)
    cf, sf = cp.repeat_interleave(2, -1), sp.repeat_interleave(2, -1)
    assert torch.equal(ox, diffusers_ref_any(x, cf, sf)) and torch.equal(oy, diffusers_ref_any(y, cf, sf))
    fx, fy = kernel.rope_interleaved_qk(x, y, cf, sf)  # and with the full tables
    assert torch.equal(fx, ox) and torch.equal(fy, oy)


@requires_gpu
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_pdl_chain(monkeypatch, graph):
    """A chain of PDL launches, each rotating the previous call's output (the allocator hands
    the buffers of two calls back to later outputs, so writes meet earlier reads too), now and
    then a non-PDL kernel in between; eagerly and as a CUDA graph, against the same chain
    without PDL (LTX_KERNELS_PDL=0): a kernel touching memory before its pdl_wait would read
    stale values."""
    cos, sin = llama_tables(128, 1, 16, torch.bfloat16, "cuda")
    q0 = torch.randn(1, 16, 32, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)
    k0 = torch.randn(1, 16, 8, 128, device="cuda", dtype=torch.bfloat16).transpose(1, 2)

    def chain():
        q, k = q0, k0
        for i in range(12):
            q, k = kernel.rope_rotate_half(q, k, cos, sin)
            if i % 4 == 3:
                q = q * 0.5
        return q.clone(), k.clone()

    monkeypatch.setenv("LTX_KERNELS_PDL", "0")
    want_q, want_k = chain()
    monkeypatch.delenv("LTX_KERNELS_PDL")
    if graph:
        (got_q, got_k), _graph = replay_captured(chain)
    else:
        got_q, got_k = chain()
    assert torch.equal(got_q, want_q) and torch.equal(got_k, want_k)


@requires_gpu
@pytest.mark.parametrize("grid", ["walk", ""], ids=["grid_walk", "default"])
def test_grid_stride_many_tokens(monkeypatch, grid):
    # With LTX_KERNELS_GRID=walk (at most 32 blocks per SM) the blocks walk, and batch 7 does
    # not divide the grid's token step, so the (s, b) stepping wraps. By default (a block per
    # token group) the same calls, up to 10^6 tokens.
    if grid:  # rope_kernel's walk (its packed form too: the rotate-half call below)
        monkeypatch.setenv("LTX_KERNELS_GRID", grid)
        monkeypatch.setenv("LTX_KERNELS_ROPE_LEAN", "0")
    x = torch.randn(7, 60001, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.randn_like(x)
    c, s = torch.randn(60001, 64, device="cuda"), torch.randn(60001, 64, device="cuda")
    oq, ok = kernel.rope_interleaved_qk(x, k, c, s)
    assert torch.equal(oq, diffusers_ref_any(x, c, s)) and torch.equal(ok, diffusers_ref_any(k, c, s))
    q = torch.randn(5, 2, 40003, 64, device="cuda", dtype=torch.float16)
    hc = torch.randn(5, 40003, 64, device="cuda", dtype=torch.float16)
    assert torch.equal(kernel.rope_rotate_half_single(q, hc, hc), llama_apply(q, q, hc, hc)[0])
    x1 = torch.randn(1_000_003, 1, 64, device="cuda", dtype=torch.bfloat16)  # batch > grid
    c1, s1 = torch.randn(1, 64, device="cuda"), torch.randn(1, 64, device="cuda")
    assert torch.equal(kernel.rope_interleaved(x1, c1, s1), diffusers_ref_any(x1, c1, s1))


@requires_gpu
def test_offsets_past_2_31(monkeypatch):
    d = 2048
    s = (1 << 31) // d + 64  # x has more than 2^31 elements (4.3 GB in bf16)
    x = torch.empty(1, s, d, device="cuda", dtype=torch.bfloat16).normal_()
    c, sn = torch.randn(1, d, device="cuda"), torch.randn(1, d, device="cuda")
    out = kernel.rope_interleaved(x, c, sn)
    tail = slice(s - 200, s)
    assert torch.equal(out[:, tail], diffusers_ref_any(x[:, tail], c, sn))
    del out
    kernel.rope_interleaved(x, c, sn, out=x)  # in place, same offsets
    q = torch.empty(1, 1, (1 << 31) // 128 + 64, 128, device="cuda", dtype=torch.bfloat16).normal_()
    del x
    hc = torch.randn(1, 1, 128, device="cuda", dtype=torch.bfloat16)
    tq = q[:, :, -100:]
    want = llama_apply(tq, tq, hc, hc)[0]
    oq = kernel.rope_rotate_half_single(q, hc, hc)  # rope_half_lean_kernel
    assert torch.equal(oq[:, :, -100:], want)
    del oq
    monkeypatch.setenv("LTX_KERNELS_ROPE_LEAN", "0")  # rope_kernel's packed form
    assert torch.equal(kernel.rope_rotate_half_single(q, hc, hc)[:, :, -100:], want)


def test_exports():
    for name in ["rope_interleaved", "rope_interleaved_qk", "rope_rotate_half", "rope_rotate_half_single"]:
        assert name in kernel.__all__ and callable(getattr(kernel, name))
    assert HAS_GPU in (True, False)
