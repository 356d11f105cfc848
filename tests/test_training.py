"""Training through the package: kernelize(Mode.TRAINING), patch_ltx_video and
torch.compile(fullgraph=True) of forward + backward on tiny real models.

The per-op gradient checks (gradcheck in float64, opcheck, gradients vs autograd of the
references per dtype) live in tests/test_*_backward.py; this file checks that whole models
train the same with the kernels as without: same loss, same gradient for every parameter
and for the input.

Tolerances: float32 throughout. The kernels' backward computes in fp32 with a different
summation order than ATen's autograd (row reductions, weight-gradient sums), so gradients
agree to ~1e-5 relative to the largest gradient of the same tensor, not bit for bit.
"""

import pytest
import torch

from .test_layers import (DEVICE, hub_names, kernelized, ltx_inputs, replaced, tiny_llama,
                          tiny_ltx, transformers_marked)  # noqa: F401 (fixture, autouse)
from .util import REPO, kernel

pytestmark = pytest.mark.kernels_ci

kernels = pytest.importorskip("kernels")
from kernels import LocalLayerRepository, Mode  # noqa: E402

LAYER_NAMES = ["RMSNorm", "DiffusersRMSNorm", "TorchRMSNorm", "GeluTanh", "GeLU",
               "DiffusersGELU", "DiffusersGEGLU"]
# inductor on the GPU (what users run); aot_eager on the CPU keeps CI fast and still traces
# forward + backward through the fakes, functionalization and the autograd formulas.
COMPILE_BACKEND = "inductor" if DEVICE == "cuda" else "aot_eager"


def local_repo(name):
    return LocalLayerRepository(REPO, layer_name=name)


def grads_of(model):
    return {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}


def assert_grads_close(got, ref, what, rtol=2e-5):
    assert got.keys() == ref.keys(), (what, sorted(set(got) ^ set(ref)))
    for name, g in got.items():
        r = ref[name]
        scale = r.abs().max().item()
        err = (g - r).abs().max().item()
        assert err <= rtol * max(scale, 1e-6) + 1e-7, f"{what}: grad of {name}: {err:.3e} (max |grad| {scale:.3e})"


def assert_close_rel(out, ref, what, rtol=2e-5):
    err = (out - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= rtol * max(scale, 1e-6) + 1e-7, f"{what}: {err:.3e} (max |ref| {scale:.3e})"


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layers_declare_backward(name):
    layer = getattr(kernel.layers, name)
    assert layer.has_backward is True
    assert layer.can_torch_compile is True


# ----------------------------------------------------------------------------- kernelize TRAINING


def llama_loss(model, ids):
    logits = model(input_ids=ids).logits
    return torch.nn.functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())


@pytest.mark.parametrize("hidden_act, act_layer", [("gelu_pytorch_tanh", "GeluTanh"), ("gelu", "GeLU")])
def test_llama_training_kernelized(hidden_act, act_layer):
    ids = torch.randint(0, 128, (2, 12), device=DEVICE)
    ref_model = tiny_llama(hidden_act).train()
    ref_loss = llama_loss(ref_model, ids)
    ref_loss.backward()
    model = kernelized(tiny_llama(hidden_act).train(), local_repo, ["RMSNorm", act_layer], Mode.TRAINING)
    assert replaced(model) == {"RMSNorm": 5, act_layer: 2}
    loss = llama_loss(model, ids)
    loss.backward()
    assert_close_rel(loss.detach(), ref_loss.detach(), "loss")
    assert_grads_close(grads_of(model), grads_of(ref_model), "llama")


def ltx_loss(model, inputs):
    out = model(**inputs)[0]
    return (out.float() ** 2).mean()


def ltx_train_inputs():
    inputs = ltx_inputs(torch.float32)
    inputs["hidden_states"].requires_grad_(True)
    return inputs


def test_ltx_training_kernelized():
    pytest.importorskip("diffusers")
    from diffusers.models.activations import GELU
    from diffusers.models.normalization import RMSNorm as DRMSNorm

    ref_model = tiny_ltx(torch.float32).train()
    ref_in = ltx_train_inputs()
    ltx_loss(ref_model, ref_in).backward()
    with hub_names((DRMSNorm, "DiffusersRMSNorm"), (torch.nn.RMSNorm, "TorchRMSNorm"),
                   (GELU, "DiffusersGELU")):
        model = kernelized(tiny_ltx(torch.float32).train(), local_repo,
                           ["DiffusersRMSNorm", "TorchRMSNorm", "DiffusersGELU"], Mode.TRAINING)
    assert replaced(model) == {"DiffusersRMSNorm": 2, "TorchRMSNorm": 4, "DiffusersGELU": 1}
    inputs = ltx_train_inputs()
    ltx_loss(model, inputs).backward()
    assert_grads_close(grads_of(model), grads_of(ref_model), "ltx")
    assert_close_rel(inputs["hidden_states"].grad, ref_in["hidden_states"].grad, "ltx input grad")


