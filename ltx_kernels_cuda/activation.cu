// GELU (erf / tanh) and gated GELU (GEGLU) on CUDA.
//
// Elementwise and memory bound. Work is split into tiles of kUnroll * tpr vectors
// of one row; a block handles `groups` rows of one tile column at a time and
// grid-strides over the (row group, tile) pairs. Every thread issues all of its
// loads (kUnroll per operand) before any math, so enough bytes are in
// flight per SM without shared memory. Contiguous inputs run as a single long row
// (with a scalar tail), so the vector width then depends only on the pointers.
//
// Numerics: fp32 with ATen's CUDA expressions (ActivationGeluKernel.cu), so the
// result is bit-identical to F.gelu in every dtype. The gated form rounds the GELU
// to the storage dtype before the product, as eager `h * F.gelu(g)` does.
#include <algorithm>
#include <cstdint>

#include "../torch-ext/torch_binding.h"
#include "common/dispatch.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kBlock = 256;   // most threads per block
// Vectors per thread per tile: 4 loads in flight per thread either way (gated
// forms load two operands per vector).
template <bool kGated>
constexpr int kUnroll = kGated ? 2 : 4;
constexpr int kMinBlocks = 4; // resident blocks per SM the register budget must allow (<= 64 regs)
constexpr int kWaves = 32;    // blocks per SM at most; the grid-stride loop does the rest

// Constants exactly as ATen computes them (double math, then one cast to float).
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2_SqrtPi = 1.12837916709551257390;
constexpr float kAlpha = static_cast<float>(kSqrt1_2);
constexpr float kBeta = static_cast<float>(kSqrt2 * k2_SqrtPi * 0.5);
constexpr float kKappa = static_cast<float>(0.044715);

// The same expression trees as ATen, so nvcc contracts them the same way
// (x + kKappa * x_cube becomes one FMA in both).
template <GeluKind K>
__device__ __forceinline__ float gelu_f(float x) {
  if constexpr (K == GeluKind::kTanh) {
    const float x_cube = x * x * x;
    const float inner = kBeta * (x + kKappa * x_cube);
    return 0.5f * x * (1.0f + tanhf(inner));
  } else {
    return x * 0.5f * (1.0f + erff(x * kAlpha));
  }
}

// gated: value * round_T(gelu(gate)); otherwise gelu(gate). Product in fp32, rounded once.
template <typename T, GeluKind K, bool kGated>
__device__ __forceinline__ T act(T gate, T value) {
  const float g = gelu_f<K>(to_float(gate));
  if constexpr (kGated) {
    return from_float<T>(to_float(value) * to_float(from_float<T>(g)));
  } else {
    return from_float<T>(g);
  }
}

struct ActParams {
  const void* gate;   // the GELU input (the whole x when not gated)
  const void* value;  // gated only: the multiplied half
  void* out;
  int64_t rows;
  int64_t nvec;        // vectors per row
  int64_t in_stride;   // elements between rows of gate/value (0: one row)
  int64_t out_stride;  // elements between rows of out
  int64_t col_tiles;   // tiles per row
  int64_t work;        // row groups * col_tiles
  int tpr;             // threads per row
  int tail;            // one-row launches: elements after the last whole vector
};

template <typename T, int N, GeluKind K, bool kGated>
__global__ void __launch_bounds__(kBlock, kMinBlocks) act_kernel(ActParams p) {
  using V = Vec<T, N>;
  const T* __restrict__ gate = static_cast<const T*>(p.gate);
  const T* __restrict__ value = static_cast<const T*>(p.value);
  T* __restrict__ out = static_cast<T*>(p.out);

  const int lane = static_cast<int>(threadIdx.x) % p.tpr;
  const int sub = static_cast<int>(threadIdx.x) / p.tpr;
  const int groups = static_cast<int>(blockDim.x) / p.tpr;
  constexpr int U = kUnroll<kGated>;
  const int64_t tile_vecs = static_cast<int64_t>(U) * p.tpr;

  // A single row whose length is not a multiple of N: the last few elements.
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < p.tail) {
    const int64_t c = p.nvec * N + threadIdx.x;
    out[c] = act<T, K, kGated>(gate[c], kGated ? value[c] : gate[c]);
  }

  for (int64_t w = blockIdx.x; w < p.work; w += gridDim.x) {
    int64_t rg, tile;
    if (p.work <= UINT32_MAX) {  // cheap 32-bit division in all but giant launches
      rg = static_cast<uint32_t>(w) / static_cast<uint32_t>(p.col_tiles);
    } else {
      rg = w / p.col_tiles;
    }
    tile = w - rg * p.col_tiles;
    const int64_t row = rg * groups + sub;
    if (row >= p.rows) continue;

    const T* g = gate + row * p.in_stride;
    const T* v = value + row * p.in_stride;
    T* o = out + row * p.out_stride;
    const int64_t j0 = tile * tile_vecs + lane;

    V gv[U];
    V vv[kGated ? U : 1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * p.tpr;
      if (j < p.nvec) {
        gv[u] = V::load(g + j * N);
        if constexpr (kGated) vv[u] = V::load(v + j * N);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t j = j0 + static_cast<int64_t>(u) * p.tpr;
      if (j < p.nvec) {
        V r;
#pragma unroll
        for (int k = 0; k < N; ++k) {
          if constexpr (kGated) {
            r.v[k] = act<T, K, true>(gv[u].v[k], vv[u].v[k]);
          } else {
            r.v[k] = act<T, K, false>(gv[u].v[k], gv[u].v[k]);
          }
        }
        r.store(o + j * N);
      }
    }
  }
}


