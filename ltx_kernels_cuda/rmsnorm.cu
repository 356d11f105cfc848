// RMSNorm forward on CUDA.
//
// Three kernels. rms_norm_direct_kernel takes the common call (x, weight and out of one
// dtype, 16-byte vectors, D <= 8192 half / 4096 fp32), rms_norm_short_kernel the same
// calls' short rows (per-head norms of many tokens). rms_norm_kernel takes every other
// one (mixed dtypes, narrow vectors, long rows): one group of `tpr` threads per row
// (tpr = 1..512, a power of two; several rows per block when tpr < block size), each
// thread keeping up to kCached vectors of its row in registers, so x is read from memory
// once; rows longer than tpr * kCached vectors re-read the remainder in the second pass.
// Sum of squares in fp32, rounding points given by `mid` (see torch_binding.h).
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

constexpr int kCached = 4;            // vectors per thread held in registers
constexpr int kTargetPerThread = 4;   // vectors per thread the launch aims for
constexpr int kBlock = 256;           // threads per block when rows are short

struct RmsNormParams {
  const void* x;
  const void* w;  // nullptr: no weight
  void* out;
  int64_t rows;
  int64_t x_stride;    // elements between rows
  int64_t out_stride;  // elements between rows
  int cols;
  int tpr;         // threads per row (a power of two)
  float eps;
  float inv_cols;  // 1 / cols, worked out by the host (a division in front of the first load)
};

// out[j-th vector] = round_out(round_mid(v * inv) * w) for one vector of a row. kMid is
// fixed at compile time (a run-time kind would be a branch per element).
template <typename Tw, typename To, int N, Round kMid, typename VX>
__device__ __forceinline__ void normalize_store(const VX v, const Tw* w, To* orow, int j,
                                                float inv) {
  float o[N];
  if (w != nullptr) {
    const Vec<Tw, N> wv = Vec<Tw, N>::load(w + j * N);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = to_float(v.v[k]) * inv;
    round_all<kMid>(o);
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] *= to_float(wv.v[k]);
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) o[k] = to_float(v.v[k]) * inv;
    round_all<kMid>(o);
  }
  pack_from_float<To, N>(o).store(orow + j * N);
}

// A thread's first C vectors of a row into `cache` (vector j = lane + i * tpr; none for an
// inactive row or past the row's end).
template <int C, typename T, int N>
__device__ __forceinline__ void load_cached(Vec<T, N> (&cache)[C], const T* xr, int lane, int tpr,
                                            int nvec, bool active) {
  // Zeroed first (Vec::set_zero): left undefined, nvcc 13.0 kept the bf16 vectors in 16-bit
  // pieces on sm_90 / 100 / 120 (sm_90 bf16 C = 4: 64 -> 47 registers, under the cap for 5
  // blocks, see kDirectMinBlocks).
#pragma unroll
  for (int i = 0; i < C; ++i) cache[i].set_zero();
#pragma unroll
  for (int i = 0; i < C; ++i) {
    const int j = lane + i * tpr;
    if (active && j < nvec) cache[i] = Vec<T, N>::load(xr + j * N);
  }
}

// The fp32 sum of squares of the vectors load_cached gave, added as a tree (tree_sum: the
// chain after the loads is log2(C * N) adds deep, not C * N). Both kernels use it, so they
// add in the same order.
template <typename T, int N>
__device__ __forceinline__ float vec_sum_squares(const Vec<T, N>& v) {
  float sq[N];
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float f = to_float(v.v[k]);
    sq[k] = f * f;
  }
  return tree_sum(sq);
}

template <int C, typename T, int N>
__device__ __forceinline__ float cached_sum_squares(const Vec<T, N> (&cache)[C], int lane, int tpr,
                                                    int nvec, bool active) {
  float part[C];  // per vector; a vector outside the row (never loaded) is not read
#pragma unroll
  for (int i = 0; i < C; ++i) part[i] = active && lane + i * tpr < nvec ? vec_sum_squares(cache[i]) : 0.f;
  return tree_sum(part);
}

