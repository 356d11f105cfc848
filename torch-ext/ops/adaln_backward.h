// adaln / gated_residual backward: op declarations and the backend launchers.
//
// The forward's intermediate roundings to half precision are treated as identity
// (what autograd through the eager casts does); all math is fp32 (double for
// float64 on the CPU).
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <cstdint>
#include <optional>
#include <tuple>

#include "ops/row_index.h"

namespace ltx {

// adaln_backward(Tensor grad, Tensor x, Tensor scale, Tensor? shift, Tensor? weight,
//                float eps, int norm, bool[4] output_mask) -> (Tensor, Tensor, Tensor, Tensor)
// (dx, dscale, dshift, dweight), each in its input's dtype and shape; an empty tensor
// where not requested (output_mask) or where the input is absent.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale,
    const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight, double eps,
    int64_t norm, std::array<bool, 4> output_mask);

// gated_residual_backward(Tensor grad, Tensor y, Tensor gate, bool[2] output_mask)
//   -> (Tensor, Tensor)
// (dy, dgate) = (grad * gate, grad * y), each reduced over its input's broadcast dims
// (fp32, deterministic) and in its input's dtype and shape; empty where not requested.
std::tuple<at::Tensor, at::Tensor> gated_residual_backward(const at::Tensor& grad,
                                                           const at::Tensor& y,
                                                           const at::Tensor& gate,
                                                           std::array<bool, 2> output_mask);

// The weight as the forward kernels read it (adaln.cpp): fp32 (float64 when `acc` is
// float64), contiguous, 16-byte aligned.
std::optional<at::Tensor> adaln_kernel_weight(const std::optional<at::Tensor>& weight,
                                              at::ScalarType acc);

// ---- backend launchers (ltx_kernels_cuda/adaln_backward.cu, ltx_kernels_cpu/...) ----
//
// Per row r of g2d / x2d ([rows, D] views, stride(1) == 1), with s the scale row at
// row-space offset 0 of `rows` (last dim contiguous), w the weight (fp32 [D], or
// float64 on the CPU; none: 1), xh the normalised row and n = xh * w:
//   dx2d[r]  = dx                  (x2d's dtype)
//   gn2d[r]  = g * n               (for dscale; any float dtype)
//   dw2d[r]  = g * (1 + s) * xh    (for dweight; fp32 / float64)
// Outputs are contiguous [rows, D] tensors; an undefined one is not computed.
void adaln_backward_launch(const at::Tensor& dx2d, const at::Tensor& gn2d, const at::Tensor& dw2d,
                           const at::Tensor& g2d, const at::Tensor& x2d, const at::Tensor& scale,
                           const std::optional<at::Tensor>& weight, const RowSpace& rows,
                           double eps, bool layer);

// dy2d[r] = g * gate_r, dgate2d[r] = g * y_r (y / gate: row-space operands 0 / 1); outputs
// contiguous [rows, D] of any float dtype, or undefined (not computed).
void gated_residual_backward_launch(const at::Tensor& dy2d, const at::Tensor& dgate2d,
                                    const at::Tensor& g2d, const at::Tensor& y,
                                    const at::Tensor& gate, const RowSpace& rows);

}  // namespace ltx