// Chooses the launch shape for `rows` rows of `cols` elements moved N at a time,
// fills the shape fields of p and launches.
template <bool kGated>
void launch(ActParams p, int64_t rows, int64_t cols, int vec, const at::Tensor& like,
            GeluKind kind, const char* op) {
  const c10::cuda::CUDAGuard guard(like.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(like.device().index()).stream();

  p.rows = rows;
  p.nvec = cols / vec;
  p.tail = static_cast<int>(cols - p.nvec * vec);
  TORCH_CHECK(p.tail == 0 || rows == 1, "ltx_kernels.", op, ": internal error: tail on ", rows,
              " rows");
  constexpr int U = kUnroll<kGated>;
  // Threads per row: enough for U vectors each. Short rows share a block
  // (a power of two of them per row); longer rows get whole warps, at most kBlock.
  const int64_t want = std::max<int64_t>(1, ceil_div(p.nvec, U));
  int block;
  if (want <= 16) {
    p.tpr = pow2_ceil(want);
    block = kBlock;
  } else {
    // As few tiles as kBlock threads allow, then as few threads as fill them evenly
    // (d = 5120 bf16: 2 tiles of 160 threads, not a full and a quarter-full 256).
    const int64_t tiles = ceil_div(want, kBlock);
    p.tpr = static_cast<int>(std::min<int64_t>(kBlock, ceil_div(ceil_div(want, tiles), 32) * 32));
    block = (kBlock / p.tpr) * p.tpr;
  }
  const int64_t groups = block / p.tpr;
  p.col_tiles = std::max<int64_t>(1, ceil_div(p.nvec, static_cast<int64_t>(U) * p.tpr));
  p.work = ceil_div(rows, groups) * p.col_tiles;
  const int64_t max_blocks = static_cast<int64_t>(sm_count(like.device().index())) * kWaves;
  const unsigned grid = static_cast<unsigned>(std::max<int64_t>(1, std::min(p.work, max_blocks)));

  dispatch_float(like.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    dispatch_vec(vec, [&](auto n) {
      constexpr int N = decltype(n)::value;
      if constexpr (N * sizeof(T) <= 16) {
        if (kind == GeluKind::kTanh) {
          act_kernel<T, N, GeluKind::kTanh, kGated><<<grid, block, 0, stream>>>(p);
        } else {
          act_kernel<T, N, GeluKind::kErf, kGated><<<grid, block, 0, stream>>>(p);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      } else {
        TORCH_CHECK(false, "ltx_kernels.", op, ": internal error: vector width ", N);
      }
    });
  });
}

// pick_vec_width's row-length argument for a launch: a single row may end in a
// scalar tail, so any width divides it; otherwise every row must split evenly.
int64_t width_cols(int64_t rows, int64_t cols) { return rows == 1 ? 8 : cols; }

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void gelu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind) {
  using namespace ltx::cuda;
  const char* op = kind == GeluKind::kTanh ? "gelu_tanh" : "gelu";
  int64_t rows = x2d.size(0);
  int64_t cols = x2d.size(1);
  int64_t xs = rows > 1 ? x2d.stride(0) : 0;
  int64_t os = rows > 1 ? out2d.stride(0) : 0;
  if (rows > 1 && xs == cols && os == cols) {  // both dense: one long row
    cols *= rows;
    rows = 1;
    xs = os = 0;
  }
  ActParams p{};
  p.gate = x2d.const_data_ptr();
  p.value = p.gate;
  p.out = out2d.mutable_data_ptr();
  p.in_stride = xs;
  p.out_stride = os;
  const int64_t es = x2d.element_size();
  const int vec = pick_vec_width(width_cols(rows, cols), {{p.gate, es, xs}, {p.out, es, os}});
  launch<false>(p, rows, cols, vec, x2d, kind, op);
}

void geglu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind, bool gate_first) {
  using namespace ltx::cuda;
  const int64_t rows = x2d.size(0);
  const int64_t d = x2d.size(1) / 2;
  const int64_t xs = rows > 1 ? x2d.stride(0) : 0;
  const int64_t os = rows > 1 ? out2d.stride(0) : 0;
  const int64_t es = x2d.element_size();
  const char* first = static_cast<const char*>(x2d.const_data_ptr());
  const char* second = first + d * es;  // may be less aligned than the row start
  ActParams p{};
  p.gate = gate_first ? first : second;
  p.value = gate_first ? second : first;
  p.out = out2d.mutable_data_ptr();
  p.in_stride = xs;
  p.out_stride = os;
  const int vec =
      pick_vec_width(width_cols(rows, d), {{first, es, xs}, {second, es, xs}, {p.out, es, os}});
  launch<true>(p, rows, d, vec, x2d, kind, "geglu");
}

}  // namespace ltx
