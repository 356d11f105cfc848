// Autograd of the differentiable forward ops (ops/autograd.h says why this is C++): one
// torch::autograd::Function per op, registered for the Autograd key. The gradients are
// the family backward ops (ops/*_backward.cpp); the out= / in-place ops stay
// inference-only (the Python wrappers say so when an input requires grad).
//
// Unused outputs: the Functions turn off grad materialisation, so an output that does not
// reach the loss hands its backward an undefined grad and costs no kernel work.
#include <ATen/ops/zeros_like.h>

#include "ops/activation.h"
#include "ops/activation_backward.h"
#include "ops/adaln.h"
#include "ops/adaln_backward.h"
#include "ops/autograd.h"
#include "ops/qk_prologue.h"
#include "ops/qk_prologue_backward.h"
#include "ops/rms_norm.h"
#include "ops/rms_norm_backward.h"
#include "ops/rope.h"
#include "ops/rope_backward.h"

namespace ltx::autograd {
namespace {

using torch::autograd::Function;

variable_list pair(std::tuple<at::Tensor, at::Tensor> t) {
  return {std::move(std::get<0>(t)), std::move(std::get<1>(t))};
}

// RoPE tables are position encodings, not parameters: no gradient for them.
void check_no_table_grad(const char* op, bool cos_needs, bool sin_needs) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      !(cos_needs || sin_needs), "ltx_kernels.", op,
      ": no gradient for the cos/sin tables (they are position encodings, not parameters); "
      "detach them or build them under torch.no_grad()");
}

// The grads of a two-output RoPE op rotated back: both through `both` (one launch), a
// single one through `one`, none: nothing. `tables`: the backward ops' remaining args.
template <typename Both, typename One, typename... Tables>
void rotate_back(variable_list& out, const at::Tensor& gq, const at::Tensor& gk, const Both& both,
                 const One& one, const Tables&... tables) {
  if (gq.defined() && gk.defined()) {
    std::tie(out[0], out[1]) = both.call(gq, gk, tables...);
  } else if (gq.defined()) {
    out[0] = one.call(gq, tables...);
  } else if (gk.defined()) {
    out[1] = one.call(gk, tables...);
  }
}

// ---- rms_norm: every semantics has the same gradient (the roundings between the steps are
// identity for it).
struct RmsNormFn : Function<RmsNormFn> {
  static constexpr const char* kName = "rms_norm";
  using Op = decltype(rms_norm);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            const std::optional<at::Tensor>& weight, double eps,
                            int64_t semantics) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, weight.value_or(at::Tensor())});
    ctx->saved_data["eps"] = eps;
    return below_autograd<RmsNormFn>(x, weight, eps, semantics);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(rms_norm_backward)>("rms_norm_backward");
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const auto need = needs_grad<2>(ctx, {true, w.defined()});
    variable_list out(4);
    if (!grads[0].defined() || !(need[0] || need[1])) return out;
    auto [dx, dw] =
        bwd.call(grads[0], x, maybe(w), ctx->saved_data["eps"].toDouble(), need[1]);
    if (need[0]) out[0] = std::move(dx);
    if (need[1]) out[1] = std::move(dw);
    return out;
  }
};

at::Tensor rms_norm_ad(const at::Tensor& x, const std::optional<at::Tensor>& weight, double eps,
                       int64_t semantics) {
  return run<RmsNormFn>(x, weight, eps, semantics);
}

// ---- gelu / gelu_tanh / geglu: the backward needs x only.
template <bool kTanh>
struct GeluFn : Function<GeluFn<kTanh>> {
  static constexpr const char* kName = kTanh ? "gelu_tanh" : "gelu";
  using Op = decltype(gelu);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x});
    return below_autograd<GeluFn<kTanh>>(x);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(gelu_backward)>("gelu_backward");
    if (!grads[0].defined()) return {at::Tensor()};
    return {bwd.call(grads[0], ctx->get_saved_variables()[0], kTanh ? "tanh" : "none")};
  }
};

at::Tensor gelu_ad(const at::Tensor& x) { return run<GeluFn<false>>(x); }
at::Tensor gelu_tanh_ad(const at::Tensor& x) { return run<GeluFn<true>>(x); }

