// AdaLN modulation and gated residual front end: argument checks, the eager
// rounding chain (which dtype each op boundary rounds to), output allocation.
// The math lives in the backend launchers (ltx::adaln_launch,
// ltx::gated_residual_launch).
//
// Rounding (shared/docs/op-semantics.md sections 1.1, 4, 5.1): the unfused eager
// expression `norm(x) * (1 + scale) + shift` rounds after every op, following
// PyTorch's type promotion:
//   n    = norm(x)             rms: diffusers RMSNorm (no weight: x's dtype, once;
//                              half weight: round to the weight dtype, multiply,
//                              round again; fp32 weight: fp32). layer: LayerNorm in
//                              fp32 (weight applied in fp32), rounded once to x's dtype.
//   s1   = 1 + scale           scale's dtype
//   m    = n * s1              promote(n, scale)
//   out  = m + shift           promote(m, shift)       (out = m without shift)
// gated_residual: p = y * gate in promote(y, gate), out = x + p in promote(x, p).
// fp32 operands (Wan's fp32 modulation) make every step an fp32 op, as in eager.
#include "ops/adaln.h"
#include "ops/adaln_backward.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

#include "ops/bcast_rows.h"
#include "ops/rows.h"
#include "torch_binding.h"

namespace ltx {
namespace {

constexpr const char* kAda = "adaln";
constexpr const char* kGate = "gated_residual";

struct AdaLnArgs {
  at::Tensor scale;                 // laid out for the kernels (bcast_rows.h)
  std::optional<at::Tensor> shift;  // likewise
  AdaLnNorm norm;
  AdaLnRounding rounding;
  at::ScalarType out;  // output dtype
};

AdaLnArgs check_adaln(const at::Tensor& x, const at::Tensor& scale,
                      const std::optional<at::Tensor>& shift,
                      const std::optional<at::Tensor>& weight, double eps, int64_t norm) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", kAda, ": x must have at least one dimension");
  check_float_dtype_or_cpu_double(x, kAda, "x");
  check_eps(eps, kAda);
  TORCH_CHECK(norm == 0 || norm == 1, "ltx_kernels.", kAda,
              ": norm must be 0 (rms) or 1 (layer), got ", norm);
  AdaLnArgs a;
  a.norm = static_cast<AdaLnNorm>(norm);
  a.scale = broadcast_operand(scale, x, kAda, "scale");
  if (shift) a.shift = broadcast_operand(*shift, x, kAda, "shift");
  if (weight) {
    check_float_dtype_or_cpu_double(*weight, kAda, "weight");
    check_same_device(*weight, x, kAda, "weight");
    TORCH_CHECK(weight->dim() == 1 && weight->size(0) == x.size(-1), "ltx_kernels.", kAda,
                ": weight must have shape [", x.size(-1), "] to match x's last dim, got ",
                shape_str(weight->sizes()));
  }

  const at::ScalarType xt = x.scalar_type();
  AdaLnRounding& r = a.rounding;
  r.mid = at::kFloat;
  r.norm = xt;
  if (a.norm == AdaLnNorm::kRms && weight) {
    // diffusers RMSNorm: a half weight rounds before and after its multiply and sets
    // the dtype; an fp32 weight keeps the fp32 product.
    const at::ScalarType w = weight->scalar_type();
    r.mid = w;
    r.norm = w;
  }
  r.scale1 = scale.scalar_type();
  r.prod = c10::promoteTypes(r.norm, r.scale1);
  a.out = shift ? c10::promoteTypes(r.prod, shift->scalar_type()) : r.prod;
  return a;
}

}  // namespace

// The weight as the kernels read it: fp32 (float64 for a float64 result on the CPU),
// contiguous, 16-byte aligned (exact).
std::optional<at::Tensor> adaln_kernel_weight(const std::optional<at::Tensor>& weight,
                                              at::ScalarType out) {
  if (!weight) return std::nullopt;
  at::Tensor w = weight->to(out == at::kDouble ? at::kDouble : at::kFloat).contiguous();
  if (reinterpret_cast<uintptr_t>(w.const_data_ptr()) % 16 != 0) w = w.clone();
  return w;
}