// Threads per row stop at 512 (no __launch_bounds__: forcing 1024 threads caps
// registers at 64 and spills on sm_100); the launch also respects the compiled
// kernel's own thread limit. Rows longer than 512 * kCached vectors (16K bf16
// elements) re-read their tail, mostly from L2.
constexpr int kMaxBlock = 512;

// kMid: a Round as int (g++ 12 cannot parse the launch stub nvcc writes for an enum-class
// template argument of a kernel taken by address: "insufficient contextual information").
template <typename Tx, typename Tw, typename To, int N, int kMid>
__global__ void rms_norm_kernel(RmsNormParams p) {
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};
  using VX = Vec<Tx, N>;
  const Tx* x = static_cast<const Tx*>(p.x);
  const Tw* w = static_cast<const Tw*>(p.w);
  To* out = static_cast<To*>(p.out);

  const int nvec = p.cols / N;
  const RowGroup rg = row_group_pow2(p.tpr);
  const int lane = rg.lane;
  const int groups = rg.groups;

  // Every thread runs the same number of iterations: row_sum needs all of them.
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < p.rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + rg.group;
    const bool active = row < p.rows;
    const Tx* xr = x + (active ? row : 0) * p.x_stride;
    To* orow = out + (active ? row : 0) * p.out_stride;

    VX cache[kCached];
    load_cached(cache, xr, lane, p.tpr, nvec, active);
    float ss = cached_sum_squares(cache, lane, p.tpr, nvec, active);
    for (int j = lane + kCached * p.tpr; active && j < nvec; j += p.tpr) {
      const VX v = VX::load(xr + j * N);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        const float f = to_float(v.v[k]);
        ss += f * f;
      }
    }

    ss = row_sum(ss, rg, scratch);
    const float inv = rsqrtf(ss * p.inv_cols + p.eps);

#pragma unroll
    for (int i = 0; i < kCached; ++i) {
      const int j = lane + i * p.tpr;
      if (active && j < nvec) normalize_store<Tw, To, N, static_cast<Round>(kMid)>(cache[i], w, orow, j, inv);
    }
    for (int j = lane + kCached * p.tpr; active && j < nvec; j += p.tpr) {
      normalize_store<Tw, To, N, static_cast<Round>(kMid)>(VX::load(xr + j * N), w, orow, j, inv);
    }
  }
}

// The one-dtype kernels' output vector: v * inv, times the weight vector load_w() gives
// when has_w, stored at dst. With T's own rounding, round(v * inv) to T and then the product
// in T rounded once: one packed multiply per pair (mul_rn, common/vec.cuh); otherwise fp32
// math rounded at kM, then once to T. load_w is called only when has_w.
template <typename T, Round kM, int N, typename LoadW>
__device__ __forceinline__ void scale_store(const Vec<T, N>& v, float inv, bool has_w,
                                            LoadW load_w, T* dst) {
  float o[N];
#pragma unroll
  for (int k = 0; k < N; ++k) o[k] = to_float(v.v[k]) * inv;
  if constexpr (!std::is_same_v<T, float> && kM == RoundOf<T>::value) {
    const Vec<T, N> n = pack_from_float<T, N>(o);
    (has_w ? mul_rn(n, load_w()) : n).store(dst);
  } else {
    if (has_w) {
      const Vec<T, N> wj = load_w();
      round_all<kM>(o);
#pragma unroll
      for (int k = 0; k < N; ++k) o[k] *= to_float(wj.v[k]);
    }
    pack_from_float<T, N>(o).store(dst);
  }
}

