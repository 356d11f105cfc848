"""ltx_kernels.layers through kernels.kernelize, on tiny random real models (CPU, offline).

Each model is kernelized with a mapping to this checkout, either as
`LocalLayerRepository(repo_path, layer_name=...)` or as
`LayerRepository("org/ltx-kernels", layer_name=..., version=1)` (the Hub form, redirected by
LOCAL_KERNELS; see `hub_repo` for the offline version lookup), in `Mode.INFERENCE` and
`Mode.INFERENCE | Mode.TORCH_COMPILE`. The tests count the modules whose forward is now
ours and compare the outputs with the unkernelized model.

Tolerances. In float32 the kernels differ from ATen only in the order of the fp32 mean
(a few fp32 ulps), so outputs agree to 1e-5 relative. In bfloat16 a norm or GELU may
round one element one bf16 ulp away from eager, and a tiny model propagates that; the bound
is that the kernelized bf16 model must stay as close to the eager bf16 model as eager bf16
is to eager float32 (the bf16 noise itself), with a float floor for exact agreement.

Compile mode is checked with `torch.compile(fullgraph=True, backend="aot_eager")`: it traces
the ops through their fake implementations and functionalization (what inductor also needs;
inductor then calls our ops as extern kernels), and it runs the rest of the model with the
same eager kernels, so compiled and eager kernelized outputs must be bit-identical.
"""

import contextlib
import importlib
import warnings

import pytest
import torch

from .util import BACKEND, REPO, REPO_ID, assert_ulp, kernel

pytestmark = pytest.mark.kernels_ci

kernels = pytest.importorskip("kernels")
from kernels import (KernelizeFallback, LayerRepository, LocalLayerRepository, Mode,  # noqa: E402
                     kernelize, use_kernel_mapping)

DEVICE = "cuda" if BACKEND == "cuda" else "cpu"
if DEVICE == "cuda" and not torch.cuda.is_available():
    pytest.skip("the loaded variant is CUDA and there is no GPU", allow_module_level=True)

MODES = [pytest.param(Mode.INFERENCE, id="inference"),
         pytest.param(Mode.INFERENCE | Mode.TORCH_COMPILE, id="inference+compile")]
REPOS = ["local", "hub"]
LAYER_NAMES = ["RMSNorm", "DiffusersRMSNorm", "TorchRMSNorm", "GeluTanh", "GeLU",
               "DiffusersGELU", "DiffusersGEGLU"]
_support = importlib.import_module(kernel.__name__ + "._layer_support")


# ----------------------------------------------------------------------------- helpers


@pytest.fixture(autouse=True, scope="module")
def transformers_marked():
    """transformers decorates its norms/activations for kernelize only when it accepts the
    installed kernels version (its own min/max pin); otherwise the decorator is a no-op and
    kernelize would silently replace nothing. Mark those classes ourselves then, as a user
    of such a pairing would with kernels.replace_kernel_forward_from_hub."""
    pairs = []
    try:
        from transformers import activations
        from transformers.models.llama.modeling_llama import LlamaRMSNorm
    except ImportError:
        yield
        return
    for cls, name in [(LlamaRMSNorm, "RMSNorm"), (getattr(activations, "GELUTanh", None), "GeluTanh"),
                      (getattr(activations, "GELUActivation", None), "GeLU")]:
        if cls is not None and getattr(cls, "kernel_layer_name", None) is None:
            pairs.append((cls, name))
    with hub_names(*pairs):
        yield


@pytest.fixture
def hub_repo(monkeypatch, tmp_path):
    """LayerRepository(REPO_ID, version=1) resolvable offline.

    kernels 0.17.2 resolves `version=` to a commit before LOCAL_KERNELS applies; offline it
    reads the Hub cache's refs/v<N> (a kernel downloaded once). We provide that cache entry;
    the load itself is redirected to this checkout by LOCAL_KERNELS (tests/util.py)."""
    import huggingface_hub.constants

    refs = tmp_path / "models--org--ltx-kernels" / "refs"
    refs.mkdir(parents=True)
    (refs / "v1").write_text("v1")
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    return lambda name: LayerRepository(REPO_ID, layer_name=name, version=1)


