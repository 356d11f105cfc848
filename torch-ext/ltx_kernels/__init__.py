"""ltx-kernels: fused CUDA/CPU kernels for diffusion transformers and LLMs.

Load it as a Hub kernel: ``kernels.get_kernel("org/ltx-kernels", version=1)``.
The functions below are thin wrappers over ops registered in C++ (``ops``).
"""

from ._ops import add_op_namespace_prefix, ops
from .rmsnorm import rms_norm_out_dtype, rmsnorm

__all__ = ["rmsnorm", "rms_norm_out_dtype"]

from .activation import gelu, gelu_and_mul, gelu_tanh, gelu_tanh_and_mul, geglu

__all__ += ["gelu", "gelu_tanh", "geglu", "gelu_and_mul", "gelu_tanh_and_mul"]
