// Rotary-embedding front end: argument checks, broadcasting of the cos/sin tables,
// canonical [B, S, H, D] views and output allocation. The math lives in the backend
// launchers (ltx::rope_launch; its transpose ltx::rope_backward_launch for the backward
// ops of ops/rope_backward.cpp, which share this front end through ltx::rope_front).
//
// Zero-copy layouts: any tensor whose last dim is contiguous and, for the interleaved
// ops, whose dims before [S, D] collapse into one evenly strided batch dim (contiguous
// tensors, slices of a fused projection, transposed batch/sequence, stride-0 batch).
// The rotate-half ops take any 4-D strides with a contiguous last dim. Anything else is
// copied once here; an output that cannot be written in place is computed into a
// temporary and copied into.
#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <c10/core/ScalarType.h>

#include <optional>
#include <vector>

#include "ops/rope.h"
#include "ops/rope_backward.h"
#include "ops/out_checks.h"
#include "ops/rows.h"
#include "torch_binding.h"

namespace ltx {
namespace {

using rope_front::Names;

const Names kInter{"rope_interleaved", "x", ""};
const Names kInterQk{"rope_interleaved_qk", "q", "k"};
const Names kHalf{"rope_rotate_half", "q", "k"};
const Names kHalfSingle{"rope_rotate_half_single", "x", ""};

// The forward rotation, or its transpose (the backward ops).
void launch(bool inverse, const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
            const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
            RopeLayout layout) {
  if (inverse) {
    rope_backward_launch(out0, in0, out1, in1, cos, sin, layout);
  } else {
    rope_launch(out0, in0, out1, in1, cos, sin, layout);
  }
}

bool last_dim_contiguous(const at::Tensor& t) { return t.size(-1) <= 1 || t.stride(-1) == 1; }

// Stride of dims [0, n) of t collapsed into one evenly strided dim (size-1 dims do not
// matter; 0 when there is none), or nullopt when they do not collapse.
std::optional<int64_t> lead_stride(const at::Tensor& t, int64_t n) {
  std::optional<int64_t> stride;
  int64_t needed = 0;
  for (int64_t d = n - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (!stride) {
      stride = t.stride(d);
    } else if (t.stride(d) != needed) {
      return std::nullopt;
    }
    needed = t.stride(d) * t.size(d);
  }
  return stride.value_or(0);
}

int64_t lead_numel(const at::Tensor& t, int64_t n) {
  int64_t p = 1;
  for (int64_t d = 0; d < n; ++d) p *= t.size(d);
  return p;
}



// One tensor the kernel rotates: its canonical input view, and where the result goes
// (the canonical output view, or a temporary copied into `out` afterwards).
struct Operand {
  at::Tensor in;     // canonical view
  at::Tensor out;    // canonical view written by the kernel
  at::Tensor dest;   // defined when out is a temporary to copy into dest
  at::Tensor temp;
};

void finish(const Operand& o) {
  if (o.dest.defined()) o.dest.copy_(o.temp);
}

// ---- interleaved (LTX-Video) ------------------------------------------------------

// The batch stride of seq_view(x) (x = [..., S, D] with its last dim contiguous and the dims
// before S collapsing), nullopt where there is none: the view's condition, asked without
// building it.
std::optional<int64_t> seq_batch_stride(const at::Tensor& x) {
  if (!last_dim_contiguous(x)) return std::nullopt;
  return lead_stride(x, x.dim() - 2);
}

// [B, S, 1, D] view of x = [..., S, D] where seq_batch_stride(x) exists; nullopt otherwise.
std::optional<at::Tensor> seq_view(const at::Tensor& x) {
  const std::optional<int64_t> bs = seq_batch_stride(x);
  if (!bs) return std::nullopt;
  const int64_t n = x.dim();
  const int64_t d = x.size(-1);
  return x.as_strided({lead_numel(x, n - 2), x.size(-2), 1, d}, {*bs, x.stride(-2), d, 1});
}

// An output in x's memory order, as eager's expression and torch.empty_like(x) give it: a
// [B, H, S, D] view of [B, S, H, D] storage (transformers' q and k after their transpose)
// comes back in that storage, so the kernel writes each token's heads where it read them
// (contiguous [B, H, S, D] outputs, before 2026-12-07: rope_llama q 32 x 8192 x 128 + k 8
// heads 59.07 µs out of place against 56.61 in place, H100 bf16 08:31, RESULTS.md). Where that
// order would need the temporary (a last dim that is not contiguous; interleaved rows whose
// leading dims do not collapse), a contiguous tensor as before.
at::Tensor empty_in_order(const at::Tensor& x, RopeLayout layout) {
  at::Tensor out = at::empty_like(x);
  const bool direct =
      layout == RopeLayout::kInterleaved ? seq_batch_stride(out).has_value() : last_dim_contiguous(out);
  return direct ? out : at::empty(x.sizes(), x.options());
}

void check_x_interleaved(const char* op, const char* name, const at::Tensor& x) {
  TORCH_CHECK(x.dim() >= 2, "ltx_kernels.", op, ": ", name,
              " must have at least 2 dims [..., S, D], got shape ", shape_str(x.sizes()));
  check_float_dtype_or_cpu_double(x, op, name);
  TORCH_CHECK(x.size(-1) % 2 == 0, "ltx_kernels.", op, ": ", name,
              "'s last dim must be even (pairs (2i, 2i+1)), got ", x.size(-1));
}

// cos/sin broadcast to x [..., S, D] as a canonical [B, S, R] view: R = D (a value per
// channel, as diffusers' LTX-Video tables after repeat_interleave(2)), or R = D / 2 (pair
// tables: value i serves the pair (2i, 2i+1); half the table bytes, the same result as
// their repeat_interleave(2, -1)).
at::Tensor table_interleaved(const char* op, const char* name, const at::Tensor& t,
                             const at::Tensor& x, const char* x_name) {
  check_device(op, name, t, x_name, x);
  if (x.scalar_type() == at::kDouble) {  // gradcheck (CPU): double tables are fine too
    TORCH_CHECK(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "ltx_kernels.",
                op, ": ", name, " must be float32 or float64 (", x_name, " is float64), got ",
                t.scalar_type());
  } else {
    TORCH_CHECK(t.scalar_type() == at::kFloat, "ltx_kernels.", op, ": ", name,
                " must be float32 (the tables are built and applied in fp32), got ",
                t.scalar_type());
  }
  const int64_t d = x.size(-1);
  const int64_t r = t.dim() >= 1 && t.size(-1) == d / 2 && d > 0 ? d / 2 : d;
  bool ok = t.dim() >= 2 && t.dim() <= x.dim() && t.size(-1) == r;
  for (int64_t i = 2; ok && i <= t.dim(); ++i) {
    ok = t.size(-i) == x.size(-i) || t.size(-i) == 1;
  }
  TORCH_CHECK(ok, "ltx_kernels.", op, ": ", name, " must have shape [S, D] or [B, S, D] ",
              "(or [S, D/2] / [B, S, D/2]: one value per pair) broadcastable to ", x_name,
              "'s shape ", shape_str(x.sizes()), " with D = ", d, ", got ", shape_str(t.sizes()));
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = r;
  at::Tensor e = (last_dim_contiguous(t) ? t : t.contiguous()).expand(shape);
  std::optional<int64_t> bs = lead_stride(e, e.dim() - 2);
  if (!bs) {  // leading dims broadcast in a way one stride cannot express
    e = e.contiguous();
    bs = lead_stride(e, e.dim() - 2);
  }
  return e.as_strided({lead_numel(e, e.dim() - 2), e.size(-2), e.size(-1)},
                      {*bs, e.stride(-2), 1});
}

Operand interleaved_operand(const at::Tensor& x, const at::Tensor& out) {
  Operand o;
  std::optional<at::Tensor> in = seq_view(x);
  o.in = in ? *in : *seq_view(x.contiguous());
  std::optional<at::Tensor> ov = seq_view(out);
  if (ov) {
    o.out = *ov;
  } else {
    o.temp = at::empty(x.sizes(), x.options());
    o.dest = out;
    o.out = *seq_view(o.temp);
  }
  return o;
}

struct Tables {
  at::Tensor cos, sin;
};

Tables check_interleaved(const char* op, const at::Tensor& x, const char* x_name,
                         const at::Tensor& cos, const at::Tensor& sin) {
  check_x_interleaved(op, x_name, x);
  TORCH_CHECK(sin.sizes() == cos.sizes(), "ltx_kernels.", op, ": sin must have cos's shape ",
              shape_str(cos.sizes()), ", got ", shape_str(sin.sizes()));
  return {table_interleaved(op, "cos", cos, x, x_name), table_interleaved(op, "sin", sin, x, x_name)};
}

void check_k_like_q(const Names& n, const at::Tensor& q, const at::Tensor& k) {
  check_device(n.op, n.k, k, n.q, q);
  TORCH_CHECK(k.scalar_type() == q.scalar_type(), "ltx_kernels.", n.op, ": ", n.k, " must have ",
              n.q, "'s dtype ", q.scalar_type(), ", got ", k.scalar_type());
}

void interleaved_qk_impl(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q,
                         const at::Tensor& k, const Tables& t, bool inverse) {
  if (q.numel() == 0) return;
  const Operand oq = interleaved_operand(q, q_out);
  const Operand ok = interleaved_operand(k, k_out);
  launch(inverse, oq.out, oq.in, ok.out, ok.in, t.cos, t.sin, RopeLayout::kInterleaved);
  finish(oq);
  finish(ok);
}

Tables check_interleaved_qk(const Names& n, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& cos, const at::Tensor& sin) {
  const Tables t = check_interleaved(n.op, q, n.q, cos, sin);
  check_k_like_q(n, q, k);
  TORCH_CHECK(k.sizes() == q.sizes(), "ltx_kernels.", n.op, ": ", n.k, " must have ", n.q,
              "'s shape ", shape_str(q.sizes()), ", got ", shape_str(k.sizes()));
  return t;
}

// ---- rotate-half (transformers) ---------------------------------------------------

int64_t check_unsqueeze_dim(const char* op, int64_t u) {
  TORCH_CHECK(u == 1 || u == 2 || u == -3 || u == -2, "ltx_kernels.", op,
              ": unsqueeze_dim must be 1 (q [B, H, S, Dh]) or 2 (q [B, S, H, Dh]), got ", u);
  return u < 0 ? u + 4 : u;
}

void check_heads_tensor(const char* op, const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.dim() == 4, "ltx_kernels.", op, ": ", name,
              " must be 4-D, [B, H, S, Dh] (unsqueeze_dim=1) or [B, S, H, Dh] (unsqueeze_dim=2),"
              " got shape ",
              shape_str(t.sizes()));
  check_float_dtype_or_cpu_double(t, op, name);
}

// [B, S, H, D] view of a 4-D q/k/output in the unsqueeze_dim layout.
at::Tensor heads_view(const at::Tensor& t, int64_t u) {
  return u == 1 ? t.permute({0, 2, 1, 3}) : t;
}

// cos/sin as a canonical [B, S, R] view (stride 0 where broadcast).
at::Tensor table_half(const char* op, const char* name, const at::Tensor& t, const at::Tensor& q,
                      const char* q_name, int64_t u) {
  check_device(op, name, t, q_name, q);
  TORCH_CHECK(t.scalar_type() == q.scalar_type() || t.scalar_type() == at::kFloat, "ltx_kernels.",
              op, ": ", name, " must be float32 or ", q_name, "'s dtype ", q.scalar_type(), ", got ",
              t.scalar_type());
  const int64_t b = q.size(0), s = q.size(u == 1 ? 2 : 1), d = q.size(3);
  const bool rank_ok = t.dim() == 2 || t.dim() == 3;
  const at::Tensor t3 = rank_ok && t.dim() == 2 ? t.unsqueeze(0) : t;
  const bool ok = rank_ok && (t3.size(0) == 1 || t3.size(0) == b) &&
                  (t3.size(1) == 1 || t3.size(1) == s) && t3.size(2) % 2 == 0 && t3.size(2) <= d;
  TORCH_CHECK(ok, "ltx_kernels.", op, ": ", name, " must have shape [B, S, R] or [S, R] with B = ",
              b, " (or 1), S = ", s, " (or 1) and an even rotary dim R <= head_dim ", d, ", got ",
              shape_str(t.sizes()));
  return (last_dim_contiguous(t3) ? t3 : t3.contiguous()).expand({b, s, t3.size(2)});
}

Tables check_half_tables(const char* op, const at::Tensor& q, const char* q_name,
                         const at::Tensor& cos, const at::Tensor& sin, int64_t u) {
  TORCH_CHECK(sin.scalar_type() == cos.scalar_type(), "ltx_kernels.", op,
              ": sin must have cos's dtype ", cos.scalar_type(), ", got ", sin.scalar_type());
  TORCH_CHECK(sin.sizes() == cos.sizes(), "ltx_kernels.", op, ": sin must have cos's shape ",
              shape_str(cos.sizes()), ", got ", shape_str(sin.sizes()));
  return {table_half(op, "cos", cos, q, q_name, u), table_half(op, "sin", sin, q, q_name, u)};
}

void check_k_heads(const Names& n, const at::Tensor& q, const at::Tensor& k, int64_t u) {
  check_heads_tensor(n.op, n.k, k);
  check_k_like_q(n, q, k);
  const int64_t sd = u == 1 ? 2 : 1;
  TORCH_CHECK(k.size(0) == q.size(0) && k.size(sd) == q.size(sd) && k.size(3) == q.size(3),
              "ltx_kernels.", n.op, ": ", n.k, " must match ", n.q, " in batch, sequence and ",
              "head_dim (only the number of heads may differ), got ", n.q, " ",
              shape_str(q.sizes()), " and ", n.k, " ", shape_str(k.sizes()));
}

Operand half_operand(const at::Tensor& x, const at::Tensor& out, int64_t u) {
  Operand o;
  o.in = heads_view(last_dim_contiguous(x) ? x : x.contiguous(), u);
  if (last_dim_contiguous(out)) {
    o.out = heads_view(out, u);
  } else {
    o.temp = at::empty(x.sizes(), x.options());
    o.dest = out;
    o.out = heads_view(o.temp, u);
  }
  return o;
}

void half_impl(const at::Tensor& q_out, const at::Tensor* k_out, const at::Tensor& q,
               const at::Tensor* k, const Tables& t, int64_t u, bool inverse) {
  if (q.numel() == 0 && (k == nullptr || k->numel() == 0)) return;
  const Operand oq = half_operand(q, q_out, u);
  if (k == nullptr) {
    launch(inverse, oq.out, oq.in, at::Tensor(), at::Tensor(), t.cos, t.sin,
           RopeLayout::kRotateHalf);
    finish(oq);
    return;
  }
  const Operand ok = half_operand(*k, *k_out, u);
  launch(inverse, oq.out, oq.in, ok.out, ok.in, t.cos, t.sin, RopeLayout::kRotateHalf);
  finish(oq);
  finish(ok);
}

void check_qk_outs(const char* op, const at::Tensor& q_out, const at::Tensor& k_out,
                   const at::Tensor& q, const at::Tensor& k) {
  check_out(op, "q_out", q_out, "q", q);
  check_out(op, "k_out", k_out, "k", k);
  check_disjoint(op, "q_out", q_out, "k", k);
  check_disjoint(op, "k_out", k_out, "q", q);
  check_disjoint(op, "q_out", q_out, "k_out", k_out);
}

}  // namespace

