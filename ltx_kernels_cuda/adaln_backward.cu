// adaln / gated_residual backward on CUDA.
//
// adaln: one group of `tpr` threads per row (plan_rows, grid-stride over rows), as the
// forward. Per row: the statistics of x (mean for layer, then the centred mean square),
// the two row sums of the backward (mean(dxh * xh), and mean(dxh) for layer), then the
// element outputs. Each thread keeps its first vector of x, grad and scale in registers
// (one vector per thread while the row fits in 512 threads); longer rows re-read the rest.
// Outputs: dx (x's dtype), g * n (dscale's term: scale's dtype when no reduction follows,
// else fp32) and dn * xh (dweight's term, fp32); the host reduces the fp32 terms with a
// fixed-order at::sum (adaln_backward.cpp), so no atomics anywhere.
//
// gated_residual: the same row groups, elementwise: g * gate and g * y.
//
// Typed fast path (16-byte loads) when grad, x and scale (y and gate) share a dtype and
// the alignment allows a vector width >= 2; else one kernel that converts each element by
// its run-time dtype. Outputs are fresh contiguous allocations (always aligned), stored
// in at most 16-byte pieces.
#include <algorithm>
#include <type_traits>

#include "../torch-ext/ops/adaln_backward.h"
#include "common/dispatch.cuh"
#include "common/reduce.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kF32 = 0, kF16 = 1, kBF16 = 2;

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return kF16;
    case at::kBFloat16: return kBF16;
    default: return kF32;
  }
}

// Loads: a typed N-wide vector, or one element of a run-time dtype.
template <typename T, int N>
struct TypedIn {
  static constexpr int kN = N;
  using Raw = Vec<T, N>;
  __device__ __forceinline__ static Raw load(const void* base, int64_t off, int /*dtype*/) {
    return Raw::load(static_cast<const T*>(base) + off);
  }
  __device__ __forceinline__ static float get(const Raw& r, int k) { return to_float(r.v[k]); }
};

struct AnyIn {
  static constexpr int kN = 1;
  struct Raw {
    float v[1];
  };
  __device__ __forceinline__ static Raw load(const void* base, int64_t off, int dtype) {
    switch (dtype) {
      case kF16: return {{__half2float(static_cast<const __half*>(base)[off])}};
      case kBF16: return {{__bfloat162float(static_cast<const __nv_bfloat16*>(base)[off])}};
      default: return {{static_cast<const float*>(base)[off]}};
    }
  }
  __device__ __forceinline__ static float get(const Raw& r, int /*k*/) { return r.v[0]; }
};

// N values stored as T at base + off (off a multiple of N, base 16-byte aligned), in
// pieces of at most 16 bytes.
template <typename T, int N>
__device__ __forceinline__ void store_typed(void* base, int64_t off, const float (&f)[N]) {
  constexpr int kPiece = (16 / static_cast<int>(sizeof(T))) < N ? 16 / static_cast<int>(sizeof(T)) : N;
  T* p = static_cast<T*>(base) + off;
#pragma unroll
  for (int b = 0; b < N; b += kPiece) {
    Vec<T, kPiece> o;
#pragma unroll
    for (int k = 0; k < kPiece; ++k) o.v[k] = from_float<T>(f[b + k]);
    o.store(p + b);
  }
}

template <int N>
__device__ __forceinline__ void store_any(void* base, int64_t off, int dtype, const float (&f)[N]) {
  switch (dtype) {
    case kF16: store_typed<__half, N>(base, off, f); break;
    case kBF16: store_typed<__nv_bfloat16, N>(base, off, f); break;
    default: store_typed<float, N>(base, off, f);
  }
}

template <int N>
__device__ __forceinline__ void load_weight(const float* w, int64_t off, float (&f)[N]) {
  constexpr int kPiece = N < 4 ? N : 4;
#pragma unroll
  for (int b = 0; b < N; b += kPiece) {
    const Vec<float, kPiece> a = Vec<float, kPiece>::load(w + off + b);
#pragma unroll
    for (int k = 0; k < kPiece; ++k) f[b + k] = a.v[k];
  }
}

// ---- adaln backward ----------------------------------------------------------------

