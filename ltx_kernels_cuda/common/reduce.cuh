// Sums across the threads that share one row.
//
// A block is split into groups of `tpr` consecutive threads (a power of two);
// each group owns one row. Every thread of the block must call row_sum the same
// number of times (inactive groups pass 0), because it uses full-warp shuffles
// and, for tpr > 32, __syncthreads.
#pragma once

#include <cuda_runtime.h>

namespace ltx::cuda {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kMaxWarpsPerBlock = 32;

__device__ __forceinline__ float warp_group_sum(float v, int width) {
  for (int offset = width >> 1; offset > 0; offset >>= 1) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// scratch: kMaxWarpsPerBlock floats of shared memory. All threads of a row get
// the same value, summed in the same order (so they agree bit for bit).
__device__ __forceinline__ float row_sum(float v, int tpr, float* scratch) {
  v = warp_group_sum(v, tpr < 32 ? tpr : 32);
  if (tpr <= 32) return v;
  const int warp = threadIdx.x >> 5;
  const int warps_per_row = tpr >> 5;
  const int first = warp - warp % warps_per_row;
  if ((threadIdx.x & 31) == 0) scratch[warp] = v;
  __syncthreads();
  float s = 0.f;
  for (int k = 0; k < warps_per_row; ++k) s += scratch[first + k];
  __syncthreads();  // scratch is reused by the next row
  return s;
}

}  // namespace ltx::cuda
