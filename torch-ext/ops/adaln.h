// AdaLN modulation and gated-residual ops as registered in torch_binding.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ltx {

// adaln(Tensor x, Tensor scale, Tensor? shift, Tensor? weight, float eps, int norm) -> Tensor
// norm(x) * (1 + scale) + shift with the rounding of the unfused eager chain.
at::Tensor adaln(const at::Tensor& x, const at::Tensor& scale, const std::optional<at::Tensor>& shift,
                 const std::optional<at::Tensor>& weight, double eps, int64_t norm);

// adaln_out(Tensor! out, Tensor x, Tensor scale, Tensor? shift, Tensor? weight, float eps,
//           int norm) -> ()
// out may be x itself (in place); partial overlap is not supported.
void adaln_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& scale,
               const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
               double eps, int64_t norm);

// gated_residual(Tensor x, Tensor y, Tensor gate) -> Tensor         x + y * gate
at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate);

// gated_residual_out(Tensor! out, Tensor x, Tensor y, Tensor gate) -> ()
void gated_residual_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& y,
                        const at::Tensor& gate);

// gated_residual_inplace(Tensor(a!) x, Tensor y, Tensor gate) -> ()    x += y * gate
void gated_residual_inplace(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate);

}  // namespace ltx
