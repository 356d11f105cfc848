// AdaLN modulation and gated residual on CUDA.
//
// adaln_direct_kernel takes the common call (one half dtype, no weight, 16-byte vectors,
// D <= 8192); the kernels below take the rest.
//
// adaln_kernel: one group of `tpr` threads per row (plan_rows in common/dispatch.cuh:
// several rows per block for short rows), grid-stride over rows. Each thread loads its
// kCached vectors of x at once (2 at 16-byte width, else 1), reduces in fp32, then loads
// scale and shift and writes norm(x) * (1 + scale) + shift with the eager chain's
// rounding points (torch_binding.h), fixed at compile time on the typed paths. Rows
// longer than tpr * kCached vectors re-read the remainder. scale/shift rows are found
// through the RowSpace (row_index.h): broadcast and strided views are read in place.
//
// gated_residual: the same row groups without a reduction.
//
// Fast paths are typed (16-byte vectors when every operand allows it); rarer
// dtype mixes and vector width 1 take one generic kernel that converts each
// element by its run-time dtype, to keep the number of instantiations small.
#include <algorithm>
#include <type_traits>

#include "../torch-ext/torch_binding.h"
#include "common/async_copy.cuh"
#include "common/dispatch.cuh"
#include "common/reduce.cuh"
#include "common/row_order.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

// Vectors per thread and operand held in registers at most: 4, or 2 when the widest
// operand moves 16 bytes per vector (three 16-byte operands x 4 would not fit in 128
// registers).
constexpr int cached_for(int widest_vector_bytes) { return widest_vector_bytes >= 16 ? 2 : 4; }

// Dtype codes for the generic kernel.
constexpr int kF32 = 0, kF16 = 1, kBF16 = 2;

int dtype_code(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return kF16;
    case at::kBFloat16: return kBF16;
    default: return kF32;
  }
}

// Element access: a typed N-wide vector, or one element of a run-time dtype.
template <typename T, int N>
struct TypedIo {
  static constexpr int kN = N;
  using Raw = Vec<T, N>;
  __device__ __forceinline__ static Raw load(const void* base, int64_t off, int /*dtype*/) {
    return Raw::load(static_cast<const T*>(base) + off);
  }
  __device__ __forceinline__ static float get(const Raw& r, int k) { return to_float(r.v[k]); }
  __device__ __forceinline__ static void store(void* base, int64_t off, int /*dtype*/,
                                               const float (&f)[N]) {
    pack_from_float<T, N>(f).store(static_cast<T*>(base) + off);
  }
};

// The storage type of a typed Io (void for AnyIo).
template <class Io>
struct IoElem {
  using type = void;
};
template <typename T, int N>
struct IoElem<TypedIo<T, N>> {
  using type = T;
};

struct AnyIo {
  static constexpr int kN = 1;
  struct Raw {
    float v;
  };
  __device__ __forceinline__ static Raw load(const void* base, int64_t off, int dtype) {
    switch (dtype) {
      case kF16: return {to_float(Vec<__half, 1>::load(static_cast<const __half*>(base) + off).v[0])};
      case kBF16:
        return {to_float(
            Vec<__nv_bfloat16, 1>::load(static_cast<const __nv_bfloat16*>(base) + off).v[0])};
      default: return {Vec<float, 1>::load(static_cast<const float*>(base) + off).v[0]};
    }
  }
  __device__ __forceinline__ static float get(const Raw& r, int /*k*/) { return r.v; }
  __device__ __forceinline__ static void store(void* base, int64_t off, int dtype,
                                               const float (&f)[1]) {
    switch (dtype) {
      case kF16: static_cast<__half*>(base)[off] = from_float<__half>(f[0]); break;
      case kBF16: static_cast<__nv_bfloat16*>(base)[off] = from_float<__nv_bfloat16>(f[0]); break;
      default: static_cast<float*>(base)[off] = f[0];
    }
  }
};

// N consecutive fp32 weights (16-byte aligned base), at most 16 bytes per access.
template <int N>
__device__ __forceinline__ void load_weight(const float* w, int64_t off, float (&f)[N]) {
  if constexpr (N == 8) {
    const Vec<float, 4> a = Vec<float, 4>::load(w + off);
    const Vec<float, 4> b = Vec<float, 4>::load(w + off + 4);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      f[k] = a.v[k];
      f[k + 4] = b.v[k];
    }
  } else {
    const Vec<float, N> a = Vec<float, N>::load(w + off);
#pragma unroll
    for (int k = 0; k < N; ++k) f[k] = a.v[k];
  }
}


// This thread's part of a row's fp32 sums over its cached vectors i < C that lie in the
// row: of the elements (kSquares false), or of their squares after subtracting `mean` when
// kCentre (LayerNorm's variance) or as they are (RMSNorm). elem(i, k): element k of vector i.
// Added as a tree (tree_sum in common/reduce.cuh: a short chain after the loads).
template <int C, int N, bool kSquares, bool kCentre, class Elem>
__device__ __forceinline__ float cached_sum(bool active, int lane, int tpr, int nvec, float mean,
                                            Elem elem) {
  float part[C];  // per vector; a vector outside the row (never loaded) is not read
#pragma unroll
  for (int i = 0; i < C; ++i) {
    part[i] = 0.f;
    if (active && lane + i * tpr < nvec) {
      float t[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = kCentre ? elem(i, k) - mean : elem(i, k);
        t[k] = kSquares ? d * d : d;
      }
      part[i] = tree_sum(t);
    }
  }
  return tree_sum(part);
}

// This thread's mean and M2 over its elements of a row (all its vectors i < C that lie in
// the row, the same count n = 1 / inv_n in every thread: set_ln_merge's case), in one pass
// about its own first element x0: d = x - x0, s = sum d, q = sum d^2 (one FMA chain per
// vector), mean x0 + s / n, M2 q - s (s / n). Three operations per element against the
// two passes' five or six (a tree of x, then x - mean, its square and a tree of those, each
// pass converting x again). Stable like the two passes: x0 is one of the n values, so
// |mean - x0| <= sqrt(n - 1) standard deviations of them and q - s^2 / n loses at most
// log2(n) bits (5 at n = 32; the row's M2 is then merged as before). tools/ln_stats_model.py
// models both forms in fp32 on the tests' offset / outlier rows: the same largest error
// against float64; at most 0.1% of bf16 outputs (0.5% of fp16) one rounding apart.
// An inactive group (x not loaded) returns zeros.
template <int C, int N, class Elem>
__device__ __forceinline__ MeanM2 shifted_mean_m2(bool active, int lane, int tpr, int nvec,
                                                  float inv_n, Elem elem) {
  const float x0 = elem(0, 0);
  float s[C], q[C];
#pragma unroll
  for (int i = 0; i < C; ++i) {
    s[i] = q[i] = 0.f;
    if (lane + i * tpr < nvec) {
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = elem(i, k) - x0;
        s[i] += d;
        q[i] = fmaf(d, d, q[i]);
      }
    }
  }
  const float sum = tree_sum(s);
  const float dm = sum * inv_n;
  // q - s^2 / n >= 0; a rounding below zero is clamped (it would shrink the row's M2)
  const MeanM2 t{x0 + dm, fmaxf(fmaf(-sum, dm, tree_sum(q)), 0.f)};
  return active ? t : MeanM2{0.f, 0.f};
}

