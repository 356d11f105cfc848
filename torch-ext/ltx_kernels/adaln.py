"""AdaLN modulation ``norm(x) * (1 + scale) + shift`` and the gated residual
``x + y * gate``, each in one pass, rounding like the unfused eager expressions."""

from typing import Optional

import torch

from . import _arch
from ._ops import add_op_namespace_prefix, ops

# norm(x) in adaln:
#   "rms": diffusers.models.normalization.RMSNorm (LTX-Video's norm1/norm2, Wan-style
#       RMS): normalise in fp32; without a weight round once to x's dtype; with a
#       half weight round to the weight dtype, multiply, round again (weight dtype);
#       with an fp32 weight the result stays fp32.
#   "layer": nn.LayerNorm over the last dim with no bias (FLUX, DiT, PixArt, LTX's
#       norm_out): mean/variance in fp32, an optional weight applied in fp32, one
#       rounding to x's dtype.
NORMS = {"rms": 0, "layer": 1}


def _norm_code(norm: str) -> int:
    try:
        return NORMS[norm]
    except KeyError:
        raise ValueError(f"ltx_kernels.adaln: norm must be one of {sorted(NORMS)}, got {norm!r}") from None


def _adaln_dtype(x_dtype, scale_dtype, shift_dtype, weight_dtype, code: int) -> torch.dtype:
    n = weight_dtype if (code == NORMS["rms"] and weight_dtype is not None) else x_dtype
    prod = torch.promote_types(n, scale_dtype)
    return prod if shift_dtype is None else torch.promote_types(prod, shift_dtype)


def adaln_out_dtype(
    x_dtype: torch.dtype,
    scale_dtype: torch.dtype,
    shift_dtype: Optional[torch.dtype] = None,
    weight_dtype: Optional[torch.dtype] = None,
    norm: str = "rms",
) -> torch.dtype:
    """The dtype adaln returns for these input dtypes (eager type promotion)."""
    return _adaln_dtype(x_dtype, scale_dtype, shift_dtype, weight_dtype, _norm_code(norm))


def gated_residual_out_dtype(
    x_dtype: torch.dtype, y_dtype: torch.dtype, gate_dtype: torch.dtype
) -> torch.dtype:
    """The dtype gated_residual returns: promote(x, promote(y, gate)), as eager."""
    return torch.promote_types(x_dtype, torch.promote_types(y_dtype, gate_dtype))


def _no_grad_path(op: str, what: str, *tensors) -> None:
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors):
        raise RuntimeError(
            f"ltx_kernels.{op}: the {what} path is inference-only (no autograd); an input "
            f"requires grad. Call it without {what} (differentiable), or under torch.no_grad()."
        )


