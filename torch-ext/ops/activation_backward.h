// activation backward: the ops (registered in activation_backward.cpp) and the
// backend launchers (ltx_kernels_cuda/activation_backward.cu, ltx_kernels_cpu/
// activation_backward_cpu.cpp; exactly one is compiled per variant).
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

#include "torch_binding.h"

namespace ltx {

// gelu_backward(Tensor grad, Tensor x, str approximate='none') -> Tensor
// dx = grad * gelu'(x) with ATen's gelu_backward formulas (erf or tanh form), fp32
// math (double for float64 on the CPU), returned contiguous in x's dtype and shape.
at::Tensor gelu_backward(const at::Tensor& grad, const at::Tensor& x, std::string_view approximate);

// geglu_backward(Tensor grad, Tensor x, str approximate='none', bool gate_first=False) -> Tensor
// x: [..., 2d], grad: [..., d]; dx: x's shape, both halves written in one pass.
// gate_first=false: out = a * gelu(b) -> da = grad * gelu(b), db = grad * a * gelu'(b);
// gate_first=true:  out = gelu(a) * b -> da = grad * b * gelu'(a), db = grad * gelu(a);
// a = x[..., :d], b = x[..., d:]. The forward's rounding of gelu() to x's dtype is
// treated as identity (as autograd through the cast does).
at::Tensor geglu_backward(const at::Tensor& grad, const at::Tensor& x, std::string_view approximate,
                          bool gate_first);

// Launchers. grad2d, x2d: [rows, cols] views with stride(1) == 1 (any row stride,
// grad's may be 0); dx2d: contiguous [rows, cols]. gelu: cols elementwise; geglu:
// x2d / dx2d have 2 * grad2d.size(1) columns.
void gelu_backward_launch(const at::Tensor& dx2d, const at::Tensor& grad2d, const at::Tensor& x2d,
                          GeluKind kind);
void geglu_backward_launch(const at::Tensor& dx2d, const at::Tensor& grad2d, const at::Tensor& x2d,
                           GeluKind kind, bool gate_first);

}  // namespace ltx
