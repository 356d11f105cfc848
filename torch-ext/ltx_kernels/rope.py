"""Rotary position embeddings: LTX-Video interleaved pairs and transformers rotate-half.

Two layouts, as separate entry points (shared/docs/op-semantics.md section 3):

* interleaved (``rope_interleaved*``): pairs ``(2i, 2i+1)`` across the whole last dim,
  as ``diffusers.models.transformers.transformer_ltx.apply_rotary_emb`` applies it to
  q/k ``[B, S, inner_dim]`` before the split into heads. Tables are float32; the math is
  fp32 and rounds once to x's dtype, bit-exact with the diffusers function.
* rotate-half (``rope_rotate_half*``): pairs ``(i, i + R/2)`` within each head, as
  ``transformers...modeling_llama.apply_rotary_pos_emb``; with ``R = cos.shape[-1]``
  smaller than head_dim only the first R channels rotate (GPT-NeoX / Phi partial rotary).
  Tables in q's dtype reproduce eager's step rounding bit for bit; float32 tables compute
  in fp32 and round once. Outputs always have q's (k's) dtype.

Training: the functional forms are differentiable in x / q / k (Autograd kernels in C++;
the backward is the transposed rotation, kernels ``rope_*_backward``, computed in fp32
with one rounding). The tables get no gradient: if cos/sin require grad, backward raises
NotImplementedError. ``out=`` / ``inplace=True`` are inference-only. On the CPU every op
also takes float64 (for ``torch.autograd.gradcheck``); CUDA takes float32/16/bf16.
"""

from typing import Optional, Tuple

import torch

from . import _arch
from ._ops import add_op_namespace_prefix, ops


def _inference_only(what, *tensors):
    # The out=/inplace paths write through the caller's buffers, which autograd cannot
    # record; the functional forms are the differentiable ones.
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(
            f"ltx_kernels.{what} is inference-only, but autograd is recording and an input "
            "requires grad; call it without out=/inplace=True (differentiable), or under "
            "torch.no_grad()"
        )