// fp32 statistics of a row whose vectors i < C this thread holds (elem(i, k)): sets `mean`
// (LayerNorm; 0 for RMSNorm) and returns 1 / sqrt(mean square, centred for LayerNorm, + eps).
// Every thread of the block must call it (row_sum).
// LayerNorm with per_thread > 0 (every thread holds per_thread elements of its row; the host
// checks): each thread's own mean and centred squares, merged in one reduction
// (row_mean_m2), instead of the row's mean and then its centred squares in two. kShift: each
// thread's mean and M2 by shifted_mean_m2 (one pass) instead of two passes, and a row of two
// warps merged as one pair (row_mean_m2's kPairWarps) (candidate, LTX_KERNELS_ADALN_LN=shift;
// adaln_direct_kernel only).
template <int C, int N, bool kLayer, bool kShift = false, class Elem>
__device__ __forceinline__ float cached_row_inv(bool active, const RowGroup& rg, int nvec,
                                                float inv_cols, float eps, RowScratch& scratch,
                                                Elem elem, float& mean, float per_thread = 0.f,
                                                float inv_per_thread = 0.f) {
  mean = 0.f;
  if constexpr (kLayer) {
    if (per_thread > 0.f) {
      if constexpr (kShift) {
        const MeanM2 r = row_mean_m2<true>(
            shifted_mean_m2<C, N>(active, rg.lane, rg.tpr, nvec, inv_per_thread, elem),
            per_thread, rg, scratch);
        mean = r.mean;
        return rsqrtf(r.m2 * inv_cols + eps);
      }
      // (the sum computed in each branch: hoisted above the branch, ptxas gave the fp16
      // staged LayerNorm kernel 64 registers instead of 60 on sm_90)
      const float s = cached_sum<C, N, false, false>(active, rg.lane, rg.tpr, nvec, 0.f, elem);
      const float m = s * inv_per_thread;
      const float m2 = cached_sum<C, N, true, true>(active, rg.lane, rg.tpr, nvec, m, elem);
      const MeanM2 r = row_mean_m2({m, m2}, per_thread, rg, scratch);
      mean = r.mean;
      return rsqrtf(r.m2 * inv_cols + eps);
    }
    const float s = cached_sum<C, N, false, false>(active, rg.lane, rg.tpr, nvec, 0.f, elem);
    mean = row_sum(s, rg, scratch) * inv_cols;
  }
  const float ss = cached_sum<C, N, true, kLayer>(active, rg.lane, rg.tpr, nvec, mean, elem);
  return rsqrtf(row_sum(ss, rg, scratch) * inv_cols + eps);
}

// ---- adaln -------------------------------------------------------------------------

struct AdaLnParams {
  const void* x;
  const void* scale;
  const void* shift;  // nullptr: no shift
  const float* w;     // nullptr: no weight
  void* out;
  int64_t rows;
  int64_t x_stride;    // elements between rows
  int64_t out_stride;  // elements between rows
  RowSpace rs;         // operand 0: scale, 1: shift
  int cols;
  int tpr;
  float eps;
  float inv_cols;  // 1 / cols, worked out by the host (a division in front of the first load)
  bool layer;  // LayerNorm (else RMSNorm)
  // LayerNorm's statistics in one reduction (cached_row_inv): the elements each thread holds
  // of its row, and 1 / that; 0 where the threads hold different counts (set_ln_merge).
  float per_thread, inv_per_thread;
  Round mid, norm, scale1, prod;
  int dx, ds, dh, dout;  // dtype codes (generic kernel)
};

// Sets p.per_thread / p.inv_per_thread for a LayerNorm launch whose threads each hold up to
// C vectors of `vec` elements of their row (p.tpr set): LayerNorm's statistics in one
// reduction where every thread holds the same count (cols a multiple of tpr * vec: LTX's,
// FLUX's and Wan's widths), else (or LTX_KERNELS_ADALN_LN=two, read per call: an A/B switch)
// the mean and the centred squares in two.
inline void set_ln_merge(AdaLnParams& p, int vec, int C) {
  p.per_thread = p.inv_per_thread = 0.f;
  const int64_t nvec = p.cols / vec;
  if (!p.layer || p.cols % vec != 0 || nvec % p.tpr != 0 || nvec / p.tpr > C ||
      ab_switch("LTX_KERNELS_ADALN_LN") == "two") {
    return;
  }
  p.per_thread = static_cast<float>(nvec / p.tpr * vec);
  p.inv_per_thread = 1.0f / p.per_thread;
}

// The four rounding points (torch_binding.h), fixed at compile time on the typed fast
// paths (no per-element branch), read from the params in the generic kernel.
// Each rounds a whole vector's values (pairwise on the typed paths: common/vec.cuh).
// (Rounds as int: see rms_norm_kernel in rmsnorm.cu for why not the enum.)
template <int kMid, int kNorm, int kScale1, int kProd>
struct FixedRounds {
  template <int N> __device__ __forceinline__ static void mid(float (&v)[N], const AdaLnParams&) { round_all<static_cast<Round>(kMid)>(v); }
  template <int N> __device__ __forceinline__ static void norm(float (&v)[N], const AdaLnParams&) { round_all<static_cast<Round>(kNorm)>(v); }
  template <int N> __device__ __forceinline__ static void scale1(float (&v)[N], const AdaLnParams&) { round_all<static_cast<Round>(kScale1)>(v); }
  template <int N> __device__ __forceinline__ static void prod(float (&v)[N], const AdaLnParams&) { round_all<static_cast<Round>(kProd)>(v); }
};
struct RuntimeRounds {
  template <int N> __device__ __forceinline__ static void mid(float (&v)[N], const AdaLnParams& p) { round_all(v, p.mid); }
  template <int N> __device__ __forceinline__ static void norm(float (&v)[N], const AdaLnParams& p) { round_all(v, p.norm); }
  template <int N> __device__ __forceinline__ static void scale1(float (&v)[N], const AdaLnParams& p) { round_all(v, p.scale1); }
  template <int N> __device__ __forceinline__ static void prod(float (&v)[N], const AdaLnParams& p) { round_all(v, p.prod); }
};