// ---- one-dtype kernel --------------------------------------------------------------
//
// x, weight and out of one dtype T with 16-byte vectors and rows of at most
// 4 * kBlock vectors (D <= 8192 bf16 / fp16, 4096 fp32): every LTX, FLUX, Wan, DiT and
// Llama width, and the per-head q/k norms of decode-sized calls (those of a prompt take
// rms_norm_short_kernel, below). C vectors of a row per thread, loaded straight
// into registers before the reduction; C = 4 for rows of >= 128 vectors, else 2 (per-head
// rows of 8-16 vectors: more rows per block). Registers are capped so that 4 (C = 4) or
// 6 (C = 2) blocks of 256 threads fit an SM: 64 KB of x in flight per SM either way.
// No loop over the rest of a row and no run-time rounding kind, unlike rms_norm_kernel.
// Rows are walked grid-stride (common/row_order.cuh). Grids of at most one block per SM
// load the weight with x (kEarlyW: a latency chain, not a bandwidth stream).
//
// Measured against the alternatives in one process (benchmarks/ab_kernels.py, H200,
// 2026-12-04, RESULTS.md): rms_norm_kernel (C = 4, 79 registers, 3 blocks per SM) and
// this kernel with C = 1, 2, 8, and a persistent kernel that queued the next rows into
// shared memory with cp.async (3 stages; chunked or strided row order). This one was
// fastest at every shape but the per-head ones (C = 2 there, as chosen here); the cp.async
// kernel was 7-17% slower than it at D >= 2048.

// Blocks of kBlock threads per SM the register cap aims for (sm_75 holds 1024 threads per
// SM, so at most 4 there). C = 4: 5 on sm_80-90 since load_cached zeroes first (48 registers
// fit; 80 KB of x in flight per SM instead of 64, as AdaLN's kAdaDirectC4Blocks); 4 on
// sm_100 / sm_120 as before (not measured there). LTX_KERNELS_BLOCKS_PER_SM=4 gives the old
// occupancy back for the A/B.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
template <int C>
constexpr int kDirectMinBlocks = 4;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000
template <int C>
constexpr int kDirectMinBlocks = C >= 4 ? 4 : 6;
#else
template <int C>
constexpr int kDirectMinBlocks = C >= 4 ? 5 : 6;
#endif
// rms_norm_short_kernel's (R rows per thread): the direct kernel's caps, but at most 4 for
// R = 4 (at 5 blocks its bf16 R = 4 spilled 128-172 bytes on sm_90).
template <int R>
constexpr int kShortMinBlocks = std::min(kDirectMinBlocks<R>, R >= 4 ? 4 : 6);

// When the kernel reads the weight (kW). Late (kWLate): after the reduction, an L1 / L2 round
// trip between the reduction and the first store of every row. Early (kWEarly): with x's
// loads, before the reduction. For grids of at most one block per SM (few rows: LLM
// decoding, small batches; the shapes CUDA graphs replay), where a call's time is a chain of
// latencies and occupancy does not matter, this takes one dependent memory round trip
// (~0.5 µs) off the chain; it costs C more 16-byte registers, so those instantiations are
// not capped for occupancy. Staged (kWStaged, the default for the other weighted grids where
// it fits): the thread's C weight vectors queued once per block into its own shared-memory
// slots by cp.async (sm_80+), before the first row's x, and read back after each reduction:
// the early form's latency at no register cost (as AdaLN's staged modulation, adaln.cu).
// The weight is the same for every row and a lane always holds the same columns, so one
// copy serves all the block's rows. H100 bf16, 2026-12-06 07:59 (RESULTS.md, clean cold L2,
// medians of 3): 4096 x 8192 44.42 -> 43.58 µs (compile 44.19), 16384 x 4096 89.38 -> 88.48
// (compile 89.66); registers unchanged (sm_90 bf16 C = 4: 64).
// kWEarlyLooped (candidate's baseline, LTX_KERNELS_RMS_DECODE=loop): the early weight with
// the row loop and the looped cross-warp sum the early form had before 2026-12-06 (see the
// end of the kernel).
// Template ints, not an enum (see rms_norm_kernel).
constexpr int kWLate = 0, kWEarly = 1, kWStaged = 2, kWEarlyLooped = 3;
template <int C, int kW>
constexpr int kDirectMinBlocksW = kW == kWEarly || kW == kWEarlyLooped ? 1 : kDirectMinBlocks<C>;