def repo_factory(kind, hub_repo):
    if kind == "local":
        return lambda name: LocalLayerRepository(REPO, layer_name=name)
    return hub_repo


def mapping(make_repo, names):
    return {n: {DEVICE: make_repo(n)} for n in names}


@contextlib.contextmanager
def hub_names(*pairs):
    """kernels.replace_kernel_forward_from_hub(cls, name) for classes nobody decorates
    (diffusers, torch.nn), undone afterwards: it sets class attributes."""
    saved = []
    for cls, name in pairs:
        saved.append((cls, {a: cls.__dict__[a] for a in ("kernel_layer_name", "kernel_condition")
                            if a in cls.__dict__}))
        kernels.replace_kernel_forward_from_hub(cls, name)
    try:
        yield
    finally:
        for cls, attrs in reversed(saved):
            for a in ("kernel_layer_name", "kernel_condition"):
                if a in cls.__dict__:
                    delattr(cls, a)
            for a, v in attrs.items():
                setattr(cls, a, v)


def replaced(model) -> dict:
    """{layer name: count} of modules whose forward is one of this package's layers."""
    counts = {}
    for m in model.modules():
        fn = getattr(m.__dict__.get("forward"), "__func__", None)
        if fn is None:
            continue
        owner = fn.__qualname__.split(".")[0]
        if fn.__module__ == kernel.layers.__name__ and fn is getattr(kernel.layers, owner).forward:
            counts[owner] = counts.get(owner, 0) + 1
    return counts


def kernelized(model, make_repo, names, mode):
    """kernelize with only our mapping; names we do not map (SiLU, rotary_pos_emb) keep their
    forward, but a mapped layer that fails to load or lacks the mode raises."""
    with use_kernel_mapping(mapping(make_repo, names), inherit_mapping=False):
        return kernelize(model, mode=mode, device=DEVICE, use_fallback=KernelizeFallback.NO_LAYER)


def run(fn, mode, *args, **kwargs):
    if Mode.TORCH_COMPILE in mode:
        torch._dynamo.reset()
        fn = torch.compile(fn, fullgraph=True, backend="aot_eager")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback may happen here
        return fn(*args, **kwargs)


def assert_within_bf16_noise(out, ref, ref32, what):
    """out vs ref (both eager-dtype runs) no further apart than ref is from the fp32 model."""
    err = (out.float() - ref.float()).abs().max().item()
    noise = (ref.float() - ref32.float()).abs().max().item()
    assert err <= max(noise, 1e-6 * ref32.abs().max().item()), f"{what}: {err:.3e} > bf16 noise {noise:.3e}"


def assert_close32(out, ref, what):
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5, msg=lambda m: f"{what}: {m}")


# ----------------------------------------------------------------------------- the layer contract


def host_class(name):
    """The class a layer replaces; skips when its library is not installed (the GPU image
    has no diffusers)."""
    if name == "TorchRMSNorm":
        return torch.nn.RMSNorm
    if name.startswith("Diffusers"):
        activations = pytest.importorskip("diffusers.models.activations")
        normalization = pytest.importorskip("diffusers.models.normalization")
        return {"DiffusersRMSNorm": normalization.RMSNorm, "DiffusersGELU": activations.GELU,
                "DiffusersGEGLU": activations.GEGLU}[name]
    if name == "RMSNorm":
        return pytest.importorskip("transformers.models.llama.modeling_llama").LlamaRMSNorm
    activations = pytest.importorskip("transformers.activations")
    return {"GeluTanh": activations.GELUTanh, "GeLU": activations.GELUActivation}[name]


@pytest.mark.parametrize("name", LAYER_NAMES)
def test_layer_passes_kernels_validation(name):
    """The checks kernelize runs on load (stateless, no extra members, same signature)."""
    from kernels.layer.layer import _validate_layer

    layer = getattr(kernel.layers, name)
    _validate_layer(check_cls=host_class(name), cls=layer, repo=f"layers.{name}")
    assert layer.has_backward is True  # tests/test_training.py
    assert layer.can_torch_compile is True


# ----------------------------------------------------------------------------- tiny Llama


