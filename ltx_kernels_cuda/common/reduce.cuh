// Sums across the threads that share one row.
//
// A block is split into groups of `tpr` consecutive threads; each group owns one row.
// tpr is a power of two up to 32 (shuffle width) and a multiple of 32 above it (plan_rows
// in dispatch.cuh makes 96, 160, ...; the direct kernels only powers of two). Every thread
// of the block must call row_sum the same number of times (inactive groups pass 0),
// because it uses full-warp shuffles and, for tpr > 32, a block barrier.
#pragma once

#include <cuda_runtime.h>

namespace ltx::cuda {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxWarpsPerBlock = 32;

// A thread's place among the block's row groups, worked out once per kernel.
struct RowGroup {
  int tpr;     // threads per row
  int lane;    // this thread's index within its row's group
  int group;   // its group's index within the block
  int groups;  // groups per block
  int first;   // the first warp of its row (tpr > 32)
};

// tpr a power of two: masks and shifts. A `%` or `/` by a run-time int is ~20 dependent
// instructions with a MUFU.RCP in the chain (SASS, sm_90, nvcc 13.0), and the direct
// kernels did it before their first load, where a latency-bound call (a decode-sized
// row) waits for it.
__device__ __forceinline__ RowGroup row_group_pow2(int tpr) {
  const int t = static_cast<int>(threadIdx.x);
  const int shift = __ffs(tpr) - 1;
  return {tpr, t & (tpr - 1), t >> shift, static_cast<int>(blockDim.x) >> shift,
          (t & ~(tpr - 1)) >> 5};
}

// Any tpr (plan_rows' multiples of 32).
__device__ __forceinline__ RowGroup row_group(int tpr) {
  const int t = static_cast<int>(threadIdx.x);
  const int group = t / tpr;
  return {tpr, t - group * tpr, group, static_cast<int>(blockDim.x) / tpr, (group * tpr) >> 5};
}

// Shared memory for row_sum / row_mean_m2: two buffers of two floats per warp, used in
// turn. A call writes one buffer, waits at a barrier and reads it; the next call's barrier
// then orders those reads before the call after it writes the same buffer again. So a call
// needs one barrier; with one buffer it needed a second after its reads. Each kernel declares
//   __shared__ float scratch_mem[kRowScratchFloats];
//   RowScratch scratch{scratch_mem};
// (`next` is per thread; all threads agree on it because all call row_sum alike.)
constexpr int kRowScratchBuffer = 2 * kMaxWarpsPerBlock;  // floats per buffer
constexpr int kRowScratchFloats = 2 * kRowScratchBuffer;

struct RowScratch {
  float* smem;
  int next = 0;
};

__device__ __forceinline__ float warp_group_sum(float v, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// All threads of a row get the same value, summed in the same order (so they agree bit
// for bit: a butterfly's two partners add the same two values).
// kMaxWarps > 0 (a row of at most that many warps): the warps' partial sums are added by a
// fully unrolled, predicated sequence instead of a loop, in the same order (same bits). For
// latency-bound calls (decode rows): the loop and its unrolled remainder were ~2 KB of
// branching SASS after the barrier, fetched from DRAM when the call starts with cold caches
// (H100 ncu, 2026-12-06: 1 x 4096 ours 4.0 µs vs Liger 3.4, no_instruction stalls 2x).
template <int kMaxWarps = 0>
__device__ __forceinline__ float row_sum(float v, const RowGroup& g, RowScratch& scratch) {
  if (g.tpr >= 32) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  } else {
    v = warp_group_sum(v, g.tpr);
  }
  if (g.tpr <= 32) return v;
  float* buf = scratch.smem + scratch.next * kRowScratchBuffer;
  scratch.next ^= 1;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) buf[warp] = v;
  __syncthreads();
  float s = 0.f;
  if constexpr (kMaxWarps > 0) {
    const int nw = g.tpr >> 5;
#pragma unroll
    for (int k = 0; k < kMaxWarps; ++k) {
      if (k < nw) s += buf[g.first + k];
    }
  } else {
    for (int k = 0; k < (g.tpr >> 5); ++k) s += buf[g.first + k];
  }
  return s;
}

// Mean and M2 (the sum of squared deviations from that mean) of a set of values.
struct MeanM2 {
  float mean;
  float m2;
};

