// Backend entry points ("launchers") shared by the binding and the kernels.
//
// The binding (torch-ext/ops/*.cpp) validates arguments, allocates outputs and
// reshapes every tensor to a 2-D row view (rows x cols, last dim contiguous, any
// row stride). Exactly one backend defines these functions in each build variant:
// ltx_kernels_cuda/*.cu for CUDA_KERNEL builds, ltx_kernels_cpu/*.cpp for
// CPU_KERNEL builds. Keep this header light: it is included by .cu files.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <optional>

namespace ltx {

// How RMSNorm rounds, i.e. which module it reproduces bit for bit.
enum class RmsNormSemantics : int64_t {
  kDiffusers = 0,  // diffusers RMSNorm: round to the weight dtype before the weight multiply
  kTorch = 1,      // torch.nn.RMSNorm / F.rms_norm: fp32 throughout, one rounding
  kLlama = 2,      // transformers LlamaRMSNorm: round to the input dtype before the weight multiply
};

// out2d[r, :] = round_out(round_mid(x2d[r, :] * rsqrt(mean(x^2) + eps)) * weight)
// x2d, out2d: [rows, cols] views with stride(1) == 1. weight: [cols] contiguous or none.
// mid_dtype: the dtype the normalised value is rounded to before the weight multiply;
// kFloat means no intermediate rounding.
void rms_norm_launch(const at::Tensor& out2d, const at::Tensor& x2d,
                     const std::optional<at::Tensor>& weight, double eps,
                     at::ScalarType mid_dtype);

// ---- activations (ltx_kernels_cuda/activation.cu, ltx_kernels_cpu/activation_cpu.cpp) ----

// Which GELU: erf (F.gelu default) or the tanh approximation (approximate="tanh").
// Both are evaluated in fp32 with ATen's CUDA formula and rounded once.
enum class GeluKind : int64_t { kErf = 0, kTanh = 1 };

// out2d = gelu(x2d), elementwise. x2d, out2d: [rows, cols] views with stride(1) == 1.
// out2d may be x2d itself (same pointer and strides).
void gelu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind);

// Gated GELU over the halves of x2d ([rows, 2*d], stride(1) == 1); out2d: [rows, d].
// gate_first == false (diffusers GEGLU): out = a * round(gelu(b)), a = x[:, :d], b = x[:, d:].
// gate_first == true (Gemma / vLLM):     out = round(gelu(a)) * b.
// round() is a cast to out's dtype (eager's op boundary), then the product is rounded again.
void geglu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind, bool gate_first);

}  // namespace ltx

// ---- rotary embeddings (rope) ---------------------------------------------------
namespace ltx {

// Which channels form a rotation pair.
enum class RopeLayout : int64_t {
  kInterleaved = 0,  // (2i, 2i+1) across the whole row (LTX-Video, FLUX-style tables)
  kRotateHalf = 1,   // (i, i + R/2) over the first R channels, the rest passed through (Llama)
};

// Rotary embedding on canonical views prepared by the binding (torch-ext/ops/rope.cpp):
//   in0/out0 (and in1/out1 when in1 is defined): [B, S, H_i, D], stride(-1) == 1, any
//     other strides (out rows never overlap); out_i may be in_i itself (in place).
//   cos/sin: [B, S, R], stride(-1) == 1, stride 0 where broadcast; float32, or the dtype
//     of the inputs. kInterleaved: R == D, or R == D / 2 (pair tables: value i serves
//     channels 2i and 2i+1; float32 only). kRotateHalf: R even, R <= D; channels >= R
//     are copied unchanged.
// Rounding: tables in the input dtype (half precision) reproduce eager step rounding
// (each product and the sum rounded to that dtype); float32 tables compute in fp32 and
// round once. Products and sums are never fused (no FMA), as in eager PyTorch.
void rope_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                 const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                 RopeLayout layout);

}  // namespace ltx

// ---- AdaLN modulation and gated residual (adaln family) ----------------------------
#include "ops/row_index.h"

namespace ltx {

// The norm in adaln: 0 diffusers RMSNorm, 1 LayerNorm without bias (over the last dim).
enum class AdaLnNorm : int64_t { kRms = 0, kLayer = 1 };

// The eager op boundaries adaln reproduces; each is a dtype the value is rounded
// to (kFloat: fp32, i.e. no extra rounding). See torch-ext/ops/adaln.cpp.
struct AdaLnRounding {
  at::ScalarType mid;     // normalised value before the weight multiply
  at::ScalarType norm;    // norm(x), after the weight multiply
  at::ScalarType scale1;  // 1 + scale
  at::ScalarType prod;    // norm(x) * (1 + scale)
};

// out2d[r, :] = round_out(round_prod(n * round_scale1(1 + scale_r)) + shift_r), where
// n = round_norm(round_mid(normalised x2d[r, :]) * weight) and scale_r / shift_r
// start at the row-space offsets of operands 0 / 1 (row_index.h), last dim contiguous.
// x2d, out2d: [rows, cols], stride(1) == 1. weight: none, or fp32 [cols], contiguous,
// 16-byte aligned.
void adaln_launch(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& scale,
                  const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
                  const RowSpace& rows, double eps, AdaLnNorm norm, const AdaLnRounding& rounding);

// out2d[r, :] = round_out(x2d[r, :] + round_prod(y_r * gate_r)); y / gate are row-space
// operands 0 / 1. out2d may be x2d itself (each element is read before it is written).
void gated_residual_launch(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& y,
                           const at::Tensor& gate, const RowSpace& rows, at::ScalarType prod);

}  // namespace ltx

// ---- fused LTX attention prologue: q/k RMSNorm + interleaved RoPE (qk_prologue) ------
namespace ltx {

// For every row r of q2d (and the same row of k2d, when k2d has it):
//   n = round_x(x * rsqrt(mean(x^2) + eps) * w)         (torch.nn.RMSNorm, fp32 math)
//   without tables: out = n
//   with tables:    out[2i]   = round_x(n[2i] * c[2i] - n[2i+1] * s[2i])
//                   out[2i+1] = round_x(n[2i+1] * c[2i+1] + n[2i] * s[2i+1])
// where round_x rounds to x's dtype (the eager op boundary between norm_q and
// apply_rotary_emb), products and sums are never fused (no FMA), and c/s are the rows
// cos[b, s, :], sin[b, s, :] with b = r / seq, s = r % seq.
// q2d/k2d, q_out2d/k_out2d: [rows_q, D] / [rows_k, D] views, stride(1) == 1; outputs may be
// their inputs (in place). Weights: none, or contiguous [D], both in x's dtype or both fp32.
// cos/sin: undefined (norm only; then rows_k may differ from rows_q), or fp32 [B, S, D]
// views with stride(-1) == 1 (rows_k == rows_q == B * S, D even), or [B, S, D / 2] pair
// tables (value i serves channels 2i and 2i+1).
void rmsnorm_rope_qk_launch(const at::Tensor& q_out2d, const at::Tensor& q2d,
                            const at::Tensor& k_out2d, const at::Tensor& k2d,
                            const std::optional<at::Tensor>& q_weight,
                            const std::optional<at::Tensor>& k_weight, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t seq, double eps);

}  // namespace ltx
