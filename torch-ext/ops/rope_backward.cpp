// Rotary-embedding backward ops: the transposed rotation (rope_backward.h) of each
// forward op, with the forward's argument checks and table conventions (the shared
// front end in ops/rope.cpp), the gradients named in the errors. Every gradient is
// returned freshly allocated in its own dtype and shape; grad may be any view
// (non-contiguous, sliced, stride 0), it is only read.
#include "ops/rope_backward.h"

#include "ops/backward_ops.h"
#include "ops/register.h"

namespace ltx {

at::Tensor rope_interleaved_backward(const at::Tensor& grad, const at::Tensor& cos,
                                     const at::Tensor& sin) {
  return rope_front::interleaved({"rope_interleaved_backward", "grad", ""}, grad, cos, sin,
                                 /*inverse=*/true);
}

std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk_backward(const at::Tensor& grad_q,
                                                                const at::Tensor& grad_k,
                                                                const at::Tensor& cos,
                                                                const at::Tensor& sin) {
  return rope_front::interleaved_qk({"rope_interleaved_qk_backward", "grad_q", "grad_k"}, grad_q,
                                    grad_k, cos, sin, /*inverse=*/true);
}

std::tuple<at::Tensor, at::Tensor> rope_rotate_half_backward(const at::Tensor& grad_q,
                                                             const at::Tensor& grad_k,
                                                             const at::Tensor& cos,
                                                             const at::Tensor& sin,
                                                             int64_t unsqueeze_dim) {
  return rope_front::rotate_half({"rope_rotate_half_backward", "grad_q", "grad_k"}, grad_q,
                                 grad_k, cos, sin, unsqueeze_dim, /*inverse=*/true);
}

at::Tensor rope_rotate_half_single_backward(const at::Tensor& grad, const at::Tensor& cos,
                                            const at::Tensor& sin, int64_t unsqueeze_dim) {
  return rope_front::rotate_half_single({"rope_rotate_half_single_backward", "grad", ""}, grad,
                                        cos, sin, unsqueeze_dim, /*inverse=*/true);
}

void register_rope_backward(torch::Library& ops) {
  ops.def("rope_interleaved_backward(Tensor grad, Tensor cos, Tensor sin) -> Tensor");
  ops.def(
      "rope_interleaved_qk_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin) -> "
      "(Tensor, Tensor)");
  ops.def(
      "rope_rotate_half_backward(Tensor grad_q, Tensor grad_k, Tensor cos, Tensor sin, "
      "int unsqueeze_dim) -> (Tensor, Tensor)");
  ops.def(
      "rope_rotate_half_single_backward(Tensor grad, Tensor cos, Tensor sin, int unsqueeze_dim) "
      "-> Tensor");
  reg::impl(ops, "rope_interleaved_backward", TORCH_FN(ltx::rope_interleaved_backward));
  reg::impl(ops, "rope_interleaved_qk_backward", TORCH_FN(ltx::rope_interleaved_qk_backward));
  reg::impl(ops, "rope_rotate_half_backward", TORCH_FN(ltx::rope_rotate_half_backward));
  reg::impl(ops, "rope_rotate_half_single_backward",
            TORCH_FN(ltx::rope_rotate_half_single_backward));
}

}  // namespace ltx