// kWeight: p.w is set (a separate instantiation: LTX's norms have none, and the weight's
// registers would otherwise cost the weight-less kernel occupancy). kLayer: LayerNorm
// (mean pass and centring), else RMSNorm. Rnd: the rounding policy above.
template <class IoX, class IoM, class IoO, int kCached, bool kWeight, bool kLayer, class Rnd>
__global__ void __launch_bounds__(kMaxRowThreads, 1) adaln_kernel(AdaLnParams p) {
  constexpr int N = IoX::kN;
  static_assert(IoM::kN == N && IoO::kN == N, "one vector width");
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};

  const int nvec = p.cols / N;
  const RowGroup rg = row_group(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;
  const float inv_cols = p.inv_cols;
  const bool has_shift = p.shift != nullptr;

  // Every thread runs the same number of iterations: row_sum needs all of them.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + rg.group;
    const bool active = row < p.rows;
    const int64_t r = active ? row : 0;
    int64_t off[2];
    p.rs.offsets<2>(r, off);
    const int64_t xo = r * p.x_stride;
    const int64_t oo = r * p.out_stride;

    // Only x before the reduction: scale/shift are not needed until after it, and holding
    // them across it cost registers and so occupancy (2026-12-03 ncu: 89 registers, 24%
    // occupancy, issue slots idle half the time). They are loaded right before use below.
    typename IoX::Raw xc[kCached];
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int j = lane + i * p.tpr;
      if (active && j < nvec) xc[i] = IoX::load(p.x, xo + static_cast<int64_t>(j) * N, p.dx);
    }

    // Statistics in fp32: mean of squares (rms), or mean then centred variance (layer).
    auto elem = [&](int i, int k) { return IoX::get(xc[i], k); };
    float mean = 0.f;
    if constexpr (kLayer) {
      float s = cached_sum<kCached, N, false, false>(active, lane, p.tpr, nvec, 0.f, elem);
      for (int j = lane + kCached * p.tpr; active && j < nvec; j += p.tpr) {
        const auto v = IoX::load(p.x, xo + static_cast<int64_t>(j) * N, p.dx);
#pragma unroll
        for (int k = 0; k < N; ++k) s += IoX::get(v, k);
      }
      mean = row_sum(s, rg, scratch) * inv_cols;
    }
    float ss = cached_sum<kCached, N, true, kLayer>(active, lane, p.tpr, nvec, mean, elem);
    for (int j = lane + kCached * p.tpr; active && j < nvec; j += p.tpr) {
      const auto v = IoX::load(p.x, xo + static_cast<int64_t>(j) * N, p.dx);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float d = kLayer ? IoX::get(v, k) - mean : IoX::get(v, k);
        ss += d * d;
      }
    }
    ss = row_sum(ss, rg, scratch);
    const float inv = rsqrtf(ss * inv_cols + p.eps);

    // Each product and sum is a separate eager op: __fmul_rn/__fadd_rn, no FMA.
    auto finish = [&](const typename IoX::Raw& xv, const typename IoM::Raw& sv,
                      const typename IoM::Raw& hv, int j) {
      float wv[N];
      if constexpr (kWeight) load_weight<N>(p.w, static_cast<int64_t>(j) * N, wv);
      float n[N], s1[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float xk = kLayer ? IoX::get(xv, k) - mean : IoX::get(xv, k);
        n[k] = __fmul_rn(xk, inv);
        s1[k] = __fadd_rn(1.0f, IoM::get(sv, k));
      }
      Rnd::mid(n, p);
      if constexpr (kWeight) {
#pragma unroll
        for (int k = 0; k < N; ++k) n[k] = __fmul_rn(n[k], wv[k]);
      }
      Rnd::norm(n, p);
      Rnd::scale1(s1, p);
#pragma unroll
      for (int k = 0; k < N; ++k) n[k] = __fmul_rn(n[k], s1[k]);  // n is now the product
      if (has_shift) {
        Rnd::prod(n, p);
#pragma unroll
        for (int k = 0; k < N; ++k) n[k] = __fadd_rn(n[k], IoM::get(hv, k));
      }
      IoO::store(p.out, oo + static_cast<int64_t>(j) * N, p.dout, n);
    };
    auto modulation = [&](int j, typename IoM::Raw& sv, typename IoM::Raw& hv) {
      const int64_t e = static_cast<int64_t>(j) * N;
      sv = IoM::load(p.scale, off[0] + e, p.ds);
      if (has_shift) hv = IoM::load(p.shift, off[1] + e, p.dh);
    };
#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int j = lane + i * p.tpr;
      if (active && j < nvec) {
        typename IoM::Raw sv, hv{};
        modulation(j, sv, hv);
        finish(xc[i], sv, hv, j);
      }
    }
    for (int j = lane + kCached * p.tpr; active && j < nvec; j += p.tpr) {
      typename IoM::Raw sv, hv{};
      modulation(j, sv, hv);
      finish(IoX::load(p.x, xo + static_cast<int64_t>(j) * N, p.dx), sv, hv, j);
    }
  }
}

// adaln without a weight, the row held in at most kStreamCached vectors per thread
// (every LTX / FLUX / DiT / Wan call). Changes from adaln_kernel, for what ncu showed of
// it (2026-12-03, v5: 42 M warp instructions vs inductor's 23 M, issue slots 70% busy,
// nothing in flight during the reduction and the arithmetic):
//  - persistent blocks over contiguous row chunks (the host sizes the grid to the
//    occupancy), so consecutive rows of a thread share their scale/shift row when the
//    modulation broadcasts ([B, 1, D], [B, F, 1, D]: runs of `mod_run` rows);
//  - round(1 + scale) and shift for a thread's own columns are kept in shared memory
//    (each thread reads back only what it wrote: no barrier), recomputed once per run of
//    rows instead of once per row (the host sends only mod_run >= 2 here: per-token
//    modulation stays on adaln_kernel);
//  - x of the next `stages - 1` rows of a group is queued with cp.async into shared memory
//    (common/async_copy.cuh) before the current row's reduction, so their bytes are in
//    flight during the reduction, the barrier and the arithmetic. (v6 held one next row
//    in registers: 60 registers, DRAM 52% busy, bytes in flight the limit; 2026-12-03.)
//    stages is 3 where the shared memory allows it, else 2;
//  - one dtype throughout (bf16 / fp16): the product and the shift are packed pair ops
//    (mul_rn / add_rn in common/vec.cuh), each rounded once like eager's ops.
// Rnd must round 1 + scale to Tm's own precision (FixedRounds<.., RoundOf<Tm>, ..>), so
// the cached Tm value is exact.
constexpr int kStreamCached = 2;
constexpr int kStreamStages = 3;  // rows of x per group in shared memory at most

// CUDA 13.0's ptxas spills 12-24 bytes of this kernel on sm_100 / sm_120 under the bare
// (512) bound and not with a minimum of one block per SM; on sm_75-sm_90 that minimum costs
// registers (sm_90 fp16: 50 -> 56, one block per SM less), so it is set only there.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
#define LTX_STREAM_BOUNDS __launch_bounds__(kMaxRowThreads, 1)
#else
#define LTX_STREAM_BOUNDS __launch_bounds__(kMaxRowThreads)
#endif

