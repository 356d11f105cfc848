// Per-thread asynchronous copies global -> shared (cp.async, sm_80+) for row streams.
//
// Why: a row kernel that prefetches the next row into registers keeps at most one row per
// thread in flight, and the registers of that buffer cap occupancy (2026-12-03 ncu, adaln
// streaming kernel: 60 registers, DRAM 52% busy, limited by bytes in flight). cp.async
// queues the copies of several rows ahead into shared memory at no register cost.
//
// Every slot is written and read by the same thread, so no barrier is needed: the
// thread's own cp.async.wait_group makes its completed copies visible to it. A thread
// reuses a slot only after it has read it into registers and used the values, so a new
// copy never overwrites data still to be read. sm_75 has no cp.async: there the copy is
// an ordinary load and store (correct, not asynchronous).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

namespace ltx::cuda {

// Queues a kBytes (4, 8 or 16) copy from global to this thread's shared slot; both
// kBytes-aligned. 16 bytes bypass L1 (.cg: streamed data) unless kKeepL1 (.ca: data other
// blocks of the SM read again, e.g. a broadcast modulation row); smaller copies go through it.
template <int kBytes, bool kKeepL1 = false>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem) {
  static_assert(kBytes == 4 || kBytes == 8 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto dst = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  if constexpr (kBytes == 16 && !kKeepL1) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(gmem) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(dst), "l"(gmem), "n"(kBytes)
                 : "memory");
  }
#else
  if constexpr (kBytes == 16) {
    *static_cast<uint4*>(smem) = *static_cast<const uint4*>(gmem);
  } else if constexpr (kBytes == 8) {
    *static_cast<uint2*>(smem) = *static_cast<const uint2*>(gmem);
  } else {
    *static_cast<uint32_t*>(smem) = *static_cast<const uint32_t*>(gmem);
  }
#endif
}

// Closes the group of copies queued since the last commit (an empty group is fine: one
// group per row keeps the waits uniform).
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Waits until at most kPending of this thread's committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

// The 16 bytes a thread's cp.async put into its own slot, read back as V (a 16-byte vector
// type such as Vec<T, N>): one 16-byte shared load, then a bit copy into V.
template <typename V>
__device__ __forceinline__ V read_slot(const uint4* slot) {
  static_assert(sizeof(V) == sizeof(uint4), "read_slot reads 16-byte slots");
  const uint4 raw = *slot;
  V v;
  memcpy(&v, &raw, sizeof(raw));
  return v;
}

}  // namespace ltx::cuda