struct GegluFn : Function<GegluFn> {
  static constexpr const char* kName = "geglu";
  using Op = decltype(geglu);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x,
                            std::string_view approximate, bool gate_first) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x});
    ctx->saved_data["approximate"] = std::string(approximate);
    ctx->saved_data["gate_first"] = gate_first;
    return below_autograd<GegluFn>(x, approximate, gate_first);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(geglu_backward)>("geglu_backward");
    variable_list out(3);
    if (!grads[0].defined()) return out;
    const std::string& approximate = ctx->saved_data["approximate"].toStringRef();
    out[0] = bwd.call(grads[0], ctx->get_saved_variables()[0], approximate,
                      ctx->saved_data["gate_first"].toBool());
    return out;
  }
};

at::Tensor geglu_ad(const at::Tensor& x, std::string_view approximate, bool gate_first) {
  return run<GegluFn>(x, approximate, gate_first);
}

// ---- RoPE: the backward is the transposed rotation of grad (the tables only). An output
// without a grad is not rotated.
struct RopeInterleavedFn : Function<RopeInterleavedFn> {
  static constexpr const char* kName = "rope_interleaved";
  using Op = decltype(rope_interleaved);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({cos, sin});
    return below_autograd<RopeInterleavedFn>(x, cos, sin);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(rope_interleaved_backward)>("rope_interleaved_backward");
    check_no_table_grad("rope_interleaved", ctx->needs_input_grad(1), ctx->needs_input_grad(2));
    const variable_list t = ctx->get_saved_variables();
    variable_list out(3);
    if (grads[0].defined()) out[0] = bwd.call(grads[0], t[0], t[1]);
    return out;
  }
};

at::Tensor rope_interleaved_ad(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return run<RopeInterleavedFn>(x, cos, sin);
}

struct RopeInterleavedQkFn : Function<RopeInterleavedQkFn> {
  static constexpr const char* kName = "rope_interleaved_qk";
  using Op = decltype(rope_interleaved_qk);

  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& cos, const at::Tensor& sin) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({cos, sin});
    return pair(below_autograd<RopeInterleavedQkFn>(q, k, cos, sin));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto one = op<decltype(rope_interleaved_backward)>("rope_interleaved_backward");
    static const auto both =
        op<decltype(rope_interleaved_qk_backward)>("rope_interleaved_qk_backward");
    check_no_table_grad("rope_interleaved_qk", ctx->needs_input_grad(2),
                        ctx->needs_input_grad(3));
    const variable_list t = ctx->get_saved_variables();
    variable_list out(4);
    rotate_back(out, grads[0], grads[1], both, one, t[0], t[1]);
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk_ad(const at::Tensor& q, const at::Tensor& k,
                                                          const at::Tensor& cos,
                                                          const at::Tensor& sin) {
  return run<RopeInterleavedQkFn>(q, k, cos, sin);
}

struct RopeRotateHalfFn : Function<RopeRotateHalfFn> {
  static constexpr const char* kName = "rope_rotate_half";
  using Op = decltype(rope_rotate_half);

  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const at::Tensor& cos, const at::Tensor& sin,
                               int64_t unsqueeze_dim) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["unsqueeze_dim"] = unsqueeze_dim;
    return pair(below_autograd<RopeRotateHalfFn>(q, k, cos, sin, unsqueeze_dim));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto one =
        op<decltype(rope_rotate_half_single_backward)>("rope_rotate_half_single_backward");
    static const auto both = op<decltype(rope_rotate_half_backward)>("rope_rotate_half_backward");
    check_no_table_grad("rope_rotate_half", ctx->needs_input_grad(2), ctx->needs_input_grad(3));
    const variable_list t = ctx->get_saved_variables();
    variable_list out(5);
    rotate_back(out, grads[0], grads[1], both, one, t[0], t[1],
                ctx->saved_data["unsqueeze_dim"].toInt());
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> rope_rotate_half_ad(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& cos,
                                                       const at::Tensor& sin,
                                                       int64_t unsqueeze_dim) {
  return run<RopeRotateHalfFn>(q, k, cos, sin, unsqueeze_dim);
}