template <typename Tx, typename Tm, typename To, int N, bool kLayer, class Rnd>
__global__ void LTX_STREAM_BOUNDS adaln_stream_kernel(AdaLnParams p, int64_t chunk,
                                                     int64_t mod_run, int stages) {
  constexpr int C = kStreamCached;
  // Same half dtype throughout: then the rounding points are x's at each op (Plain form).
  constexpr bool kPacked =
      std::is_same_v<Tx, Tm> && std::is_same_v<Tx, To> && !std::is_same_v<Tx, float>;
  using VX = Vec<Tx, N>;
  using VM = Vec<Tm, N>;
  // Per group: C*tpr of 1+scale, then of shift; after all groups', the x stages:
  // [stage][i][thread] (consecutive threads own consecutive slots: conflict-free).
  extern __shared__ __align__(16) unsigned char mod_smem[];
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};

  const int nvec = p.cols / N;
  const RowGroup rg = row_group(p.tpr);
  const int lane = rg.lane;
  const int group = rg.group;
  const int groups = rg.groups;
  const bool has_shift = p.shift != nullptr;
  const Tx* x = static_cast<const Tx*>(p.x);
  const Tm* scale = static_cast<const Tm*>(p.scale);
  const Tm* shift = static_cast<const Tm*>(p.shift);
  To* out = static_cast<To*>(p.out);
  VM* s1_cache = reinterpret_cast<VM*>(mod_smem) + static_cast<size_t>(group) * 2 * C * p.tpr;
  VM* shift_cache = s1_cache + C * p.tpr;

  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < p.rows ? begin + chunk : p.rows;

  VX* const x_slots = reinterpret_cast<VX*>(mod_smem + 2 * C * blockDim.x * sizeof(VM)) +
                      threadIdx.x;
  auto slot = [&](int stage, int i) { return x_slots + (stage * C + i) * blockDim.x; };
  // Queues x of `row` (if in the chunk) into `stage`; always one commit group.
  auto queue_row = [&](int64_t row, int stage) {
    if (row < end) {
      const Tx* xr = x + row * p.x_stride;
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int j = lane + i * p.tpr;
        if (j < nvec) cp_async<sizeof(VX)>(slot(stage, i), xr + static_cast<int64_t>(j) * N);
      }
    }
    cp_async_commit();
  };

  for (int s = 0; s < stages - 1; ++s) queue_row(begin + group + s * groups, s);
  int stage = 0;           // the current row's stage
  int fill = stages - 1;   // the stage queued next (read into registers one row ago)
  int64_t run_end = -1;  // the cache holds the modulation of rows < run_end (of this run)
  // Every thread runs the same number of iterations: row_sum needs all of them.
  for (int64_t r0 = begin; r0 < end; r0 += groups) {
    const int64_t row = r0 + group;
    const bool active = row < end;
    queue_row(row + (stages - 1) * groups, fill);  // in flight during everything below
    static_assert(kStreamStages == 3, "the waits below name each stage count");
    if (stages == 3) {
      cp_async_wait<2>();
    } else {
      cp_async_wait<1>();
    }
    VX cur[C];
#pragma unroll
    for (int i = 0; i < C; ++i) {
      if (active && lane + i * p.tpr < nvec) memcpy(&cur[i], slot(stage, i), sizeof(VX));
    }
    stage = stage + 1 == stages ? 0 : stage + 1;
    fill = fill + 1 == stages ? 0 : fill + 1;

    float mean;
    const float inv = cached_row_inv<C, N, kLayer>(
        active, rg, nvec, p.inv_cols, p.eps, scratch,
        [&](int i, int k) { return to_float(cur[i].v[k]); }, mean, p.per_thread,
        p.inv_per_thread);

    if (active) {
      if (row >= run_end) {  // a new modulation row
        int64_t off[2];
        p.rs.offsets<2>(row, off);
        run_end = (row / mod_run + 1) * mod_run;
#pragma unroll
        for (int i = 0; i < C; ++i) {
          const int j = lane + i * p.tpr;
          if (j < nvec) {
            const int64_t e = static_cast<int64_t>(j) * N;
            const VM sv = VM::load(scale + off[0] + e);
            float s1[N];
#pragma unroll
            for (int k = 0; k < N; ++k) s1[k] = __fadd_rn(1.0f, to_float(sv.v[k]));
            Rnd::scale1(s1, p);
            s1_cache[j] = pack_from_float<Tm, N>(s1);
            if (has_shift) shift_cache[j] = VM::load(shift + off[1] + e);
          }
        }
      }
      To* orow = out + row * p.out_stride;
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int j = lane + i * p.tpr;
        if (j < nvec) {
          float n[N];
#pragma unroll
          for (int k = 0; k < N; ++k) {
            const float xk = kLayer ? to_float(cur[i].v[k]) - mean : to_float(cur[i].v[k]);
            n[k] = __fmul_rn(xk, inv);
          }
          Rnd::mid(n, p);
          if constexpr (kPacked) {
            // norm(x) rounded to x's dtype by the packing, then one rounding per op
            VX o = mul_rn(pack_from_float<Tx, N>(n), s1_cache[j]);
            if (has_shift) o = add_rn(o, shift_cache[j]);
            o.store(orow + static_cast<int64_t>(j) * N);
          } else {
            Rnd::norm(n, p);
            const VM s1 = s1_cache[j];
#pragma unroll
            for (int k = 0; k < N; ++k) n[k] = __fmul_rn(n[k], to_float(s1.v[k]));
            if (has_shift) {
              const VM h = shift_cache[j];
              Rnd::prod(n, p);
#pragma unroll
              for (int k = 0; k < N; ++k) n[k] = __fadd_rn(n[k], to_float(h.v[k]));
            }
            pack_from_float<To, N>(n).store(orow + static_cast<int64_t>(j) * N);
          }
        }
      }
    }
  }
  cp_async_wait<0>();  // only empty groups can remain; leave nothing queued at exit
}

// adaln's common call: x, scale, shift and out of one half dtype (bf16 / fp16), no weight,
// 16-byte vectors, rows of at most kDirectCached * kDirectBlock vectors (D <= 8192: every
// LTX / FLUX / Wan / DiT width). rms_norm_direct_kernel's scheme (rmsnorm.cu), which beat
// a cp.async row pipeline like adaln_stream_kernel's by 7-17% there: C = 4 vectors of a
// row per thread loaded straight into registers, one row group per 256-thread block,
// registers capped so several blocks share an SM (bytes in flight per SM are what count).
// The modulation rows are read once per row: when they broadcast ([B, 1, D]) they are L2
// hits. Early (kModEarly): scale and shift are loaded with x, before the reduction, so their
// bytes are in flight during it (per-token modulation: they are half of what the call
// reads), at the price of registers (sm_90: 90-106 against 56-64, so 2 blocks per SM
// instead of 4; capped for 3 it spilled in bf16); late: after it. Staged (kModStaged, the
// default where it fits): queued with x into shared memory by cp.async, early at no
// register cost (sm_90: 55-64 registers, 4 blocks per SM; 48 and 5 since x is zeroed first).
// Rounding: the Plain form of adaln_launch (norm, 1 + scale, product and sum each rounded
// to T once, like eager's ops), the product and the sum as packed pair ops (mul_rn /
// add_rn in common/vec.cuh), as in adaln_stream_kernel. Rows: grid-stride
// (common/row_order.cuh).
constexpr int kDirectBlock = 256;
constexpr int kDirectCached = 4;

// When and how the kernel reads scale / shift (kMod): after the reduction (late); with x's
// loads, into registers (early); or with x's loads, into shared memory by cp.async (staged:
// early, but the bytes in flight hold no registers; each thread reads back only its own
// slots, so no barrier; common/async_copy.cuh). Template ints, not an enum (see rms_norm_kernel).
// kModStagedStream (the default for per-token modulation where staged fits): staged, with x
// loaded without allocating in L1 (Vec::load_stream). A per-token call reads nothing twice,
// so L1 lines buy it nothing. H100 bf16, 2026-12-06 07:48 (RESULTS.md, clean cold L2,
// medians of 3): per-token [2, 8064, 2048] 85.54 -> 84.77 µs; with broadcast modulation it
// lost 1.4-2.0% (LTX RMS 44.38 -> 45.25, 13B 87.10 -> 88.54, LayerNorm 45.41 -> 46.05) but
// for FLUX's LayerNorm (23.78 -> 23.33), so broadcast calls keep x in L1. A compile-time
// form: the same choice as a run-time flag cost the staged kernel 21-25% (06:10).
constexpr int kModLate = 0, kModEarly = 1, kModStaged = 2, kModStagedStream = 3;
// The forms that queue the modulation into shared memory.
constexpr bool mod_staged(int mod) { return mod == kModStaged || mod == kModStagedStream; }

// Blocks of kDirectBlock threads per SM the register cap aims for (kAdaDirectMinBlocks).
// C = 4 late / staged: 5 on sm_80-90 (80 KB of x in flight per SM), since x is zeroed before
// its conditional loads (Vec::set_zero, 2026-12-07: the bf16 forms need 48 registers, not 64;
// 4 blocks before, LTX_KERNELS_BLOCKS_PER_SM=4 gives that back); 4 on sm_75 (1024 threads
// per SM) and sm_100 (CUDA 13.0's ptxas spilled 12-124 bytes of the bf16 forms there under
// the cap for 5); 3 on sm_120 (it spilled 8 bytes of the bf16 LayerNorm instantiation there
// under the cap for 4). C = 4 early: 2. C = 2 (per-token modulation, below) holds half the
// vectors: 4 even loading early. H100 bf16, 2026-12-07 22:07 (RESULTS.md, medians of 3),
// 5 blocks against 4: [2, 8064, 2048] broadcast RMS / LayerNorm and per-token level
// (44.26 / 45.25 / 84.29 µs against 44.32 / 45.31 / 84.29), FLUX LayerNorm [1, 4608, 3072]
// 22.88 -> 22.08.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
constexpr int kAdaDirectC4Blocks = 3;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
constexpr int kAdaDirectC4Blocks = 4;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
constexpr int kAdaDirectC4Blocks = 5;
#else
constexpr int kAdaDirectC4Blocks = 4;
#endif
template <int kMod, int C>
constexpr int kAdaDirectMinBlocks = C <= 2 ? 4 : kMod == kModEarly ? 2 : kAdaDirectC4Blocks;