def tiny_llama(hidden_act="silu", dtype=torch.float32):
    pytest.importorskip("transformers")
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      rms_norm_eps=1e-6, hidden_act=hidden_act)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # non-trivial norm weights
        for m in model.modules():
            if type(m).__name__ == "LlamaRMSNorm":
                m.weight.normal_(1.0, 0.2)
    return model.to(DEVICE, dtype)


@pytest.mark.parametrize("repo", REPOS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("hidden_act, act_layer", [("silu", None), ("gelu_pytorch_tanh", "GeluTanh"),
                                                   ("gelu", "GeLU")])
def test_llama_kernelized(repo, mode, hidden_act, act_layer, hub_repo):
    if act_layer is not None and repo == "hub":
        pytest.skip("the activations are checked through LocalLayerRepository only (CI time)")
    make_repo = repo_factory(repo, hub_repo)
    names = ["RMSNorm"] + ([act_layer] if act_layer else [])
    ids = torch.randint(0, 128, (2, 12), device=DEVICE)
    outs = {}
    for dtype in (torch.float32, torch.bfloat16):
        ref_model = tiny_llama(hidden_act, dtype)
        ref = run(lambda i: ref_model(input_ids=i).logits, Mode.INFERENCE, ids)
        model = kernelized(tiny_llama(hidden_act, dtype), make_repo, names, mode)
        counts = replaced(model)
        # 2 layers x (input, post-attention) + final norm; one MLP activation per layer.
        assert counts.get("RMSNorm") == 5, counts
        if act_layer:
            assert counts.get(act_layer) == 2, counts
        out = run(lambda i: model(input_ids=i).logits, mode, ids)
        outs[dtype] = (out, ref)
    out32, ref32 = outs[torch.float32]
    assert_close32(out32, ref32, "fp32 logits")
    out16, ref16 = outs[torch.bfloat16]
    assert_within_bf16_noise(out16, ref16, ref32, "bf16 logits")
    if Mode.TORCH_COMPILE in mode:  # compiled kernelized == eager kernelized, bit for bit
        model = kernelized(tiny_llama(hidden_act, torch.bfloat16), make_repo, names, Mode.INFERENCE)
        torch.testing.assert_close(run(lambda i: model(input_ids=i).logits, Mode.INFERENCE, ids),
                                   out16, rtol=0, atol=0)


# ----------------------------------------------------------------------------- tiny LTX-Video


def tiny_ltx(dtype):
    from diffusers import LTXVideoTransformer3DModel

    torch.manual_seed(0)
    model = LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=4,
                                       attention_head_dim=8, cross_attention_dim=32, num_layers=1,
                                       caption_channels=32).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.RMSNorm) and m.weight is not None:
                m.weight.normal_(1.0, 0.2)
    return model.to(DEVICE, dtype)


def ltx_inputs(dtype):
    g = torch.Generator().manual_seed(1)
    frames, h, w = 3, 4, 4
    return dict(
        hidden_states=torch.randn(2, frames * h * w, 8, generator=g).to(DEVICE, dtype),
        encoder_hidden_states=torch.randn(2, 6, 32, generator=g).to(DEVICE, dtype),
        timestep=torch.tensor([100, 700], device=DEVICE),
        encoder_attention_mask=torch.ones(2, 6, device=DEVICE, dtype=dtype),
        num_frames=frames, height=h, width=w, return_dict=False,
    )


@pytest.mark.parametrize("repo", REPOS)
@pytest.mark.parametrize("mode", MODES)
def test_ltx_transformer_kernelized(repo, mode, hub_repo):
    pytest.importorskip("diffusers")
    from diffusers.models.activations import GELU
    from diffusers.models.normalization import RMSNorm as DRMSNorm

    make_repo = repo_factory(repo, hub_repo)
    names = ["DiffusersRMSNorm", "TorchRMSNorm", "DiffusersGELU"]
    outs = {}
    with hub_names((DRMSNorm, "DiffusersRMSNorm"), (torch.nn.RMSNorm, "TorchRMSNorm"),
                   (GELU, "DiffusersGELU")):
        for dtype in (torch.float32, torch.bfloat16):
            ref_model = tiny_ltx(dtype)
            ref = run(lambda **kw: ref_model(**kw)[0], Mode.INFERENCE, **ltx_inputs(dtype))
            model = kernelized(tiny_ltx(dtype), make_repo, names, mode)
            # 1 block: norm1, norm2 (diffusers); attn1/attn2 norm_q, norm_k (torch); ff.net.0.
            assert replaced(model) == {"DiffusersRMSNorm": 2, "TorchRMSNorm": 4, "DiffusersGELU": 1}
            out = run(lambda **kw: model(**kw)[0], mode, **ltx_inputs(dtype))
            outs[dtype] = (out, ref)
    assert not hasattr(torch.nn.RMSNorm, "kernel_layer_name")  # hub_names undid itself
    out32, ref32 = outs[torch.float32]
    assert_close32(out32, ref32, "fp32 LTX output")
    out16, ref16 = outs[torch.bfloat16]
    assert_within_bf16_noise(out16, ref16, ref32, "bf16 LTX output")


