// adaln / gated_residual backward ops: schemas, argument checks, the parameter-gradient
// reductions, registration.
//
// The row kernels write per-element terms (dx, g * n, g * (1 + s) * xh, g * gate,
// g * y); an operand that broadcasts gets its gradient by an fp32 at::sum over its
// broadcast dims (a fixed reduction order: deterministic on CPU and CUDA). An operand
// with x's full shape (per-token scale/shift) is written directly in its dtype, with no
// reduction and no fp32 buffer.
#include "ops/adaln_backward.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/ScalarType.h>

#include <vector>

#include "ops/backward_ops.h"
#include "ops/bcast_rows.h"
#include "ops/register.h"
#include "ops/rows.h"
#include "torch_binding.h"

namespace ltx {
namespace {

constexpr const char* kAdaB = "adaln_backward";
constexpr const char* kGateB = "gated_residual_backward";

void check_grad(const at::Tensor& grad, const at::Tensor& x, const char* op) {
  check_float_dtype_or_cpu_double(grad, op, "grad");
  check_same_device(grad, x, op, "grad");
  TORCH_CHECK(grad.sizes() == x.sizes(), "ltx_kernels.", op, ": grad must have x's shape ",
              shape_str(x.sizes()), ", got ", shape_str(grad.sizes()));
}

// The dims of x (shape `full`) that operand `t` broadcasts over (leading dims it lacks,
// and its size-1 dims where x's size is not 1). Empty: t has x's shape up to leading 1s.
std::vector<int64_t> broadcast_dims(const at::Tensor& t, at::IntArrayRef full) {
  std::vector<int64_t> dims;
  const int64_t lead = static_cast<int64_t>(full.size()) - t.dim();
  for (int64_t i = 0; i < static_cast<int64_t>(full.size()); ++i) {
    if (full[i] == 1) continue;
    if (i < lead || t.size(i - lead) == 1) dims.push_back(i);
  }
  return dims;
}

// The gradient of operand t from the per-element term `full` (x's shape): summed in the
// accumulation type over t's broadcast dims, in t's dtype and shape.
at::Tensor reduce_to(const at::Tensor& full, const at::Tensor& t, at::ScalarType acc) {
  const std::vector<int64_t> dims = broadcast_dims(t, full.sizes());
  if (dims.empty()) return full.to(t.scalar_type()).reshape(t.sizes());
  return at::sum(full, dims, /*keepdim=*/true, acc).reshape(t.sizes()).to(t.scalar_type());
}

// An element buffer for an operand's gradient term: t's own dtype when no reduction
// follows, else the accumulation type.
at::Tensor term_buffer(const at::Tensor& t, const at::Tensor& x, at::ScalarType acc) {
  const bool direct = broadcast_dims(t, x.sizes()).empty();
  return at::empty(x.sizes(), x.options().dtype(direct ? t.scalar_type() : acc));
}

bool any_double(std::initializer_list<const at::Tensor*> ts) {
  for (const at::Tensor* t : ts) {
    if (t != nullptr && t->scalar_type() == at::kDouble) return true;
  }
  return false;
}

at::Tensor empty_like_none(const at::Tensor& x) { return at::empty({0}, x.options()); }

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> adaln_backward(
    const at::Tensor& grad, const at::Tensor& x, const at::Tensor& scale,
    const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight, double eps,
    int64_t norm, std::array<bool, 4> mask) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", kAdaB, ": x must have at least one dimension");
  check_float_dtype_or_cpu_double(x, kAdaB, "x");
  check_grad(grad, x, kAdaB);
  check_eps(eps, kAdaB);
  TORCH_CHECK(norm == 0 || norm == 1, "ltx_kernels.", kAdaB,
              ": norm must be 0 (rms) or 1 (layer), got ", norm);
  at::Tensor s = broadcast_operand(scale, x, kAdaB, "scale");
  if (shift) (void)broadcast_operand(*shift, x, kAdaB, "shift");
  if (weight) {
    check_float_dtype_or_cpu_double(*weight, kAdaB, "weight");
    check_same_device(*weight, x, kAdaB, "weight");
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == x.size(-1), "ltx_kernels.", kAdaB,
                ": weight must have shape [", x.size(-1), "] to match x's last dim, got ",
                shape_str(weight->sizes()));
  }
  const at::ScalarType acc =
      any_double({&grad, &x, &scale, shift ? &*shift : nullptr, weight ? &*weight : nullptr})
          ? at::kDouble
          : at::kFloat;