// ---- front end shared with the backward ops ---------------------------------------------

namespace rope_front {

at::Tensor interleaved(const Names& n, const at::Tensor& x, const at::Tensor& cos,
                       const at::Tensor& sin, bool inverse) {
  const Tables t = check_interleaved(n.op, x, n.q, cos, sin);
  at::Tensor out = empty_in_order(x, RopeLayout::kInterleaved);
  if (x.numel() == 0) return out;
  const Operand o = interleaved_operand(x, out);
  launch(inverse, o.out, o.in, at::Tensor(), at::Tensor(), t.cos, t.sin,
         RopeLayout::kInterleaved);
  return out;
}

std::tuple<at::Tensor, at::Tensor> interleaved_qk(const Names& n, const at::Tensor& q,
                                                  const at::Tensor& k, const at::Tensor& cos,
                                                  const at::Tensor& sin, bool inverse) {
  const Tables t = check_interleaved_qk(n, q, k, cos, sin);
  at::Tensor q_out = empty_in_order(q, RopeLayout::kInterleaved);
  at::Tensor k_out = empty_in_order(k, RopeLayout::kInterleaved);
  interleaved_qk_impl(q_out, k_out, q, k, t, inverse);
  return {q_out, k_out};
}

std::tuple<at::Tensor, at::Tensor> rotate_half(const Names& n, const at::Tensor& q,
                                               const at::Tensor& k, const at::Tensor& cos,
                                               const at::Tensor& sin, int64_t unsqueeze_dim,
                                               bool inverse) {
  const int64_t u = check_unsqueeze_dim(n.op, unsqueeze_dim);
  check_heads_tensor(n.op, n.q, q);
  check_k_heads(n, q, k, u);
  const Tables t = check_half_tables(n.op, q, n.q, cos, sin, u);
  at::Tensor q_out = empty_in_order(q, RopeLayout::kRotateHalf);
  at::Tensor k_out = empty_in_order(k, RopeLayout::kRotateHalf);
  half_impl(q_out, &k_out, q, &k, t, u, inverse);
  return {q_out, k_out};
}

at::Tensor rotate_half_single(const Names& n, const at::Tensor& x, const at::Tensor& cos,
                              const at::Tensor& sin, int64_t unsqueeze_dim, bool inverse) {
  const int64_t u = check_unsqueeze_dim(n.op, unsqueeze_dim);
  check_heads_tensor(n.op, n.q, x);
  const Tables t = check_half_tables(n.op, x, n.q, cos, sin, u);
  at::Tensor out = empty_in_order(x, RopeLayout::kRotateHalf);
  half_impl(out, nullptr, x, nullptr, t, u, inverse);
  return out;
}

}  // namespace rope_front