struct AdaLnBwdParams {
  const void* g;
  const void* x;
  const void* s;
  const float* w;  // nullptr: no weight
  void* dx;        // nullptr: not computed
  void* gn;        // nullptr: not computed
  float* dw;       // nullptr: not computed
  int64_t rows;
  int64_t g_stride, x_stride;  // elements between rows
  RowSpace rs;                 // operand 0: scale
  int cols;
  int tpr;
  float eps;
  bool layer;
  int dg, dxin, ds, ddx, dgn;  // dtype codes
};

template <class Io, bool kWeight>
__global__ void __launch_bounds__(kMaxRowThreads, 1) adaln_backward_kernel(AdaLnBwdParams p) {
  constexpr int N = Io::kN;
  using Raw = typename Io::Raw;
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};

  const int nvec = p.cols / N;
  const RowGroup rg = row_group(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;
  const float inv_cols = 1.0f / static_cast<float>(p.cols);

  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + rg.group;
    const bool active = row < p.rows;
    const int64_t r = active ? row : 0;
    int64_t off[1];
    p.rs.offsets<1>(r, off);
    const int64_t xo = r * p.x_stride, go = r * p.g_stride, oo = r * p.cols;

    const bool first = active && lane < nvec;  // this thread's cached vector
    Raw xc{}, gc{}, sc{};
    if (first) {
      const int64_t e = static_cast<int64_t>(lane) * N;
      xc = Io::load(p.x, xo + e, p.dxin);
      gc = Io::load(p.g, go + e, p.dg);
      sc = Io::load(p.s, off[0] + e, p.ds);
    }
    // Visits this thread's vectors of the row: f(x, g, s, j), cached first, then re-read.
    auto for_each = [&](bool need_gs, auto&& f) {
      if (first) f(xc, gc, sc, lane);
      for (int j = lane + p.tpr; active && j < nvec; j += p.tpr) {
        const int64_t e = static_cast<int64_t>(j) * N;
        Raw gv{}, sv{};
        if (need_gs) {
          gv = Io::load(p.g, go + e, p.dg);
          sv = Io::load(p.s, off[0] + e, p.ds);
        }
        f(Io::load(p.x, xo + e, p.dxin), gv, sv, j);
      }
    };

    float mean = 0.f;
    if (p.layer) {
      float acc = 0.f;
      for_each(false, [&](const Raw& xv, const Raw&, const Raw&, int) {
#pragma unroll
        for (int k = 0; k < N; ++k) acc += Io::get(xv, k);
      });
      mean = row_sum(acc, rg, scratch) * inv_cols;
    }
    float ss = 0.f;
    for_each(false, [&](const Raw& xv, const Raw&, const Raw&, int) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = Io::get(xv, k) - mean;
        ss += d * d;
      }
    });
    const float rstd = rsqrtf(row_sum(ss, rg, scratch) * inv_cols + p.eps);

    // xh, dn = g * (1 + s) and dxh = dn * w of one vector.
    auto terms = [&](const Raw& xv, const Raw& gv, const Raw& sv, int j, float (&xh)[N],
                     float (&dn)[N], float (&dxh)[N], float (&wv)[N]) {
      if constexpr (kWeight) load_weight<N>(p.w, static_cast<int64_t>(j) * N, wv);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        xh[k] = (Io::get(xv, k) - mean) * rstd;
        dn[k] = Io::get(gv, k) * (1.0f + Io::get(sv, k));
        dxh[k] = kWeight ? dn[k] * wv[k] : dn[k];
      }
    };

    float a = 0.f, b = 0.f;  // sum(dxh * xh), sum(dxh)
    if (p.dx != nullptr) {
      for_each(true, [&](const Raw& xv, const Raw& gv, const Raw& sv, int j) {
        float xh[N], dn[N], dxh[N], wv[N];
        terms(xv, gv, sv, j, xh, dn, dxh, wv);
#pragma unroll
        for (int k = 0; k < N; ++k) {
          a += dxh[k] * xh[k];
          b += dxh[k];
        }
      });
      a = row_sum(a, rg, scratch) * inv_cols;
      if (p.layer) b = row_sum(b, rg, scratch) * inv_cols;
    }
    if (!p.layer) b = 0.f;

    for_each(true, [&](const Raw& xv, const Raw& gv, const Raw& sv, int j) {
      float xh[N], dn[N], dxh[N], wv[N];
      terms(xv, gv, sv, j, xh, dn, dxh, wv);
      const int64_t e = oo + static_cast<int64_t>(j) * N;
      float o[N];
      if (p.dx != nullptr) {
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = rstd * (dxh[k] - b - xh[k] * a);
        store_any<N>(p.dx, e, p.ddx, o);
      }
      if (p.gn != nullptr) {
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = Io::get(gv, k) * (kWeight ? xh[k] * wv[k] : xh[k]);
        store_any<N>(p.gn, e, p.dgn, o);
      }
      if (p.dw != nullptr) {
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = dn[k] * xh[k];
        store_typed<float, N>(p.dw, e, o);
      }
    });
  }
}