template <typename T, int kMid, int C, int kW>
__global__ void __launch_bounds__(kBlock, kDirectMinBlocksW<C, kW>)
    rms_norm_direct_kernel(RmsNormParams p) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  constexpr bool kEarlyW = kW == kWEarly || kW == kWEarlyLooped;
  constexpr bool kOneRow = kW == kWEarly;
  constexpr bool kStagedW = kW == kWStaged;
  using V = Vec<T, N>;
  __shared__ float scratch_mem[kRowScratchFloats];
  RowScratch scratch{scratch_mem};
  // kStagedW: this thread's C weight vectors, slot-major (a warp's slots consecutive).
  __shared__ uint4 w_slots[kStagedW ? C * kBlock : 1];
  auto w_slot = [&](int i) -> uint4* { return &w_slots[i * kBlock + threadIdx.x]; };
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  T* out = static_cast<T*>(p.out);
  const int nvec = p.cols / N;
  const RowGroup rg = row_group_pow2(p.tpr);
  const int lane = rg.lane;
  // Launched with PDL (sm_90+, common/pdl.cuh): wait for the previous kernel before
  // the first global access, and let the next one be scheduled now (it waits likewise).
  pdl_wait();
  pdl_launch_dependents();
  if constexpr (kStagedW) {
    // Through L1 (.ca): the SM's other blocks read the same weight.
    if (w != nullptr) {
#pragma unroll
      for (int i = 0; i < C; ++i) {
        const int j = lane + i * p.tpr;
        if (j < nvec) cp_async<16, true>(w_slot(i), w + j * N);
      }
    }
    cp_async_commit();
  }
  // One row of this thread's group (inactive past the last row: it still takes part in
  // row_sum, which needs every thread of the block).
  auto one_row = [&](int64_t row) {
    const bool active = row < p.rows;
    const T* xr = x + (active ? row : 0) * p.x_stride;
    // x first: the sum waits for it; the weight is not needed until after the reduction.
    V cur[C];
    load_cached(cur, xr, lane, p.tpr, nvec, active);
    V wv[C];
    if constexpr (kEarlyW) {
      if (w != nullptr) {
#pragma unroll
        for (int i = 0; i < C; ++i) {
          const int j = lane + i * p.tpr;
          if (active && j < nvec) wv[i] = V::load(w + j * N);
        }
      }
    }
    float ss = cached_sum_squares(cur, lane, p.tpr, nvec, active);
    // The early form's rows are one group of at most kBlock threads: the unrolled sum.
    ss = row_sum<kOneRow ? kBlock / 32 : 0>(ss, rg, scratch);
    const float inv = rsqrtf(ss * p.inv_cols + p.eps);
    if (!active) return;
    if constexpr (kStagedW) cp_async_wait<0>();  // the first row's wait; a no-op after it
    T* orow = out + row * p.out_stride;
#pragma unroll
    for (int i = 0; i < C; ++i) {
      const int j = lane + i * p.tpr;
      if (j >= nvec) continue;
      scale_store<T, static_cast<Round>(kMid)>(
          cur[i], inv, w != nullptr,
          [&] {
            if constexpr (kEarlyW) {
              return wv[i];
            } else if constexpr (kStagedW) {
              return read_slot<V>(w_slot(i));
            } else {
              return V::load(w + j * N);
            }
          },
          orow + j * N);
    }
  };
  if constexpr (kOneRow) {
    // The early form runs only on grids of a block per row group within one wave
    // (launch_rms_norm_direct's one_wave; launch_rows gives every group a block), so each
    // group has at most one row: no row loop, less code to fetch when a call starts cold.
    // With row_sum unrolled, H100 bf16, 2026-12-06 10:03 (RESULTS.md, graph replay, medians of
    // 5 rounds): 16 x 4096 1.82 -> 1.74 µs, 16 x 8192 2.09 -> 1.87, 1 x 32 x 128 1.72 -> 1.50.
    one_row(static_cast<int64_t>(blockIdx.x) * rg.groups + rg.group);
  } else {
    // Every thread runs the same number of iterations: row_sum needs all of them.
    const BlockRows br = block_rows(p.rows, rg.groups);
    for (int64_t base = br.begin; base < br.end; base += br.step) one_row(base + rg.group);
  }
  if constexpr (kStagedW) cp_async_wait<0>();  // a thread with no active row leaves nothing queued
}

