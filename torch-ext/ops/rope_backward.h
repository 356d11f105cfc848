// Rotary-embedding backward: the ops (registered in rope_backward.cpp) and the launchers.
//
// A rotation's gradient is its transpose. For a pair (a, b) whose forward is
//   out_a = x_a c_a - x_b s_a,   out_b = x_b c_b + x_a s_b
// the input gradient is
//   dx_a = g_a c_a + g_b s_b,    dx_b = g_b c_b - g_a s_a
// (the partner's sin: the tables may differ per channel). Rotate-half channels >= R
// pass the gradient through. Always computed in fp32 (double for double) with one
// rounding, also for tables in the input dtype: autograd through eager's per-step
// casts treats them as identity. The tables get no gradient.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <tuple>

#include "../torch_binding.h"

namespace ltx {

// ---- ops (shapes, dtypes and table conventions as the forward ops in ops/rope.h) ----

// rope_interleaved_backward(Tensor grad, Tensor cos, Tensor sin) -> Tensor
at::Tensor rope_interleaved_backward(const at::Tensor& grad, const at::Tensor& cos,
                                     const at::Tensor& sin);

// rope_interleaved_qk_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin)
//   -> (Tensor, Tensor)
std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk_backward(const at::Tensor& grad_q,
                                                                const at::Tensor& grad_k,
                                                                const at::Tensor& cos,
                                                                const at::Tensor& sin);

// rope_rotate_half_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin,
//                           int unsqueeze_dim) -> (Tensor, Tensor)
std::tuple<at::Tensor, at::Tensor> rope_rotate_half_backward(const at::Tensor& grad_q,
                                                             const at::Tensor& grad_k,
                                                             const at::Tensor& cos,
                                                             const at::Tensor& sin,
                                                             int64_t unsqueeze_dim);

// rope_rotate_half_single_backward(Tensor grad, Tensor cos, Tensor sin, int unsqueeze_dim)
//   -> Tensor
at::Tensor rope_rotate_half_single_backward(const at::Tensor& grad, const at::Tensor& cos,
                                            const at::Tensor& sin, int64_t unsqueeze_dim);

// ---- shared front end (ops/rope.cpp), parameterised by op and argument names --------

namespace rope_front {

struct Names {
  const char* op;
  const char* q;  // the (first) rotated tensor
  const char* k;  // the second one (qk ops)
};

at::Tensor interleaved(const Names& n, const at::Tensor& x, const at::Tensor& cos,
                       const at::Tensor& sin, bool inverse);
std::tuple<at::Tensor, at::Tensor> interleaved_qk(const Names& n, const at::Tensor& q,
                                                  const at::Tensor& k, const at::Tensor& cos,
                                                  const at::Tensor& sin, bool inverse);
std::tuple<at::Tensor, at::Tensor> rotate_half(const Names& n, const at::Tensor& q,
                                               const at::Tensor& k, const at::Tensor& cos,
                                               const at::Tensor& sin, int64_t unsqueeze_dim,
                                               bool inverse);
at::Tensor rotate_half_single(const Names& n, const at::Tensor& x, const at::Tensor& cos,
                              const at::Tensor& sin, int64_t unsqueeze_dim, bool inverse);

}  // namespace rope_front

// ---- launchers ----------------------------------------------------------------------

// rope_launch (torch_binding.h) with a direction: inverse = false is the forward
// rotation (rope_launch itself), inverse = true its transpose, always in fp32 (double
// for double inputs, CPU only) with one rounding. Defined with the forward kernels
// (ltx_kernels_cuda/rope.cu, ltx_kernels_cpu/rope_cpu.cpp); the views and table
// conventions are rope_launch's.
void rope_rotate_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                        const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                        RopeLayout layout, bool inverse);

// The backward launcher: rope_rotate_launch with inverse = true (rope_backward.cu,
// rope_backward_cpu.cpp). out_i are fresh tensors; in_i (the gradients) may have any
// strides rope_launch accepts, stride 0 included.
void rope_backward_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                          const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                          RopeLayout layout);

}  // namespace ltx
