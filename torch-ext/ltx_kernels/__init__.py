"""ltx-kernels: fused CUDA/CPU kernels for diffusion transformers and LLMs.

Load it as a Hub kernel: ``kernels.get_kernel("org/ltx-kernels", version=1)``.
The functions below are thin wrappers over ops registered in C++ (``ops``).
"""

from ._ops import add_op_namespace_prefix, ops
from .rmsnorm import rms_norm_out_dtype, rmsnorm
from .adaln import adaln, adaln_out_dtype, gated_residual, gated_residual_out_dtype

__all__ = ["rmsnorm", "rms_norm_out_dtype"]
__all__ += ["adaln", "adaln_out_dtype", "gated_residual", "gated_residual_out_dtype"]
