// qk_prologue backward op: schema, argument checks, row views, outputs, registration.
// Inputs, weights and tables go through the forward binding's own checks and views
// (qk_prologue.cpp), so both directions read them the same way.
#include "ops/qk_prologue_backward.h"

#include <ATen/ops/empty.h>

#include "ops/backward_ops.h"
#include "ops/register.h"
#include "ops/rms_norm_backward.h"
#include "ops/rows.h"

namespace ltx {
namespace {

constexpr const char* kOp = "rmsnorm_rope_qk_backward";

void check_grad(const char* name, const at::Tensor& g, const char* x_name, const at::Tensor& x) {
  check_float_dtype_or_cpu_double(g, kOp, name);
  TORCH_CHECK(g.device() == x.device(), "ltx_kernels.", kOp, ": ", name, " is on ", g.device(),
              " but ", x_name, " is on ", x.device(), "; all tensors must be on one device");
  check_double_together(kOp, x_name, x, name, g);
  TORCH_CHECK(g.sizes() == x.sizes(), "ltx_kernels.", kOp, ": ", name, " must have ", x_name,
              "'s shape ", shape_str(x.sizes()), ", got ", shape_str(g.sizes()));
}

at::Tensor weight_grad(const std::optional<at::Tensor>& w, bool want, const at::Tensor& q) {
  if (!w || !want) return at::Tensor();
  const at::ScalarType acc = q.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  return at::empty({q.size(-1)}, q.options().dtype(acc));
}

at::Tensor finish_weight_grad(const at::Tensor& acc, const std::optional<at::Tensor>& w,
                              const at::Tensor& q) {
  if (!acc.defined()) return at::empty({0}, q.options().dtype(w ? w->scalar_type() : q.scalar_type()));
  return acc.to(w->scalar_type());
}

}  // namespace

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> rmsnorm_rope_qk_backward(
    const at::Tensor& grad_q, const at::Tensor& grad_k, const at::Tensor& q, const at::Tensor& k,
    const std::optional<at::Tensor>& q_weight, const std::optional<at::Tensor>& k_weight,
    const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin, double eps,
    bool weights_grad) {
  qk::check_inputs(q, k);
  check_grad("grad_q", grad_q, "q", q);
  check_grad("grad_k", grad_k, "k", k);
  check_eps(eps, kOp);
  const qk::Weights w = qk::prepare_weights(q, q_weight, k_weight);
  const qk::Tables t = qk::check_tables(q, k, cos, sin);
  at::Tensor dq = at::empty(q.sizes(), q.options());
  at::Tensor dk = at::empty(k.sizes(), k.options());
  at::Tensor dqw = weight_grad(q_weight, weights_grad, q);
  at::Tensor dkw = weight_grad(k_weight, weights_grad, q);
  if (q.numel() > 0 || k.numel() > 0) {
    rmsnorm_rope_qk_backward_launch(as_rows(dq), as_rows(grad_q), as_rows(q), as_rows(dk),
                                    as_rows(grad_k), as_rows(k), w.q, w.k, t.cos, t.sin, t.seq,
                                    eps, dqw, dkw);
  }
  // A side without rows gets no kernel writes: its weight grad is zero.
  if (dqw.defined() && q.numel() == 0) dqw.zero_();
  if (dkw.defined() && k.numel() == 0) dkw.zero_();
  return {dq, dk, finish_weight_grad(dqw, q_weight, q), finish_weight_grad(dkw, k_weight, q)};
}

void register_qk_prologue_backward(torch::Library& ops) {
  ops.def(
      "rmsnorm_rope_qk_backward(Tensor grad_q, Tensor grad_k, Tensor q, Tensor k, "
      "Tensor? q_weight, Tensor? k_weight, Tensor? cos, Tensor? sin, float eps, "
      "bool weights_grad) -> (Tensor, Tensor, Tensor, Tensor)");
  ltx::reg::impl(ops, "rmsnorm_rope_qk_backward", TORCH_FN(ltx::rmsnorm_rope_qk_backward));
}

}  // namespace ltx
