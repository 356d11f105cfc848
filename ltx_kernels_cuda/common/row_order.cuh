// How the direct row kernels (rms_norm_direct_kernel, adaln_direct_kernel) spread rows over
// blocks: grid-stride (the default) or balanced contiguous chunks (a candidate).
//
// Why chunks: a block takes `groups` rows per iteration. Grid-stride hands out whole row
// groups, so when they do not divide evenly over the blocks resident at once, the last
// wave runs part-full and the bytes in flight drop for its duration: per-head rows on an
// H200 (8064 x 32 rows of 64, 64 rows per block, 6 blocks per SM) are 5.09 waves, the
// last ~1/6 of the time at 9% of the slots. Chunks give each resident block the same number
// of rows (+-1); the last iteration of each is partial (only its latency is paid).
// Selected per call by LTX_KERNELS_ROW_ORDER=chunk until a device call has timed it
// (benchmarks/ab_kernels.py).
#pragma once

#include "dispatch.cuh"

namespace ltx::cuda {

// The rows a block walks: [begin, end) in steps of `step`, row group by row group.
struct BlockRows {
  int64_t begin, end, step;
};

// chunk == 0: grid-stride (block b takes groups b, b + grid, ...); else rows
// [b * chunk, (b + 1) * chunk) of `rows`. Every thread of a block gets the same range, so
// all run the same number of iterations (row_sum's barriers need that).
__device__ __forceinline__ BlockRows block_rows(int64_t rows, int64_t chunk, int groups) {
  if (chunk == 0) {
    return {static_cast<int64_t>(blockIdx.x) * groups, rows,
            static_cast<int64_t>(gridDim.x) * groups};
  }
  const int64_t b = static_cast<int64_t>(blockIdx.x) * chunk;
  return {b, b + chunk < rows ? b + chunk : rows, groups};
}

// Launches kernel(p, chunk) over p.rows rows, `groups` per block of `block` threads per
// iteration (no dynamic shared memory), in the row order the switch asks for.
template <typename Params>
void launch_rows(void (*kernel)(Params, int64_t), const Params& p, int block, int64_t groups,
                 int device, cudaStream_t stream) {
  const int64_t units = ceil_div(p.rows, groups);
  unsigned grid;
  int64_t chunk = 0;  // grid-stride
  if (ab_switch("LTX_KERNELS_ROW_ORDER") != "chunk") {
    // A grid-stride loop covers rows beyond the grid; 64 blocks per SM is plenty to balance.
    grid = static_cast<unsigned>(std::min(units, static_cast<int64_t>(sm_count(device)) * 64));
  } else {
    const int64_t resident = static_cast<int64_t>(sm_count(device)) *
                             resident_blocks(reinterpret_cast<const void*>(kernel), block, 0, device);
    chunk = ceil_div(p.rows, std::min(units, resident));
    grid = static_cast<unsigned>(ceil_div(p.rows, chunk));
  }
  kernel<<<grid, block, 0, stream>>>(p, chunk);
}

}  // namespace ltx::cuda
