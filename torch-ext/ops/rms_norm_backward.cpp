// rms_norm backward op: schema, argument checks, output allocation, registration.
// The math lives in the backend launchers (rms_norm_backward_launch).
#include "ops/rms_norm_backward.h"

#include <ATen/ops/empty.h>

#include "ops/backward_ops.h"
#include "ops/register.h"
#include "ops/rows.h"

namespace ltx {
namespace {

constexpr const char* kOp = "rms_norm_backward";

// The accumulation dtype of the weight grad: fp32, or float64 for float64 x.
at::ScalarType acc_dtype(const at::Tensor& x) {
  return x.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rms_norm_backward(const at::Tensor& grad, const at::Tensor& x,
                                                     const std::optional<at::Tensor>& weight,
                                                     double eps, bool weight_grad) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", kOp, ": x must have at least one dimension");
  check_float_dtype_or_cpu_double(x, kOp, "x");
  check_float_dtype_or_cpu_double(grad, kOp, "grad");
  check_same_device(grad, x, kOp, "grad");
  check_double_together(kOp, "x", x, "grad", grad);
  TORCH_CHECK(grad.sizes() == x.sizes(), "ltx_kernels.", kOp, ": grad must have x's shape ",
              shape_str(x.sizes()), ", got ", shape_str(grad.sizes()));
  check_eps(eps, kOp);
  std::optional<at::Tensor> w;
  if (weight) {
    check_float_dtype_or_cpu_double(*weight, kOp, "weight");
    check_same_device(*weight, x, kOp, "weight");
    check_double_together(kOp, "x", x, "weight", *weight);
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == x.size(-1), "ltx_kernels.", kOp,
                ": weight must have shape [", x.size(-1), "] to match x's last dim, got ",
                shape_str(weight->sizes()));
    w = weight->contiguous();
  }
  at::Tensor dx = at::empty(x.sizes(), x.options());
  const bool want_dw = weight.has_value() && weight_grad;
  at::Tensor dw_acc;
  if (want_dw) dw_acc = at::empty({x.size(-1)}, x.options().dtype(acc_dtype(x)));
  if (x.numel() > 0) {
    rms_norm_backward_launch(as_rows(dx), as_rows(grad), as_rows(x), w, eps, dw_acc);
  } else if (want_dw) {
    dw_acc.zero_();
  }
  if (!want_dw) {
    const at::ScalarType t = weight ? weight->scalar_type() : x.scalar_type();
    return {dx, at::empty({0}, x.options().dtype(t))};
  }
  return {dx, dw_acc.to(weight->scalar_type())};
}

void register_rms_norm_backward(torch::Library& ops) {
  ops.def(
      "rms_norm_backward(Tensor grad, Tensor x, Tensor? weight, float eps, bool weight_grad)"
      " -> (Tensor, Tensor)");
  ltx::reg::impl(ops, "rms_norm_backward", TORCH_FN(ltx::rms_norm_backward));
}

}  // namespace ltx