// Two disjoint parts of equal count n merged (Chan, Golub and LeVeque): the mean halfway,
// M2 the parts' sum plus the spread of their means, delta^2 * n / 2 (half_n = n / 2). The
// two partners of a butterfly pass (a, b) and (b, a) and get the same bits: the sums are
// commutative, delta only changes sign, and no product is fused into a sum.
__device__ __forceinline__ MeanM2 merge_equal(MeanM2 a, MeanM2 b, float half_n) {
  const float d = __fsub_rn(b.mean, a.mean);
  return {__fmul_rn(0.5f, __fadd_rn(a.mean, b.mean)),
          __fadd_rn(__fadd_rn(a.m2, b.m2), __fmul_rn(__fmul_rn(d, d), half_n))};
}

// A row's mean and M2 from each thread's (mean, M2) over the same number n of its elements,
// in one reduction: LayerNorm's statistics without a second pass over the row (a mean
// first, then the centred squares: two reductions, two barriers for tpr > 32). Stable like
// Welford's: no sum of squares minus a squared sum. Every thread of the row gets the same
// bits. Same calling rules as row_sum (every thread of the block, the same number of times).
// kPairWarps (candidate, with adaln's LTX_KERNELS_ADALN_LN=shift): a row of two warps (tpr =
// 64: LTX's D = 2048 in bf16 / fp16) merges them as one equal pair (merge_equal) instead of
// through the loop below (its set-up, a MUFU.RCP and its checks: ~50 instructions against
// ~12, SASS sm_90).
template <bool kPairWarps = false>
__device__ __forceinline__ MeanM2 row_mean_m2(MeanM2 v, float n, const RowGroup& g,
                                              RowScratch& scratch) {
  const int width = g.tpr >= 32 ? 32 : g.tpr;
  // Offsets upwards, so each side of a merge at offset o holds n * o elements.
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    if (o >= width) break;
    const MeanM2 b{__shfl_xor_sync(kFullMask, v.mean, o), __shfl_xor_sync(kFullMask, v.m2, o)};
    v = merge_equal(v, b, __fmul_rn(n, 0.5f * static_cast<float>(o)));
  }
  if (g.tpr <= 32) return v;
  float* buf = scratch.smem + scratch.next * kRowScratchBuffer;
  scratch.next ^= 1;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) {
    buf[warp] = v.mean;
    buf[kMaxWarpsPerBlock + warp] = v.m2;
  }
  __syncthreads();
  // The row's warps in order, each of nw = 32 n elements; the same chain in every thread.
  // Warp k joins k warps' worth: its weight in the mean is w = 1 / (k + 1) and the means'
  // spread counts k nw * nw / ((k + 1) nw) = nw (1 - w). w by MUFU.RCP (__fdividef, <= 2 ulp):
  // written as count * nw / total these were two IEEE divisions per warp, each with FCHK and
  // a slow-path CALL (14 FCHK in every LayerNorm kernel, SASS sm_90). Fully unrolled with
  // constant fractions instead, ptxas hoisted the loads and took up to 25 more registers.
  const float nw = 32.f * n;
  MeanM2 acc{buf[g.first], buf[kMaxWarpsPerBlock + g.first]};
  if constexpr (kPairWarps) {
    if (g.tpr == 64) {
      return merge_equal(acc, {buf[g.first + 1], buf[kMaxWarpsPerBlock + g.first + 1]},
                         __fmul_rn(nw, 0.5f));
    }
  }
  for (int k = 1; k < (g.tpr >> 5); ++k) {
    const MeanM2 b{buf[g.first + k], buf[kMaxWarpsPerBlock + g.first + k]};
    const float w = __fdividef(1.0f, static_cast<float>(k + 1));
    const float d = b.mean - acc.mean;
    acc.mean += d * w;
    acc.m2 += b.m2 + d * d * (nw * (1.0f - w));
  }
  return acc;
}

// v[0] + ... + v[N - 1] as a balanced tree: log2(N) dependent adds instead of N - 1. A
// thread's vectors of a row arrive together (one memory round trip), so the add chain
// after them is on a latency-bound call's critical path.
template <int N>
__device__ __forceinline__ float tree_sum(const float (&v)[N]) {
  if constexpr (N == 1) {
    return v[0];
  } else {
    constexpr int H = N / 2;
    float lo[H], hi[N - H];
#pragma unroll
    for (int k = 0; k < H; ++k) lo[k] = v[k];
#pragma unroll
    for (int k = H; k < N; ++k) hi[k - H] = v[k];
    return tree_sum(lo) + tree_sum(hi);
  }
}

}  // namespace ltx::cuda
