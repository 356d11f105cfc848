// activation backward ops: schemas, argument checks, output allocation, row views.
// The math is in the backend launchers (activation_backward.h).
#include "ops/activation_backward.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <string>
#include <vector>

#include "ops/backward_ops.h"
#include "ops/register.h"
#include "ops/rows.h"

namespace ltx {
namespace {

GeluKind parse_approximate(std::string_view approximate, const char* op) {
  if (approximate == "none") return GeluKind::kErf;
  if (approximate == "tanh") return GeluKind::kTanh;
  TORCH_CHECK(false, "ltx_kernels.", op, ": approximate must be 'none' or 'tanh', got '",
              std::string(approximate), "'");
  return GeluKind::kErf;
}

// grad and x: float (or CPU double), one device, one dtype (autograd hands the
// backward a grad in the output's dtype, which is x's).
void check_pair(const at::Tensor& grad, const at::Tensor& x, const char* op) {
  check_float_dtype_or_cpu_double(x, op, "x");
  check_float_dtype_or_cpu_double(grad, op, "grad");
  check_same_device(grad, x, op, "grad");
  TORCH_CHECK(grad.scalar_type() == x.scalar_type(), "ltx_kernels.", op,
              ": grad must have x's dtype ", x.scalar_type(), ", got ", grad.scalar_type());
}

// 0-d tensors are treated as one element.
at::Tensor at_least_1d(const at::Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; }

}  // namespace

at::Tensor gelu_backward(const at::Tensor& grad, const at::Tensor& x, std::string_view approximate) {
  constexpr const char* op = "gelu_backward";
  const GeluKind kind = parse_approximate(approximate, op);
  check_pair(grad, x, op);
  TORCH_CHECK(grad.sizes() == x.sizes(), "ltx_kernels.", op, ": grad must have x's shape ",
              shape_str(x.sizes()), ", got ", shape_str(grad.sizes()));
  at::Tensor dx = at::empty(x.sizes(), x.options());
  if (x.numel() == 0) return dx;
  gelu_backward_launch(as_rows(at_least_1d(dx)), as_rows(at_least_1d(grad)),
                       as_rows(at_least_1d(x)), kind);
  return dx;
}

at::Tensor geglu_backward(const at::Tensor& grad, const at::Tensor& x, std::string_view approximate,
                          bool gate_first) {
  constexpr const char* op = "geglu_backward";
  const GeluKind kind = parse_approximate(approximate, op);
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", op, ": x must have at least one dimension");
  check_pair(grad, x, op);
  TORCH_CHECK(x.size(-1) % 2 == 0, "ltx_kernels.", op,
              ": x's last dim must be even (two halves: value and gate), got shape ",
              shape_str(x.sizes()));
  std::vector<int64_t> half(x.sizes().begin(), x.sizes().end());
  half.back() /= 2;
  TORCH_CHECK(grad.sizes() == at::IntArrayRef(half), "ltx_kernels.", op, ": grad must have shape ",
              shape_str(half), " (x's shape with the last dim halved), got ",
              shape_str(grad.sizes()));
  at::Tensor dx = at::empty(x.sizes(), x.options());
  if (grad.numel() == 0) return dx;  // then x (and dx) are empty too
  geglu_backward_launch(as_rows(dx), as_rows(grad), as_rows(x), kind, gate_first);
  return dx;
}

void register_activation_backward(torch::Library& ops) {
  ops.def("gelu_backward(Tensor grad, Tensor x, str approximate='none') -> Tensor");
  ops.def(
      "geglu_backward(Tensor grad, Tensor x, str approximate='none', bool gate_first=False) -> "
      "Tensor");
  reg::impl(ops, "gelu_backward", TORCH_FN(ltx::gelu_backward));
  reg::impl(ops, "geglu_backward", TORCH_FN(ltx::geglu_backward));
}

}  // namespace ltx