// ---- short rows (the per-head norms) -----------------------------------------------
//
// Rows of at most 32 vectors (the per-head q/k norms, D = 64 / 128 bf16) with R rows per
// thread and one vector of each: tpr = the row's vector count, and slot i of an iteration
// is row base + i * groups + group. So each load and store instruction of a warp covers
// 32 / tpr neighbouring whole rows (contiguous bytes, as a copy's would), where the direct
// kernel's C vectors of one row per thread leave each instruction a slice of 8 rows
// (per-head 64: tpr = 4, 64 of each row's 128 bytes). The weight's one vector per thread
// is loaded once per thread. Why: per-head 64 was 9% slower than a same-bytes copy
// (20.06 vs 18.0-18.4 µs; inductor, whose layout is this one, 18.34), per-head 128 4%.
// Measured and chosen in launch_rms_norm_direct.
template <typename T, int kMid, int R>
__global__ void __launch_bounds__(kBlock, kShortMinBlocks<R>)
    rms_norm_short_kernel(RmsNormParams p) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  constexpr Round kM = static_cast<Round>(kMid);
  constexpr bool kPackedMul = !std::is_same_v<T, float> && kM == RoundOf<T>::value;
  using V = Vec<T, N>;
  const T* x = static_cast<const T*>(p.x);
  const T* w = static_cast<const T*>(p.w);
  T* out = static_cast<T*>(p.out);
  const RowGroup rg = row_group_pow2(p.tpr);
  const bool in_row = rg.lane < p.cols / N;  // tpr is the vector count rounded up
  const int col = rg.lane * N;
  pdl_wait();
  pdl_launch_dependents();
  // The packed form keeps the weight in registers; the others (fp32 math, more live
  // registers) read it again per row, from L1 (a 128-256 byte vector), or they spill.
  V wv;
  if (kPackedMul && w != nullptr && in_row) wv = V::load(w + col);
  auto load_w = [&] { return kPackedMul ? wv : V::load(w + col); };
  const int64_t per_iter = static_cast<int64_t>(rg.groups) * R;
  for (int64_t base = blockIdx.x * per_iter; base < p.rows; base += gridDim.x * per_iter) {
    int64_t row[R];
    bool live[R];
    V cur[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      row[i] = base + i * rg.groups + rg.group;
      live[i] = in_row && row[i] < p.rows;
      if (live[i]) cur[i] = V::load(x + row[i] * p.x_stride + col);
    }
    float ss[R];
#pragma unroll
    for (int i = 0; i < R; ++i) {
      // every lane of the warp takes part in the sum
      ss[i] = warp_group_sum(live[i] ? vec_sum_squares(cur[i]) : 0.f, rg.tpr);
    }
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (!live[i]) continue;
      scale_store<T, kM>(cur[i], rsqrtf(ss[i] * p.inv_cols + p.eps), w != nullptr, load_w,
                         out + row[i] * p.out_stride + col);
    }
  }
}