// ---- gated residual backward -----------------------------------------------------------

struct GateBwdParams {
  const void* g;
  const void* y;
  const void* gate;
  void* dy;     // nullptr: not computed
  void* dgate;  // nullptr: not computed
  int64_t rows;
  int64_t g_stride;
  RowSpace rs;  // operand 0: y, 1: gate
  int cols;
  int tpr;
  int dg, dyin, dgatein, ddy, ddgate;
};

template <class Io>
__global__ void __launch_bounds__(kMaxRowThreads, 1) gated_residual_backward_kernel(GateBwdParams p) {
  constexpr int N = Io::kN;
  const int nvec = p.cols / N;
  const RowGroup rg = row_group(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * groups + rg.group;
       row < p.rows; row += static_cast<int64_t>(gridDim.x) * groups) {
    int64_t off[2];
    p.rs.offsets<2>(row, off);
    const int64_t go = row * p.g_stride, oo = row * p.cols;
    for (int j = lane; j < nvec; j += p.tpr) {
      const int64_t e = static_cast<int64_t>(j) * N;
      const typename Io::Raw gv = Io::load(p.g, go + e, p.dg);
      float o[N];
      if (p.dy != nullptr) {
        const typename Io::Raw t = Io::load(p.gate, off[1] + e, p.dgatein);
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = Io::get(gv, k) * Io::get(t, k);
        store_any<N>(p.dy, oo + e, p.ddy, o);
      }
      if (p.dgate != nullptr) {
        const typename Io::Raw t = Io::load(p.y, off[0] + e, p.dyin);
#pragma unroll
        for (int k = 0; k < N; ++k) o[k] = Io::get(gv, k) * Io::get(t, k);
        store_any<N>(p.dgate, oo + e, p.ddgate, o);
      }
    }
  }
}