def rope_interleaved(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """LTX-Video RoPE: ``out[2i] = x[2i]*cos[2i] - x[2i+1]*sin[2i]``,
    ``out[2i+1] = x[2i+1]*cos[2i+1] + x[2i]*sin[2i+1]``, in fp32, cast once to x's dtype.

    ``x``: ``[..., S, D]`` (D even), float32/float16/bfloat16. ``cos``/``sin``: float32
    ``[S, D]`` or ``[B, S, D]`` broadcastable to x (a stride-0 expanded batch is read
    without a copy), or pair tables ``[S, D/2]`` / ``[B, S, D/2]``: value i serves the pair
    ``(2i, 2i+1)``, the same result as their ``repeat_interleave(2, -1)`` with half the
    table bytes (LTX's tables are such a repeat: pass ``cos[..., ::2]`` once per forward). Identity pairs (LTX's front padding, cos=1, sin=0) pass x through
    unchanged. ``out``, if given, receives the result and is returned; it may be ``x``
    (inference-only: a RuntimeError when autograd records and an input requires grad).
    Differentiable in x without ``out``.
    """
    _arch.check(x)
    if out is None:
        return ops.rope_interleaved(x, cos, sin)
    _inference_only("rope_interleaved(out=...)", x, cos, sin)
    ops.rope_interleaved_out(out, x, cos, sin)
    return out


def rope_interleaved_qk(
    q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, inplace: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``rope_interleaved`` on q and k (same shape and dtype) in one launch; the tables
    are read once per token for both. q/k may be row-strided views of a fused
    projection. ``inplace=True`` writes into q and k and returns them (inference-only:
    a RuntimeError when autograd records and an input requires grad); without it the
    op is differentiable in q and k."""
    _arch.check(q)
    if inplace:
        _inference_only("rope_interleaved_qk(inplace=True)", q, k, cos, sin)
        ops.rope_interleaved_qk_out(q, k, q, k, cos, sin)
        return q, k
    q_out, k_out = ops.rope_interleaved_qk(q, k, cos, sin)
    return q_out, k_out


def rope_rotate_half(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    *,
    inplace: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)``:
    ``q*cos + rotate_half(q)*sin`` per head, q and k in one launch.

    ``q``: ``[B, H, S, Dh]`` for ``unsqueeze_dim=1`` or ``[B, S, H, Dh]`` for 2; ``k`` the
    same but may have fewer heads (GQA). ``cos``/``sin``: ``[B, S, R]`` or ``[S, R]``
    (taken as ``[1, S, R]``), in q's dtype or float32, R even and <= Dh; channels ``>= R``
    pass through (partial rotary, as GPT-NeoX slices by ``cos.shape[-1]``).
    ``inplace=True`` writes into q and k and returns them (inference-only: a RuntimeError
    when autograd records and an input requires grad); without it the op is
    differentiable in q and k.
    """
    _arch.check(q)
    if inplace:
        _inference_only("rope_rotate_half(inplace=True)", q, k, cos, sin)
        ops.rope_rotate_half_out(q, k, q, k, cos, sin, unsqueeze_dim)
        return q, k
    q_out, k_out = ops.rope_rotate_half(q, k, cos, sin, unsqueeze_dim)
    return q_out, k_out


def rope_rotate_half_single(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    *,
    inplace: bool = False,
) -> torch.Tensor:
    """``rope_rotate_half`` for one tensor (q alone or k alone). ``inplace=True`` is
    inference-only, as for ``rope_rotate_half``."""
    _arch.check(x)
    if inplace:
        _inference_only("rope_rotate_half_single(inplace=True)", x, cos, sin)
        ops.rope_rotate_half_single_out(x, x, cos, sin, unsqueeze_dim)
        return x
    return ops.rope_rotate_half_single(x, cos, sin, unsqueeze_dim)


def _leading_dims_collapse(x, n):
    """Whether dims 0..n-1 of x step by one stride (size-1 dims skipped): rope.cpp's lead_stride."""
    needed = None
    for d in reversed(range(n)):
        if x.shape[d] == 1:
            continue
        if needed is not None and x.stride(d) != needed:
            return False
        needed = x.stride(d) * x.shape[d]
    return True


def _empty_in_order(x, interleaved):
    """The output the C++ front end allocates (rope.cpp empty_in_order): x's memory order, as
    torch.empty_like(x) and eager's expression give it, unless the kernel could not write that
    directly (last dim not contiguous; interleaved rows whose leading dims do not collapse)."""
    out = torch.empty_like(x)
    direct = out.shape[-1] <= 1 or out.stride(-1) == 1
    if direct and interleaved:
        direct = _leading_dims_collapse(out, out.dim() - 2)
    return out if direct else x.new_empty(x.shape)


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved"))
def _rope_interleaved_fake(x, cos, sin):
    _arch.check_fake(x)
    return _empty_in_order(x, True)


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved_out"))
def _rope_interleaved_out_fake(out, x, cos, sin):
    _arch.check_fake(out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved_qk"))
def _rope_interleaved_qk_fake(q, k, cos, sin):
    _arch.check_fake(q)
    return _empty_in_order(q, True), _empty_in_order(k, True)


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved_qk_out"))
def _rope_interleaved_qk_out_fake(q_out, k_out, q, k, cos, sin):
    _arch.check_fake(q_out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("rope_rotate_half"))
def _rope_rotate_half_fake(q, k, cos, sin, unsqueeze_dim):
    _arch.check_fake(q)
    return _empty_in_order(q, False), _empty_in_order(k, False)


@torch.library.register_fake(add_op_namespace_prefix("rope_rotate_half_out"))
def _rope_rotate_half_out_fake(q_out, k_out, q, k, cos, sin, unsqueeze_dim):
    _arch.check_fake(q_out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("rope_rotate_half_single"))
def _rope_rotate_half_single_fake(x, cos, sin, unsqueeze_dim):
    _arch.check_fake(x)
    return _empty_in_order(x, False)


@torch.library.register_fake(add_op_namespace_prefix("rope_rotate_half_single_out"))
def _rope_rotate_half_single_out_fake(out, x, cos, sin, unsqueeze_dim):
    _arch.check_fake(out)
    return None


# ---- backward ops and autograd --------------------------------------------------------


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved_backward"))
def _rope_interleaved_backward_fake(grad, cos, sin):
    _arch.check_fake(grad)
    return _empty_in_order(grad, True)


@torch.library.register_fake(add_op_namespace_prefix("rope_interleaved_qk_backward"))
def _rope_interleaved_qk_backward_fake(grad_q, grad_k, cos, sin):
    _arch.check_fake(grad_q)
    return _empty_in_order(grad_q, True), _empty_in_order(grad_k, True)


@torch.library.register_fake(add_op_namespace_prefix("rope_rotate_half_backward"))
def _rope_rotate_half_backward_fake(grad_q, grad_k, cos, sin, unsqueeze_dim):
    _arch.check_fake(grad_q)
    return _empty_in_order(grad_q, False), _empty_in_order(grad_k, False)


@torch.library.register_fake(add_op_namespace_prefix("rope_rotate_half_single_backward"))
def _rope_rotate_half_single_backward_fake(grad, cos, sin, unsqueeze_dim):
    _arch.check_fake(grad)
    return _empty_in_order(grad, False)


# Autograd: registered in C++ for the Autograd key (torch-ext/ops/autograd.cpp): the backward
# is the transposed rotation of grad; the tables get no gradient.
