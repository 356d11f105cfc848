"""ltx-kernels: fused CUDA/CPU kernels for diffusion transformers and LLMs.

Load it as a Hub kernel: ``kernels.get_kernel("org/ltx-kernels", version=1)``.
The functions below are thin wrappers over ops registered in C++ (``ops``).
"""

from ._ops import add_op_namespace_prefix, ops
from ._doctor import doctor
from .adaln import adaln, adaln_out_dtype, gated_residual, gated_residual_out_dtype
from .activation import geglu, gelu, gelu_and_mul, gelu_tanh, gelu_tanh_and_mul
from .rmsnorm import rms_norm_out_dtype, rmsnorm
from .rope import rope_interleaved, rope_interleaved_qk, rope_rotate_half, rope_rotate_half_single
from .qk_prologue import rmsnorm_rope_qk
from .ltx_video import patch_ltx_video, unpatch_ltx_video
from . import layers

# One literal list: kernel-builder's card filler reads the function names from it.
__all__ = [
    "rmsnorm",
    "rms_norm_out_dtype",
    "gelu",
    "gelu_tanh",
    "geglu",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "rope_interleaved",
    "rope_interleaved_qk",
    "rope_rotate_half",
    "rope_rotate_half_single",
    "adaln",
    "adaln_out_dtype",
    "gated_residual",
    "gated_residual_out_dtype",
    "doctor",
    "rmsnorm_rope_qk",
    "patch_ltx_video",
    "unpatch_ltx_video",
    "layers",
]
