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

// LTX_KERNELS_BLOCKS_PER_SM=n (a developer's A/B switch, read per call; the kernels that
// launch_rows / launch_rows_pow2 start, which use no dynamic shared memory): at most n blocks
// per SM, by asking for dynamic shared memory that n + 1 blocks would not fit. It times a
// kernel at the occupancy an older register count gave it (Vec::set_zero, 2026-12-07: the q/k
// prologue 2 -> 3 blocks of 256 per SM, AdaLN's direct kernel 4 -> 5). The shared memory
// taken also shrinks L1 (the carve-out): a confound where a kernel rereads through L1.
// Returns the dynamic bytes to launch with (0: no cap asked, or the kernel's own shared
// memory caps it already).
inline size_t occupancy_cap_smem(const void* kernel, int device) {
  const std::string_view v = ab_switch("LTX_KERNELS_BLOCKS_PER_SM");
  if (v.empty() || v.size() > 2) return 0;
  int n = 0;
  for (const char c : v) {
    if (c < '0' || c > '9') return 0;  // not a count: no cap
    n = n * 10 + (c - '0');
  }
  if (n == 0) return 0;
  const int per_sm = device_attribute(cudaDevAttrMaxSharedMemoryPerMultiprocessor, device);
  const int reserved = device_attribute(cudaDevAttrReservedSharedMemoryPerBlock, device);
  cudaFuncAttributes attr;
  C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
  // Per block, rounded up to 1 KB (above any allocation granularity): n still fit, n + 1 not.
  const size_t need = (static_cast<size_t>(per_sm) / (n + 1) / 1024 + 1) * 1024;
  const size_t fixed = attr.sharedSizeBytes + static_cast<size_t>(reserved);
  if (need <= fixed) return 0;
  const size_t dyn = need - fixed;
  C10_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(dyn)));
  return dyn;
}

// Launches kernel(p) over p.rows rows, `groups` per block of `block` threads per iteration
// (dynamic shared memory only under LTX_KERNELS_BLOCKS_PER_SM). A block per row group
// (grid_cap); a grid-stride loop covers rows beyond the grid (LTX_KERNELS_GRID=walk: beyond
// 64 blocks per SM). pdl: with programmatic dependent launch (common/pdl.cuh; only for
// kernels that call pdl_wait first). A persistent grid (only the blocks resident at once,
// each walking ~rows / grid rows grid-stride) was timed against this (H200, 2026-12-05 10:24,
// RESULTS.md): slower at every shape of rmsnorm (0.4-7%), AdaLN 1-3% slower at 4 of 5 shapes
// (1x4608x3072 LayerNorm 1.3% faster); dropped.
template <typename Params>
void launch_rows(void (*kernel)(Params), const Params& p, int block, int64_t groups,
                 int device, cudaStream_t stream, bool pdl = false) {
  launch_pdl_smem(kernel, row_grid(p.rows, groups, 64, device), static_cast<unsigned>(block),
                  occupancy_cap_smem(reinterpret_cast<const void*>(kernel), device), stream, pdl, p);
}

// Launches kernel(p) for the row kernels that take any power-of-two tpr (rms_norm_kernel,
// the q/k prologue, the norm backward kernels): p.tpr = tpr_wanted, halved while above the
// compiled kernel's thread limit (registers decide it); blocks of max(tpr, min_block)
// threads within that limit, row groups of tpr threads over `rows` rows, a block per row
// group (grid_cap).
template <typename Params>
void launch_rows_pow2(void (*kernel)(Params), Params& p, int tpr_wanted, int min_block,
                      int64_t rows, int device, cudaStream_t stream) {
  const void* k = reinterpret_cast<const void*>(kernel);
  const int limit = max_block_threads(k, device);
  p.tpr = tpr_wanted;
  while (p.tpr > limit) p.tpr /= 2;  // any power of two is correct
  const int block = std::min(std::max(p.tpr, min_block), limit) / p.tpr * p.tpr;
  kernel<<<row_grid(rows, block / p.tpr, 64, device), block, occupancy_cap_smem(k, device), stream>>>(p);
}

}  // namespace ltx::cuda
