"""patch_ltx_video on a real diffusers LTXVideoTransformer3DModel: outputs match the
unpatched model within bf16's own noise, undo restores it bit for bit, a patched block
compiles with fullgraph=True, and the report counts what was replaced."""

import pytest
import torch

from .util import DEVICES, kernel, requires_gpu

pytestmark = pytest.mark.kernels_ci

diffusers = pytest.importorskip("diffusers")


def tiny_model(num_layers=2):
    # op-semantics.md section 7 (diffusers' own test config), two blocks
    from diffusers import LTXVideoTransformer3DModel

    return LTXVideoTransformer3DModel(
        in_channels=8, out_channels=8, num_attention_heads=4, attention_head_dim=8,
        cross_attention_dim=32, num_layers=num_layers, caption_channels=32,
    ).eval()


def model_inputs(model, device, dtype, batch=2, frames=3, height=8, width=8, text=16):
    cfg = model.config
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(batch, frames * height * width, cfg.in_channels, generator=g)
    enc = torch.randn(batch, text, cfg.caption_channels, generator=g)
    mask = torch.ones(batch, text)
    mask[:, text * 3 // 4:] = 0
    return dict(
        hidden_states=x.to(device, dtype), encoder_hidden_states=enc.to(device, dtype),
        timestep=torch.tensor([500, 20, 900, 1][:batch], device=device),
        encoder_attention_mask=mask.to(device), num_frames=frames, height=height, width=width,
        rope_interpolation_scale=(8 / 25, 32, 32), return_dict=False,
    )


def run(model, inputs):
    with torch.no_grad():
        return model(**inputs)[0]


def assert_within_bf16_noise(got, want, ref32, what):
    """cosine >= 0.9999, and max |patched - unpatched| no larger than the max difference
    between the unpatched model in bf16 and the same model in fp32 on the same inputs:
    that run differs from the bf16 one only by where it rounds (the same ops in an
    equivalent order at another precision), so it measures what bf16 rounding alone
    moves the output by."""
    cos = torch.nn.functional.cosine_similarity(got.float().flatten(), want.float().flatten(), dim=0)
    diff = (got.float() - want.float()).abs().max().item()
    noise = (want.float() - ref32.float()).abs().max().item()
    assert cos.item() >= 0.9999, f"{what}: cosine {cos.item()}"
    assert diff <= noise, f"{what}: max |patched - unpatched| {diff} exceeds bf16 noise {noise}"


@pytest.mark.parametrize("device", DEVICES)
def test_patched_matches_unpatched_and_undo_restores(device):
    model = tiny_model().to(device)
    ref32 = run(model, model_inputs(model, device, torch.float32))
    model.to(torch.bfloat16)
    inputs = model_inputs(model, device, torch.bfloat16)
    want = run(model, inputs)
    procs = [m.processor for m in model.modules() if type(m).__name__ == "LTXAttention"]

    handle = kernel.patch_ltx_video(model)
    assert handle.counts == {"adaln": 4, "gated_residual": 4, "rmsnorm_rope_qk": 4, "gelu_tanh": 3,
                             "rmsnorm": 0}, handle
    assert not handle.skipped and "counts" in repr(handle)
    assert kernel.patch_ltx_video(model) is handle  # idempotent
    got = run(model, inputs)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert_within_bf16_noise(got, want, ref32, "tiny LTX")

    handle.undo()
    assert [m.processor for m in model.modules() if type(m).__name__ == "LTXAttention"] == procs
    assert not any("forward" in m.__dict__ for m in model.modules())
    assert torch.equal(run(model, inputs), want)
    # unpatch_ltx_video does the same
    kernel.patch_ltx_video(model)
    assert kernel.unpatch_ltx_video(model) and not kernel.unpatch_ltx_video(model)
    assert torch.equal(run(model, inputs), want)


@pytest.mark.parametrize("device", DEVICES)
def test_patch_before_cast_and_backend_kept(device):
    """Nothing is captured at patch time (weights, dtype, device are read per call), so
    patching first and casting after (as before enable_model_cpu_offload) gives the same
    bits; the attention backend selected on the model is kept and survives undo."""
    model = tiny_model(1)
    model.set_attention_backend("native")
    handle = kernel.patch_ltx_video(model)
    procs = [m.processor for m in model.modules() if type(m).__name__ == "LTXAttention"]
    assert all(type(p).__name__ == "LTXKernelAttnProcessor" for p in procs)
    assert all(str(getattr(p._attention_backend, "value", p._attention_backend)) == "native" for p in procs)
    model.to(device=device, dtype=torch.bfloat16)
    inputs = model_inputs(model, device, torch.bfloat16)
    late = run(model, inputs)
    handle.undo()
    kernel.patch_ltx_video(model)
    assert torch.equal(run(model, inputs), late)
    model.set_attention_backend("_native_math")  # set while patched: used, and kept on undo
    run(model, inputs)
    kernel.unpatch_ltx_video(model)
    procs = [m.processor for m in model.modules() if type(m).__name__ == "LTXAttention"]
    assert all(type(p).__name__ == "LTXVideoAttnProcessor" for p in procs)
    assert all(str(getattr(p._attention_backend, "value", p._attention_backend)) == "_native_math" for p in procs)


def test_rejects_other_models():
    with pytest.raises(TypeError, match="nothing to patch"):
        kernel.patch_ltx_video(torch.nn.Linear(4, 4))


@pytest.mark.parametrize("device", DEVICES)
def test_compile_fullgraph_patched_block_matches_eager(device):
    model = tiny_model(1).to(device=device, dtype=torch.bfloat16)
    kernel.patch_ltx_video(model)
    block = model.transformer_blocks[0]
    dim = block.scale_shift_table.shape[1]
    h = torch.randn(2, 24, dim, device=device, dtype=torch.bfloat16)
    enc = torch.randn(2, 16, dim, device=device, dtype=torch.bfloat16)
    temb = torch.randn(2, 1, 6 * dim, device=device, dtype=torch.bfloat16)
    cos, sin = model.rope(h, 2, 3, 4, (8 / 25, 32, 32))
    bias = torch.zeros(2, 1, 16, device=device, dtype=torch.bfloat16)
    bias[..., 12:] = -10000.0
    args = (h, enc, temb, (cos, sin), bias)
    torch._dynamo.reset()
    with torch.no_grad():
        want = block(*args)
        # aot_eager: dynamo + fakes + functionalization, and the same kernels underneath,
        # so the result must be bit-identical (inductor would re-round the torch glue).
        got = torch.compile(block, fullgraph=True, backend="aot_eager")(*args)
    assert torch.equal(got, want)


@requires_gpu
def test_gpu_real_2b_config():
    """The real LTX-Video 2B transformer (random weights), 49 frames at 512x768 -> latent
    7x16x24 = 2688 tokens, batch 2 (CFG), 128 T5 tokens."""
    from diffusers import LTXVideoTransformer3DModel

    dev = "cuda"
    torch.manual_seed(0)
    model = LTXVideoTransformer3DModel().to(dev).eval()
    inputs32 = model_inputs(model, dev, torch.float32, batch=2, frames=7, height=16, width=24, text=128)
    ref32 = run(model, inputs32)
    model.to(torch.bfloat16)
    inputs = model_inputs(model, dev, torch.bfloat16, batch=2, frames=7, height=16, width=24, text=128)
    want = run(model, inputs)
    handle = kernel.patch_ltx_video(model)
    assert handle.counts["adaln"] == 56 and handle.counts["rmsnorm_rope_qk"] == 56
    got = run(model, inputs)
    assert_within_bf16_noise(got, want, ref32, "LTX 2B, 2688 tokens")
    handle.undo()
    assert torch.equal(run(model, inputs), want)
