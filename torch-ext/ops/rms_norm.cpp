// RMSNorm front end: argument checks, output dtype rule, output allocation.
// The math lives in the backend launchers (ltx::rms_norm_launch).
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include "ops/rms_norm.h"
#include "ops/rms_norm_backward.h"
#include "ops/rows.h"
#include "torch_binding.h"

namespace ltx {
namespace {

constexpr const char* kOp = "rms_norm";

struct RmsNormPlan {
  at::ScalarType out;  // output dtype
  at::ScalarType mid;  // dtype of the normalised value before the weight multiply
};

// The cast points of the module each semantics reproduces
// (shared/docs/op-semantics.md section 1.5).
RmsNormPlan plan(at::ScalarType x, const std::optional<at::Tensor>& weight, int64_t semantics) {
  TORCH_CHECK(semantics >= 0 && semantics <= 2, "ltx_kernels.", kOp,
              ": semantics must be 0 (diffusers), 1 (torch) or 2 (llama), got ", semantics);
  if (!weight) return {x, at::kFloat};  // normalise in fp32, round once to x's dtype
  const at::ScalarType w = weight->scalar_type();
  switch (static_cast<RmsNormSemantics>(semantics)) {
    case RmsNormSemantics::kDiffusers:
      // fp32 weight: the fp32 product is never cast back; half weight: cast, then multiply.
      return {w, w};
    case RmsNormSemantics::kTorch:
      return {x, at::kFloat};
    case RmsNormSemantics::kLlama:
      return {c10::promoteTypes(w, x), x};
  }
  return {x, at::kFloat};
}

RmsNormPlan check_args(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                       int64_t semantics) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", kOp, ": x must have at least one dimension");
  check_float_dtype_or_cpu_double(x, kOp, "x");
  check_eps(eps, kOp);
  if (weight) {
    check_float_dtype_or_cpu_double(*weight, kOp, "weight");
    check_same_device(*weight, x, kOp, "weight");
    check_double_together(kOp, "x", x, "weight", *weight);
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == x.size(-1), "ltx_kernels.", kOp,
                ": weight must have shape [", x.size(-1), "] to match x's last dim, got ",
                shape_str(weight->sizes()));
  }
  return plan(x.scalar_type(), weight, semantics);
}

void run(const at::Tensor& out, const at::Tensor& x, const std::optional<at::Tensor>& weight,
         double eps, at::ScalarType mid) {
  if (x.numel() == 0) return;
  std::optional<at::Tensor> w;
  if (weight) w = weight->contiguous();
  rms_norm_launch(as_output_rows(out, kOp), as_rows(x), w, eps, mid);
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                    int64_t semantics) {
  const RmsNormPlan p = check_args(x, weight, eps, semantics);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(p.out));
  run(out, x, weight, eps, p.mid);
  return out;
}

void rms_norm_out(const at::Tensor& out, const at::Tensor& x,
                  const std::optional<at::Tensor>& weight, double eps, int64_t semantics) {
  const RmsNormPlan p = check_args(x, weight, eps, semantics);
  check_same_device(out, x, kOp, "out");
  TORCH_CHECK(out.scalar_type() == p.out, "ltx_kernels.", kOp, ": out must have dtype ", p.out,
              " for these inputs, got ", out.scalar_type());
  TORCH_CHECK(out.sizes() == x.sizes(), "ltx_kernels.", kOp, ": out must have x's shape ",
              shape_str(x.sizes()), ", got ", shape_str(out.sizes()));
  run(out, x, weight, eps, p.mid);
}

}  // namespace ltx
