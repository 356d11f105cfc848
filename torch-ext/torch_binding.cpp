// Op schemas and their per-backend implementations.
//
// kernel-builder compiles one backend per variant: CUDA_KERNEL or CPU_KERNEL is
// defined, never both. Each op is defined once; the variant registers its real
// kernels for its own device and a clear error for the other one (a CUDA tensor
// reaching a CPU build would otherwise hit the dispatcher's generic message).
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include "ops/rms_norm.h"
#include "ops/activation.h"
#include "ops/rope.h"
#include "ops/adaln.h"
#include "ops/qk_prologue.h"
#include "ops/backward_ops.h"
#include "ops/register.h"
#include "registration.h"

using ltx::reg::impl;

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // RMSNorm (semantics: 0 diffusers, 1 torch.nn.RMSNorm, 2 LlamaRMSNorm).
  ops.def("rms_norm(Tensor x, Tensor? weight, float eps, int semantics) -> Tensor");
  ops.def("rms_norm_out(Tensor! out, Tensor x, Tensor? weight, float eps, int semantics) -> ()");
  impl(ops, "rms_norm", TORCH_FN(ltx::rms_norm));
  impl(ops, "rms_norm_out", TORCH_FN(ltx::rms_norm_out));

  // GELU (erf / tanh, rounded once) and GEGLU (halves of the last dim; gate_first
  // false: x[..., :d] * gelu(x[..., d:]) as diffusers GEGLU, true: gelu(x[..., :d]) * x[..., d:]).
  ops.def("gelu(Tensor x) -> Tensor");
  ops.def("gelu_out(Tensor! out, Tensor x) -> ()");
  ops.def("gelu_tanh(Tensor x) -> Tensor");
  ops.def("gelu_tanh_out(Tensor! out, Tensor x) -> ()");
  ops.def("geglu(Tensor x, str approximate='none', bool gate_first=False) -> Tensor");
  ops.def("geglu_out(Tensor! out, Tensor x, str approximate='none', bool gate_first=False) -> ()");
  impl(ops, "gelu", TORCH_FN(ltx::gelu));
  impl(ops, "gelu_out", TORCH_FN(ltx::gelu_out));
  impl(ops, "gelu_tanh", TORCH_FN(ltx::gelu_tanh));
  impl(ops, "gelu_tanh_out", TORCH_FN(ltx::gelu_tanh_out));
  impl(ops, "geglu", TORCH_FN(ltx::geglu));
  impl(ops, "geglu_out", TORCH_FN(ltx::geglu_out));

  // Rotary embeddings: interleaved pairs (LTX-Video) and rotate-half (transformers).
  ops.def("rope_interleaved(Tensor x, Tensor cos, Tensor sin) -> Tensor");
  ops.def("rope_interleaved_out(Tensor! out, Tensor x, Tensor cos, Tensor sin) -> ()");
  ops.def("rope_interleaved_qk(Tensor q, Tensor k, Tensor cos, Tensor sin) -> (Tensor, Tensor)");
  ops.def(
      "rope_interleaved_qk_out(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor cos, "
      "Tensor sin) -> ()");
  ops.def(
      "rope_rotate_half(Tensor q, Tensor k, Tensor cos, Tensor sin, int unsqueeze_dim) -> "
      "(Tensor, Tensor)");
  ops.def(
      "rope_rotate_half_out(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor cos, "
      "Tensor sin, int unsqueeze_dim) -> ()");
  ops.def("rope_rotate_half_single(Tensor x, Tensor cos, Tensor sin, int unsqueeze_dim) -> Tensor");
  ops.def(
      "rope_rotate_half_single_out(Tensor! out, Tensor x, Tensor cos, Tensor sin, "
      "int unsqueeze_dim) -> ()");
  impl(ops, "rope_interleaved", TORCH_FN(ltx::rope_interleaved));
  impl(ops, "rope_interleaved_out", TORCH_FN(ltx::rope_interleaved_out));
  impl(ops, "rope_interleaved_qk", TORCH_FN(ltx::rope_interleaved_qk));
  impl(ops, "rope_interleaved_qk_out", TORCH_FN(ltx::rope_interleaved_qk_out));
  impl(ops, "rope_rotate_half", TORCH_FN(ltx::rope_rotate_half));
  impl(ops, "rope_rotate_half_out", TORCH_FN(ltx::rope_rotate_half_out));
  impl(ops, "rope_rotate_half_single", TORCH_FN(ltx::rope_rotate_half_single));
  impl(ops, "rope_rotate_half_single_out", TORCH_FN(ltx::rope_rotate_half_single_out));

  // AdaLN modulation norm(x) * (1 + scale) + shift (norm: 0 diffusers RMSNorm, 1 LayerNorm),
  // and the gated residual x + y * gate; both round like the unfused eager chain.
  ops.def("adaln(Tensor x, Tensor scale, Tensor? shift, Tensor? weight, float eps, int norm) -> Tensor");
  ops.def("adaln_out(Tensor! out, Tensor x, Tensor scale, Tensor? shift, Tensor? weight, float eps, int norm) -> ()");
  ops.def("gated_residual(Tensor x, Tensor y, Tensor gate) -> Tensor");
  ops.def("gated_residual_out(Tensor! out, Tensor x, Tensor y, Tensor gate) -> ()");
  ops.def("gated_residual_inplace(Tensor(a!) x, Tensor y, Tensor gate) -> ()");
  impl(ops, "adaln", TORCH_FN(ltx::adaln));
  impl(ops, "adaln_out", TORCH_FN(ltx::adaln_out));
  impl(ops, "gated_residual", TORCH_FN(ltx::gated_residual));
  impl(ops, "gated_residual_out", TORCH_FN(ltx::gated_residual_out));
  impl(ops, "gated_residual_inplace", TORCH_FN(ltx::gated_residual_inplace));

  // Fused LTX attention prologue: torch.nn.RMSNorm on q and on k (own weights), then
  // interleaved RoPE with fp32 tables on both (cos/sin None: norm only), one launch.
  ops.def(
      "rmsnorm_rope_qk(Tensor q, Tensor k, Tensor? q_weight, Tensor? k_weight, Tensor? cos, "
      "Tensor? sin, float eps) -> (Tensor, Tensor)");
  ops.def(
      "rmsnorm_rope_qk_out(Tensor! q_out, Tensor! k_out, Tensor q, Tensor k, Tensor? q_weight, "
      "Tensor? k_weight, Tensor? cos, Tensor? sin, float eps) -> ()");
  impl(ops, "rmsnorm_rope_qk", TORCH_FN(ltx::rmsnorm_rope_qk));
  impl(ops, "rmsnorm_rope_qk_out", TORCH_FN(ltx::rmsnorm_rope_qk_out));

  // Backward ops (training): each family defines and registers its own (ops/*_backward.cpp).
  ltx::register_rms_norm_backward(ops);
  ltx::register_activation_backward(ops);
  ltx::register_rope_backward(ops);
  ltx::register_adaln_backward(ops);
  ltx::register_qk_prologue_backward(ops);

  // Autograd of the forward ops, in C++ (ops/autograd.h says why).
  ltx::autograd::register_autograd(ops);
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