struct RopeRotateHalfSingleFn : Function<RopeRotateHalfSingleFn> {
  static constexpr const char* kName = "rope_rotate_half_single";
  using Op = decltype(rope_rotate_half_single);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t unsqueeze_dim) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["unsqueeze_dim"] = unsqueeze_dim;
    return below_autograd<RopeRotateHalfSingleFn>(x, cos, sin, unsqueeze_dim);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd =
        op<decltype(rope_rotate_half_single_backward)>("rope_rotate_half_single_backward");
    check_no_table_grad("rope_rotate_half_single", ctx->needs_input_grad(1),
                        ctx->needs_input_grad(2));
    const variable_list t = ctx->get_saved_variables();
    variable_list out(4);
    if (grads[0].defined()) {
      out[0] = bwd.call(grads[0], t[0], t[1], ctx->saved_data["unsqueeze_dim"].toInt());
    }
    return out;
  }
};

at::Tensor rope_rotate_half_single_ad(const at::Tensor& x, const at::Tensor& cos,
                                      const at::Tensor& sin, int64_t unsqueeze_dim) {
  return run<RopeRotateHalfSingleFn>(x, cos, sin, unsqueeze_dim);
}

// ---- adaln and gated_residual.
struct AdalnFn : Function<AdalnFn> {
  static constexpr const char* kName = "adaln";
  using Op = decltype(adaln);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& scale,
                            const std::optional<at::Tensor>& shift,
                            const std::optional<at::Tensor>& weight, double eps, int64_t norm) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({x, scale, shift.value_or(at::Tensor()), weight.value_or(at::Tensor())});
    ctx->saved_data["eps"] = eps;
    ctx->saved_data["norm"] = norm;
    return below_autograd<AdalnFn>(x, scale, shift, weight, eps, norm);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(adaln_backward)>("adaln_backward");
    const variable_list s = ctx->get_saved_variables();
    const auto need = needs_grad<4>(ctx, {true, true, s[2].defined(), s[3].defined()});
    variable_list out(6);
    if (!grads[0].defined() || !(need[0] || need[1] || need[2] || need[3])) return out;
    auto [dx, dscale, dshift, dweight] =
        bwd.call(grads[0], s[0], s[1], maybe(s[2]), maybe(s[3]),
                 ctx->saved_data["eps"].toDouble(), ctx->saved_data["norm"].toInt(), need);
    if (need[0]) out[0] = std::move(dx);
    if (need[1]) out[1] = std::move(dscale);
    if (need[2]) out[2] = std::move(dshift);
    if (need[3]) out[3] = std::move(dweight);
    return out;
  }
};

at::Tensor adaln_ad(const at::Tensor& x, const at::Tensor& scale,
                    const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
                    double eps, int64_t norm) {
  return run<AdalnFn>(x, scale, shift, weight, eps, norm);
}

struct GatedResidualFn : Function<GatedResidualFn> {
  static constexpr const char* kName = "gated_residual";
  using Op = decltype(gated_residual);

  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& y,
                            const at::Tensor& gate) {
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({y, gate});
    ctx->saved_data["x_dtype"] = x.scalar_type();
    return below_autograd<GatedResidualFn>(x, y, gate);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(gated_residual_backward)>("gated_residual_backward");
    const auto need = needs_grad<3>(ctx, {true, true, true});
    const at::Tensor& grad = grads[0];
    variable_list out(3);
    if (!grad.defined()) return out;
    // d/dx (x + y * gate) = grad, in x's dtype (x has the output's shape).
    if (need[0]) out[0] = grad.to(ctx->saved_data["x_dtype"].toScalarType());
    if (need[1] || need[2]) {
      const variable_list s = ctx->get_saved_variables();
      auto [dy, dgate] = bwd.call(grad, s[0], s[1], {need[1], need[2]});
      if (need[1]) out[1] = std::move(dy);
      if (need[2]) out[2] = std::move(dgate);
    }
    return out;
  }
};

at::Tensor gated_residual_ad(const at::Tensor& x, const at::Tensor& y, const at::Tensor& gate) {
  return run<GatedResidualFn>(x, y, gate);
}

