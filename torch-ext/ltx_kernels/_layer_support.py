"""Helpers for layers.py: what the loaded variant can run, and the one-time fallback notice.

`kernels` requires layer classes to have no members besides ``forward``, ``has_backward``
and ``can_torch_compile``, so everything a layer needs besides its forward lives here.

A layer checks its inputs with one of the ``*_reason`` functions. ``None`` means the kernel
can run; otherwise the layer calls :func:`fallback`, which warns once per (layer, reason)
per process and runs the host module's own PyTorch code. The plain functions
(``ltx_kernels.rmsnorm``, ...) never fall back: they raise.
"""

import functools
import math
import re
import warnings
from typing import Optional

import torch

from ._ops import add_op_namespace_prefix

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)

_WARNED = set()  # (layer name, reason) pairs already reported in this process


def _variant_device_type() -> Optional[str]:
    """"cpu" or "cuda": the device the loaded variant has kernels for.

    kernel-builder names the op namespace ``_<package>_<backend>_<hash>``; the variant
    registers real kernels for its own device only (a clear error for the other)."""
    namespace = add_op_namespace_prefix("x").split("::")[0]
    m = re.match(r"_ltx_kernels_(cpu|cuda)_", namespace)
    return m.group(1) if m else None


VARIANT_DEVICE = _variant_device_type()
# The tensor attribute that says "on the variant's device": `t.is_cuda` costs ~0.1 µs,
# `t.device.type` ~0.5 µs (it builds a torch.device), and layers check every call.
_ON_VARIANT = {"cuda": "is_cuda", "cpu": "is_cpu"}.get(VARIANT_DEVICE)


def _tensor_reason(t: torch.Tensor, name: str) -> Optional[str]:
    if _ON_VARIANT is not None and not getattr(t, _ON_VARIANT):
        return (f"{name} is on a {t.device.type} device, but the loaded ltx-kernels variant "
                f"has kernels for {VARIANT_DEVICE} only")
    if t.dtype not in FLOAT_DTYPES:
        return f"{name} has dtype {t.dtype} (kernels exist for float32, float16, bfloat16)"
    return None


def norm_reason(x: torch.Tensor, weight: Optional[torch.Tensor], eps) -> Optional[str]:
    """Why ltx_kernels.rmsnorm cannot normalise x's last dim with this weight/eps, or None."""
    reason = _tensor_reason(x, "the input")
    if reason is None and x.dim() < 1:
        reason = "the input is 0-dimensional"
    if reason is None and weight is not None:
        reason = _tensor_reason(weight, "the weight")
        if reason is None and weight.device != x.device:
            reason = "the weight and the input are on different devices"
        if reason is None and (weight.dim() != 1 or weight.shape[0] != x.shape[-1]):
            reason = (f"the weight has shape {tuple(weight.shape)}, the kernel needs "
                      f"[{x.shape[-1]}] (the input's last dim)")
    if reason is None and eps is not None and not (isinstance(eps, (int, float))
                                                   and math.isfinite(eps) and eps >= 0):
        reason = f"eps={eps!r} is not a finite number >= 0"
    return reason


def torch_norm_reason(x: torch.Tensor, normalized_shape, weight, eps) -> Optional[str]:
    """norm_reason for torch.nn.RMSNorm, whose normalized_shape may span several dims."""
    shape = tuple(normalized_shape)
    if len(shape) != 1:
        return (f"normalized_shape={shape} spans {len(shape)} dims; the kernel normalises "
                f"the last dim only")
    if x.dim() < 1 or x.shape[-1] != shape[0]:
        return f"the input's shape {tuple(x.shape)} does not end in normalized_shape={shape}"
    return norm_reason(x, weight, eps)


def act_reason(x: torch.Tensor) -> Optional[str]:
    """Why the elementwise/gated GELU kernels cannot take x, or None."""
    return _tensor_reason(x, "the input")


def is_partial_of(fn, target, **keywords) -> bool:
    """fn is functools.partial(target, **keywords) (transformers' GELUTanh.act)."""
    return (isinstance(fn, functools.partial) and fn.func is target and not fn.args
            and dict(fn.keywords) == keywords)


def warn_once(layer: str, reason: str) -> None:
    if torch.compiler.is_compiling():
        return  # warnings.warn breaks a fullgraph trace; the eager run reports it
    key = (layer, reason)
    if key in _WARNED:
        return
    _WARNED.add(key)
    warnings.warn(f"ltx_kernels.layers.{layer}: {reason}; using the module's own PyTorch "
                  f"forward instead (reported once per process)", RuntimeWarning, stacklevel=4)


def fallback(module: torch.nn.Module, layer: str, reason: str, *args, **kwargs):
    """Warn once, then run the host class's own forward (kernelize only replaced the
    instance's ``forward``; the class keeps the original)."""
    warn_once(layer, reason)
    return type(module).forward(module, *args, **kwargs)