  const bool want_dx = mask[0], want_ds = mask[1], want_dh = mask[2] && shift.has_value(),
             want_dw = mask[3] && weight.has_value();
  at::Tensor dx = want_dx ? at::empty(x.sizes(), x.options()) : empty_like_none(x);
  at::Tensor gn = want_ds ? term_buffer(scale, x, acc) : at::Tensor();
  at::Tensor dwt = want_dw ? at::empty(x.sizes(), x.options().dtype(acc)) : at::Tensor();
  const int64_t cols = x.size(-1);
  if ((want_dx || want_ds || want_dw) && x.numel() > 0) {
    at::Tensor* operands[kMaxRowOperands] = {&s, nullptr};
    const RowSpace rs = make_row_space(x, operands, 1);
    auto rows2d = [cols](const at::Tensor& t) {
      return t.defined() ? t.view({-1, cols}) : at::Tensor();
    };
    adaln_backward_launch(want_dx ? rows2d(dx) : at::Tensor(), rows2d(gn), rows2d(dwt),
                          as_rows(grad), as_rows(x), s, adaln_kernel_weight(weight, acc), rs, eps,
                          norm == 1);
  }

  at::Tensor ds = empty_like_none(scale);
  at::Tensor dh = shift ? empty_like_none(*shift) : empty_like_none(x);
  at::Tensor dw = weight ? empty_like_none(*weight) : empty_like_none(x);
  if (want_ds) ds = x.numel() > 0 ? reduce_to(gn, scale, acc) : at::zeros_like(scale);
  if (want_dh) {
    // dshift = grad reduced over shift's broadcast dims (a copy when there are none:
    // outputs never alias grad).
    const std::vector<int64_t> dims = broadcast_dims(*shift, x.sizes());
    if (x.numel() == 0) {
      dh = at::zeros_like(*shift);
    } else if (dims.empty()) {
      dh = grad.to(shift->scalar_type(), /*non_blocking=*/false, /*copy=*/true)
               .reshape(shift->sizes());
    } else {
      dh = at::sum(grad, dims, /*keepdim=*/true, acc).reshape(shift->sizes())
               .to(shift->scalar_type());
    }
  }
  if (want_dw) {
    dw = x.numel() > 0 ? at::sum(dwt.view({-1, cols}), at::IntArrayRef{0}, false, acc).to(weight->scalar_type())
                       : at::zeros_like(*weight);
  }
  return {dx, ds, dh, dw};
}

std::tuple<at::Tensor, at::Tensor> gated_residual_backward(const at::Tensor& grad,
                                                           const at::Tensor& y,
                                                           const at::Tensor& gate,
                                                           std::array<bool, 2> mask) {
  TORCH_CHECK(grad.dim() >= 1, "ltx_kernels.", kGateB, ": grad must have at least one dimension");
  check_float_dtype_or_cpu_double(grad, kGateB, "grad");
  at::Tensor yr = broadcast_operand(y, grad, kGateB, "y");
  at::Tensor gr = broadcast_operand(gate, grad, kGateB, "gate");
  const at::ScalarType acc = any_double({&grad, &y, &gate}) ? at::kDouble : at::kFloat;
  at::Tensor dyt = mask[0] ? term_buffer(y, grad, acc) : at::Tensor();
  at::Tensor dgt = mask[1] ? term_buffer(gate, grad, acc) : at::Tensor();
  const int64_t cols = grad.size(-1);
  if ((mask[0] || mask[1]) && grad.numel() > 0) {
    at::Tensor* operands[kMaxRowOperands] = {&yr, &gr};
    const RowSpace rs = make_row_space(grad, operands, 2);
    auto rows2d = [cols](const at::Tensor& t) {
      return t.defined() ? t.view({-1, cols}) : at::Tensor();
    };
    gated_residual_backward_launch(rows2d(dyt), rows2d(dgt), as_rows(grad), yr, gr, rs);
  }
  at::Tensor dy = empty_like_none(y), dg = empty_like_none(gate);
  if (mask[0]) dy = grad.numel() > 0 ? reduce_to(dyt, y, acc) : at::zeros_like(y);
  if (mask[1]) dg = grad.numel() > 0 ? reduce_to(dgt, gate, acc) : at::zeros_like(gate);
  return {dy, dg};
}

void register_adaln_backward(torch::Library& ops) {
  ops.def(
      "adaln_backward(Tensor grad, Tensor x, Tensor scale, Tensor? shift, Tensor? weight, "
      "float eps, int norm, bool[4] output_mask) -> (Tensor, Tensor, Tensor, Tensor)");
  ops.def(
      "gated_residual_backward(Tensor grad, Tensor y, Tensor gate, bool[2] output_mask) "
      "-> (Tensor, Tensor)");
  ltx::reg::impl(ops, "adaln_backward", TORCH_FN(ltx::adaln_backward));
  ltx::reg::impl(ops, "gated_residual_backward", TORCH_FN(ltx::gated_residual_backward));
}

}  // namespace ltx