// ---- rmsnorm_rope_qk (the LTX-Video q/k prologue).
struct RmsNormRopeQkFn : Function<RmsNormRopeQkFn> {
  static constexpr const char* kName = "rmsnorm_rope_qk";
  using Op = decltype(rmsnorm_rope_qk);

  static variable_list forward(AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                               const std::optional<at::Tensor>& q_weight,
                               const std::optional<at::Tensor>& k_weight,
                               const std::optional<at::Tensor>& cos,
                               const std::optional<at::Tensor>& sin, double eps) {
    ctx->set_materialize_grads(false);
    const at::Tensor none;
    ctx->save_for_backward({q, k, q_weight.value_or(none), k_weight.value_or(none),
                            cos.value_or(none), sin.value_or(none)});
    ctx->saved_data["eps"] = eps;
    return pair(below_autograd<RmsNormRopeQkFn>(q, k, q_weight, k_weight, cos, sin, eps));
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    static const auto bwd = op<decltype(rmsnorm_rope_qk_backward)>("rmsnorm_rope_qk_backward");
    const variable_list s = ctx->get_saved_variables();
    const auto need = needs_grad<6>(
        ctx, {true, true, s[2].defined(), s[3].defined(), s[4].defined(), s[5].defined()});
    TORCH_CHECK_NOT_IMPLEMENTED(!(need[4] || need[5]),
                                "ltx_kernels.rmsnorm_rope_qk: no gradient for cos/sin (the RoPE "
                                "tables are constants in LTX-Video); detach them");
    variable_list out(7);
    at::Tensor gq = grads[0], gk = grads[1];
    if (!(need[0] || need[1] || need[2] || need[3]) || (!gq.defined() && !gk.defined())) {
      return out;
    }
    // An unused output's grad is undefined: it contributes nothing, i.e. zeros.
    if (!gq.defined()) gq = at::zeros_like(s[0]);
    if (!gk.defined()) gk = at::zeros_like(s[1]);
    const bool weights_grad = need[2] || need[3];
    auto [dq, dk, dqw, dkw] = bwd.call(gq, gk, s[0], s[1], maybe(s[2]), maybe(s[3]), maybe(s[4]),
                                       maybe(s[5]), ctx->saved_data["eps"].toDouble(), weights_grad);
    if (need[0]) out[0] = std::move(dq);
    if (need[1]) out[1] = std::move(dk);
    if (need[2]) out[2] = std::move(dqw);
    if (need[3]) out[3] = std::move(dkw);
    return out;
  }
};

std::tuple<at::Tensor, at::Tensor> rmsnorm_rope_qk_ad(
    const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& q_weight,
    const std::optional<at::Tensor>& k_weight, const std::optional<at::Tensor>& cos,
    const std::optional<at::Tensor>& sin, double eps) {
  return run<RmsNormRopeQkFn>(q, k, q_weight, k_weight, cos, sin, eps);
}

}  // namespace

void register_autograd(torch::Library& ops) {
  impl_autograd(ops, "rms_norm", TORCH_FN(rms_norm_ad));
  impl_autograd(ops, "gelu", TORCH_FN(gelu_ad));
  impl_autograd(ops, "gelu_tanh", TORCH_FN(gelu_tanh_ad));
  impl_autograd(ops, "geglu", TORCH_FN(geglu_ad));
  impl_autograd(ops, "rope_interleaved", TORCH_FN(rope_interleaved_ad));
  impl_autograd(ops, "rope_interleaved_qk", TORCH_FN(rope_interleaved_qk_ad));
  impl_autograd(ops, "rope_rotate_half", TORCH_FN(rope_rotate_half_ad));
  impl_autograd(ops, "rope_rotate_half_single", TORCH_FN(rope_rotate_half_single_ad));
  impl_autograd(ops, "adaln", TORCH_FN(adaln_ad));
  impl_autograd(ops, "gated_residual", TORCH_FN(gated_residual_ad));
  impl_autograd(ops, "rmsnorm_rope_qk", TORCH_FN(rmsnorm_rope_qk_ad));
}

}  // namespace ltx::autograd
