"""Stateless layers for ``kernels.kernelize``: drop-in forwards for transformers, diffusers
and torch.nn modules, each with the rounding of the module it replaces.

``kernelize`` sets ``module.forward = MethodType(Layer.forward, module)``, so ``self`` is the
host module and the layer reads the host's own attributes (annotated below). When the
kernel cannot take a call (a dtype other than float32/float16/bfloat16, a device the loaded
variant has no kernels for, a weight shape the op rejects), the layer runs the host module's own PyTorch forward and warns once per
(layer, reason) per process. The plain functions (``rmsnorm``, ``gelu``, ...) raise instead.

| layer | replaces | hub name |
|---|---|---|
| ``RMSNorm`` | transformers ``LlamaRMSNorm``, ``Qwen2RMSNorm``, ... | ``"RMSNorm"`` (decorated upstream) |
| ``DiffusersRMSNorm`` | ``diffusers.models.normalization.RMSNorm`` | none upstream: ``replace_kernel_forward_from_hub`` |
| ``TorchRMSNorm`` | ``torch.nn.RMSNorm`` (LTX/Wan/FLUX q/k norms) | none upstream: ``replace_kernel_forward_from_hub`` |
| ``GeluTanh`` | transformers ``GELUTanh`` | ``"GeluTanh"`` |
| ``GeLU`` | transformers ``GELUActivation`` | ``"GeLU"`` |
| ``DiffusersGELU`` | ``diffusers.models.activations.GELU`` (LTX ``ff.net.0``) | none upstream |
| ``DiffusersGEGLU`` | ``diffusers.models.activations.GEGLU`` | none upstream |

Every layer has backward kernels (``has_backward = True``: the ops have Autograd kernels
registered in C++, torch-ext/ops/autograd.cpp; tests/test_training.py trains tiny Llama / LTX models
kernelized in ``Mode.TRAINING`` and compares loss and gradients with the unkernelized model).
All support ``Mode.TORCH_COMPILE`` (tests/test_layers.py compiles each with ``fullgraph=True``
and compares with eager; tests/test_training.py compiles forward + backward).
"""

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import _layer_support as _s
from .activation import geglu, gelu, gelu_tanh
from .rmsnorm import rmsnorm


class RMSNorm(nn.Module):
    """transformers ``LlamaRMSNorm`` and its copies (hub name ``"RMSNorm"``):
    ``weight * (x * rsqrt(mean(x**2) + variance_epsilon)).to(x.dtype)``, semantics "llama"."""

    weight: torch.Tensor
    variance_epsilon: float

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        reason = _s.norm_reason(hidden_states, self.weight, self.variance_epsilon)
        if reason is not None:
            return _s.fallback(self, "RMSNorm", reason, hidden_states)
        return rmsnorm(hidden_states, self.weight, self.variance_epsilon, semantics="llama")


class DiffusersRMSNorm(nn.Module):
    """diffusers ``RMSNorm`` (LTX-Video ``norm1``/``norm2``, HunyuanVideo/SD3 q/k norms):
    weight possibly None, optional bias added after the weight multiply, as diffusers does."""

    eps: float
    weight: Optional[torch.Tensor]
    bias: Optional[torch.Tensor]

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        weight = self.weight
        bias = self.bias if weight is not None else None  # diffusers ignores bias without weight
        reason = _s.norm_reason(hidden_states, weight, self.eps)
        if reason is None and bias is not None:
            reason = _s.act_reason(bias)
        if reason is not None:
            return _s.fallback(self, "DiffusersRMSNorm", reason, hidden_states)
        out = rmsnorm(hidden_states, weight, self.eps, semantics="diffusers")
        if bias is not None:
            out = out + bias
        return out


class TorchRMSNorm(nn.Module):
    """``torch.nn.RMSNorm`` / ``F.rms_norm`` over one trailing dim (eps None = float32 eps),
    weight possibly None; fp32 math, one rounding to x's dtype (semantics "torch")."""

    normalized_shape: tuple
    eps: Optional[float]
    weight: Optional[torch.Tensor]

    has_backward = True
    can_torch_compile = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = _s.torch_norm_reason(x, self.normalized_shape, self.weight, self.eps)
        if reason is not None:
            return _s.fallback(self, "TorchRMSNorm", reason, x)
        return rmsnorm(x, self.weight, self.eps, semantics="torch")


class GeluTanh(nn.Module):
    """transformers ``GELUTanh`` (hub name ``"GeluTanh"``): ``F.gelu(x, approximate="tanh")``."""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        reason = _s.act_reason(input)
        if reason is None and not _s.is_partial_of(getattr(self, "act", None), F.gelu,
                                                   approximate="tanh"):
            reason = "the module computes GELU-tanh in Python (use_gelu_tanh_python=True)"
        if reason is not None:
            return _s.fallback(self, "GeluTanh", reason, input)
        return gelu_tanh(input)


class GeLU(nn.Module):
    """transformers ``GELUActivation`` (hub name ``"GeLU"``): erf ``F.gelu(x)``."""

    has_backward = True
    can_torch_compile = True

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        reason = _s.act_reason(input)
        if reason is None and getattr(self, "act", None) is not F.gelu:
            reason = "the module computes GELU in Python (use_gelu_python=True)"
        if reason is not None:
            return _s.fallback(self, "GeLU", reason, input)
        return gelu(input)


class DiffusersGELU(nn.Module):
    """diffusers ``GELU`` (LTX-Video ``ff.net.0``, ``approximate="tanh"``): the module's own
    ``proj`` Linear, then the GELU kernel."""

    proj: nn.Linear
    approximate: str

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states):
        hidden_states = self.proj(hidden_states)
        reason = _s.act_reason(hidden_states)
        if reason is None and self.approximate not in ("none", "tanh"):
            reason = f"approximate={self.approximate!r}"
        if reason is not None:
            _s.warn_once("DiffusersGELU", reason)
            return self.gelu(hidden_states)
        if self.approximate == "tanh":
            return gelu_tanh(hidden_states)
        return gelu(hidden_states)


class DiffusersGEGLU(nn.Module):
    """diffusers ``GEGLU`` (SD/SDXL/AnimateDiff feed-forwards): the module's own ``proj``,
    then ``h * gelu(gate)`` with ``h, gate = proj(x).chunk(2, -1)`` in one kernel."""

    proj: nn.Linear

    has_backward = True
    can_torch_compile = True

    def forward(self, hidden_states, *args, **kwargs):
        if len(args) > 0 or kwargs.get("scale", None) is not None:
            # The deprecated `scale` argument: let diffusers issue its deprecation.
            return type(self).forward(self, hidden_states, *args, **kwargs)
        hidden_states = self.proj(hidden_states)
        reason = _s.act_reason(hidden_states)
        if reason is not None:
            _s.warn_once("DiffusersGEGLU", reason)
            hidden_states, gate = hidden_states.chunk(2, dim=-1)
            return hidden_states * self.gelu(gate)
        return geglu(hidden_states, "none")
