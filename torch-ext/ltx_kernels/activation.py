"""GELU (erf and tanh) and gated GELU over the last dim, with eager PyTorch's rounding.

- ``gelu`` / ``gelu_tanh``: ``F.gelu(x)`` / ``F.gelu(x, approximate="tanh")``: fp32 math,
  one rounding to x's dtype (bit-identical to ATen's CUDA kernel).
- ``geglu``: the last dim holds two halves of size d. Default (diffusers ``GEGLU``):
  ``h, g = x.chunk(2, -1); h * gelu(g)``. ``gate_first=True`` (Gemma, vLLM,
  kernels-community ``*_and_mul``): ``gelu(x[..., :d]) * x[..., d:]``. As in eager, the
  GELU is rounded to x's dtype before the product, which is rounded again.
- ``gelu_and_mul(out, x)`` / ``gelu_tanh_and_mul(out, x)``: kernels-community's
  out-first, gate-first calls.

Any rank, float32/float16/bfloat16 (and float64 on the CPU, for gradcheck). Rows may be
strided (``proj(x)[..., :2d]``) and pointers misaligned; other layouts are copied once.
Outputs are contiguous, in x's dtype.

Training: ``gelu``, ``gelu_tanh`` and ``geglu`` (the functional ops) are differentiable
through the ``gelu_backward`` / ``geglu_backward`` kernels (fp32 math, ATen's derivative
formulas; the forward's rounding of the GELU before the gated product is treated as
identity, as autograd through that cast does). The ``out=`` paths and ``gelu_and_mul`` /
``gelu_tanh_and_mul`` are inference-only: they raise if grad mode is on and x requires grad.
"""

from typing import Optional

import torch

from . import _arch
from ._ops import add_op_namespace_prefix, ops

APPROXIMATIONS = ("none", "tanh")


def _check_approximate(approximate: str) -> None:
    if approximate not in APPROXIMATIONS:
        raise ValueError(
            f"ltx_kernels.geglu: approximate must be 'none' or 'tanh', got {approximate!r}"
        )


def _check_inference_only(x: torch.Tensor, what: str) -> None:
    if torch.is_grad_enabled() and x.requires_grad:
        raise RuntimeError(
            f"ltx_kernels.{what} is inference-only (it writes into a caller's tensor, which "
            "autograd cannot track) but x requires grad; call it without out= (or use the "
            "functional op) for training, or run it under torch.no_grad()"
        )


def gelu(x: torch.Tensor, *, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Erf GELU, ``x * 0.5 * (1 + erf(x / sqrt(2)))`` in fp32, rounded once. ``out`` may be x.

    Differentiable without ``out``; the ``out=`` path is inference-only (raises if grad
    mode is on and x requires grad)."""
    _arch.check(x)
    if out is None:
        return ops.gelu(x)
    _check_inference_only(x, "gelu(out=...)")
    ops.gelu_out(out, x)
    return out


def gelu_tanh(x: torch.Tensor, *, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Tanh GELU, ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`` in fp32, rounded
    once (``F.gelu(x, approximate="tanh")``). ``out`` may be x.

    Differentiable without ``out``; the ``out=`` path is inference-only (raises if grad
    mode is on and x requires grad)."""
    _arch.check(x)
    if out is None:
        return ops.gelu_tanh(x)
    _check_inference_only(x, "gelu_tanh(out=...)")
    ops.gelu_tanh_out(out, x)
    return out


def geglu(
    x: torch.Tensor,
    approximate: str = "none",
    *,
    gate_first: bool = False,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Gated GELU of ``x[..., :d]`` and ``x[..., d:]`` (x's last dim 2d, even), shape [..., d].

    ``gate_first=False``: ``x[..., :d] * gelu(x[..., d:], approximate)`` (diffusers GEGLU);
    ``gate_first=True``: ``gelu(x[..., :d], approximate) * x[..., d:]`` (Gemma / vLLM).

    Differentiable without ``out``; the ``out=`` path is inference-only (raises if grad
    mode is on and x requires grad).
    """
    _arch.check(x)
    _check_approximate(approximate)
    if out is None:
        return ops.geglu(x, approximate, gate_first)
    _check_inference_only(x, "geglu(out=...)")
    ops.geglu_out(out, x, approximate, gate_first)
    return out


def gelu_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """kernels-community / vLLM: ``out = gelu(x[..., :d]) * x[..., d:]`` (erf).

    Inference-only (raises if grad mode is on and x requires grad); for training use
    ``geglu(x, gate_first=True)``."""
    _arch.check(x)
    _check_inference_only(x, "gelu_and_mul")
    ops.geglu_out(out, x, "none", True)
    return out


def gelu_tanh_and_mul(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """kernels-community / vLLM: ``out = gelu_tanh(x[..., :d]) * x[..., d:]``.

    Inference-only (raises if grad mode is on and x requires grad); for training use
    ``geglu(x, "tanh", gate_first=True)``."""
    _arch.check(x)
    _check_inference_only(x, "gelu_tanh_and_mul")
    ops.geglu_out(out, x, "tanh", True)
    return out


@torch.library.register_fake(add_op_namespace_prefix("gelu"))
def _gelu_fake(x):
    _arch.check_fake(x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake(add_op_namespace_prefix("gelu_tanh"))
def _gelu_tanh_fake(x):
    _arch.check_fake(x)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake(add_op_namespace_prefix("gelu_out"))
def _gelu_out_fake(out, x):
    _arch.check_fake(out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("gelu_tanh_out"))
def _gelu_tanh_out_fake(out, x):
    _arch.check_fake(out)
    return None


def _geglu_shape(x):
    torch._check(x.dim() >= 1, lambda: "ltx_kernels.geglu: x must have at least one dimension")
    torch._check(
        x.shape[-1] % 2 == 0,
        lambda: f"ltx_kernels.geglu: x's last dim must be even (two halves), got shape {tuple(x.shape)}",
    )
    return (*x.shape[:-1], x.shape[-1] // 2)


@torch.library.register_fake(add_op_namespace_prefix("geglu"))
def _geglu_fake(x, approximate="none", gate_first=False):
    _arch.check_fake(x)
    return x.new_empty(_geglu_shape(x))


@torch.library.register_fake(add_op_namespace_prefix("geglu_out"))
def _geglu_out_fake(out, x, approximate="none", gate_first=False):
    _arch.check_fake(out)
    return None


# ---- backward ------------------------------------------------------------------------


@torch.library.register_fake(add_op_namespace_prefix("gelu_backward"))
def _gelu_backward_fake(grad, x, approximate="none"):
    _arch.check_fake(x)
    torch._check(
        grad.shape == x.shape,
        lambda: f"ltx_kernels.gelu_backward: grad must have x's shape {list(x.shape)}, got {list(grad.shape)}",
    )
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.register_fake(add_op_namespace_prefix("geglu_backward"))
def _geglu_backward_fake(grad, x, approximate="none", gate_first=False):
    _arch.check_fake(x)
    shape = _geglu_shape(x)
    torch._check(
        tuple(grad.shape) == tuple(shape),
        lambda: f"ltx_kernels.geglu_backward: grad must have shape {list(shape)}, got {list(grad.shape)}",
    )
    return torch.empty_like(x, memory_format=torch.contiguous_format)


# Autograd: registered in C++ for the Autograd key (torch-ext/ops/autograd.cpp).
