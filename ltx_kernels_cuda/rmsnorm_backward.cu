// rms_norm backward on CUDA (see rms_backward.cuh for the math and the dw reduction).
//
// Row kernel: one group of `tpr` threads (a power of two) per row, as the forward; pass 1
// sums x^2 and gw*x, pass 2 writes dx (the second read of the row mostly hits L1/L2).
// Grads of a dtype other than x's or fp32, and weights of another dtype than x's or fp32,
// are converted once on the host (exact for weights; grads lose nothing they had in x's
// dtype either way) to keep the instantiations few.
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>

#include <algorithm>
#include <type_traits>

#include "../torch-ext/ops/rms_norm_backward.h"
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

struct RowParams {
  const void* x;
  const void* g;
  const void* w;  // nullptr: none
  void* dx;
  float* rstd;  // nullptr: not wanted
  int64_t rows, x_stride, g_stride, dx_stride;
  int cols;
  int tpr;
  float eps;
};

template <typename T, typename Tg, typename Tw, int N>
__global__ void rms_norm_backward_kernel(RowParams p) {
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};
  const int nvec = p.cols / N;
  const RowGroup rg = row_group(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;
  const float inv_cols = 1.0f / static_cast<float>(p.cols);
  const Tw* w = static_cast<const Tw*>(p.w);
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + rg.group;
    const bool active = row < p.rows;
    const int64_t rr = active ? row : 0;
    const T* xr = static_cast<const T*>(p.x) + rr * p.x_stride;
    const Tg* gr = static_cast<const Tg*>(p.g) + rr * p.g_stride;
    T* dxr = static_cast<T*>(p.dx) + rr * p.dx_stride;
    float ss = 0.f, dot = 0.f;
    for (int j = lane; active && j < nvec; j += p.tpr) {
      float x[N], g[N], wv[N];
      rmsbwd::load_f<T, N, true>(xr + j * N, x);
      rmsbwd::load_f<Tg, N, true>(gr + j * N, g);
      if (w != nullptr) rmsbwd::load_f<Tw, N, true>(w + j * N, wv);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        ss += x[k] * x[k];
        dot += (w != nullptr ? g[k] * wv[k] : g[k]) * x[k];
      }
    }
    ss = row_sum(ss, rg, scratch);
    dot = row_sum(dot, rg, scratch);
    const float r = rsqrtf(ss * inv_cols + p.eps);
    const float kx = r * r * dot * inv_cols;  // dx = r*gw - x*(r*kx)
    if (active && lane == 0 && p.rstd != nullptr) p.rstd[row] = r;
    for (int j = lane; active && j < nvec; j += p.tpr) {
      float x[N], g[N], wv[N], d[N];
      rmsbwd::load_f<T, N, true>(xr + j * N, x);
      rmsbwd::load_f<Tg, N, true>(gr + j * N, g);
      if (w != nullptr) rmsbwd::load_f<Tw, N, true>(w + j * N, wv);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float gw = w != nullptr ? g[k] * wv[k] : g[k];
        d[k] = r * (gw - x[k] * kx);
      }
      rmsbwd::store_f<T, N, true>(d, dxr + j * N);
    }
  }
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void rms_norm_backward_launch(const at::Tensor& dx2d, const at::Tensor& g2d_in,
                              const at::Tensor& x2d, const std::optional<at::Tensor>& weight_in,
                              double eps, const at::Tensor& dw) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(x2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x2d.device().index()).stream();
  const at::ScalarType xt = x2d.scalar_type();
  const at::Tensor g2d =
      (g2d_in.scalar_type() == xt || g2d_in.scalar_type() == at::kFloat) ? g2d_in
                                                                         : g2d_in.to(at::kFloat);
  std::optional<at::Tensor> weight = weight_in;
  if (weight && weight->scalar_type() != xt && weight->scalar_type() != at::kFloat) {
    weight = weight->to(at::kFloat);
  }
  TORCH_CHECK(x2d.size(1) <= INT32_MAX, "ltx_kernels.rms_norm_backward: last dim too large");

  RowParams p{};
  p.x = x2d.const_data_ptr();
  p.g = g2d.const_data_ptr();
  p.w = weight ? weight->const_data_ptr() : nullptr;
  p.dx = dx2d.mutable_data_ptr();
  p.rows = x2d.size(0);
  p.x_stride = p.rows > 1 ? x2d.stride(0) : 0;
  p.g_stride = p.rows > 1 ? g2d.stride(0) : 0;
  p.dx_stride = p.rows > 1 ? dx2d.stride(0) : 0;
  p.cols = static_cast<int>(x2d.size(1));
  p.eps = static_cast<float>(eps);
  at::Tensor rstd;
  if (dw.defined()) {
    rstd = at::empty({p.rows}, x2d.options().dtype(at::kFloat));
    p.rstd = rstd.mutable_data_ptr<float>();
  }
  const at::ScalarType gt = g2d.scalar_type();
  const at::ScalarType wt = weight ? weight->scalar_type() : xt;
  const int vec = pick_vec_width(
      p.cols, {{p.x, x2d.element_size(), p.x_stride},
               {p.g, g2d.element_size(), p.g_stride},
               {p.dx, dx2d.element_size(), p.dx_stride},
               {p.w ? p.w : p.x, weight ? weight->element_size() : x2d.element_size(), 0}});
  const int64_t nvec = p.cols / vec;
  const int tpr_wanted = std::min(kMaxBlock, pow2_ceil(ceil_div(nvec, kTargetPerThread)));
  const int device = x2d.device().index();

  auto launch = [&](auto kernel) {
    launch_rows_pow2(kernel, p, tpr_wanted, kBlock, p.rows, device, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  rmsbwd::DwParams d{};
  at::Tensor partial;
  if (dw.defined()) {
    d.side[0] = {p.x, p.g, p.rstd, p.rows, p.x_stride, p.g_stride};
    d.side[1] = d.side[0];
    d.rows_per_chunk = rmsbwd::dw_rows_per_chunk(p.rows);
    d.chunks = ceil_div(p.rows, d.rows_per_chunk);
    d.cols = p.cols;
    partial = at::empty({1, d.chunks, p.cols}, x2d.options().dtype(at::kFloat));
    d.partial = partial.mutable_data_ptr<float>();
  }
  auto launch_dw = [&](auto kernel) {
    constexpr int kDwBlock = 128;
    const dim3 grid(static_cast<unsigned>(ceil_div(nvec, kDwBlock)),
                    static_cast<unsigned>(d.chunks), 1);
    kernel<<<grid, kDwBlock, 0, stream>>>(d);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  dispatch_float(xt, [&](auto xtag) {
    using T = typename decltype(xtag)::type;
    dispatch_float(gt, [&](auto gtag) {
      using Tg = typename decltype(gtag)::type;
      dispatch_float(wt, [&](auto wtag) {
        using Tw = typename decltype(wtag)::type;
        if constexpr ((std::is_same_v<Tg, T> || std::is_same_v<Tg, float>) &&
                      (std::is_same_v<Tw, T> || std::is_same_v<Tw, float>)) {
          dispatch_vec(vec, [&](auto n) {
            constexpr int N = decltype(n)::value;
            constexpr size_t widest = std::max({sizeof(T), sizeof(Tg), sizeof(Tw)});
            if constexpr (N * widest <= 16) {
              launch(rms_norm_backward_kernel<T, Tg, Tw, N>);
              if (dw.defined()) launch_dw(rmsbwd::dw_partial_kernel<T, Tg, N, true, kNoTables>);
            } else {
              TORCH_CHECK(false, "ltx_kernels.rms_norm_backward: internal error: vector width ", N);
            }
          });
        } else {
          TORCH_CHECK(false, "ltx_kernels.rms_norm_backward: internal error: dtypes");
        }
      });
    });
  });
  if (dw.defined()) dw.copy_(at::sum(partial, at::IntArrayRef{0, 1}));
}

}  // namespace ltx