// ---- interleaved ops ----------------------------------------------------------------

at::Tensor rope_interleaved(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return rope_front::interleaved(kInter, x, cos, sin, /*inverse=*/false);
}

void rope_interleaved_out(const at::Tensor& out, const at::Tensor& x, const at::Tensor& cos,
                          const at::Tensor& sin) {
  const Tables t = check_interleaved(kInter.op, x, "x", cos, sin);
  check_out(kInter.op, "out", out, "x", x);
  if (x.numel() == 0) return;
  const Operand o = interleaved_operand(x, out);
  rope_launch(o.out, o.in, at::Tensor(), at::Tensor(), t.cos, t.sin, RopeLayout::kInterleaved);
  finish(o);
}

std::tuple<at::Tensor, at::Tensor> rope_interleaved_qk(const at::Tensor& q, const at::Tensor& k,
                                                       const at::Tensor& cos,
                                                       const at::Tensor& sin) {
  return rope_front::interleaved_qk(kInterQk, q, k, cos, sin, /*inverse=*/false);
}

void rope_interleaved_qk_out(const at::Tensor& q_out, const at::Tensor& k_out,
                             const at::Tensor& q, const at::Tensor& k, const at::Tensor& cos,
                             const at::Tensor& sin) {
  const Tables t = check_interleaved_qk(kInterQk, q, k, cos, sin);
  check_qk_outs(kInterQk.op, q_out, k_out, q, k);
  interleaved_qk_impl(q_out, k_out, q, k, t, /*inverse=*/false);
}

