// Backward of the fused q/k RMSNorm + interleaved RoPE on CUDA (math: rms_backward.cuh and
// rmsnorm_rope_qk_backward in ops/qk_prologue_backward.h).
//
// One launch for q and k, as the forward: a group of `tpr` threads per token does that
// token's q row and k row. Pass 1: each vector's grad goes back through the rotation
// (fp32 tables read once for both rows), then sums of x^2 and gw*x; pass 2 re-reads and
// writes dx. r per row is stored for the weight-grad reduction, one more launch for both
// weights (dw_partial_kernel, grid.z = side). Grads of a dtype other than q's or fp32
// are converted to fp32 once on the host.
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <type_traits>

#include "../torch-ext/ops/qk_prologue_backward.h"
#include "common/dispatch.cuh"
#include "common/reduce.cuh"
#include "common/rms_backward.cuh"
#include "common/row_order.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kTargetPerThread = 4;
constexpr int kBlock = 256;
constexpr int kMaxBlock = 512;

struct QkBwdParams {
  const void* x[2];
  const void* g[2];
  const void* w[2];  // nullptr: none
  void* dx[2];
  float* rstd[2];  // nullptr: not wanted
  int64_t rows[2], x_stride[2], g_stride[2], dx_stride[2];
  int64_t tokens;
  const float* cos;  // nullptr: norm only
  const float* sin;
  int64_t cos_b, cos_s, sin_b, sin_s, seq;
  int cols;
  int tpr;
  float eps;
};

// The grad of the normalised value for vector j of one row: g, rotated back with tables.
template <typename Tg, int N, bool kVec, int kTab>
__device__ __forceinline__ void grad_n(const Tg* gr, const float* crow, const float* srow, int j,
                                       float* g) {
  rmsbwd::load_f<Tg, N, kVec>(gr + j * N, g);
  if constexpr (kTab != kNoTables) {
    float c[N], s[N];
    load_table<N, kVec, kTab>(crow, j, c);
    load_table<N, kVec, kTab>(srow, j, s);
    rmsbwd::rotate_back<N>(g, c, s);
  }
}

