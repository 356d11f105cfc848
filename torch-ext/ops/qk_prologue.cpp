// Front end of the fused q/k RMSNorm + interleaved RoPE (the LTX-Video attention
// prologue): argument checks, row views, table views, weight preparation and outputs.
// The math lives in the backend launchers (ltx::rmsnorm_rope_qk_launch).
//
// Zero-copy layouts: q/k (and outputs) whose last dim is contiguous and whose leading
// dims collapse into evenly strided rows (contiguous tensors, slices of a fused qkv
// projection); tables [S, D] / [B, S, D] with a contiguous last dim, any batch and
// sequence strides (stride-0 batch included). Anything else is copied once here; an
// output that cannot be written as rows is computed into a temporary and copied into.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <vector>

#include "ops/qk_prologue.h"
#include "ops/qk_prologue_backward.h"
#include "ops/rms_norm_backward.h"
#include "ops/out_checks.h"
#include "ops/rows.h"
#include "torch_binding.h"

namespace ltx {
namespace {
constexpr const char* kOp = "rmsnorm_rope_qk";
}  // namespace

// Shared with the backward binding (qk_prologue_backward.h).
namespace qk {

void check_dev(const char* name, const at::Tensor& t, const at::Tensor& q) {
  TORCH_CHECK(t.device() == q.device(), "ltx_kernels.", kOp, ": ", name, " is on ", t.device(),
              " but q is on ", q.device(), "; all tensors must be on one device");
}

void check_inputs(const at::Tensor& q, const at::Tensor& k) {
  TORCH_CHECK(q.dim() >= 1, "ltx_kernels.", kOp, ": q must have at least 1 dim, got a scalar");
  TORCH_CHECK(k.dim() >= 1, "ltx_kernels.", kOp, ": k must have at least 1 dim, got a scalar");
  check_float_dtype_or_cpu_double(q, kOp, "q");
  check_dev("k", k, q);
  TORCH_CHECK(k.scalar_type() == q.scalar_type(), "ltx_kernels.", kOp,
              ": k must have q's dtype ", q.scalar_type(), ", got ", k.scalar_type());
  TORCH_CHECK(k.size(-1) == q.size(-1), "ltx_kernels.", kOp,
              ": k must have q's last dim (the normalised inner dim) ", q.size(-1), ", got ",
              k.size(-1), " (shape ", shape_str(k.sizes()), ")");
}

Weights prepare_weights(const at::Tensor& q, const std::optional<at::Tensor>& qw,
                        const std::optional<at::Tensor>& kw) {
  const int64_t d = q.size(-1);
  auto check = [&](const char* name, const std::optional<at::Tensor>& w) {
    if (!w) return;
    check_dev(name, *w, q);
    check_float_dtype_or_cpu_double(*w, kOp, name);
    check_double_together(kOp, "q", q, name, *w);
    TORCH_CHECK(w->dim() == 1 && w->size(0) == d, "ltx_kernels.", kOp, ": ", name,
                " must have shape [", d, "] (q's last dim), got ", shape_str(w->sizes()));
  };
  check("q_weight", qw);
  check("k_weight", kw);
  const at::ScalarType xt = q.scalar_type();
  const bool native = (!qw || qw->scalar_type() == xt) && (!kw || kw->scalar_type() == xt);
  auto prep = [&](const std::optional<at::Tensor>& w) -> std::optional<at::Tensor> {
    if (!w) return std::nullopt;
    return native ? w->contiguous() : w->to(at::kFloat).contiguous();
  };
  return {prep(qw), prep(kw)};
}

// cos/sin broadcast to q [..., S, D] as a [B, S, R] view (last dim contiguous): R = D, or
// R = D / 2 for pair tables (value i serves the pair (2i, 2i+1), as rope_interleaved).
at::Tensor table_view(const char* name, const at::Tensor& t, const at::Tensor& q) {
  check_dev(name, t, q);
  // float64 q (CPU, gradcheck): the tables are read as float64 too.
  const bool dbl = q.scalar_type() == at::kDouble;
  TORCH_CHECK(t.scalar_type() == at::kFloat || (dbl && t.scalar_type() == at::kDouble),
              "ltx_kernels.", kOp, ": ", name,
              " must be float32 (LTX builds and applies the tables in fp32), got ",
              t.scalar_type());
  const int64_t d = q.size(-1);
  const int64_t r = t.dim() >= 1 && t.size(-1) == d / 2 && d > 0 ? d / 2 : d;
  bool ok = t.dim() >= 2 && t.dim() <= q.dim() && t.size(-1) == r;
  for (int64_t i = 2; ok && i <= t.dim(); ++i) {
    ok = t.size(-i) == q.size(-i) || t.size(-i) == 1;
  }
  TORCH_CHECK(ok, "ltx_kernels.", kOp, ": ", name, " must have shape [S, D] or [B, S, D] ",
              "(or [S, D/2] / [B, S, D/2]: one value per pair) broadcastable to q's shape ",
              shape_str(q.sizes()), ", got ", shape_str(t.sizes()));
  const at::Tensor td = dbl ? t.to(at::kDouble) : t;
  const at::Tensor c = (td.size(-1) <= 1 || td.stride(-1) == 1) ? td : td.contiguous();
  std::vector<int64_t> shape(q.sizes().begin(), q.sizes().end());
  shape.back() = r;
  // reshape keeps a view (stride-0 batch included) whenever one stride can express it.
  return c.expand(shape).reshape({-1, q.size(-2), r});
}

Tables check_tables(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& cos,
                    const std::optional<at::Tensor>& sin) {
  TORCH_CHECK(cos.has_value() == sin.has_value(), "ltx_kernels.", kOp,
              ": pass both cos and sin (RoPE) or neither (norm only), got ",
              cos ? "cos without sin" : "sin without cos");
  Tables t;
  if (!cos) return t;
  TORCH_CHECK(q.dim() >= 2, "ltx_kernels.", kOp,
              ": with cos/sin, q must have at least 2 dims [..., S, D], got shape ",
              shape_str(q.sizes()));
  TORCH_CHECK(q.size(-1) % 2 == 0, "ltx_kernels.", kOp,
              ": with cos/sin, q's last dim must be even (pairs (2i, 2i+1)), got ", q.size(-1));
  TORCH_CHECK(k.sizes() == q.sizes(), "ltx_kernels.", kOp,
              ": with cos/sin (self-attention), k must have q's shape ", shape_str(q.sizes()),
              ", got ", shape_str(k.sizes()));
  TORCH_CHECK(sin->sizes() == cos->sizes(), "ltx_kernels.", kOp, ": sin must have cos's shape ",
              shape_str(cos->sizes()), ", got ", shape_str(sin->sizes()));
  t.cos = table_view("cos", *cos, q);
  t.sin = table_view("sin", *sin, q);
  t.seq = q.size(-2);
  return t;
}

}  // namespace qk

namespace {
using namespace qk;

// Where the kernel writes one output: its row view, or a temporary copied into dest.
struct Dest {
  at::Tensor rows, temp, dest;
};

Dest dest_rows(const at::Tensor& out) {
  Dest d;
  const std::optional<int64_t> rs = collapsed_row_stride(out);
  if (rs && (row_count(out) <= 1 || *rs >= out.size(-1))) {
    d.rows = as_output_rows(out, kOp);
  } else {
    d.temp = at::empty(out.sizes(), out.options());
    d.dest = out;
    d.rows = as_rows(d.temp);
  }
  return d;
}

void run(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q,
         const at::Tensor& k, const Weights& w, const Tables& t, double eps) {
  if (q.numel() == 0 && k.numel() == 0) return;
  const Dest dq = dest_rows(q_out);
  const Dest dk = dest_rows(k_out);
  rmsnorm_rope_qk_launch(dq.rows, as_rows(q), dk.rows, as_rows(k), w.q, w.k, t.cos, t.sin, t.seq,
                         eps);
  if (dq.dest.defined()) dq.dest.copy_(dq.temp);
  if (dk.dest.defined()) dk.dest.copy_(dk.temp);
}

}  // namespace

std::tuple<at::Tensor, at::Tensor> rmsnorm_rope_qk(
    const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& q_weight,
    const std::optional<at::Tensor>& k_weight, const std::optional<at::Tensor>& cos,
    const std::optional<at::Tensor>& sin, double eps) {
  check_inputs(q, k);
  check_eps(eps, kOp);
  const Weights w = prepare_weights(q, q_weight, k_weight);
  const Tables t = check_tables(q, k, cos, sin);
  at::Tensor q_out = at::empty(q.sizes(), q.options());
  at::Tensor k_out = at::empty(k.sizes(), k.options());
  run(q_out, k_out, q, k, w, t, eps);
  return {q_out, k_out};
}

void rmsnorm_rope_qk_out(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q,
                         const at::Tensor& k, const std::optional<at::Tensor>& q_weight,
                         const std::optional<at::Tensor>& k_weight,
                         const std::optional<at::Tensor>& cos,
                         const std::optional<at::Tensor>& sin, double eps) {
  check_inputs(q, k);
  check_eps(eps, kOp);
  const Weights w = prepare_weights(q, q_weight, k_weight);
  const Tables t = check_tables(q, k, cos, sin);
  check_out(kOp, "q_out", q_out, "q", q);
  check_out(kOp, "k_out", k_out, "k", k);
  check_disjoint(kOp, "q_out", q_out, "k", k);
  check_disjoint(kOp, "k_out", k_out, "q", q);
  check_disjoint(kOp, "q_out", q_out, "k_out", k_out);
  run(q_out, k_out, q, k, w, t, eps);
}

}  // namespace ltx
