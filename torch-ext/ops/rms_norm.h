// RMSNorm ops as registered in torch_binding.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ltx {

// rms_norm(Tensor x, Tensor? weight, float eps, int semantics) -> Tensor
at::Tensor rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                    int64_t semantics);

// rms_norm_out(Tensor! out, Tensor x, Tensor? weight, float eps, int semantics) -> ()
// out may be x itself (in place); partial overlap is not supported.
void rms_norm_out(const at::Tensor& out, const at::Tensor& x,
                  const std::optional<at::Tensor>& weight, double eps, int64_t semantics);

}  // namespace ltx