// ---- rotate-half ops ------------------------------------------------------------------

std::tuple<at::Tensor, at::Tensor> rope_rotate_half(const at::Tensor& q, const at::Tensor& k,
                                                    const at::Tensor& cos,
                                                    const at::Tensor& sin,
                                                    int64_t unsqueeze_dim) {
  return rope_front::rotate_half(kHalf, q, k, cos, sin, unsqueeze_dim, /*inverse=*/false);
}

void rope_rotate_half_out(const at::Tensor& q_out, const at::Tensor& k_out, const at::Tensor& q,
                          const at::Tensor& k, const at::Tensor& cos, const at::Tensor& sin,
                          int64_t unsqueeze_dim) {
  const int64_t u = check_unsqueeze_dim(kHalf.op, unsqueeze_dim);
  check_heads_tensor(kHalf.op, "q", q);
  check_k_heads(kHalf, q, k, u);
  const Tables t = check_half_tables(kHalf.op, q, "q", cos, sin, u);
  check_qk_outs(kHalf.op, q_out, k_out, q, k);
  half_impl(q_out, &k_out, q, &k, t, u, /*inverse=*/false);
}

at::Tensor rope_rotate_half_single(const at::Tensor& x, const at::Tensor& cos,
                                   const at::Tensor& sin, int64_t unsqueeze_dim) {
  return rope_front::rotate_half_single(kHalfSingle, x, cos, sin, unsqueeze_dim,
                                        /*inverse=*/false);
}

void rope_rotate_half_single_out(const at::Tensor& out, const at::Tensor& x,
                                 const at::Tensor& cos, const at::Tensor& sin,
                                 int64_t unsqueeze_dim) {
  const int64_t u = check_unsqueeze_dim(kHalfSingle.op, unsqueeze_dim);
  check_heads_tensor(kHalfSingle.op, "x", x);
  const Tables t = check_half_tables(kHalfSingle.op, x, "x", cos, sin, u);
  check_out(kHalfSingle.op, "out", out, "x", x);
  half_impl(out, nullptr, x, nullptr, t, u, /*inverse=*/false);
}

}  // namespace ltx
