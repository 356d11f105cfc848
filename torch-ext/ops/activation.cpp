// GELU / GEGLU front end: argument checks, output allocation, the 2-D row views.
// The math lives in the backend launchers (ltx::gelu_launch, ltx::geglu_launch).
#include "ops/activation.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <string>
#include <vector>

#include "ops/rows.h"
#include "torch_binding.h"

namespace ltx {
namespace {

const char* gelu_op_name(GeluKind kind) { return kind == GeluKind::kTanh ? "gelu_tanh" : "gelu"; }

// float64 only on the CPU (gradcheck of the backward runs the forward in double).
void check_input(const at::Tensor& x, const char* op) {
  check_float_dtype_or_cpu_double(x, op, "x");
}

// out must be the op's output: same device and dtype as x, the given shape, and no
// element shared with x unless it is the very same element (in place).
void check_out(const at::Tensor& out, const at::Tensor& x, at::IntArrayRef shape,
               const char* op) {
  check_same_device(out, x, op, "out");
  TORCH_CHECK(out.scalar_type() == x.scalar_type(), "ltx_kernels.", op, ": out must have x's dtype ",
              x.scalar_type(), ", got ", out.scalar_type());
  TORCH_CHECK(out.sizes() == shape, "ltx_kernels.", op, ": out must have shape ", shape_str(shape),
              ", got ", shape_str(out.sizes()));
  TORCH_CHECK(at::get_overlap_status(out, x) != at::MemOverlapStatus::Partial, "ltx_kernels.", op,
              ": out partially overlaps x; pass a separate tensor (or x itself for gelu)");
}

// 0-d tensors are treated as one element.
at::Tensor at_least_1d(const at::Tensor& t) { return t.dim() == 0 ? t.view({1}) : t; }

void run_gelu(const at::Tensor& out, const at::Tensor& x, GeluKind kind) {
  if (x.numel() == 0) return;
  const char* op = gelu_op_name(kind);
  gelu_launch(as_output_rows(at_least_1d(out), op), as_rows(at_least_1d(x)), kind);
}

GeluKind parse_approximate(std::string_view approximate) {
  if (approximate == "none") return GeluKind::kErf;
  if (approximate == "tanh") return GeluKind::kTanh;
  TORCH_CHECK(false, "ltx_kernels.geglu: approximate must be 'none' or 'tanh', got '",
              std::string(approximate), "'");
  return GeluKind::kErf;
}

constexpr const char* kGeglu = "geglu";

// Checks x and returns the output shape x.shape[:-1] + [x.shape[-1] / 2].
std::vector<int64_t> geglu_shape(const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", kGeglu, ": x must have at least one dimension");
  check_input(x, kGeglu);
  TORCH_CHECK(x.size(-1) % 2 == 0, "ltx_kernels.", kGeglu,
              ": x's last dim must be even (two halves: value and gate), got shape ",
              shape_str(x.sizes()));
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() /= 2;
  return shape;
}

void run_geglu(const at::Tensor& out, const at::Tensor& x, GeluKind kind, bool gate_first) {
  if (out.numel() == 0) return;
  geglu_launch(as_output_rows(out, kGeglu), as_rows(x), kind, gate_first);
}

at::Tensor gelu_functional(const at::Tensor& x, GeluKind kind) {
  check_input(x, gelu_op_name(kind));
  at::Tensor out = at::empty(x.sizes(), x.options());
  run_gelu(out, x, kind);
  return out;
}

void gelu_out_impl(const at::Tensor& out, const at::Tensor& x, GeluKind kind) {
  const char* op = gelu_op_name(kind);
  check_input(x, op);
  check_out(out, x, x.sizes(), op);
  run_gelu(out, x, kind);
}

}  // namespace

at::Tensor gelu(const at::Tensor& x) { return gelu_functional(x, GeluKind::kErf); }
at::Tensor gelu_tanh(const at::Tensor& x) { return gelu_functional(x, GeluKind::kTanh); }
void gelu_out(const at::Tensor& out, const at::Tensor& x) { gelu_out_impl(out, x, GeluKind::kErf); }
void gelu_tanh_out(const at::Tensor& out, const at::Tensor& x) {
  gelu_out_impl(out, x, GeluKind::kTanh);
}

at::Tensor geglu(const at::Tensor& x, std::string_view approximate, bool gate_first) {
  const GeluKind kind = parse_approximate(approximate);
  const std::vector<int64_t> shape = geglu_shape(x);
  at::Tensor out = at::empty(shape, x.options());
  run_geglu(out, x, kind, gate_first);
  return out;
}

void geglu_out(const at::Tensor& out, const at::Tensor& x, std::string_view approximate,
               bool gate_first) {
  const GeluKind kind = parse_approximate(approximate);
  const std::vector<int64_t> shape = geglu_shape(x);
  check_out(out, x, shape, kGeglu);
  run_geglu(out, x, kind, gate_first);
}

}  // namespace ltx