def adaln(
    x: torch.Tensor,
    scale: torch.Tensor,
    shift: Optional[torch.Tensor] = None,
    weight: Optional[torch.Tensor] = None,
    eps: float = 1e-6,
    norm: str = "rms",
    *,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``norm(x) * (1 + scale) + shift`` over the last dim of ``x``, in one pass over x.

    ``norm`` is ``"rms"`` (diffusers RMSNorm) or ``"layer"`` (LayerNorm, no bias); see
    ``NORMS``. ``weight`` (``[D]`` or None) is the norm's elementwise weight. ``scale``
    and ``shift`` (None: no shift) broadcast against ``x`` like the eager expression,
    e.g. ``[B, 1, D]``, ``[B, S, D]``, ``[B, F, 1, D]`` for x ``[B, F, S, D]``, ``[D]``;
    any leading strides (the views ``(table + temb).unbind(2)`` makes) are read without
    a copy. Every op boundary rounds as in eager PyTorch: ``norm(x)``, then ``1 + scale``
    in scale's dtype, the product in ``promote(norm, scale)``, the sum in
    ``promote(product, shift)``, which is the output dtype (``adaln_out_dtype``). With
    fp32 ``x``, ``scale`` and ``shift`` (Wan) all of it is fp32. ``out``, if given,
    receives the result (it may be ``x``) and is returned.

    Differentiable (x, scale, shift, weight) without ``out``; the ``out=`` path is
    inference-only and raises if grad mode is on and an input requires grad.
    """
    _arch.check(x)
    code = _norm_code(norm)
    if out is not None:
        _no_grad_path("adaln", "out=", x, scale, shift, weight)
    if out is None:
        return ops.adaln(x, scale, shift, weight, eps, code)
    ops.adaln_out(out, x, scale, shift, weight, eps, code)
    return out


def gated_residual(
    x: torch.Tensor,
    y: torch.Tensor,
    gate: torch.Tensor,
    *,
    out: Optional[torch.Tensor] = None,
    inplace: bool = False,
) -> torch.Tensor:
    """``x + y * gate`` in one pass (LTX's ``h + attn(n) * gate_msa``).

    ``y`` and ``gate`` broadcast against ``x`` (same forms as adaln's scale); the
    product rounds to ``promote(y, gate)`` and the sum to ``promote(x, product)``, the
    output dtype, as in eager. ``inplace=True`` writes into ``x`` (which must already
    have the output dtype) and returns it; ``out`` receives the result otherwise.

    Differentiable (x, y, gate) without ``out``/``inplace``; those paths are
    inference-only and raise if grad mode is on and an input requires grad.
    """
    _arch.check(x)
    if out is not None or inplace:
        _no_grad_path("gated_residual", "inplace=True" if inplace else "out=", x, y, gate)
    if inplace:
        if out is not None:
            raise ValueError("ltx_kernels.gated_residual: pass either out or inplace=True, not both")
        ops.gated_residual_inplace(x, y, gate)
        return x
    if out is None:
        return ops.gated_residual(x, y, gate)
    ops.gated_residual_out(out, x, y, gate)
    return out


@torch.library.register_fake(add_op_namespace_prefix("adaln"))
def _adaln_fake(x, scale, shift, weight, eps, norm):
    _arch.check_fake(x)
    dtype = _adaln_dtype(
        x.dtype, scale.dtype, None if shift is None else shift.dtype,
        None if weight is None else weight.dtype, norm,
    )
    return x.new_empty(x.shape, dtype=dtype)


@torch.library.register_fake(add_op_namespace_prefix("adaln_out"))
def _adaln_out_fake(out, x, scale, shift, weight, eps, norm):
    _arch.check_fake(out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("gated_residual"))
def _gated_residual_fake(x, y, gate):
    _arch.check_fake(x)
    return x.new_empty(x.shape, dtype=gated_residual_out_dtype(x.dtype, y.dtype, gate.dtype))


@torch.library.register_fake(add_op_namespace_prefix("gated_residual_out"))
def _gated_residual_out_fake(out, x, y, gate):
    _arch.check_fake(out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("gated_residual_inplace"))
def _gated_residual_inplace_fake(x, y, gate):
    _arch.check_fake(x)
    return None


# ---- training: backward ops and autograd ---------------------------------------------


@torch.library.register_fake(add_op_namespace_prefix("adaln_backward"))
def _adaln_backward_fake(grad, x, scale, shift, weight, eps, norm, output_mask):
    _arch.check_fake(x)

    def grad_of(t, wanted):
        if t is None or not wanted:
            return x.new_empty((0,)) if t is None else t.new_empty((0,))
        return t.new_empty(t.shape)

    return (
        grad_of(x, output_mask[0]),
        grad_of(scale, output_mask[1]),
        grad_of(shift, output_mask[2]),
        grad_of(weight, output_mask[3]),
    )


@torch.library.register_fake(add_op_namespace_prefix("gated_residual_backward"))
def _gated_residual_backward_fake(grad, y, gate, output_mask):
    _arch.check_fake(grad)
    return (
        y.new_empty(y.shape) if output_mask[0] else y.new_empty((0,)),
        gate.new_empty(gate.shape) if output_mask[1] else gate.new_empty((0,)),
    )


# Autograd: registered in C++ for the Autograd key (torch-ext/ops/autograd.cpp).
