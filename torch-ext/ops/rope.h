// Rotary-embedding ops as registered in torch_binding.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

namespace ltx {

// rope_interleaved(Tensor x, Tensor cos, Tensor sin) -> Tensor
// LTX-Video layout: pairs (2i, 2i+1) across the whole last dim of x [..., S, D];
// cos/sin float32, broadcastable to x ([S, D], [B, S, D], stride-0 batch).
at::Tensor rope_interleaved(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

// rope_interleaved_out(Tensor! out, Tensor x, Tensor cos, Tensor sin) -> ()
// out may be x itself (in place); partial overlap is rejected.
void rope_interleaved_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& cos,
                          const at::Tensor& sin);

// rope_interleaved_qk(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)
std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& cos,
                                                       const at::Tensor& sin);

// rope_interleaved_qk_out(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor cos,
//                         Tensor sin) -> ()
void rope_interleaved_qk_out(const at::Tensor& q_out, const at::Tensor& k_out,
                             const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                             const at::Tensor& sin);

// rope_rotate_half(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim)
//   -> (Tensor, Tensor)
// transformers' apply_rotary_pos_emb: q/k [B, H, S, Dh] (unsqueeze_dim 1) or [B, S, H, Dh]
// (unsqueeze_dim 2), k may have fewer heads; cos/sin [B, S, R] or [S, R], R <= Dh even.
std::tuple<at::Tensor, at::Tensor> rope_rotate_half(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& cos,
                                                    const at::Tensor& sin,
                                                    int64_t unsqueeze_dim);

// rope_rotate_half_out(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor cos,
//                      Tensor sin, int unsqueeze_dim) -> ()
void rope_rotate_half_out(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q,
                          const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t unsqueeze_dim);

// rope_rotate_half_single(Tensor x, Tensor cos, Tensor sin, int unsqueeze_dim) -> Tensor
at::Tensor rope_rotate_half_single(const at::Tensor& x, const at::Tensor& cos,
                                   const at::Tensor& sin, int64_t unsqueeze_dim);

// rope_rotate_half_single_out(Tensor! out, Tensor x, Tensor cos, Tensor sin,
//                             int unsqueeze_dim) -> ()
void rope_rotate_half_single_out(const at::Tensor& out, const at::Tensor& x,
                                 const at::Tensor& cos, const at::Tensor& sin,
                                 int64_t unsqueeze_dim);

}  // namespace ltx