// C: vectors of a row per thread: 4 when staged (the default where it fits, see
// launch_adaln_direct); in the register forms 2 for per-token modulation (loaded early) with
// rows of at most 2 * kDirectBlock vectors, else 4. C = 2 loading early keeps 4 blocks per SM
// (the C = 4 early form fits 2) with 96 KB in flight per SM. H200, 2026-12-05 10:32 (RESULTS.md):
// per-token [2, 8064, 2048] 63.57 -> 62.74 µs (C = 2 late 69.7); with the broadcast
// modulation ([B, 1, D]) C = 2 lost 17-28% in either load order (37.7 -> 44.2 at 2x8064x2048),
// so it stays 4 there. LTX_KERNELS_ADALN_C=2 / 4 (read per call: an A/B switch) forces it.
// C = 1 (one vector per thread, a row per block at D = 2048, 42-48 registers, 5-6 blocks per
// SM, as inductor's 512-thread-per-row kernels) lost everywhere: H100 bf16 2026-12-05 21:28,
// [2, 8064, 2048] broadcast 45.57 -> 60.0 µs, per-token 86.05 -> 87.06, LayerNorm 48.1 -> 71.4.
// C = 8 (late, a warp per row at D = 2048, no barrier, 3 blocks per SM: 96 KB of x in flight)
// lost on the H100 at every shape, 2026-12-07 22:07: [2, 8064, 2048] broadcast RMS 44.26 ->
// 50.08 µs, LayerNorm 45.25 -> 50.46, per-token 84.29 -> 91.68, FLUX LayerNorm 22.08 -> 23.36
// (its 8 late modulation round trips after the reduction, one per vector); deleted.
// kShift: LayerNorm's per-thread statistics in one pass (shifted_mean_m2; candidate).
template <typename T, bool kLayer, int kMod, int C, bool kShift = false>
__global__ void __launch_bounds__(kDirectBlock, kAdaDirectMinBlocks<kMod, C>)
    adaln_direct_kernel(AdaLnParams p) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  constexpr bool kEarly = kMod == kModEarly;
  constexpr bool kStaged = mod_staged(kMod);
  constexpr int CM = kEarly ? C : 1;  // modulation vectors held across the reduction
  using V = Vec<T, N>;
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};
  // kStaged: this thread's C scale then C shift vectors, slot-major so that a warp's
  // 16-byte slots are consecutive (C = 4: 32 KB per block).
  __shared__ uint4 staged_mem[kStaged ? 2 * C * kDirectBlock : 1];
  auto slot = [&](int m, int i) -> uint4* {
    return &staged_mem[(m * C + i) * kDirectBlock + threadIdx.x];
  };
  const T* x = static_cast<const T*>(p.x);
  const T* scale = static_cast<const T*>(p.scale);
  const T* shift = static_cast<const T*>(p.shift);
  T* out = static_cast<T*>(p.out);
  const int nvec = p.cols / N;
  const RowGroup rg = row_group_pow2(p.tpr);
  const int lane = rg.lane;
  const bool has_shift = shift != nullptr;
  V ones;
#pragma unroll
  for (int k = 0; k < N; ++k) ones.v[k] = from_float<T>(1.0f);
  // Every thread runs the same number of iterations: row_sum needs all of them.
  const BlockRows br = block_rows(p.rows, rg.groups);
  for (int64_t base = br.begin; base < br.end; base += br.step) {
    const int64_t row = base + rg.group;
    const bool active = row < br.end;
    const int64_t r = active ? row : 0;  // an inactive group loads nothing
    const T* xr = x + r * p.x_stride;
    int64_t off[2];
    // f(i, scale_offset, shift_offset) for each of this thread's vectors of the modulation
    // row (element offsets), for the early and staged forms.
    auto each_mod_vector = [&](auto f) {
      p.rs.offsets<2, true>(r, off);
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int j = lane + i * p.tpr;
        if (active && j < nvec) f(i, off[0] + j * N, off[1] + j * N);
      }
    };
    if constexpr (kStaged) {
      // Queued before x's loads, while no x register is live yet (bf16 C = 4: queued after
      // them, the addresses spilled at 64 registers). Through L1 (.ca): broadcast rows are
      // read again by the SM's other row groups.
      each_mod_vector([&](int i, int64_t so, int64_t ho) {
        cp_async<16, true>(slot(0, i), scale + so);
        if (has_shift) cp_async<16, true>(slot(1, i), shift + ho);
      });
      cp_async_commit();
    }
    V xc[C], sc[CM], hc[CM];
    // Zeroed first (Vec::set_zero): left undefined, bf16 vectors were kept in 16-bit pieces
    // (sm_90 C = 4: 64 registers at the cap instead of 48).
#pragma unroll
    for (int i = 0; i < C; ++i) xc[i].set_zero();
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int j = lane + i * p.tpr;
      if (active && j < nvec) {
        if constexpr (kMod == kModStagedStream) {
          xc[i] = V::load_stream(xr + j * N);
        } else {
          xc[i] = V::load(xr + j * N);
        }
      }
    }
    if constexpr (kEarly) {
      each_mod_vector([&](int i, int64_t so, int64_t ho) {
        sc[i] = V::load(scale + so);
        if (has_shift) hc[i] = V::load(shift + ho);
      });
    }

    float mean;
    const float inv = cached_row_inv<C, N, kLayer, kShift>(
        active, rg, nvec, p.inv_cols, p.eps, scratch,
        [&](int i, int k) { return to_float(xc[i].v[k]); }, mean, p.per_thread,
        p.inv_per_thread);
    if (!active) continue;

    if constexpr (kMod == kModLate) p.rs.offsets<2, true>(row, off);
    if constexpr (kStaged) cp_async_wait<0>();
    T* orow = out + row * p.out_stride;
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int j = lane + i * p.tpr;
      if (j >= nvec) continue;
      V sv, hv;
      if constexpr (kEarly) {
        sv = sc[i];
        hv = hc[i];
      } else if constexpr (kStaged) {
        sv = read_slot<V>(slot(0, i));
        if (has_shift) hv = read_slot<V>(slot(1, i));
      } else {
        sv = V::load(scale + off[0] + j * N);
        if (has_shift) hv = V::load(shift + off[1] + j * N);
      }
      float n[N];
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float xk = kLayer ? to_float(xc[i].v[k]) - mean : to_float(xc[i].v[k]);
        n[k] = __fmul_rn(xk, inv);
      }
      // 1 + scale as a packed add: the exact sum rounded once to T, which is what eager's
      // fp32 add then rounding to T gives (that sum is exact in fp32 or rounds to T alike).
      V o = mul_rn(pack_from_float<T, N>(n), add_rn(ones, sv));
      if (has_shift) o = add_rn(o, hv);
      o.store(orow + j * N);
    }
  }
}

// Whether the staged form runs as planned on this device: cp.async (sm_80+) and 4 blocks
// per SM with their 32 KB of slots each (sm_80 / 90 / 100 have 164-228 KB of shared memory
// per SM; sm_86 / 89 / 120 have 100 KB, 3 blocks, untimed: they keep the register forms).
template <typename T, bool kLayer>
bool staged_fits(int device) {
  static int fits[64] = {};
  const auto kernel = adaln_direct_kernel<T, kLayer, kModStaged, kDirectCached>;
  return staging_fits(fits, reinterpret_cast<const void*>(kernel), kDirectBlock, 4, device);
}

