// rms_norm backward: op declarations and the backend launchers, plus the float64 rule
// shared by the RMSNorm and q/k prologue bindings.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <optional>
#include <tuple>

namespace ltx {

// rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, float eps, bool weight_grad)
//   -> (Tensor dx, Tensor dweight)
// The gradient of every rms_norm semantics (its roundings are identity for the gradient):
// r = rsqrt(mean(x^2) + eps), xh = x*r, gw = grad*w, dx = r*(gw - xh*mean(gw*xh)),
// dweight = sum over rows of grad*xh (fp32, deterministic) in weight's dtype; dweight is
// empty when weight is None or weight_grad is false. dx has x's dtype and shape.
std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad, const at::Tensor& x,
                                                     const std::optional<at::Tensor>& weight,
                                                     double eps, bool weight_grad);

// Backend launcher. dx2d, g2d, x2d: [rows, D] views with stride(1) == 1 (g2d's row stride
// may be 0). weight: contiguous [D] or none. dw: undefined (not wanted) or a contiguous
// [D] tensor of the accumulation dtype (fp32; float64 for float64 x), fully written.
void rms_norm_backward_launch(const at::Tensor& dx2d, const at::Tensor& g2d,
                              const at::Tensor& x2d, const std::optional<at::Tensor>& weight,
                              double eps, const at::Tensor& dw);

// float64 runs on the CPU only, as one precision for the whole call (gradcheck): a float64
// tensor next to a tensor of another float dtype is rejected, naming both.
inline void check_double_together(const char* op, const char* a_name, const at::Tensor& a,
                                  const char* b_name, const at::Tensor& b) {
  const bool ad = a.scalar_type() == at::kDouble, bd = b.scalar_type() == at::kDouble;
  TORCH_CHECK(ad == bd, "ltx_kernels.", op, ": float64 is all-or-nothing: ", a_name, " is ",
              a.scalar_type(), " but ", b_name, " is ", b.scalar_type());
}

}  // namespace ltx
