// qk_prologue backward: op declarations, the backend launchers, and the forward binding's
// argument checks / views that the backward binding reuses (defined in qk_prologue.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace ltx {

// rmsnorm_rope_qk_backward(Tensor grad_q, Tensor grad_k, Tensor q, Tensor k, Tensor? q_weight,
//     Tensor? k_weight, Tensor? cos, Tensor? sin, float eps, bool weights_grad)
//   -> (Tensor dq, Tensor dk, Tensor dq_weight, Tensor dk_weight)
// Per row: the grad goes back through the interleaved rotation (its transpose, same fp32
// tables: dn[2i] = g[2i]c[2i] + g[2i+1]s[2i+1], dn[2i+1] = g[2i+1]c[2i+1] - g[2i]s[2i]),
// then through torch.nn.RMSNorm with the weight. dq/dk in q's dtype and shapes; the weight
// grads (deterministic fp32 sums, in each weight's dtype) are empty tensors for a None
// weight or weights_grad false. The tables get no gradient.
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> rmsnorm_rope_qk_backward(
    const at::Tensor& grad_q, const at::Tensor& grad_k, const at::Tensor& q, const at::Tensor& k,
    const std::optional<at::Tensor>& q_weight, const std::optional<at::Tensor>& k_weight,
    const std::optional<at::Tensor>& cos, const std::optional<at::Tensor>& sin, double eps,
    bool weights_grad);

// Backend launcher. As rmsnorm_rope_qk_launch (torch_binding.h) for q2d/k2d, weights, tables
// and seq; dq2d/dk2d: outputs of q2d's/k2d's row counts; gq2d/gk2d: [rows, D] grads with
// stride(1) == 1 (row stride may be 0). dqw/dkw: undefined (not wanted) or contiguous [D]
// tensors of the accumulation dtype (fp32; float64 for float64 q), fully written.
void rmsnorm_rope_qk_backward_launch(const at::Tensor& dq2d, const at::Tensor& gq2d,
                                     const at::Tensor& q2d, const at::Tensor& dk2d,
                                     const at::Tensor& gk2d, const at::Tensor& k2d,
                                     const std::optional<at::Tensor>& q_weight,
                                     const std::optional<at::Tensor>& k_weight,
                                     const at::Tensor& cos, const at::Tensor& sin, int64_t seq,
                                     double eps, const at::Tensor& dqw, const at::Tensor& dkw);

namespace qk {

// The two weights as the kernel reads them: contiguous [D], both in x's dtype, or both
// fp32 (weights of another dtype are converted: torch.nn.RMSNorm multiplies in fp32
// either way, so only the storage changes).
struct Weights {
  std::optional<at::Tensor> q, k;
};

struct Tables {
  // Undefined: norm only; else [B, S, D] or [B, S, D / 2] (pair tables) views with a
  // contiguous last dim.
  at::Tensor cos, sin;
  int64_t seq = 1;
};

void check_dev(const char* name, const at::Tensor& t, const at::Tensor& q);
void check_inputs(const at::Tensor& q, const at::Tensor& k);
Weights prepare_weights(const at::Tensor& q, const std::optional<at::Tensor>& qw,
                        const std::optional<at::Tensor>& kw);
Tables check_tables(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& cos,
                    const std::optional<at::Tensor>& sin);

}  // namespace qk
}  // namespace ltx
