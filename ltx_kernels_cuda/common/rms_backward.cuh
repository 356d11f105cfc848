// Row-wise RMSNorm backward shared by rmsnorm_backward.cu and qk_prologue_backward.cu.
//
// The forward's roundings are identity for the gradient, so with r = rsqrt(mean(x^2)+eps),
// xh = x*r and gw = g*w:  dx = r*(gw - xh*mean(gw*xh)) = r*gw - x*(r^3*dot/D), dot = sum(gw*x),
// and dw = sum over rows of g*xh. Two kernels:
//   * a row kernel (in each .cu file) computes dx and stores r per row (fp32 [rows]);
//   * dw_partial_kernel (here) sums g*x*r over a fixed chunk of rows per block, in row
//     order, into fp32 partials [sides, chunks, D]; the launcher adds the chunks with
//     at::sum. The chunking depends only on the shape: the result is deterministic.
#pragma once

#include <cstdint>

#include "rope_tables.cuh"
#include "vec.cuh"

namespace ltx::cuda::rmsbwd {

// N consecutive elements; kVec: one aligned vector access, else N scalar accesses.
template <typename T, int N, bool kVec>
__device__ __forceinline__ void load_f(const T* p, float* out) {
  if constexpr (kVec) {
    const Vec<T, N> v = Vec<T, N>::load(p);
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_float(v.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) out[k] = to_float(p[k]);
  }
}

template <typename T, int N, bool kVec>
__device__ __forceinline__ void store_f(const float* in, T* p) {
  Vec<T, N> v;
#pragma unroll
  for (int k = 0; k < N; ++k) v.v[k] = from_float<T>(in[k]);
  if constexpr (kVec) {
    v.store(p);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = v.v[k];
  }
}

// The transpose of the interleaved rotation out[2i] = n[2i]c[2i] - n[2i+1]s[2i],
// out[2i+1] = n[2i+1]c[2i+1] + n[2i]s[2i+1], applied in place to the grad g (N even).
template <int N>
__device__ __forceinline__ void rotate_back(float* g, const float* c, const float* s) {
#pragma unroll
  for (int k = 0; k < N; k += 2) {
    const float g0 = g[k], g1 = g[k + 1];
    g[k] = g0 * c[k] + g1 * s[k + 1];
    g[k + 1] = g1 * c[k + 1] - g0 * s[k];
  }
}

// One operand set of the weight-grad reduction (q or k; rmsnorm uses side 0 only).
struct DwSide {
  const void* x;
  const void* g;
  const float* rstd;  // r of each row, from the row kernel
  int64_t rows;
  int64_t x_stride, g_stride;
};

struct DwParams {
  DwSide side[2];
  float* partial;  // [sides, chunks, cols]
  const float* cos;  // nullptr: no rotation
  const float* sin;
  int64_t cos_b, cos_s, sin_b, sin_s, seq;
  int64_t rows_per_chunk;
  int64_t chunks;
  int cols;
};

// grid: (ceil(cols / N / blockDim.x), chunks, sides). Thread j owns columns [j*N, j*N+N).
// kTab: kNoTables, or how the grads' rotation tables are read (common/rope_tables.cuh).
template <typename T, typename Tg, int N, bool kVec, int kTab>
__global__ void dw_partial_kernel(DwParams p) {
  const int nvec = p.cols / N;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= nvec) return;
  const DwSide s = p.side[blockIdx.z];
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * p.rows_per_chunk;
  const int64_t r1 = r0 + p.rows_per_chunk < s.rows ? r0 + p.rows_per_chunk : s.rows;
  float acc[N];
#pragma unroll
  for (int k = 0; k < N; ++k) acc[k] = 0.f;
  for (int64_t r = r0; r < r1; ++r) {
    float x[N], g[N];
    load_f<T, N, kVec>(static_cast<const T*>(s.x) + r * s.x_stride + j * N, x);
    load_f<Tg, N, kVec>(static_cast<const Tg*>(s.g) + r * s.g_stride + j * N, g);
    if constexpr (kTab != kNoTables) {
      float c[N], sn[N];
      const int64_t b = r / p.seq, q = r % p.seq;
      load_table<N, kVec, kTab>(p.cos + b * p.cos_b + q * p.cos_s, j, c);
      load_table<N, kVec, kTab>(p.sin + b * p.sin_b + q * p.sin_s, j, sn);
      rotate_back<N>(g, c, sn);
    }
    const float rs = __ldg(s.rstd + r);
#pragma unroll
    for (int k = 0; k < N; ++k) acc[k] += g[k] * (x[k] * rs);
  }
  float* out = p.partial + (static_cast<int64_t>(blockIdx.z) * p.chunks + blockIdx.y) * p.cols + j * N;
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = acc[k];
}

// Rows per chunk of the weight-grad reduction: a function of the shape only (deterministic
// sums), at least 32 rows per thread, at most ~1024 chunks.
inline int64_t dw_rows_per_chunk(int64_t rows) {
  const int64_t per = (rows + 1023) / 1024;
  return per < 32 ? 32 : per;
}

}  // namespace ltx::cuda::rmsbwd
