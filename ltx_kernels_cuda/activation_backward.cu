// GELU / GEGLU backward on CUDA.
//
// Elementwise and memory bound, like the forward: each thread moves kUnroll
// 16-byte (or narrower, as alignment allows) vectors per operand, issuing every
// load before any math, and the grid strides over the flattened (row, vector)
// index space. Dense gelu problems run as one long row with a scalar tail.
//
// Numerics: fp32 with ATen's gelu_backward expressions (erf and tanh forms).
// geglu writes both halves of dx in the same pass from one read of grad and x.
#include <algorithm>
#include <cstdint>

#include "../torch-ext/ops/activation_backward.h"
#include "common/dispatch.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kBlock = 256;
// Vectors per operand per thread and iteration: 4 (gelu) / 3 (geglu) loads in flight
// per thread, within the 64-register budget (geglu bf16 x 8 spills at 2).
template <bool kGated>
constexpr int kUnroll = kGated ? 1 : 2;
constexpr int kMinBlocks = 4;  // resident blocks per SM the register budget must allow (<= 64 regs)
constexpr int kWaves = 16;     // blocks per SM at most; the grid-stride loop does the rest

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2_SqrtPi = 1.12837916709551257390;
constexpr float kErfAlpha = static_cast<float>(kSqrt1_2);
constexpr float kErfBeta = static_cast<float>(k2_SqrtPi * kSqrt1_2 * 0.5);  // 1 / sqrt(2 pi)
constexpr float kTanhBeta = static_cast<float>(kSqrt2 * k2_SqrtPi * 0.5);   // sqrt(2 / pi)
constexpr float kKappa = static_cast<float>(0.044715);

// gelu(x) (f) and gelu'(x) (df) together: they share the erf / tanh.
template <GeluKind K>
__device__ __forceinline__ void gelu_and_grad(float x, float& f, float& df) {
  if constexpr (K == GeluKind::kTanh) {
    const float x_sq = x * x;
    const float inner = kTanhBeta * (x + kKappa * x_sq * x);
    const float t = tanhf(inner);
    const float left = 0.5f * x;
    const float right = 1.0f + t;
    f = left * right;
    df = 0.5f * right + left * (1.0f - t * t) * (kTanhBeta * (1.0f + 3.0f * kKappa * x_sq));
  } else {
    const float cdf = 0.5f * (1.0f + erff(x * kErfAlpha));
    f = x * cdf;
    df = cdf + x * kErfBeta * expf(-0.5f * x * x);
  }
}

struct BwdParams {
  const void* grad;
  const void* x;    // gelu: x; geglu: the row start (first half)
  void* dx;         // contiguous
  int64_t rows;
  int64_t nvec;     // vectors per row (of grad)
  int64_t total;    // rows * nvec
  int64_t d;        // geglu: elements per half (offset of the second half)
  int64_t gs, xs, ds;  // row strides in elements (0 for one row)
  int tail;         // one-row gelu launches: elements after the last whole vector
};

// kGated == false: dx = grad * gelu'(x). kGated == true: see geglu_backward.
template <typename T, int N, GeluKind K, bool kGated>
__global__ void __launch_bounds__(kBlock, kMinBlocks) bwd_kernel(BwdParams p, bool gate_first) {
  using V = Vec<T, N>;
  constexpr int U = kUnroll<kGated>;
  const T* __restrict__ grad = static_cast<const T*>(p.grad);
  const T* __restrict__ x = static_cast<const T*>(p.x);
  T* __restrict__ dx = static_cast<T*>(p.dx);

  if (!kGated && blockIdx.x == 0 && static_cast<int>(threadIdx.x) < p.tail) {
    const int64_t c = p.nvec * N + threadIdx.x;
    float f, df;
    gelu_and_grad<K>(to_float(x[c]), f, df);
    dx[c] = from_float<T>(to_float(grad[c]) * df);
  }

  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; base < p.total;
       base += stride * U) {
    V gv[U], av[U], bv[U];
    int64_t doff[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t i = base + u * stride;
      if (i < p.total) {
        int64_t r;
        if (p.total <= UINT32_MAX) {  // 32-bit division in all but giant launches
          r = static_cast<uint32_t>(i) / static_cast<uint32_t>(p.nvec);
        } else {
          r = i / p.nvec;
        }
        const int64_t c = (i - r * p.nvec) * N;
        doff[u] = r * p.ds + c;
        gv[u] = V::load(grad + r * p.gs + c);
        av[u] = V::load(x + r * p.xs + c);
        if constexpr (kGated) bv[u] = V::load(x + r * p.xs + c + p.d);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (base + u * stride < p.total) {
        if constexpr (kGated) {
          V da, db;
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const float g = to_float(gv[u].v[k]);
            const float a = to_float(av[u].v[k]);
            const float b = to_float(bv[u].v[k]);
            float f, df;
            gelu_and_grad<K>(gate_first ? a : b, f, df);
            const float d_gate = g * (gate_first ? b : a) * df;
            const float d_value = g * f;
            da.v[k] = from_float<T>(gate_first ? d_gate : d_value);
            db.v[k] = from_float<T>(gate_first ? d_value : d_gate);
          }
          da.store(dx + doff[u]);
          db.store(dx + doff[u] + p.d);
        } else {
          V o;
#pragma unroll
          for (int k = 0; k < N; ++k) {
            float f, df;
            gelu_and_grad<K>(to_float(av[u].v[k]), f, df);
            o.v[k] = from_float<T>(to_float(gv[u].v[k]) * df);
          }
          o.store(dx + doff[u]);
        }
      }
    }
  }
}

