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

// Shared memory for row_sum: two buffers of one float per warp, used in turn. A call
// writes one buffer, waits at a barrier and reads it; the next call's barrier then orders
// those reads before the call after it writes the same buffer again. So a call needs one
// barrier; with one buffer it needed a second after its reads. Each kernel declares
//   __shared__ float scratch_mem[kRowScratchFloats];
//   RowScratch scratch{scratch_mem};
// (`next` is per thread; all threads agree on it because all call row_sum alike.)
constexpr int kRowScratchFloats = 2 * kMaxWarpsPerBlock;

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
__device__ __forceinline__ float row_sum(float v, const RowGroup& g, RowScratch& scratch) {
  if (g.tpr >= 32) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(kFullMask, v, offset);
  } else {
    v = warp_group_sum(v, g.tpr);
  }
  if (g.tpr <= 32) return v;
  float* buf = scratch.smem + scratch.next * kMaxWarpsPerBlock;
  scratch.next ^= 1;
  const int warp = static_cast<int>(threadIdx.x) >> 5;
  if ((threadIdx.x & 31) == 0) buf[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int k = 0; k < (g.tpr >> 5); ++k) s += buf[g.first + k];
  return s;
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
