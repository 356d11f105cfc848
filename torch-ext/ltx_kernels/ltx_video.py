"""Make a diffusers ``LTXVideoTransformer3DModel`` use this package's kernels, and undo it.

Pure torch: diffusers is never imported here. Modules are recognised by class name and
attributes (duck typing), and ``dispatch_attention_fn`` is taken from the module that
defines the model's own ``LTXAttention`` class, so nothing is imported at kernel load.
"""

import sys
import types
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

from .activation import gelu_tanh
from .adaln import adaln, gated_residual
from .qk_prologue import rmsnorm_rope_qk
from .rmsnorm import rmsnorm
from .rope import rope_interleaved_qk

_HANDLE_ATTR = "_ltx_kernels_patch"
_FP32_EPS = torch.finfo(torch.float32).eps  # torch.nn.RMSNorm(eps=None), for every dtype


def _rms_eps(norm: torch.nn.Module) -> float:
    eps = getattr(norm, "eps", None)
    return _FP32_EPS if eps is None else float(eps)


def _is_torch_rmsnorm(m: torch.nn.Module) -> bool:
    return isinstance(m, torch.nn.RMSNorm) and len(tuple(m.normalized_shape)) == 1


def _is_diffusers_rmsnorm(m: torch.nn.Module) -> bool:
    return (type(m).__name__ == "RMSNorm" and type(m).__module__.startswith("diffusers.")
            and hasattr(m, "eps") and getattr(m, "bias", None) is None)