template <bool kGated>
void launch(BwdParams p, int64_t cols, int vec, const at::Tensor& like, GeluKind kind,
            bool gate_first, const char* op) {
  const c10::cuda::CUDAGuard guard(like.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(like.device().index()).stream();
  p.nvec = cols / vec;
  p.tail = static_cast<int>(cols - p.nvec * vec);
  TORCH_CHECK(p.tail == 0 || (p.rows == 1 && !kGated), "ltx_kernels.", op,
              ": internal error: tail on ", p.rows, " rows");
  p.total = p.rows * p.nvec;
  const int64_t want =
      std::max<int64_t>(1, ceil_div(p.total, static_cast<int64_t>(kBlock) * kUnroll<kGated>));
  const int64_t max_blocks = static_cast<int64_t>(sm_count(like.device().index())) * kWaves;
  const unsigned grid = static_cast<unsigned>(std::min(want, max_blocks));

  dispatch_float(like.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_vec(vec, [&](auto n) {
      constexpr int N = decltype(n)::value;
      if constexpr (N * sizeof(T) <= 16) {
        if (kind == GeluKind::kTanh) {
          bwd_kernel<T, N, GeluKind::kTanh, kGated><<<grid, kBlock, 0, stream>>>(p, gate_first);
        } else {
          bwd_kernel<T, N, GeluKind::kErf, kGated><<<grid, kBlock, 0, stream>>>(p, gate_first);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      } else {
        TORCH_CHECK(false, "ltx_kernels.", op, ": internal error: vector width ", N);
      }
    });
  });
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void gelu_backward_launch(const at::Tensor& dx2d, const at::Tensor& grad2d, const at::Tensor& x2d,
                          GeluKind kind) {
  using namespace ltx::cuda;
  BwdParams p{};
  p.rows = x2d.size(0);
  int64_t cols = x2d.size(1);
  p.gs = p.rows > 1 ? grad2d.stride(0) : 0;
  p.xs = p.rows > 1 ? x2d.stride(0) : 0;
  p.ds = p.rows > 1 ? dx2d.stride(0) : 0;
  if (p.rows > 1 && p.gs == cols && p.xs == cols && p.ds == cols) {  // all dense: one long row
    cols *= p.rows;
    p.rows = 1;
    p.gs = p.xs = p.ds = 0;
  }
  p.grad = grad2d.const_data_ptr();
  p.x = x2d.const_data_ptr();
  p.dx = dx2d.mutable_data_ptr();
  const int64_t es = x2d.element_size();
  // One row may end in a scalar tail, so any width divides it.
  const int vec = pick_vec_width(p.rows == 1 ? 8 : cols,
                                 {{p.grad, es, p.gs}, {p.x, es, p.xs}, {p.dx, es, p.ds}});
  launch<false>(p, cols, vec, x2d, kind, false, "gelu_backward");
}

void geglu_backward_launch(const at::Tensor& dx2d, const at::Tensor& grad2d, const at::Tensor& x2d,
                           GeluKind kind, bool gate_first) {
  using namespace ltx::cuda;
  BwdParams p{};
  p.rows = x2d.size(0);
  p.d = grad2d.size(1);
  p.gs = p.rows > 1 ? grad2d.stride(0) : 0;
  p.xs = p.rows > 1 ? x2d.stride(0) : 0;
  p.ds = p.rows > 1 ? dx2d.stride(0) : 0;
  p.grad = grad2d.const_data_ptr();
  p.x = x2d.const_data_ptr();
  p.dx = dx2d.mutable_data_ptr();
  const int64_t es = x2d.element_size();
  const char* x2 = static_cast<const char*>(p.x) + p.d * es;  // may be less aligned than x
  const char* dx2 = static_cast<const char*>(p.dx) + p.d * es;
  const int vec = pick_vec_width(p.d, {{p.grad, es, p.gs},
                                       {p.x, es, p.xs},
                                       {x2, es, p.xs},
                                       {p.dx, es, p.ds},
                                       {dx2, es, p.ds}});
  launch<true>(p, p.d, vec, x2d, kind, gate_first, "geglu_backward");
}

}  // namespace ltx