# ----------------------------------------------------------------------------- single modules


def _diffusers_norm(bias, dtype, affine=True):
    from diffusers.models.normalization import RMSNorm as DRMSNorm

    m = DRMSNorm(48, eps=1e-6, elementwise_affine=affine, bias=bias)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(1.0, 0.3)
    return m.to(DEVICE, dtype)


def _module_cases():
    from diffusers.models.activations import GEGLU, GELU
    from diffusers.models.normalization import RMSNorm as DRMSNorm

    def torch_norm(shape, eps, affine):
        def make():
            m = torch.nn.RMSNorm(shape, eps=eps, elementwise_affine=affine)
            if affine:
                with torch.no_grad():
                    m.weight.normal_(1.0, 0.3)
            return m
        return make

    return [
        ("diffusers-rms-bias", DRMSNorm, "DiffusersRMSNorm", lambda: _diffusers_norm(True, torch.float32)),
        ("diffusers-rms-noaffine", DRMSNorm, "DiffusersRMSNorm", lambda: _diffusers_norm(False, torch.float32, False)),
        ("torch-rms-eps-none", torch.nn.RMSNorm, "TorchRMSNorm", torch_norm(48, None, True)),
        ("torch-rms-noaffine", torch.nn.RMSNorm, "TorchRMSNorm", torch_norm(48, 1e-5, False)),
        ("diffusers-gelu-erf", GELU, "DiffusersGELU", lambda: GELU(16, 48, approximate="none")),
        ("diffusers-geglu", GEGLU, "DiffusersGEGLU", lambda: GEGLU(16, 48)),
    ]


@pytest.mark.parametrize("mode", MODES)
def test_single_modules_kernelized(mode):
    """The host variants the models above do not reach: bias, no weight, eps=None, erf GELU,
    GEGLU; in fp32, bf16, and bf16 input with fp32 parameters (diffusers/LLM mixed use)."""
    pytest.importorskip("diffusers")
    cases = _module_cases()
    make_repo = lambda name: LocalLayerRepository(REPO, layer_name=name)  # noqa: E731
    with hub_names(*{(cls, name) for _, cls, name, _ in cases}):
        for case, _, name, make in cases:
            is_act = name in ("DiffusersGELU", "DiffusersGEGLU")
            in_dim = 16 if is_act else 48
            dtypes = [(torch.float32,) * 2, (torch.bfloat16,) * 2]
            if not is_act:  # a Linear needs its input in its own dtype
                dtypes.append((torch.bfloat16, torch.float32))
            for x_dtype, p_dtype in dtypes:
                torch.manual_seed(0)
                ref_m = make().to(DEVICE, p_dtype)
                torch.manual_seed(0)
                m = kernelized(torch.nn.Sequential(make().to(DEVICE, p_dtype)), make_repo, [name], mode)
                assert replaced(m) == {name: 1}, case
                x = (3 * torch.randn(3, 5, in_dim)).to(DEVICE, x_dtype)
                ref = run(ref_m, Mode.INFERENCE, x)
                out = run(m, mode, x)
                what = f"{case} x {x_dtype} params {p_dtype}"
                assert out.dtype == ref.dtype and out.shape == ref.shape, what
                if ref.dtype == torch.float32:
                    assert_close32(out, ref, what)
                elif not is_act:  # one rounding of values ~1 fp32 ulp apart: at most 1 bf16 ulp
                    assert_ulp(out, ref, max_ulp=1, max_mismatch_frac=0.05, what=what)
                else:
                    # ATen's CPU bf16 GELU uses its own vectorised erf/tanh and differs from
                    # fp32-once rounding in a few % of elements (1 ulp, more in the far
                    # negative tail where |y| is tiny): require the kernel's error against
                    # the float64 module to be no larger than eager's own.
                    torch.manual_seed(0)
                    m64 = make().to(DEVICE, torch.float64)
                    ref64 = run(m64, Mode.INFERENCE, x.double())
                    err = (out.double() - ref64).abs().max().item()
                    noise = (ref.double() - ref64).abs().max().item()
                    assert err <= noise, f"{what}: error {err:.3e} > eager bf16's {noise:.3e}"