class LTXKernelAttnProcessor:
    """``LTXVideoAttnProcessor`` with ``norm_q``/``norm_k`` and the RoPE fused into one
    ``rmsnorm_rope_qk`` launch. Attention itself is diffusers' ``dispatch_attention_fn``
    with this processor's ``_attention_backend`` / ``_parallel_config``: copied from the
    processor it replaces, and set as usual by ``model.set_attention_backend(...)``."""

    def __init__(self, original: Any, dispatch_attention_fn: Callable):
        self.original = original
        self._attention_backend = getattr(original, "_attention_backend", None)
        self._parallel_config = getattr(original, "_parallel_config", None)
        self._dispatch_attention_fn = dispatch_attention_fn

    def __call__(
        self,
        attn: torch.nn.Module,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    ) -> torch.Tensor:
        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        )
        if attention_mask is not None:
            attention_mask = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
            attention_mask = attention_mask.view(batch_size, attn.heads, -1, attention_mask.shape[-1])
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states

        query = attn.to_q(hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        cos, sin = (None, None) if image_rotary_emb is None else image_rotary_emb
        eps_q, eps_k = _rms_eps(attn.norm_q), _rms_eps(attn.norm_k)
        if eps_q == eps_k:
            query, key = rmsnorm_rope_qk(query, key, attn.norm_q.weight, attn.norm_k.weight,
                                         cos, sin, eps_q)
        else:  # the fused op takes one eps
            query = rmsnorm(query, attn.norm_q.weight, eps_q, semantics="torch")
            key = rmsnorm(key, attn.norm_k.weight, eps_k, semantics="torch")
            if cos is not None:
                query, key = rope_interleaved_qk(query, key, cos, sin)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        hidden_states = self._dispatch_attention_fn(
            query,
            key,
            value,
            attn_mask=attention_mask,
            dropout_p=0.0,
            is_causal=False,
            backend=self._attention_backend,
            parallel_config=self._parallel_config,
        )
        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.to(query.dtype)
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states


# ---- replacement forwards (bound to the module instance; state read at call time) ----


def _block_forward(
    self,
    hidden_states: torch.Tensor,
    encoder_hidden_states: torch.Tensor,
    temb: torch.Tensor,
    image_rotary_emb: Optional[Tuple[torch.Tensor, torch.Tensor]] = None,
    encoder_attention_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """``LTXVideoTransformerBlock.forward`` with adaln for norm1/norm2 + modulation and
    gated_residual for both gated residuals; same op order and rounding as eager."""
    batch_size = hidden_states.size(0)
    num_ada_params = self.scale_shift_table.shape[0]
    ada_values = self.scale_shift_table[None, None].to(temb.device) + temb.reshape(
        batch_size, temb.size(1), num_ada_params, -1
    )
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = ada_values.unbind(dim=2)

    norm_hidden_states = adaln(hidden_states, scale_msa, shift_msa, self.norm1.weight,
                               self.norm1.eps, "rms")
    attn_hidden_states = self.attn1(
        hidden_states=norm_hidden_states,
        encoder_hidden_states=None,
        image_rotary_emb=image_rotary_emb,
    )
    hidden_states = gated_residual(hidden_states, attn_hidden_states, gate_msa)

    attn_hidden_states = self.attn2(
        hidden_states,
        encoder_hidden_states=encoder_hidden_states,
        image_rotary_emb=None,
        attention_mask=encoder_attention_mask,
    )
    hidden_states = hidden_states + attn_hidden_states
    norm_hidden_states = adaln(hidden_states, scale_mlp, shift_mlp, self.norm2.weight,
                               self.norm2.eps, "rms")
    ff_output = self.ff(norm_hidden_states)
    return gated_residual(hidden_states, ff_output, gate_mlp)


def _gelu_proj_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """diffusers ``GELU(approximate="tanh")``: ``gelu_tanh(proj(x))``."""
    return gelu_tanh(self.proj(hidden_states))


def _gelu_forward(self, input: torch.Tensor) -> torch.Tensor:
    """``torch.nn.GELU(approximate="tanh")``."""
    return gelu_tanh(input)


def _torch_rmsnorm_forward(self, x: torch.Tensor) -> torch.Tensor:
    """``torch.nn.RMSNorm`` over the last dim (fp32 math, one rounding)."""
    return rmsnorm(x, self.weight, _rms_eps(self), semantics="torch")


def _diffusers_rmsnorm_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
    """diffusers ``RMSNorm`` without bias (rounds to the weight dtype before the multiply)."""
    return rmsnorm(hidden_states, self.weight, self.eps, semantics="diffusers")


# ---- the handle -----------------------------------------------------------------------


class LTXVideoPatch:
    """What ``patch_ltx_video`` replaced. ``counts``: replacements per kind;
    ``skipped``: modules left alone and why. ``undo()`` restores every original."""

    def __init__(self, transformer: torch.nn.Module):
        self._transformer = transformer
        self._forwards: List[Tuple[torch.nn.Module, bool, Any]] = []
        self._processors: List[Tuple[torch.nn.Module, Any, LTXKernelAttnProcessor]] = []
        self.counts: Dict[str, int] = {
            "adaln": 0, "gated_residual": 0, "rmsnorm_rope_qk": 0, "gelu_tanh": 0, "rmsnorm": 0,
        }
        self.skipped: Dict[str, str] = {}
        self.active = True

    def _set_forward(self, module: torch.nn.Module, fn: Callable) -> None:
        had = "forward" in module.__dict__
        self._forwards.append((module, had, module.__dict__.get("forward")))
        module.forward = types.MethodType(fn, module)

    def _set_processor(self, attn: torch.nn.Module, proc: LTXKernelAttnProcessor) -> None:
        self._processors.append((attn, attn.processor, proc))
        attn.set_processor(proc)

    def undo(self) -> None:
        """Restore every original forward and attention processor (idempotent). Backend
        settings made while patched (``set_attention_backend``) carry over."""
        if not self.active:
            return
        for module, had, old in reversed(self._forwards):
            if had:
                module.forward = old
            else:
                module.__dict__.pop("forward", None)
        for attn, original, proc in reversed(self._processors):
            if attn.processor is proc:
                for name in ("_attention_backend", "_parallel_config"):
                    if hasattr(original, name) or getattr(proc, name) is not None:
                        setattr(original, name, getattr(proc, name))
                attn.set_processor(original)
        self._forwards.clear()
        self._processors.clear()
        self.active = False
        if self._transformer.__dict__.get(_HANDLE_ATTR) is self:
            del self._transformer.__dict__[_HANDLE_ATTR]

    def __repr__(self) -> str:
        state = "active" if self.active else "undone"
        return f"LTXVideoPatch({state}, counts={self.counts}, skipped={self.skipped})"


def _find_dispatch(attn: torch.nn.Module) -> Optional[Callable]:
    for cls in (type(attn), type(getattr(attn, "processor", None))):
        mod = sys.modules.get(getattr(cls, "__module__", ""), None)
        fn = getattr(mod, "dispatch_attention_fn", None)
        if callable(fn):
            return fn
    return None


def patch_ltx_video(transformer: torch.nn.Module) -> LTXVideoPatch:
    """Make an LTX-Video transformer (diffusers ``LTXVideoTransformer3DModel``, 0.9.x)
    run on this package's kernels; returns an ``LTXVideoPatch`` handle (``.counts``,
    ``.skipped``, ``.undo()``). Patching an already patched model returns its handle.

    Replaced, per module instance (the classes are not touched):

    * ``LTXVideoTransformerBlock.forward``: ``adaln`` for ``norm1``/``norm2`` + the
      ``(1 + scale), + shift`` modulation (2 per block), ``gated_residual`` for the
      attention and feed-forward gated residuals (2 per block); the ungated cross-attention
      residual stays a plain add.
    * every ``LTXAttention`` whose processor is diffusers' ``LTXVideoAttnProcessor``:
      an ``LTXKernelAttnProcessor`` doing ``norm_q``/``norm_k`` + interleaved RoPE with
      ``rmsnorm_rope_qk`` (norms only in cross-attention). **Attention:** the processor
      calls diffusers' own ``dispatch_attention_fn`` with the attention backend and
      parallel config of the processor it replaces, so whatever backend was selected
      (native SDPA by default, or ``set_attention_backend(...)`` before or after
      patching) is the one used. Attention modules with another processor are skipped.
    * the feed-forward ``GELU(approximate="tanh")`` (and ``nn.GELU(approximate="tanh")``,
      e.g. the caption projection): ``gelu_tanh``.
    * any other RMSNorm not covered above (diffusers ``RMSNorm`` without bias, or
      ``torch.nn.RMSNorm``): ``rmsnorm`` with the matching semantics.

    Not replaced: ``norm_out`` (``nn.LayerNorm``) and the final ``* (1 + scale) + shift``,
    which live in the model's own ``forward``; linears, attention, embeddings.

    Parameters are read at call time and nothing device-specific is captured, so it can
    be applied before ``.to(...)``, ``enable_model_cpu_offload()`` or dtype casts. The
    replacements are registered ops with fake kernels: a patched block compiles with
    ``torch.compile(fullgraph=True)``. Numerics: every op rounds like the eager module it
    replaces (the fused q/k prologue rounds the normalised q/k to the activation dtype
    before the rotation, as eager does), so outputs match the unpatched model up to
    fp32 summation order.
    """
    existing = transformer.__dict__.get(_HANDLE_ATTR)
    if isinstance(existing, LTXVideoPatch) and existing.active:
        return existing
    handle = LTXVideoPatch(transformer)
    covered = set()

    for name, m in transformer.named_modules():
        cls = type(m).__name__
        if cls == "LTXVideoTransformerBlock":
            norms = [getattr(m, "norm1", None), getattr(m, "norm2", None)]
            if all(n is not None and _is_diffusers_rmsnorm(n) for n in norms) and all(
                hasattr(m, a) for a in ("attn1", "attn2", "ff", "scale_shift_table")
            ):
                handle._set_forward(m, _block_forward)
                handle.counts["adaln"] += 2
                handle.counts["gated_residual"] += 2
                covered.update(id(n) for n in norms)
            else:
                handle.skipped[name] = "block norms are not bias-free diffusers RMSNorm"
        elif cls == "LTXAttention" and hasattr(m, "norm_q") and hasattr(m, "norm_k"):
            proc = getattr(m, "processor", None)
            dispatch = _find_dispatch(m)
            if type(proc).__name__ != "LTXVideoAttnProcessor":
                handle.skipped[name] = f"processor {type(proc).__name__} is not LTXVideoAttnProcessor"
            elif not (_is_torch_rmsnorm(m.norm_q) and _is_torch_rmsnorm(m.norm_k)):
                handle.skipped[name] = "norm_q/norm_k are not torch.nn.RMSNorm"
            elif dispatch is None:
                handle.skipped[name] = "dispatch_attention_fn not found"
            else:
                handle._set_processor(m, LTXKernelAttnProcessor(proc, dispatch))
                handle.counts["rmsnorm_rope_qk"] += 1
                covered.update((id(m.norm_q), id(m.norm_k)))

    for name, m in transformer.named_modules():
        if id(m) in covered:
            continue
        if type(m).__name__ == "GELU" and getattr(m, "approximate", None) == "tanh":
            if isinstance(m, torch.nn.GELU):
                handle._set_forward(m, _gelu_forward)
                handle.counts["gelu_tanh"] += 1
            elif isinstance(getattr(m, "proj", None), torch.nn.Linear):
                handle._set_forward(m, _gelu_proj_forward)
                handle.counts["gelu_tanh"] += 1
        elif _is_torch_rmsnorm(m):
            handle._set_forward(m, _torch_rmsnorm_forward)
            handle.counts["rmsnorm"] += 1
        elif _is_diffusers_rmsnorm(m):
            handle._set_forward(m, _diffusers_rmsnorm_forward)
            handle.counts["rmsnorm"] += 1

    if not handle._forwards and not handle._processors:
        raise TypeError(
            f"patch_ltx_video: nothing to patch in {type(transformer).__name__} (expected a "
            "diffusers LTXVideoTransformer3DModel or LTX blocks)")
    transformer.__dict__[_HANDLE_ATTR] = handle
    return handle


def unpatch_ltx_video(transformer: torch.nn.Module) -> bool:
    """Undo ``patch_ltx_video(transformer)``; returns whether it was patched."""
    handle = transformer.__dict__.get(_HANDLE_ATTR)
    if not isinstance(handle, LTXVideoPatch):
        return False
    handle.undo()
    return True
