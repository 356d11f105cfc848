"""The fused LTX-Video attention prologue: ``norm_q(q)``, ``norm_k(k)`` (``torch.nn.RMSNorm``
over the full inner dim, each with its own weight) and interleaved RoPE on both, in one
launch that reads each cos/sin row once for q and k."""

from typing import Optional, Tuple

import torch

from . import _arch
from ._ops import add_op_namespace_prefix, ops


def rmsnorm_rope_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    q_weight: Optional[torch.Tensor],
    k_weight: Optional[torch.Tensor],
    cos: Optional[torch.Tensor] = None,
    sin: Optional[torch.Tensor] = None,
    eps: float = 1e-5,
    *,
    inplace: bool = False,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_emb(norm_q(q), (cos, sin))`` and the same for k, LTX-Video's
    ``LTXVideoAttnProcessor`` steps 2-3, fused.

    ``norm_q``/``norm_k`` are ``torch.nn.RMSNorm(D, eps)`` with weights ``q_weight`` /
    ``k_weight`` (``[D]``, any float dtype, or None): ``x * rsqrt(mean(x^2) + eps) * w`` in
    fp32, rounded to x's dtype -- the op boundary eager has before the rotation. The
    rotation (interleaved pairs ``(2i, 2i+1)`` across the whole last dim, diffusers
    ``transformer_ltx.apply_rotary_emb``) then runs in fp32 on that rounded value and
    rounds once. So the result equals the unfused eager sequence, up to the fp32
    summation order of the norm's mean of squares.

    ``q``: ``[..., S, D]`` float32/float16/bfloat16; ``k``: q's dtype and, with tables,
    q's shape. Either may be a row-strided view of a fused projection (no copy).
    ``cos``/``sin``: float32 ``[S, D]`` or ``[B, S, D]`` broadcastable to q (stride-0 batch
    read without a copy), or pair tables ``[S, D/2]`` / ``[B, S, D/2]`` (value i serves the
    pair ``(2i, 2i+1)``: as ``rope_interleaved``, half the table bytes), or both None for the norms only; then k may have other leading
    dims than q (cross-attention keys). ``inplace=True`` writes into q and k and returns
    them; that path is inference-only (a RuntimeError when grad mode is on and an input
    requires grad). Returns ``(q_out, k_out)`` in q's dtype. Differentiable in q, k and
    the weights (not in cos/sin: a NotImplementedError in backward if they require grad).
    float64 (q, k, weights, tables) is accepted on the CPU only (for gradcheck).
    """
    _arch.check(q)
    if inplace:
        if torch.is_grad_enabled() and any(
            t is not None and t.requires_grad for t in (q, k, q_weight, k_weight, cos, sin)
        ):
            raise RuntimeError(
                "ltx_kernels.rmsnorm_rope_qk(inplace=True) is inference-only (it writes into "
                "q and k, which autograd cannot track); an input requires grad: call it with "
                "inplace=False, or under torch.no_grad()"
            )
        ops.rmsnorm_rope_qk_out(q, k, q, k, q_weight, k_weight, cos, sin, eps)
        return q, k
    q_out, k_out = ops.rmsnorm_rope_qk(q, k, q_weight, k_weight, cos, sin, eps)
    return q_out, k_out


@torch.library.register_fake(add_op_namespace_prefix("rmsnorm_rope_qk"))
def _rmsnorm_rope_qk_fake(q, k, q_weight, k_weight, cos, sin, eps):
    _arch.check_fake(q)
    return q.new_empty(q.shape), k.new_empty(k.shape)


@torch.library.register_fake(add_op_namespace_prefix("rmsnorm_rope_qk_out"))
def _rmsnorm_rope_qk_out_fake(q_out, k_out, q, k, q_weight, k_weight, cos, sin, eps):
    _arch.check_fake(q_out)
    return None


@torch.library.register_fake(add_op_namespace_prefix("rmsnorm_rope_qk_backward"))
def _rmsnorm_rope_qk_backward_fake(
    grad_q, grad_k, q, k, q_weight, k_weight, cos, sin, eps, weights_grad
):
    _arch.check_fake(q)

    def wgrad(w):
        if w is None:
            return q.new_empty((0,))
        return w.new_empty(w.shape if weights_grad else (0,))

    return q.new_empty(q.shape), k.new_empty(k.shape), wgrad(q_weight), wgrad(k_weight)


# Autograd: registered in C++ for the Autograd key (torch-ext/ops/autograd.cpp).