// Launches adaln_direct_kernel for a call it takes (see above; the caller checked the
// dtypes, the weight and the rounding form); false, launching nothing, otherwise.
// per_token: every row has its own modulation row (C = 2 then in the register forms).
// mod: kModLate / kModEarly / kModStaged / kModStagedStream forced, or -1: staged where it
// fits (staged_fits; per-token modulation with x loaded past L1: kModStagedStream), else
// early for per-token modulation and late for broadcast modulation.
// Staged is the default since the H200 A/B of 2026-12-06 03:08 (RESULTS.md; bf16, clean
// cold L2, medians of 3): it keeps the early form's bytes in flight without its registers.
// Broadcast [2, 8064, 2048] RMS 37.50 -> 35.01 µs, [2, 8064, 4096] 69.79 -> 67.23,
// LayerNorm [2, 8064, 2048] 41.92 -> 40.29, [1, 4608, 3072] 22.66 -> 22.14; per-token
// [2, 8064, 2048] (C = 2 early) 63.60 -> 63.17 (C = 4 staged; C = 2 staged 63.47). Early
// into registers at C = 4 fits 2 blocks per SM: 47.0 µs there.
template <typename T, bool kLayer>
bool launch_adaln_direct(AdaLnParams p, int vec, int mod, bool per_token, int device,
                         cudaStream_t stream) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  const int64_t nvec = p.cols / vec;
  if (vec != N || nvec > static_cast<int64_t>(kDirectCached) * kDirectBlock) return false;
  if (mod < 0) {
    mod = staged_fits<T, kLayer>(device) ? (per_token ? kModStagedStream : kModStaged)
                                         : (per_token ? kModEarly : kModLate);
  }
  // C = 2 for per-token rows in the register forms (see the kernel), unless forced.
  const std::string_view c_switch = ab_switch("LTX_KERNELS_ADALN_C");
  const bool c2 = nvec <= 2LL * kDirectBlock &&
                  (c_switch == "2" || (c_switch != "4" && per_token && !mod_staged(mod)));
  p.tpr = pow2_ceil(ceil_div(nvec, c2 ? 2 : kDirectCached));
  set_ln_merge(p, vec, c2 ? 2 : kDirectCached);
  const int64_t groups = kDirectBlock / p.tpr;
  // LayerNorm's per-thread statistics in one pass (candidate, kShift): only where the merge
  // form runs (every thread the same count).
  const bool shift =
      kLayer && p.per_thread > 0.f && ab_switch("LTX_KERNELS_ADALN_LN") == "shift";
  auto go = [&](auto c, auto sh) {
    constexpr int C = decltype(c)::value;
    constexpr bool kShift = decltype(sh)::value;
    auto run = [&](auto kernel) { launch_rows(kernel, p, kDirectBlock, groups, device, stream); };
    switch (mod) {
      case kModEarly: run(adaln_direct_kernel<T, kLayer, kModEarly, C, kShift>); break;
      case kModStaged: run(adaln_direct_kernel<T, kLayer, kModStaged, C, kShift>); break;
      case kModStagedStream: run(adaln_direct_kernel<T, kLayer, kModStagedStream, C, kShift>); break;
      default: run(adaln_direct_kernel<T, kLayer, kModLate, C, kShift>); break;
    }
  };
  auto go_c = [&](auto c) {
    if constexpr (kLayer) {
      if (shift) return go(c, std::true_type{});
    }
    go(c, std::false_type{});
  };
  c2 ? go_c(std::integral_constant<int, 2>{}) : go_c(std::integral_constant<int, kDirectCached>{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// ---- gated residual ------------------------------------------------------------------

struct GateParams {
  const void* x;
  const void* y;
  const void* gate;
  void* out;
  int64_t rows;
  int64_t x_stride;
  int64_t out_stride;
  RowSpace rs;  // operand 0: y, 1: gate
  int cols;
  int tpr;
  Round prod;
  int dx, dy, dg, dout;
};

// kProd: the product's rounding fixed at compile time; kRuntimeProd: read p.prod instead
// (generic kernel).
// (kProd is a Round as int: see rms_norm_kernel in rmsnorm.cu for why not the enum.)
template <class IoX, class IoY, class IoG, class IoO, int kCached, int kProd, bool kRuntimeProd>
__global__ void __launch_bounds__(kMaxRowThreads, 1) gated_residual_kernel(GateParams p) {
  constexpr int N = IoX::kN;
  static_assert(IoY::kN == N && IoG::kN == N && IoO::kN == N, "one vector width");
  // One half dtype throughout: x + round(y * gate) as two packed ops, each rounded once
  // like eager's (mul_rn / add_rn in common/vec.cuh).
  using Elem = typename IoElem<IoX>::type;
  constexpr bool kPacked = std::is_same_v<IoX, IoY> && std::is_same_v<IoX, IoG> &&
                           std::is_same_v<IoX, IoO> && N % 2 == 0 &&
                           (std::is_same_v<Elem, __half> || std::is_same_v<Elem, __nv_bfloat16>);
  const int nvec = p.cols / N;
  const int lane = threadIdx.x % p.tpr;
  const int groups = blockDim.x / p.tpr;

  for (int64_t row = static_cast<int64_t>(blockIdx.x) * groups + threadIdx.x / p.tpr;
       row < p.rows; row += static_cast<int64_t>(gridDim.x) * groups) {
    int64_t off[2];
    p.rs.offsets<2, true>(row, off);
    const int64_t xo = row * p.x_stride;
    const int64_t oo = row * p.out_stride;
    // Batches of kCached vectors: all loads first (bytes in flight), then the stores.
    for (int j0 = lane; j0 < nvec; j0 += kCached * p.tpr) {
      typename IoX::Raw xc[kCached];
      typename IoY::Raw yc[kCached];
      typename IoG::Raw gc[kCached];
#pragma unroll
      for (int i = 0; i < kCached; ++i) {
        const int j = j0 + i * p.tpr;
        if (j < nvec) {
          const int64_t e = static_cast<int64_t>(j) * N;
          xc[i] = IoX::load(p.x, xo + e, p.dx);
          yc[i] = IoY::load(p.y, off[0] + e, p.dy);
          gc[i] = IoG::load(p.gate, off[1] + e, p.dg);
        }
      }
#pragma unroll
      for (int i = 0; i < kCached; ++i) {
        const int j = j0 + i * p.tpr;
        if (j < nvec) {
          if constexpr (kPacked && !kRuntimeProd && kProd == static_cast<int>(RoundOf<Elem>::value)) {
            add_rn(xc[i], mul_rn(yc[i], gc[i])).store(static_cast<Elem*>(p.out) + oo + static_cast<int64_t>(j) * N);
          } else {
            float o[N];
#pragma unroll
            for (int k = 0; k < N; ++k) o[k] = __fmul_rn(IoY::get(yc[i], k), IoG::get(gc[i], k));
            if constexpr (kRuntimeProd) {
              round_all(o, p.prod);
            } else {
              round_all<static_cast<Round>(kProd)>(o);
            }
#pragma unroll
            for (int k = 0; k < N; ++k) o[k] = __fadd_rn(IoX::get(xc[i], k), o[k]);
            IoO::store(p.out, oo + static_cast<int64_t>(j) * N, p.dout, o);
          }
        }
      }
    }
  }
}


// Launches adaln_stream_kernel on a persistent grid: as many blocks as fit on the GPU at
// once (resident_blocks), each over a contiguous chunk of rows (a multiple of the rows per
// block, so every block but the last is full). False, launching nothing, when its shared
// memory would not fit.
template <typename Tx, typename Tm, typename To, int N, bool kLayer, class Rnd>
bool launch_adaln_stream(AdaLnParams p, const RowPlan& l, int64_t mod_run, int device,
                         cudaStream_t stream) {
  auto kernel = adaln_stream_kernel<Tx, Tm, To, N, kLayer, Rnd>;
  set_ln_merge(p, N, kStreamCached);
  // Shared memory: the modulation cache, then `stages` rows of x per group. Three stages
  // where they fit in the 48 KB a block gets without opting in (less the kernel's static
  // reduction scratch), else two (D = 5120 bf16), else the call stays on adaln_kernel
  // (D = 6144 and 8192 bf16: no LTX / FLUX / Wan / DiT width).
  const size_t mod_bytes = static_cast<size_t>(2) * kStreamCached * l.block * sizeof(Vec<Tm, N>);
  const size_t row_bytes = static_cast<size_t>(kStreamCached) * l.block * sizeof(Vec<Tx, N>);
  constexpr size_t kSmemLimit = 48 * 1024 - kRowScratchFloats * sizeof(float);
  int stages = kStreamStages;
  while (stages >= 2 && mod_bytes + stages * row_bytes > kSmemLimit) --stages;
  if (stages < 2) return false;
  const size_t smem = mod_bytes + stages * row_bytes;
  const int occ = resident_blocks(reinterpret_cast<const void*>(kernel), l.block, smem, device);
  const int groups = l.block / l.tpr;
  const int64_t want = std::min<int64_t>(ceil_div(p.rows, groups),
                                         static_cast<int64_t>(sm_count(device)) * occ);
  const int64_t chunk = ceil_div(ceil_div(p.rows, want), groups) * groups;
  const auto grid = static_cast<unsigned>(ceil_div(p.rows, chunk));
  kernel<<<grid, l.block, smem, stream>>>(p, chunk, mod_run, stages);
  return true;
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void adaln_launch(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& scale,
                  const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
                  const RowSpace& rows, double eps, AdaLnNorm norm, const AdaLnRounding& r) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(x2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x2d.device().index()).stream();

  AdaLnParams p{};
  p.x = x2d.const_data_ptr();
  p.scale = scale.const_data_ptr();
  p.shift = shift ? shift->const_data_ptr() : nullptr;
  p.w = weight ? weight->const_data_ptr<float>() : nullptr;
  p.out = out2d.mutable_data_ptr();
  p.rows = x2d.size(0);
  p.x_stride = x2d.size(0) > 1 ? x2d.stride(0) : 0;
  p.out_stride = out2d.size(0) > 1 ? out2d.stride(0) : 0;
  p.rs = rows;
  TORCH_CHECK(x2d.size(1) <= INT32_MAX, "ltx_kernels.adaln: last dim too large");
  p.cols = static_cast<int>(x2d.size(1));
  p.eps = static_cast<float>(eps);
  p.inv_cols = 1.0f / static_cast<float>(p.cols);
  p.layer = norm == AdaLnNorm::kLayer;
  p.mid = round_kind(r.mid);
  p.norm = round_kind(r.norm);
  p.scale1 = round_kind(r.scale1);
  p.prod = round_kind(r.prod);
  const at::ScalarType xt = x2d.scalar_type(), st = scale.scalar_type(),
                       ht = shift ? shift->scalar_type() : st, ot = out2d.scalar_type();
  p.dx = dtype_code(xt);
  p.ds = dtype_code(st);
  p.dh = dtype_code(ht);
  p.dout = dtype_code(ot);

  const int vec = pick_vec_width(
      p.cols, {{p.x, x2d.element_size(), p.x_stride},
               {p.out, out2d.element_size(), p.out_stride},
               {p.scale, scale.element_size(), rows.stride_gcd(0)},
               {p.shift ? p.shift : p.scale, shift ? shift->element_size() : scale.element_size(),
                rows.stride_gcd(shift ? 1 : 0)}});
  const int64_t widest = std::max({x2d.element_size(), out2d.element_size(), scale.element_size(),
                                   shift ? shift->element_size() : 1});
  if (p.rows == 0 || p.cols == 0) return;
  const RowPlan l = plan_rows(p.rows, p.cols / vec, cached_for(static_cast<int>(vec * widest)),
                              x2d.device().index(), /*min_cache=*/vec * widest == 16 ? 2 : 1);
  p.tpr = l.tpr;
  const int device = x2d.device().index();
  // Runs of consecutive rows that share their scale/shift row: the innermost row-space
  // dim broadcasts in both operands (e.g. [B, 1, D] against x [B, T, D]), or one row.
  constexpr int kInner = kMaxRowDims - 1;
  const int64_t mod_run = rows.ndim == 0 ? p.rows
                          : rows.stride[0][kInner] == 0 && rows.stride[1][kInner] == 0
                              ? rows.size[kInner]
                              : 1;

  // adaln_direct_kernel takes one half dtype throughout, no weight, the Plain rounding form
  // (below), loading the modulation early when every row has its own (H200, 2026-12-05,
  // benchmarks/ab_kernels.py: 6-21% faster than the kernels below at every LTX / FLUX shape,
  // the early / late choice the faster of the two at each). LTX_KERNELS_ADALN_KERNEL=row
  // (read per call: a developer's A/B switch) sends the call to the kernels below instead.
  const bool direct_ok = ab_switch("LTX_KERNELS_ADALN_KERNEL") != "row";
  if (direct_ok && p.w == nullptr && xt == st &&
      xt == ht && xt == ot && (xt == at::kBFloat16 || xt == at::kHalf)) {
    // LTX_KERNELS_ADALN_MOD=early / late / staged / staged-stream (an A/B switch, read per
    // call) forces when and how the modulation is read (staged forms: sm_80+).
    const std::string_view mod_switch = ab_switch("LTX_KERNELS_ADALN_MOD");
    const int mod = mod_switch == "early"           ? kModEarly
                    : mod_switch == "late"          ? kModLate
                    : mod_switch == "staged"        ? kModStaged
                    : mod_switch == "staged-stream" ? kModStagedStream
                                                    : -1;  // launch_adaln_direct chooses
    bool direct = false;
    dispatch_float(xt, [&](auto t) {
      using T = typename decltype(t)::type;
      if constexpr (!std::is_same_v<T, float>) {
        constexpr Round rt = RoundOf<T>::value;
        if (p.mid != Round::kNone || p.norm != rt || p.scale1 != rt || p.prod != rt) return;
        direct = p.layer ? launch_adaln_direct<T, true>(p, vec, mod, mod_run == 1, device, stream)
                         : launch_adaln_direct<T, false>(p, vec, mod, mod_run == 1, device, stream);
      }
    });
    if (direct) return;
  }

  // Fast paths: x, scale/shift and out all of one dtype, or half x with fp32
  // modulation (and fp32 out); vector width >= 2.
  // The typed kernels fix the rounding points at compile time, in one of two forms the
  // front end produces for these dtype pairs (rx / rm: x's / the modulation's rounding):
  //   (mid, norm, 1+scale, prod) = (none, rx, rm, rm): no weight, or LayerNorm's weight
  //                              = (rx,   rx, rm, rm): RMSNorm with a weight of x's dtype
  // Anything else (an fp32 or other-dtype weight on half x) takes the generic kernel.
  bool done = false;
  auto try_fast = [&](auto xtag, auto mtag, auto otag) {
    using Tx = typename decltype(xtag)::type;
    using Tm = typename decltype(mtag)::type;
    using To = typename decltype(otag)::type;
    constexpr Round rx = RoundOf<Tx>::value, rm = RoundOf<Tm>::value;
    // Which form this call needs: weighted_rms for RMSNorm with a weight, else plain.
    const bool weighted_rms = p.w != nullptr && !p.layer;
    const bool tail = p.scale1 == rm && p.prod == rm && p.norm == rx;
    if (!tail || p.mid != (weighted_rms ? rx : Round::kNone)) return;
    constexpr int ix = static_cast<int>(rx), im = static_cast<int>(rm);
    dispatch_vec(vec, [&](auto n) {
      constexpr int N = decltype(n)::value;
      constexpr size_t widest = std::max({sizeof(Tx), sizeof(Tm), sizeof(To)});
      if constexpr (N >= 2 && N * widest <= 16) {
        // A second cached vector only at full 16-byte width: narrower vectors (misaligned
        // views) with two or more cached would spill; they re-read the rest instead.
        auto go = [&](auto w, auto layer, auto rnd) {
          constexpr bool kW = decltype(w)::value, kL = decltype(layer)::value;
          using R = decltype(rnd);
          if (l.cache >= 2 && N * widest == 16) {
            adaln_kernel<TypedIo<Tx, N>, TypedIo<Tm, N>, TypedIo<To, N>, 2, kW, kL, R>
                <<<l.grid, l.block, 0, stream>>>(p);
          } else {
            adaln_kernel<TypedIo<Tx, N>, TypedIo<Tm, N>, TypedIo<To, N>, 1, kW, kL, R>
                <<<l.grid, l.block, 0, stream>>>(p);
          }
        };
        using Plain = FixedRounds<0, ix, im, im>;
        using WeightedRms = FixedRounds<ix, ix, im, im>;
        // The streaming kernel: full-width vectors only (instantiated for those alone).
        auto try_stream = [&]() {
          if constexpr (N * widest == 16) {
            // Per-token modulation (a new scale/shift row every row) stays on adaln_kernel:
            // 2026-12-03 bench, bf16 2x8064x2048: 83.0 µs here vs 79 µs there (v5).
            if (p.w != nullptr || mod_run < 2 || p.cols / N > kStreamCached * l.tpr) return false;
            return p.layer
                       ? launch_adaln_stream<Tx, Tm, To, N, true, Plain>(p, l, mod_run, device, stream)
                       : launch_adaln_stream<Tx, Tm, To, N, false, Plain>(p, l, mod_run, device, stream);
          } else {
            return false;
          }
        };
        if (try_stream()) {
          // launched: the streaming kernel
        } else if (p.w == nullptr) {
          if (p.layer) {
            go(std::false_type{}, std::true_type{}, Plain{});
          } else {
            go(std::false_type{}, std::false_type{}, Plain{});
          }
        } else if (p.layer) {
          go(std::true_type{}, std::true_type{}, Plain{});
        } else {  // weighted_rms
          go(std::true_type{}, std::false_type{}, WeightedRms{});
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        done = true;
      }
    });
  };
  if (st == ht && vec >= 2) {
    if (xt == st && ot == xt) {
      dispatch_float(xt, [&](auto t) { try_fast(t, t, t); });
    } else if (st == at::kFloat && ot == at::kFloat && xt != at::kFloat) {
      dispatch_float(xt, [&](auto t) {
        using T = typename decltype(t)::type;
        if constexpr (!std::is_same_v<T, float>) try_fast(t, TypeTag<float>{}, TypeTag<float>{});
      });
    }
  }
  if (!done) {
    // one cached vector (the rest is re-read); the weight is a run-time branch here
    auto go = [&](auto w, auto layer) {
      constexpr bool kW = decltype(w)::value, kL = decltype(layer)::value;
      adaln_kernel<AnyIo, AnyIo, AnyIo, 1, kW, kL, RuntimeRounds><<<l.grid, l.block, 0, stream>>>(p);
    };
    if (p.w != nullptr) {
      p.layer ? go(std::true_type{}, std::true_type{}) : go(std::true_type{}, std::false_type{});
    } else {
      p.layer ? go(std::false_type{}, std::true_type{}) : go(std::false_type{}, std::false_type{});
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

void gated_residual_launch(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& y,
                           const at::Tensor& gate, const RowSpace& rows, at::ScalarType prod) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(x2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x2d.device().index()).stream();

  GateParams p{};
  p.x = x2d.const_data_ptr();
  p.y = y.const_data_ptr();
  p.gate = gate.const_data_ptr();
  p.out = out2d.mutable_data_ptr();
  p.rows = x2d.size(0);
  p.x_stride = x2d.size(0) > 1 ? x2d.stride(0) : 0;
  p.out_stride = out2d.size(0) > 1 ? out2d.stride(0) : 0;
  p.rs = rows;
  TORCH_CHECK(x2d.size(1) <= INT32_MAX, "ltx_kernels.gated_residual: last dim too large");
  p.cols = static_cast<int>(x2d.size(1));
  p.prod = round_kind(prod);
  const at::ScalarType xt = x2d.scalar_type(), yt = y.scalar_type(), gt = gate.scalar_type(),
                       ot = out2d.scalar_type();
  p.dx = dtype_code(xt);
  p.dy = dtype_code(yt);
  p.dg = dtype_code(gt);
  p.dout = dtype_code(ot);

  const int vec = pick_vec_width(p.cols, {{p.x, x2d.element_size(), p.x_stride},
                                          {p.out, out2d.element_size(), p.out_stride},
                                          {p.y, y.element_size(), rows.stride_gcd(0)},
                                          {p.gate, gate.element_size(), rows.stride_gcd(1)}});
  const int64_t widest = std::max({x2d.element_size(), out2d.element_size(), y.element_size(),
                                   gate.element_size()});
  if (p.rows == 0 || p.cols == 0) return;
  const RowPlan l = plan_rows(p.rows, p.cols / vec, cached_for(static_cast<int>(vec * widest)),
                              x2d.device().index());
  p.tpr = l.tpr;

  // Fast paths: one dtype throughout, or fp32 x/gate/out with a half y (Wan's
  // x.float() + attn_out * gate); vector width >= 2.
  bool done = false;
  // The typed kernels round the product to x's dtype (one dtype throughout) or not at all
  // (fp32 x and gate): RoundOf<Tx> in both; anything else takes the generic kernel.
  auto try_fast = [&](auto xtag, auto ytag) {
    using Tx = typename decltype(xtag)::type;
    using Ty = typename decltype(ytag)::type;
    constexpr int kP = static_cast<int>(RoundOf<Tx>::value);
    if (static_cast<int>(p.prod) != kP) return;
    dispatch_vec(vec, [&](auto n) {
      constexpr int N = decltype(n)::value;
      constexpr size_t widest = std::max(sizeof(Tx), sizeof(Ty));
      if constexpr (N >= 2 && N * widest <= 16) {
        if (l.cache >= 2 && N * widest == 16) {
          gated_residual_kernel<TypedIo<Tx, N>, TypedIo<Ty, N>, TypedIo<Tx, N>, TypedIo<Tx, N>, 2, kP, false>
              <<<l.grid, l.block, 0, stream>>>(p);
        } else {  // one vector per thread and batch (the batch loop covers any row length)
          gated_residual_kernel<TypedIo<Tx, N>, TypedIo<Ty, N>, TypedIo<Tx, N>, TypedIo<Tx, N>, 1, kP, false>
              <<<l.grid, l.block, 0, stream>>>(p);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
        done = true;
      }
    });
  };
  if (vec >= 2 && gt == xt && ot == xt) {
    if (yt == xt) {
      dispatch_float(xt, [&](auto t) { try_fast(t, t); });
    } else if (xt == at::kFloat) {
      dispatch_float(yt, [&](auto t) { try_fast(TypeTag<float>{}, t); });
    }
  }
  if (!done) {
    gated_residual_kernel<AnyIo, AnyIo, AnyIo, AnyIo, 2, 0, true>
        <<<l.grid, l.block, 0, stream>>>(p);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  }
}

}  // namespace ltx
