// Programmatic dependent launch (PDL, sm_90+).
//
// A kernel launched with PDL may be scheduled while the kernel before it in the stream is
// still finishing: its blocks start, run up to pdl_wait(), and wait there until that kernel
// has completed and its writes are visible. What it saves is the gap between two kernels
// (grid launch, block dispatch, the prologue), ~0.5-1 µs: most of a decode-sized call under
// CUDA-graph replay (rmsnorm 16 x 4096: 2.7 µs a call, an empty kernel 0.75; H200,
// RESULTS.md 2026-12-05). FlashInfer's norms launch this way on sm_90+ (enable_pdl).
//
// Rule: a kernel launched with PDL must call pdl_wait() before its first global memory
// access (read or write: the previous kernel may still read what this one overwrites).
// Launch only such kernels through launch_pdl. Without PDL, or before sm_90, both device
// calls are no-ops.
#pragma once

#include <cuda_runtime.h>

#include <c10/cuda/CUDAException.h>

#include <utility>

#include "dispatch.cuh"

namespace ltx::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next PDL kernel in the stream be scheduled once every block of this grid has
// called it or exited (it still waits in pdl_wait for this grid to complete).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// Whether `device` can launch with PDL (compute capability 9.0 or newer), asked once.
inline bool pdl_supported(int device) {
  static int known[64] = {};  // 1 no, 2 yes
  return per_device(known, device, 1, [&] {
           return device_attribute(cudaDevAttrComputeCapabilityMajor, device) >= 9 ? 2 : 1;
         }) == 2;
}

// Whether a launch on `device` should use PDL: on every GPU that has it, unless
// LTX_KERNELS_PDL=0 (read per call: a developer's A/B switch, benchmarks/ab_kernels.py).
// For kernels that call pdl_wait first. Measured (H200, 2026-12-05 10:24, CUDA-graph replay,
// RESULTS.md): rmsnorm 16 x 4096 2.67 -> 1.99 µs, 1 x 32 x 128 2.09 -> 1.49, decode RoPE
// 3.41 -> 2.77; calls timed alone (cold L2) and wide shapes unchanged within 1%.
inline bool pdl_requested(int device) {
  return ab_switch("LTX_KERNELS_PDL") != "0" && pdl_supported(device);
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute when `pdl` (the
// caller checked pdl_supported and that the kernel calls pdl_wait first).
template <typename... Params, typename... Args>
void launch_pdl_smem(void (*kernel)(Params...), unsigned grid, unsigned block, size_t smem,
                     cudaStream_t stream, bool pdl, Args&&... args) {
  if (!pdl) {
    kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
    return;
  }
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  C10_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

// launch_pdl_smem without dynamic shared memory.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), unsigned grid, unsigned block, cudaStream_t stream,
                bool pdl, Args&&... args) {
  launch_pdl_smem(kernel, grid, block, 0, stream, pdl, std::forward<Args>(args)...);
}

}  // namespace ltx::cuda