# ----------------------------------------------------------------------------- fallback


def _kernelized_norm(cls_name):
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    if cls_name == "RMSNorm":
        m = LlamaRMSNorm(48)
    else:
        m = torch.nn.RMSNorm((4, 12))  # normalized_shape over two dims: the kernel cannot
    with torch.no_grad():
        m.weight.normal_(1.0, 0.3)
    return m


def test_fallback_warns_once_and_matches_the_module():
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    _support._WARNED.clear()
    make_repo = lambda name: LocalLayerRepository(REPO, layer_name=name)  # noqa: E731
    with hub_names((torch.nn.RMSNorm, "TorchRMSNorm")):
        llama = kernelized(_kernelized_norm("RMSNorm").to(DEVICE), make_repo, ["RMSNorm"], Mode.INFERENCE)
        on_meta = kernelized(_kernelized_norm("RMSNorm").to("meta"), make_repo, ["RMSNorm"],
                             Mode.INFERENCE)
        two_d = kernelized(_kernelized_norm("TorchRMSNorm").to(DEVICE), make_repo, ["TorchRMSNorm"],
                           Mode.INFERENCE)
    assert replaced(llama) == {"RMSNorm": 1} and replaced(two_d) == {"TorchRMSNorm": 1}

    cases = [
        (llama, torch.randn(3, 48, dtype=torch.float64), "RMSNorm", "dtype torch.float64", torch.float64),
        (on_meta, torch.randn(3, 48, device="meta"), "RMSNorm", "meta device", None),
        (two_d, torch.randn(3, 4, 12), "TorchRMSNorm", "normalized_shape=(4, 12)", torch.float32),
    ]
    for module, x, name, needle, w_dtype in cases:
        if w_dtype is not None:
            module.to(DEVICE, w_dtype)
            x = x.to(DEVICE)
        for attempt in range(2):
            with warnings.catch_warnings(record=True) as caught, torch.no_grad():
                warnings.simplefilter("always")
                out = module(x)
            msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
            if attempt == 0:
                assert len(msgs) == 1 and f"layers.{name}" in msgs[0] and needle in msgs[0], msgs
            else:
                assert msgs == [], msgs  # once per (op, reason) per process
        ref = type(module).forward(module, x)
        assert out.shape == ref.shape and out.dtype == ref.dtype
        if out.device.type != "meta":
            torch.testing.assert_close(out, ref, rtol=0, atol=0)

    # Autograd on parameters that require grad: the kernel runs (it has a backward), no fallback.
    llama.to(DEVICE, torch.float32)
    x = torch.randn(3, 48, device=DEVICE, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        llama(x).sum().backward()
    assert x.grad is not None and llama.weight.grad is not None
    assert isinstance(llama, LlamaRMSNorm)


def test_plain_functions_keep_raising():
    # float64 runs on the CPU (for gradcheck) but not on GPUs; integers nowhere.
    bad = torch.randn(3, 48, dtype=torch.float64, device=DEVICE) if DEVICE == "cuda" else \
        torch.ones(3, 48, dtype=torch.int32)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        kernel.rmsnorm(bad, None, 1e-6)
    with pytest.raises(RuntimeError, match="float32, float16 or bfloat16"):
        kernel.gelu_tanh(bad)
    x = torch.randn(3, 48, device=DEVICE)
    with pytest.raises(RuntimeError, match="weight must have shape"):
        kernel.rmsnorm(x, torch.ones(4, 12, device=DEVICE), 1e-6, semantics="torch")
