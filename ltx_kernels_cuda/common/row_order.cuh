// How the direct row kernels (rms_norm_direct_kernel, adaln_direct_kernel) spread rows over
// blocks: grid-stride, whole row groups of `groups` rows per block iteration.
//
// Balanced contiguous chunks (every resident block the same number of rows, +-1) were
// tried against this as a candidate: slower at every shape timed (H200, 2026-12-05,
// benchmarks/ab_kernels.py; RESULTS.md): rmsnorm 2-11%, AdaLN 0.5-7%, even on the per-head
// rows whose part-full last wave motivated them. Grid-stride keeps neighbouring blocks on
// neighbouring rows, which DRAM pages and L2 sectors seem to prefer.
#pragma once

#include "dispatch.cuh"
#include "pdl.cuh"

namespace ltx::cuda {

// The rows a block walks: [begin, end) in steps of `step`, row group by row group. Every
// thread of a block gets the same range, so all run the same number of iterations
// (row_sum's barriers need that).
struct BlockRows {
  int64_t begin, end, step;
};

__device__ __forceinline__ BlockRows block_rows(int64_t rows, int groups) {
  return {static_cast<int64_t>(blockIdx.x) * groups, rows,
          static_cast<int64_t>(gridDim.x) * groups};
}

// Blocks for `rows` rows, `groups` per block and iteration: one per row group (grid_cap;
// with LTX_KERNELS_GRID=walk at most `per_sm` blocks per SM, a grid-stride loop covers the
// rest).
inline unsigned row_grid(int64_t rows, int64_t groups, int per_sm, int device) {
  return static_cast<unsigned>(std::min(ceil_div(rows, groups), grid_cap(device, per_sm)));
}

// Launches kernel(p) over p.rows rows, `groups` per block of `block` threads per iteration
// (no dynamic shared memory). A block per row group (grid_cap); a grid-stride loop covers
// rows beyond the grid (LTX_KERNELS_GRID=walk: beyond 64 blocks per SM). pdl: with
// programmatic dependent launch (common/pdl.cuh; only for kernels that call pdl_wait first).
// A persistent grid (only the blocks resident at once, each walking ~rows / grid rows
// grid-stride) was timed against this (H200, 2026-12-05 10:24, RESULTS.md): slower at every
// shape of rmsnorm (0.4-7%), AdaLN 1-3% slower at 4 of 5 shapes (1x4608x3072 LayerNorm 1.3%
// faster); dropped.
template <typename Params>
void launch_rows(void (*kernel)(Params), const Params& p, int block, int64_t groups,
                 int device, cudaStream_t stream, bool pdl = false) {
  launch_pdl(kernel, row_grid(p.rows, groups, 64, device), static_cast<unsigned>(block),
             stream, pdl, p);
}

// Launches kernel(p) for the row kernels that take any power-of-two tpr (rms_norm_kernel,
// the q/k prologue, the norm backward kernels): p.tpr = tpr_wanted, halved while above the
// compiled kernel's thread limit (registers decide it); blocks of max(tpr, min_block)
// threads within that limit, row groups of tpr threads over `rows` rows, a block per row
// group (grid_cap).
template <typename Params>
void launch_rows_pow2(void (*kernel)(Params), Params& p, int tpr_wanted, int min_block,
                      int64_t rows, int device, cudaStream_t stream) {
  const int limit = max_block_threads(reinterpret_cast<const void*>(kernel), device);
  p.tpr = tpr_wanted;
  while (p.tpr > limit) p.tpr /= 2;  // any power of two is correct
  const int block = std::min(std::max(p.tpr, min_block), limit) / p.tpr * p.tpr;
  kernel<<<row_grid(rows, block / p.tpr, 64, device), block, 0, stream>>>(p);
}

}  // namespace ltx::cuda