namespace {

void run_adaln(const at::Tensor& out, const at::Tensor& x, AdaLnArgs& a,
               const std::optional<at::Tensor>& weight, double eps) {
  if (x.numel() == 0) return;
  at::Tensor* operands[kMaxRowOperands] = {&a.scale, a.shift ? &*a.shift : nullptr};
  const RowSpace rs = make_row_space(x, operands, a.shift ? 2 : 1);
  adaln_launch(as_output_rows(out, kAda), as_rows(x), a.scale, a.shift, adaln_kernel_weight(weight, out.scalar_type()), rs,
               eps, a.norm, a.rounding);
}

struct GateArgs {
  at::Tensor y, gate;  // laid out for the kernels
  at::ScalarType prod, out;
};

GateArgs check_gate(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  TORCH_CHECK(x.dim() >= 1, "ltx_kernels.", kGate, ": x must have at least one dimension");
  check_float_dtype_or_cpu_double(x, kGate, "x");
  GateArgs g;
  g.y = broadcast_operand(y, x, kGate, "y");
  g.gate = broadcast_operand(gate, x, kGate, "gate");
  g.prod = c10::promoteTypes(y.scalar_type(), gate.scalar_type());
  g.out = c10::promoteTypes(x.scalar_type(), g.prod);
  return g;
}

void run_gate(const at::Tensor& out, const at::Tensor& x, GateArgs& g) {
  if (x.numel() == 0) return;
  at::Tensor* operands[kMaxRowOperands] = {&g.y, &g.gate};
  const RowSpace rs = make_row_space(x, operands, 2);
  gated_residual_launch(as_output_rows(out, kGate), as_rows(x), g.y, g.gate, rs, g.prod);
}

void check_out(const at::Tensor& out, const at::Tensor& x, at::ScalarType dtype, const char* op) {
  check_same_device(out, x, op, "out");
  TORCH_CHECK(out.scalar_type() == dtype, "ltx_kernels.", op, ": out must have dtype ", dtype,
              " for these inputs, got ", out.scalar_type());
  TORCH_CHECK(out.sizes() == x.sizes(), "ltx_kernels.", op, ": out must have x's shape ",
              shape_str(x.sizes()), ", got ", shape_str(out.sizes()));
}

}  // namespace

at::Tensor adaln(const at::Tensor& x, const at::Tensor& scale, const std::optional<at::Tensor>& shift,
                 const std::optional<at::Tensor>& weight, double eps, int64_t norm) {
  AdaLnArgs a = check_adaln(x, scale, shift, weight, eps, norm);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(a.out));
  run_adaln(out, x, a, weight, eps);
  return out;
}

void adaln_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& scale,
               const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
               double eps, int64_t norm) {
  AdaLnArgs a = check_adaln(x, scale, shift, weight, eps, norm);
  check_out(out, x, a.out, kAda);
  run_adaln(out, x, a, weight, eps);
}

at::Tensor gated_residual(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  GateArgs g = check_gate(x, y, gate);
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(g.out));
  run_gate(out, x, g);
  return out;
}

void gated_residual_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& y,
                        const at::Tensor& gate) {
  GateArgs g = check_gate(x, y, gate);
  check_out(out, x, g.out, kGate);
  run_gate(out, x, g);
}

void gated_residual_inplace(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  GateArgs g = check_gate(x, y, gate);
  TORCH_CHECK(g.out == x.scalar_type(), "ltx_kernels.", kGate, ": in place, x must have the ",
              "result dtype ", g.out, " (promoted from x, y and gate), got ", x.scalar_type());
  TORCH_CHECK(at::has_internal_overlap(x) != at::MemOverlap::Yes, "ltx_kernels.", kGate,
              ": x has elements that share memory (e.g. an expanded view) and cannot be "
              "updated in place");
  if (x.numel() == 0) return;
  if (collapsed_row_stride(x)) {
    run_gate(x, x, g);  // each element is read, then written, by the same thread
    return;
  }
  // x's rows are not evenly strided (e.g. a transpose): compute, then copy back.
  at::Tensor out = at::empty(x.sizes(), x.options().dtype(g.out));
  run_gate(out, x, g);
  at::Tensor(x).copy_(out);
}

}  // namespace ltx