# ----------------------------------------------------------------------------- patch_ltx_video


def test_patch_ltx_video_trains_like_unpatched():
    """Every fused op of the patch (AdaLN, gated residual, q/k prologue, GELU-tanh) under
    autograd: same loss and gradients as diffusers' own modules."""
    pytest.importorskip("diffusers")
    ref_model = tiny_ltx(torch.float32).train()
    ref_in = ltx_train_inputs()
    ref_loss = ltx_loss(ref_model, ref_in)
    ref_loss.backward()
    model = tiny_ltx(torch.float32).train()
    report = kernel.patch_ltx_video(model)
    inputs = ltx_train_inputs()
    loss = ltx_loss(model, inputs)
    loss.backward()
    assert_close_rel(loss.detach(), ref_loss.detach(), "loss")
    assert_grads_close(grads_of(model), grads_of(ref_model), "patched ltx")
    assert_close_rel(inputs["hidden_states"].grad, ref_in["hidden_states"].grad, "input grad")
    assert "adaln" in repr(report)


# ----------------------------------------------------------------------------- compile with backward


def _compiled_step(module, make_inputs, loss_fn):
    """(loss, grads) of one eager step and of one torch.compile(fullgraph=True) step."""
    results = []
    for compiled in (False, True):
        for p in module.parameters():
            p.grad = None
        fn = loss_fn
        if compiled:
            torch._dynamo.reset()
            fn = torch.compile(loss_fn, fullgraph=True, backend=COMPILE_BACKEND)
        inputs = make_inputs()
        loss = fn(module, inputs)
        loss.backward()
        results.append((loss.detach(), grads_of(module)))
    return results


def test_compile_fullgraph_training_step_ltx_block():
    """One patched LTX transformer block: forward + backward compiled with fullgraph=True
    (no graph breaks around our ops or their backward) equals the eager step."""
    pytest.importorskip("diffusers")
    model = tiny_ltx(torch.float32).train()
    kernel.patch_ltx_video(model)
    block = model.transformer_blocks[0]
    tokens, dim = 48, 32

    def make_inputs():  # the same values on every call
        g = torch.Generator().manual_seed(3)
        return dict(
            hidden_states=torch.randn(2, tokens, dim, generator=g).to(DEVICE).requires_grad_(True),
            encoder_hidden_states=torch.randn(2, 6, dim, generator=g).to(DEVICE),
            temb=torch.randn(2, 1, 6 * dim, generator=g).to(DEVICE),
            image_rotary_emb=tuple(t.to(DEVICE) for t in _rope_tables(tokens, dim, g)),
        )

    def loss_fn(blk, inputs):
        return (blk(**inputs).float() ** 2).mean()

    (l0, g0), (l1, g1) = _compiled_step(block, make_inputs, loss_fn)
    assert_close_rel(l1, l0, "compiled loss", rtol=1e-4)
    assert_grads_close(g1, g0, "compiled ltx block", rtol=1e-4)


def _rope_tables(tokens, dim, g):
    freqs = torch.rand(2, tokens, dim // 2, generator=g) * 6.28
    freqs = freqs.repeat_interleave(2, dim=-1)
    return freqs.cos(), freqs.sin()


def test_compile_fullgraph_training_step_llama_layer():
    """One kernelized Llama decoder layer (RMSNorm + GELU-tanh layers), compiled forward +
    backward with fullgraph=True, equals the eager step."""
    model = kernelized(tiny_llama("gelu_pytorch_tanh").train(), local_repo, ["RMSNorm", "GeluTanh"],
                       Mode.TRAINING | Mode.TORCH_COMPILE)
    layer = model.model.layers[0]
    rotary = model.model.rotary_emb

    def make_inputs():  # the same values on every call
        g = torch.Generator().manual_seed(4)
        x = torch.randn(2, 12, 64, generator=g).to(DEVICE).requires_grad_(True)
        pos = torch.arange(12, device=DEVICE).unsqueeze(0).expand(2, -1)
        return dict(hidden_states=x, position_embeddings=rotary(x, pos), position_ids=pos)

    def loss_fn(lyr, inputs):
        out = lyr(**inputs)
        out = out[0] if isinstance(out, tuple) else out
        return (out.float() ** 2).mean()

    (l0, g0), (l1, g1) = _compiled_step(layer, make_inputs, loss_fn)
    assert_close_rel(l1, l0, "compiled loss", rtol=1e-4)
    assert_grads_close(g1, g0, "compiled llama layer", rtol=1e-4)