// Whether the staged-weight form runs as planned on this device (common/dispatch.cuh
// staging_fits): as many blocks per SM as the register cap aims for, with their C * 4 KB of
// slots each.
template <typename T, int kMid, int C>
bool w_staged_fits(int device) {
  static int fits[64] = {};
  const auto kernel = rms_norm_direct_kernel<T, kMid, C, kWStaged>;
  return staging_fits(fits, reinterpret_cast<const void*>(kernel), kBlock, kDirectMinBlocks<C>, device);
}

// Launches rms_norm_direct_kernel for a call it takes (16-byte vectors, rows of at most
// 4 * kBlock vectors); false, launching nothing, otherwise.
template <typename T, int kMid>
bool launch_rms_norm_direct(RmsNormParams p, int vec, int device, cudaStream_t stream) {
  constexpr int N = 16 / static_cast<int>(sizeof(T));
  const int64_t nvec = p.cols / vec;
  if (vec != N || nvec > 4LL * kBlock) return false;
  int cache = nvec >= 128 ? 4 : 2;
  // Whether rows in groups of kBlock / tpr take at most one block per SM.
  auto one_wave = [&](int64_t tpr) { return ceil_div(p.rows, kBlock / tpr) <= sm_count(device); };
  // 2 vectors per thread for calls whose grid stays within one block per SM even then
  // (decode-sized rows up to D = 4096 bf16): twice the threads per row, so the rows spread
  // over twice the SMs and each thread's chain (loads, conversions, sums, stores) is half as
  // long; the same instantiations as the per-head rows. H200, 2026-12-05 10:24 (RESULTS.md):
  // 16 x 4096 under graph replay 1.99 -> 1.70 µs with PDL (2.67 -> 2.36 without), cold L2
  // 5.86 -> 5.35. LTX_KERNELS_RMS_DECODE_C=4 (read per call: an A/B switch) keeps 4.
  if (cache == 4 && nvec <= 2LL * kBlock && ab_switch("LTX_KERNELS_RMS_DECODE_C") != "4" &&
      one_wave(pow2_ceil(ceil_div(nvec, 2)))) {
    cache = 2;
  }
  // rms_norm_short_kernel, 4 rows per thread, for rows of at most 16 vectors (the per-head
  // norms of a prompt: D = 64 / 128 half, 64 fp32) over more than one wave. H200 bf16,
  // 2026-12-05 12:06 (RESULTS.md, cold L2): 8064 x 32 x 64 20.13 -> 19.20 µs (2 rows per
  // thread 19.22; compile 18.80), 8064 x 32 x 128 34.93 -> 34.14 (2 rows: 34.46).
  // LTX_KERNELS_RMS_SHORT (read per call: an A/B switch): 0 keeps the direct kernel, 2 takes
  // 2 rows per thread, and 2 / 4 also take rows of 17-32 vectors (not timed: there the
  // direct kernel's loads already cover whole 128-byte lines).
  const std::string_view short_rows = ab_switch("LTX_KERNELS_RMS_SHORT");
  const bool short_ok = short_rows.empty() ? nvec <= 16 : (short_rows == "2" || short_rows == "4") && nvec <= 32;
  if (short_ok && !one_wave(pow2_ceil(nvec))) {
    p.tpr = pow2_ceil(nvec);
    const int r = short_rows == "2" ? 2 : 4;
    auto kernel = r == 2 ? rms_norm_short_kernel<T, kMid, 2> : rms_norm_short_kernel<T, kMid, 4>;
    launch_rows(kernel, p, kBlock, (kBlock / p.tpr) * r, device, stream, pdl_requested(device));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return true;
  }
  p.tpr = pow2_ceil(ceil_div(nvec, cache));
  const int64_t groups = kBlock / p.tpr;
  // The weight early when every block has one row group and there are at most as many
  // blocks as SMs (H200, CUDA-graph replay, 2026-12-05: 0.3-0.6 µs faster than loading it
  // after the reduction at every decode shape timed; RESULTS.md).
  const bool early_w = p.w != nullptr && one_wave(p.tpr);
  // The other weighted grids: the weight staged in shared memory where that fits, else
  // loaded late. LTX_KERNELS_RMS_W=late (read per call: an A/B switch) keeps it late.
  const bool staged_w = !early_w && p.w != nullptr && ab_switch("LTX_KERNELS_RMS_W") != "late" &&
                        (cache == 4 ? w_staged_fits<T, kMid, 4>(device) : w_staged_fits<T, kMid, 2>(device));
  // Programmatic dependent launch on sm_90+ (common/pdl.cuh: the gap between kernels, most
  // of a decode-sized call under CUDA-graph replay).
  const bool pdl = pdl_requested(device);
  auto go = [&](auto c) {
    constexpr int C = decltype(c)::value;
    auto run = [&](auto kernel) { launch_rows(kernel, p, kBlock, groups, device, stream, pdl); };
    if (early_w) {
      // The one-row form has no row loop: its grid must give every row group a block.
      TORCH_CHECK(static_cast<int64_t>(row_grid(p.rows, groups, 64, device)) * groups >= p.rows,
                  "ltx_kernels.rms_norm: internal error: decode grid does not cover the rows");
      if (ab_switch("LTX_KERNELS_RMS_DECODE") == "loop") {
        run(rms_norm_direct_kernel<T, kMid, C, kWEarlyLooped>);
      } else {
        run(rms_norm_direct_kernel<T, kMid, C, kWEarly>);
      }
    } else if (staged_w) {
      run(rms_norm_direct_kernel<T, kMid, C, kWStaged>);
    } else {
      run(rms_norm_direct_kernel<T, kMid, C, kWLate>);
    }
  };
  cache == 4 ? go(std::integral_constant<int, 4>{}) : go(std::integral_constant<int, 2>{});
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// Valid (x, weight, out) dtype triples: out is x's, weight's, or fp32.
template <typename Tx, typename Tw, typename To>
constexpr bool kValidTriple =
    std::is_same_v<To, Tx> || std::is_same_v<To, Tw> || std::is_same_v<To, float>;


// The front end rounds the normalised value to x's dtype, the weight's, or not at all
// (rms_norm.cpp): one instantiation per distinct kind. (A function, not inline in the
// launcher's nested generic lambdas: g++ 12 mis-resolves the enclosing lambdas' type
// aliases there.)
template <typename Tx, typename Tw, typename To, int N, typename Launch>
void launch_with_mid(Launch& launch, Round mid) {
  constexpr int rx = static_cast<int>(RoundOf<Tx>::value);
  constexpr int rw = static_cast<int>(RoundOf<Tw>::value);
  // Which (out dtype, kind) pairs the front end makes: none with out = x (no weight, torch
  // semantics) or an fp32 weight and out (diffusers); x's kind with out = promote(x, w)
  // (llama); the weight's kind with out = w (diffusers, half weight). Only those are built.
  constexpr bool kNoneOk = std::is_same_v<To, Tx> || (std::is_same_v<Tw, float> && std::is_same_v<To, float>);
  constexpr bool kXOk = std::is_same_v<To, std::conditional_t<std::is_same_v<Tx, Tw>, Tx, float>>;
  constexpr bool kWOk = std::is_same_v<To, Tw>;
  const int m = static_cast<int>(mid);
  if constexpr (kNoneOk) {
    if (m == 0) return launch(rms_norm_kernel<Tx, Tw, To, N, 0>);
  }
  if constexpr (kXOk) {
    if (m == rx) return launch(rms_norm_kernel<Tx, Tw, To, N, rx>);
  }
  if constexpr (kWOk) {
    if (m == rw) return launch(rms_norm_kernel<Tx, Tw, To, N, rw>);
  }
  TORCH_CHECK(false, "ltx_kernels.rms_norm: internal error: rounding kind ", m, " for this dtype combination");
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void rms_norm_launch(const at::Tensor& out2d, const at::Tensor& x2d,
                     const std::optional<at::Tensor>& weight, double eps,
                     at::ScalarType mid_dtype) {
  using namespace ltx::cuda;
  const c10::cuda::CUDAGuard guard(x2d.device());
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(x2d.device().index()).stream();

  RmsNormParams p{};
  p.x = x2d.const_data_ptr();
  p.w = weight ? weight->const_data_ptr() : nullptr;
  p.out = out2d.mutable_data_ptr();
  p.rows = x2d.size(0);
  p.x_stride = x2d.size(0) > 1 ? x2d.stride(0) : 0;
  p.out_stride = out2d.size(0) > 1 ? out2d.stride(0) : 0;
  TORCH_CHECK(x2d.size(1) <= INT32_MAX, "ltx_kernels.rms_norm: last dim too large");
  p.cols = static_cast<int>(x2d.size(1));
  p.eps = static_cast<float>(eps);
  p.inv_cols = 1.0f / static_cast<float>(p.cols);
  const Round mid = round_kind(mid_dtype);

  const at::ScalarType w_dtype = weight ? weight->scalar_type() : x2d.scalar_type();
  const int vec = pick_vec_width(
      p.cols, {{p.x, x2d.element_size(), p.x_stride},
               {p.out, out2d.element_size(), p.out_stride},
               {p.w ? p.w : p.x, weight ? weight->element_size() : x2d.element_size(), 0}});
  const int64_t nvec = p.cols / vec;
  const int tpr_wanted = std::min(kMaxBlock, pow2_ceil(ceil_div(nvec, kTargetPerThread)));
  const int device = x2d.device().index();
  auto launch = [&](auto kernel) {
    launch_rows_pow2(kernel, p, tpr_wanted, kBlock, p.rows, device, stream);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
  };

  // One dtype throughout: rms_norm_direct_kernel where it takes the call.
  // LTX_KERNELS_RMS_KERNEL=row (read per call) sends every call to rms_norm_kernel: a
  // developer's A/B switch for timing both in one process (benchmarks/ab_kernels.py).
  const bool row_only = ab_switch("LTX_KERNELS_RMS_KERNEL") == "row";
  if (!row_only && w_dtype == x2d.scalar_type() && out2d.scalar_type() == x2d.scalar_type()) {
    bool done = false;
    dispatch_float(x2d.scalar_type(), [&](auto t) {
      using T = typename decltype(t)::type;
      constexpr int kOwn = static_cast<int>(RoundOf<T>::value);
      if (mid == Round::kNone) {
        done = launch_rms_norm_direct<T, 0>(p, vec, device, stream);
      } else if constexpr (kOwn != 0) {
        if (static_cast<int>(mid) == kOwn) done = launch_rms_norm_direct<T, kOwn>(p, vec, device, stream);
      }
    });
    if (done) return;
  }

  dispatch_float(x2d.scalar_type(), [&](auto xt) {
    using Tx = typename decltype(xt)::type;
    dispatch_float(w_dtype, [&](auto wt) {
      using Tw = typename decltype(wt)::type;
      dispatch_float(out2d.scalar_type(), [&](auto ot) {
        using To = typename decltype(ot)::type;
        if constexpr (kValidTriple<Tx, Tw, To>) {
          dispatch_vec(vec, [&](auto n) {
            constexpr int N = decltype(n)::value;
            constexpr size_t widest = std::max({sizeof(Tx), sizeof(Tw), sizeof(To)});
            if constexpr (N * widest <= 16) {
              launch_with_mid<Tx, Tw, To, N>(launch, mid);
            } else {
              TORCH_CHECK(false, "ltx_kernels.rms_norm: internal error: vector width ", N);
            }
          });
        } else {
          TORCH_CHECK(false, "ltx_kernels.rms_norm: unsupported dtype combination");
        }
      });
    });
  });
}

}  // namespace ltx
