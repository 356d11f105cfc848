// Fused LTX attention prologue as registered in torch_binding.cpp: torch.nn.RMSNorm on q
// and on k (each with its own weight), then interleaved RoPE on both, in one launch.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <tuple>

namespace ltx {

// rmsnorm_rope_qk(Tensor q, Tensor k, Tensor? q_weight, Tensor? k_weight, Tensor? cos,
//                 Tensor? sin, float eps) -> (Tensor, Tensor)
// q/k: [..., D] (with tables: [..., S, D], k of q's shape; without: k may have other
// leading dims, e.g. cross-attention text keys). Outputs have q's / k's dtype.
std::tuple<at::Tensor, at::Tensor> rmsnorm_rope_qk(
    const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& q_weight,
    const std::optional<at::Tensor>& k_weight, const std::optional<at::Tensor>& cos,
    const std::optional<at::Tensor>& sin, double eps);

// rmsnorm_rope_qk_out(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor? q_weight,
//                     Tensor? k_weight, Tensor? cos, Tensor? sin, float eps) -> ()
// q_out may be q and k_out may be k (in place); other overlaps are rejected.
void rmsnorm_rope_qk_out(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q,
                         const at::Tensor& k, const std::optional<at::Tensor>& q_weight,
                         const std::optional<at::Tensor>& k_weight,
                         const std::optional<at::Tensor>& cos,
                         const std::optional<at::Tensor>& sin, double eps);

}  // namespace ltx