// kTab: kNoTables (norm only), or how the tables are read (common/rope_tables.cuh).
template <typename T, typename Tg, typename Tw, int N, bool kVec, int kTab>
__global__ void qk_backward_kernel(QkBwdParams p) {
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};
  const int nvec = p.cols / N;
  const RowGroup rg = row_group(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;
  const float inv_cols = 1.0f / static_cast<float>(p.cols);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < p.tokens;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + rg.group;
    const float* crow = nullptr;
    const float* srow = nullptr;
    if constexpr (kTab != kNoTables) {
      const int64_t rr = row < p.tokens ? row : 0;
      const int64_t b = rr / p.seq, s = rr % p.seq;
      crow = p.cos + b * p.cos_b + s * p.cos_s;
      srow = p.sin + b * p.sin_b + s * p.sin_s;
    }
#pragma unroll
    for (int t = 0; t < 2; ++t) {
      const bool live = row < p.rows[t];
      const int64_t rr = live ? row : 0;
      const T* xr = static_cast<const T*>(p.x[t]) + rr * p.x_stride[t];
      const Tg* gr = static_cast<const Tg*>(p.g[t]) + rr * p.g_stride[t];
      const Tw* w = static_cast<const Tw*>(p.w[t]);
      float ss = 0.f, dot = 0.f;
      for (int j = lane; live && j < nvec; j += p.tpr) {
        float x[N], g[N], wv[N];
        rmsbwd::load_f<T, N, kVec>(xr + j * N, x);
        grad_n<Tg, N, kVec, kTab>(gr, crow, srow, j, g);
        if (w != nullptr) rmsbwd::load_f<Tw, N, kVec>(w + j * N, wv);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          ss += x[k] * x[k];
          dot += (w != nullptr ? g[k] * wv[k] : g[k]) * x[k];
        }
      }
      // Every thread of the block calls row_sum equally often (dead rows add zeros).
      ss = row_sum(ss, rg, scratch);
      dot = row_sum(dot, rg, scratch);
      const float r = rsqrtf(ss * inv_cols + p.eps);
      const float kx = r * r * dot * inv_cols;
      if (live && lane == 0 && p.rstd[t] != nullptr) p.rstd[t][row] = r;
      T* dxr = static_cast<T*>(p.dx[t]) + rr * p.dx_stride[t];
      for (int j = lane; live && j < nvec; j += p.tpr) {
        float x[N], g[N], wv[N], d[N];
        rmsbwd::load_f<T, N, kVec>(xr + j * N, x);
        grad_n<Tg, N, kVec, kTab>(gr, crow, srow, j, g);
        if (w != nullptr) rmsbwd::load_f<Tw, N, kVec>(w + j * N, wv);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          const float gw = w != nullptr ? g[k] * wv[k] : g[k];
          d[k] = r * (gw - x[k] * kx);
        }
        rmsbwd::store_f<T, N, kVec>(d, dxr + j * N);
      }
    }
  }
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void rmsnorm_rope_qk_backward_launch(const at::Tensor& dq2d, const at::Tensor& gq2d_in,
                                     const at::Tensor& q2d, const at::Tensor& dk2d,
                                     const at::Tensor& gk2d_in, const at::Tensor& k2d,
                                     const std::optional<at::Tensor>& q_weight,
                                     const std::optional<at::Tensor>& k_weight,
                                     const at::Tensor& cos, const at::Tensor& sin, int64_t seq,
                                     double eps, const at::Tensor& dqw, const at::Tensor& dkw) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(q2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q2d.device().index()).stream();
  const at::ScalarType xt = q2d.scalar_type();
  // Both grads in one dtype: q's if both have it, else fp32.
  const bool native = gq2d_in.scalar_type() == xt && gk2d_in.scalar_type() == xt;
  const at::Tensor gq2d = native ? gq2d_in : gq2d_in.to(at::kFloat);
  const at::Tensor gk2d = native ? gk2d_in : gk2d_in.to(at::kFloat);
  TORCH_CHECK(q2d.size(1) <= INT32_MAX, "ltx_kernels.rmsnorm_rope_qk_backward: last dim too large");

  QkBwdParams p{};
  const at::Tensor* xs[2] = {&q2d, &k2d};
  const at::Tensor* gs[2] = {&gq2d, &gk2d};
  const at::Tensor* ds[2] = {&dq2d, &dk2d};
  const std::optional<at::Tensor>* ws[2] = {&q_weight, &k_weight};
  const at::Tensor* dws[2] = {&dqw, &dkw};
  at::Tensor rstd[2];
  for (int t = 0; t < 2; ++t) {
    p.x[t] = xs[t]->const_data_ptr();
    p.g[t] = gs[t]->const_data_ptr();
    p.dx[t] = ds[t]->mutable_data_ptr();
    p.w[t] = *ws[t] ? (*ws[t])->const_data_ptr() : nullptr;
    p.rows[t] = xs[t]->size(0);
    const bool multi = p.rows[t] > 1;
    p.x_stride[t] = multi ? xs[t]->stride(0) : 0;
    p.g_stride[t] = multi ? gs[t]->stride(0) : 0;
    p.dx_stride[t] = multi ? ds[t]->stride(0) : 0;
    if (dws[t]->defined()) {
      rstd[t] = at::empty({std::max<int64_t>(p.rows[t], 1)}, q2d.options().dtype(at::kFloat));
      p.rstd[t] = rstd[t].mutable_data_ptr<float>();
    }
  }
  p.tokens = std::max(p.rows[0], p.rows[1]);
  if (p.tokens == 0) return;
  p.cols = static_cast<int>(q2d.size(1));
  p.eps = static_cast<float>(eps);
  p.seq = std::max<int64_t>(seq, 1);
  const bool rope = cos.defined();
  if (rope) {
    p.cos = cos.const_data_ptr<float>();
    p.sin = sin.const_data_ptr<float>();
    p.cos_b = cos.size(0) > 1 ? cos.stride(0) : 0;
    p.cos_s = cos.size(1) > 1 ? cos.stride(1) : 0;
    p.sin_b = sin.size(0) > 1 ? sin.stride(0) : 0;
    p.sin_s = sin.size(1) > 1 ? sin.stride(1) : 0;
  }

  const at::ScalarType gt = gq2d.scalar_type();
  const at::ScalarType wt =
      q_weight ? q_weight->scalar_type() : (k_weight ? k_weight->scalar_type() : xt);
  const int64_t xe = q2d.element_size(), ge = gq2d.element_size(), we = at::elementSize(wt);
  const void* w_any = p.w[0] ? p.w[0] : (p.w[1] ? p.w[1] : p.x[0]);
  int vec = pick_vec_width(p.cols, {{p.x[0], xe, p.x_stride[0]}, {p.x[1], xe, p.x_stride[1]},
                                    {p.g[0], ge, p.g_stride[0]}, {p.g[1], ge, p.g_stride[1]},
                                    {p.dx[0], xe, p.dx_stride[0]}, {p.dx[1], xe, p.dx_stride[1]},
                                    {w_any, we, 0}, {p.w[1] ? p.w[1] : w_any, we, 0}});
  const int tables = table_kind(cos, p.cols);
  if (vec >= 4 && rope &&
      !tables_vectorizable(tables, vec, p.cos, p.sin, {p.cos_b, p.cos_s, p.sin_b, p.sin_s})) {
    vec = 2;
  }
  // As the forward: 8 / 4 with vector accesses, 2 (even D) or 1 (odd D, norm only) scalar.
  if (vec < 4) vec = p.cols % 2 == 0 ? 2 : 1;
  const int64_t nvec = p.cols / vec;
  const int tpr_wanted = std::min(kMaxBlock, pow2_ceil(ceil_div(nvec, kTargetPerThread)));
  auto launch = [&](auto kernel) {
    launch_rows_pow2(kernel, p, tpr_wanted, kBlock, p.tokens, q2d.device().index(), stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  // Weight grads: sides with a wanted grad, in order (q then k).
  rmsbwd::DwParams d{};
  int sides = 0;
  int side_of[2] = {-1, -1};
  at::Tensor partial;
  for (int t = 0; t < 2; ++t) {
    if (!dws[t]->defined() || p.rows[t] == 0) continue;
    d.side[sides] = {p.x[t], p.g[t], p.rstd[t], p.rows[t], p.x_stride[t], p.g_stride[t]};
    side_of[t] = sides++;
  }
  if (sides > 0) {
    d.rows_per_chunk = rmsbwd::dw_rows_per_chunk(p.tokens);
    d.chunks = ceil_div(p.tokens, d.rows_per_chunk);
    d.cols = p.cols;
    d.cos = p.cos;
    d.sin = p.sin;
    d.cos_b = p.cos_b, d.cos_s = p.cos_s, d.sin_b = p.sin_b, d.sin_s = p.sin_s, d.seq = p.seq;
    // Zeros: the chunks past a shorter side's rows are not written by the kernel.
    partial = at::zeros({sides, d.chunks, p.cols}, q2d.options().dtype(at::kFloat));
    d.partial = partial.mutable_data_ptr<float>();
  }
  auto launch_dw = [&](auto kernel) {
    constexpr int kDwBlock = 128;
    const dim3 grid(static_cast<unsigned>(ceil_div(nvec, kDwBlock)),
                    static_cast<unsigned>(d.chunks), static_cast<unsigned>(sides));
    kernel<<<grid, kDwBlock, 0, stream>>>(d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  auto run = [&](auto kernel, auto dw_kernel) {
    launch(kernel);
    if (sides > 0) launch_dw(dw_kernel);
  };
  dispatch_float(xt, [&](auto xtag) {
    using T = typename decltype(xtag)::type;
    dispatch_float(gt, [&](auto gtag) {
      using Tg = typename decltype(gtag)::type;
      dispatch_float(wt, [&](auto wtag) {
        using Tw = typename decltype(wtag)::type;
        if constexpr ((std::is_same_v<Tg, T> || std::is_same_v<Tg, float>) &&
                      (std::is_same_v<Tw, T> || std::is_same_v<Tw, float>)) {
          constexpr size_t widest = std::max({sizeof(T), sizeof(Tg), sizeof(Tw)});
          // The row kernel and the weight-grad kernel for this call's table kind.
          auto run_tab = [&](auto vec_tag, auto kvec_tag) {
            constexpr int N = decltype(vec_tag)::value;
            constexpr bool kVec = decltype(kvec_tag)::value;
            if (tables == kPairTables) {
              return run(qk_backward_kernel<T, Tg, Tw, N, kVec, kPairTables>,
                         rmsbwd::dw_partial_kernel<T, Tg, N, kVec, kPairTables>);
            }
            if (tables == kFullTables) {
              return run(qk_backward_kernel<T, Tg, Tw, N, kVec, kFullTables>,
                         rmsbwd::dw_partial_kernel<T, Tg, N, kVec, kFullTables>);
            }
            return run(qk_backward_kernel<T, Tg, Tw, N, kVec, kNoTables>,
                       rmsbwd::dw_partial_kernel<T, Tg, N, kVec, kNoTables>);
          };
          using std::integral_constant;
          switch (vec) {
            case 8:
              if constexpr (8 * widest <= 16) {
                return run_tab(integral_constant<int, 8>{}, std::true_type{});
              }
              break;
            case 4:
              if constexpr (4 * widest <= 16) {
                return run_tab(integral_constant<int, 4>{}, std::true_type{});
              }
              break;
            case 2:
              return run_tab(integral_constant<int, 2>{}, std::false_type{});
            default:  // odd D: norm only
              return run(qk_backward_kernel<T, Tg, Tw, 1, false, kNoTables>,
                         rmsbwd::dw_partial_kernel<T, Tg, 1, false, kNoTables>);
          }
          TORCH_CHECK(false, "ltx_kernels.rmsnorm_rope_qk_backward: internal error: vector width ",
                      vec);
        } else {
          TORCH_CHECK(false, "ltx_kernels.rmsnorm_rope_qk_backward: weights must be float32 or "
                             "q's dtype");
        }
      });
    });
  });
  if (sides > 0) {
    const at::Tensor sums = at::sum(partial, at::IntArrayRef{1});
    for (int t = 0; t < 2; ++t) {
      if (side_of[t] >= 0) dws[t]->copy_(sums[side_of[t]]);
    }
  }
  // A wanted weight grad of a side without rows is zero.
  for (int t = 0; t < 2; ++t) {
    if (dws[t]->defined() && side_of[t] < 0) dws[t]->zero_();
  }
}

}  // namespace ltx