void* ptr_or_null(const at::Tensor& t) { return t.defined() ? t.mutable_data_ptr() : nullptr; }

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void adaln_backward_launch(const at::Tensor& dx2d, const at::Tensor& gn2d, const at::Tensor& dw2d,
                           const at::Tensor& g2d, const at::Tensor& x2d, const at::Tensor& scale,
                           const std::optional<at::Tensor>& weight, const RowSpace& rows,
                           double eps, bool layer) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(x2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x2d.device().index()).stream();

  AdaLnBwdParams p{};
  p.g = g2d.const_data_ptr();
  p.x = x2d.const_data_ptr();
  p.s = scale.const_data_ptr();
  p.w = weight ? weight->const_data_ptr<float>() : nullptr;
  p.dx = ptr_or_null(dx2d);
  p.gn = ptr_or_null(gn2d);
  p.dw = dw2d.defined() ? dw2d.mutable_data_ptr<float>() : nullptr;
  p.rows = x2d.size(0);
  p.g_stride = g2d.size(0) > 1 ? g2d.stride(0) : 0;
  p.x_stride = x2d.size(0) > 1 ? x2d.stride(0) : 0;
  p.rs = rows;
  TORCH_CHECK(x2d.size(1) <= INT32_MAX, "ltx_kernels.adaln_backward: last dim too large");
  p.cols = static_cast<int>(x2d.size(1));
  p.eps = static_cast<float>(eps);
  p.layer = layer;
  const at::ScalarType gt = g2d.scalar_type(), xt = x2d.scalar_type(), st = scale.scalar_type();
  p.dg = dtype_code(gt);
  p.dxin = dtype_code(xt);
  p.ds = dtype_code(st);
  p.ddx = dx2d.defined() ? dtype_code(dx2d.scalar_type()) : kF32;
  p.dgn = gn2d.defined() ? dtype_code(gn2d.scalar_type()) : kF32;
  if (p.rows == 0 || p.cols == 0) return;

  const bool same = gt == xt && st == xt;
  const int vec = same ? pick_vec_width(p.cols, {{p.x, x2d.element_size(), p.x_stride},
                                                 {p.g, g2d.element_size(), p.g_stride},
                                                 {p.s, scale.element_size(), rows.stride_gcd(0)}})
                       : 1;
  const RowPlan l = plan_rows(p.rows, p.cols / vec, 1, x2d.device().index());
  p.tpr = l.tpr;

  auto launch = [&](auto io) {
    using Io = decltype(io);
    if (p.w != nullptr) {
      adaln_backward_kernel<Io, true><<<l.grid, l.block, 0, stream>>>(p);
    } else {
      adaln_backward_kernel<Io, false><<<l.grid, l.block, 0, stream>>>(p);
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };
  bool done = false;
  if (vec >= 2) {
    dispatch_float(xt, [&](auto t) {
      using T = typename decltype(t)::type;
      dispatch_vec(vec, [&](auto n) {
        constexpr int N = decltype(n)::value;
        if constexpr (N >= 2 && N * sizeof(T) <= 16) {
          launch(TypedIn<T, N>{});
          done = true;
        }
      });
    });
  }
  if (!done) launch(AnyIn{});
}

void gated_residual_backward_launch(const at::Tensor& dy2d, const at::Tensor& dgate2d,
                                    const at::Tensor& g2d, const at::Tensor& y,
                                    const at::Tensor& gate, const RowSpace& rows) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(g2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(g2d.device().index()).stream();

  GateBwdParams p{};
  p.g = g2d.const_data_ptr();
  p.y = y.const_data_ptr();
  p.gate = gate.const_data_ptr();
  p.dy = ptr_or_null(dy2d);
  p.dgate = ptr_or_null(dgate2d);
  p.rows = g2d.size(0);
  p.g_stride = g2d.size(0) > 1 ? g2d.stride(0) : 0;
  p.rs = rows;
  TORCH_CHECK(g2d.size(1) <= INT32_MAX, "ltx_kernels.gated_residual_backward: last dim too large");
  p.cols = static_cast<int>(g2d.size(1));
  const at::ScalarType gt = g2d.scalar_type(), yt = y.scalar_type(), tt = gate.scalar_type();
  p.dg = dtype_code(gt);
  p.dyin = dtype_code(yt);
  p.dgatein = dtype_code(tt);
  p.ddy = dy2d.defined() ? dtype_code(dy2d.scalar_type()) : kF32;
  p.ddgate = dgate2d.defined() ? dtype_code(dgate2d.scalar_type()) : kF32;
  if (p.rows == 0 || p.cols == 0) return;

  const bool same = yt == gt && tt == gt;
  const int vec = same ? pick_vec_width(p.cols, {{p.g, g2d.element_size(), p.g_stride},
                                                 {p.y, y.element_size(), rows.stride_gcd(0)},
                                                 {p.gate, gate.element_size(), rows.stride_gcd(1)}})
                       : 1;
  const RowPlan l = plan_rows(p.rows, p.cols / vec, 1, g2d.device().index());
  p.tpr = l.tpr;
  bool done = false;
  if (vec >= 2) {
    dispatch_float(gt, [&](auto t) {
      using T = typename decltype(t)::type;
      dispatch_vec(vec, [&](auto n) {
        constexpr int N = decltype(n)::value;
        if constexpr (N >= 2 && N * sizeof(T) <= 16) {
          gated_residual_backward_kernel<TypedIn<T, N>><<<l.grid, l.block, 0, stream>>>(p);
          C10_CUDA_KERNEL_LAUNCH_CHECK();
          done = true;
        }
      });
    });
  }
  if (!done) {
    gated_residual_backward_kernel<AnyIn><<<l.grid, l.block, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace ltx
