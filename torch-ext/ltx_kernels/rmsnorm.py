"""RMSNorm over the last dim, with the rounding of the module it replaces."""

from typing import Optional

import torch

from . import _arch
from ._ops import add_op_namespace_prefix, ops

# Which module's cast points to reproduce (shared/docs/op-semantics.md section 1):
#   "diffusers": diffusers.models.normalization.RMSNorm - normalise in fp32; with a
#       half weight, round to the weight dtype, multiply, round again; output in the
#       weight's dtype (fp32 for an fp32 weight), or x's dtype without a weight.
#   "torch": torch.nn.RMSNorm / F.rms_norm - fp32 throughout, one rounding, x's dtype.
#   "llama": transformers LlamaRMSNorm - round to x's dtype, multiply by the weight,
#       output in promote(weight dtype, x dtype).
# torch.compile of any of these rounds once, like "torch"; the others stay within
# one ulp of it.
SEMANTICS = {"diffusers": 0, "torch": 1, "llama": 2}


def _semantics_code(semantics: str) -> int:
    try:
        return SEMANTICS[semantics]
    except KeyError:
        raise ValueError(
            f"ltx_kernels.rmsnorm: semantics must be one of {sorted(SEMANTICS)}, got {semantics!r}"
        ) from None


def rms_norm_out_dtype(
    x_dtype: torch.dtype, weight_dtype: Optional[torch.dtype], semantics: str = "diffusers"
) -> torch.dtype:
    """The output dtype rmsnorm gives for these input dtypes (the module's rule)."""
    return _out_dtype(x_dtype, weight_dtype, _semantics_code(semantics))


def _out_dtype(x_dtype, weight_dtype, code: int) -> torch.dtype:
    if weight_dtype is None:
        return x_dtype
    if code == SEMANTICS["diffusers"]:
        return weight_dtype
    if code == SEMANTICS["torch"]:
        return x_dtype
    return torch.promote_types(weight_dtype, x_dtype)


def rmsnorm(
    x: torch.Tensor,
    weight: Optional[torch.Tensor] = None,
    eps: Optional[float] = 1e-6,
    *,
    out: Optional[torch.Tensor] = None,
    semantics: str = "diffusers",
) -> torch.Tensor:
    """``x * rsqrt(mean(x**2, -1) + eps) * weight`` over the last dim of ``x``.

    Any rank; float32/float16/bfloat16 ``x`` and ``weight`` (shape ``[x.shape[-1]]``
    or None), accumulated in float32. ``eps=None`` means float32's machine epsilon,
    as ``torch.nn.RMSNorm(eps=None)``. Differentiable (x and weight) without ``out``.
    ``out``, if given, receives the result (it may be ``x`` itself) and is returned; that
    path is inference-only (a RuntimeError when grad mode is on and an input requires
    grad). float64 is accepted on the CPU only (for gradcheck). Rows may be strided (e.g. ``qkv[..., :D]``)
    without a copy; other layouts are copied once.
    """
    _arch.check(x)
    if eps is None:
        eps = torch.finfo(torch.float32).eps
    code = _semantics_code(semantics)
    if out is None:
        return ops.rms_norm(x, weight, eps, code)
    _check_inference_only("rmsnorm(out=...)", x, weight)
    ops.rms_norm_out(out, x, weight, eps, code)
    return out


def _check_inference_only(what, *tensors):
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(
            f"ltx_kernels.{what} is inference-only (it writes into a given tensor, which "
            "autograd cannot track); an input requires grad: call it without out= / inplace, "
            "or under torch.no_grad()"
        )


@torch.library.register_fake(add_op_namespace_prefix("rms_norm"))
def _rms_norm_fake(x, weight, eps, semantics):
    _arch.check_fake(x)
    w_dtype = None if weight is None else weight.dtype
    return x.new_empty(x.shape, dtype=_out_dtype(x.dtype, w_dtype, semantics))


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_out"))
def _rms_norm_out_fake(out, x, weight, eps, semantics):
    _arch.check_fake(out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("rms_norm_backward"))
def _rms_norm_backward_fake(grad, x, weight, eps, weight_grad):
    _arch.check_fake(x)
    dx = x.new_empty(x.shape)
    if weight is None:
        return dx, x.new_empty((0,))
    if not weight_grad:
        return dx, weight.new_empty((0,))
    return dx, weight.new_empty(weight.shape)


# Autograd: registered in C++ for the Autograd key (torch-ext/ops/autograd.cpp).
