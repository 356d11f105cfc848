// Host-side helpers for the launchers: dtype dispatch, vector-width choice,
// device guard + current stream.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string_view>
#include <tuple>
#include <utility>

#include "vec.cuh"

namespace ltx::cuda {

// A developer's A/B switch: the value of environment variable `name`, empty when unset.
// Read on every call, so benchmarks/ab_kernels.py can time each variant in one process;
// unset always means the default kernels.
inline std::string_view ab_switch(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string_view(v) : std::string_view();
}

template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with the CUDA storage type of a float dtype.
template <typename F>
void dispatch_float(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat: return f(TypeTag<float>{});
    case at::kHalf: return f(TypeTag<__half>{});
    case at::kBFloat16: return f(TypeTag<__nv_bfloat16>{});
    default: TORCH_CHECK(false, "ltx_kernels: unsupported dtype ", t);
  }
}

inline Round round_kind(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return Round::kHalf;
    case at::kBFloat16: return Round::kBFloat16;
    default: return Round::kNone;
  }
}

// One operand of a vectorised access: base pointer, element size, and the
// element distance between consecutive rows (0 for a single row / broadcast).
struct Access {
  const void* ptr;
  int64_t elem_bytes;
  int64_t row_stride;
};

// The widest N in {8, 4, 2, 1} elements such that an N-element access is at
// most 16 bytes for every operand, every row starts N-aligned, and cols % N == 0.
inline int pick_vec_width(int64_t cols, std::initializer_list<Access> operands) {
  for (int n : {8, 4, 2}) {
    bool ok = cols % n == 0;
    for (const Access& a : operands) {
      const int64_t bytes = a.elem_bytes * n;
      ok = ok && bytes <= 16 && reinterpret_cast<uintptr_t>(a.ptr) % bytes == 0 &&
           a.row_stride % n == 0;
    }
    if (ok) return n;
  }
  return 1;
}

// Calls f(std::integral_constant<int, N>{}) for a runtime vector width.
template <typename F>
void dispatch_vec(int n, F&& f) {
  switch (n) {
    case 8: return f(std::integral_constant<int, 8>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 2: return f(std::integral_constant<int, 2>{});
    default: return f(std::integral_constant<int, 1>{});
  }
}

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// compute() for `device` once, kept in the caller's `cache` (0: not yet asked, so compute
// must return non-zero); `other` for device indices outside 0-63. For the runtime's
// per-device attributes on every launch: an array read, no lock (writers racing on a
// device all store the same value).
template <typename Compute>
inline int per_device(int (&cache)[64], int device, int other, Compute compute) {
  if (device < 0 || device >= 64) return other;
  if (cache[device] == 0) cache[device] = compute();
  return cache[device];
}

inline int device_attribute(cudaDeviceAttr attr, int device) {
  int value = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&value, attr, device));
  return value;
}

// Peak DRAM bandwidth of a device in GB/s (2 transfers per memory clock times the bus
// width), queried once per device: H100 SXM 3352, H200 4916.
inline int dram_peak_gbps(int device) {
  static int gbps[64] = {};
  return per_device(gbps, device, 0, [&] {
    const int khz = device_attribute(cudaDevAttrMemoryClockRate, device);
    const int bits = device_attribute(cudaDevAttrGlobalMemoryBusWidth, device);
    return std::max(1, static_cast<int>(2.0 * khz * 1e3 * (bits / 8) / 1e9));
  });
}

// Compute capability major of a device (8: cp.async and more), queried once per device.
inline int cc_major(int device) {
  static int major[64] = {};
  return per_device(major, device, 0,
                    [&] { return device_attribute(cudaDevAttrComputeCapabilityMajor, device); });
}

// Multiprocessor count of a device, queried once per device.
inline int sm_count(int device) {
  static int counts[64] = {};
  return per_device(counts, device, 132,
                    [&] { return device_attribute(cudaDevAttrMultiProcessorCount, device); });
}

// The most blocks a grid-stride launch takes: 2^22, a block for every row group (token
// group) of any realistic call, so blocks rarely walk. (2^22: the RoPE kernel's first token
// index is 32-bit.) Was per_sm blocks per SM (64 for the row kernels: rmsnorm, AdaLN, gated
// residual, q/k prologue and the norm backward kernels; 32 for RoPE), the rest walked; the
// GEGLU kernel gained 2% from the same change (H100, RESULTS.md 2026-12-05 17:12). Here
// (H100 bf16, 2026-12-05 19:23, benchmarks/ab_kernels.py) it ties or wins at every shape
// timed: gated residual [2, 8064, 2048] 63.25 -> 62.85 µs, rope_ltx_qk_pair 128.54 ->
// 128.19, rope_ltx 128.91 -> 128.78, rmsnorm / AdaLN / rope_llama within 0.1%.
// LTX_KERNELS_GRID=walk (read per call: a developer A/B switch, and the tests' way to make
// the grid-stride loops walk) restores the per_sm cap.
inline int64_t grid_cap(int device, int per_sm) {
  if (ab_switch("LTX_KERNELS_GRID") == "walk") return static_cast<int64_t>(sm_count(device)) * per_sm;
  return int64_t{1} << 22;
}

// ask() for `key` once, later calls answer from a map (thread-safe). For the runtime's
// per-kernel queries: too slow to repeat on every launch. The statics belong to each caller's
// instantiation (its lambda's type), so every query has its own map.
template <typename Key, typename Ask>
int memo_query(const Key& key, Ask ask) {
  static std::mutex mu;
  static std::map<Key, int> known;
  {
    const std::lock_guard<std::mutex> lock(mu);
    const auto it = known.find(key);
    if (it != known.end()) return it->second;
  }
  const int value = ask();
  const std::lock_guard<std::mutex> lock(mu);
  known[key] = value;
  return value;
}

// Blocks of `block` threads and `smem` dynamic shared bytes of `kernel` resident per SM at
// once (at least 1), asked of the runtime once per (kernel, block, smem, device): persistent
// grids size themselves with it, and the occupancy query is too slow for every launch.
inline int resident_blocks(const void* kernel, int block, size_t smem, int device) {
  return memo_query(std::make_tuple(kernel, block, smem, device), [&] {
    int occ = 0;
    C10_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kernel, block, smem));
    return std::max(occ, 1);
  });
}

// Whether a kernel that stages operands in its static shared memory with cp.async runs as
// planned on `device`: cp.async (sm_80+) and at least `min_blocks` of its `block`-thread
// blocks resident per SM. Answered once per device into the caller's `cache` (one per kernel
// instantiation): a plain array read on every launch, not the occupancy memo's lock and map.
inline bool staging_fits(int (&cache)[64], const void* kernel, int block, int min_blocks, int device) {
  return per_device(cache, device, 2, [&] {
    if (cc_major(device) < 8) return 2;
    return resident_blocks(kernel, block, 0, device) >= min_blocks ? 1 : 2;
  }) == 1;
}

// The most threads a block of `kernel` may have (its registers decide it), asked of the
// runtime once per (kernel, device): cudaFuncGetAttributes is host time that every small
// eager call paid when asked per launch.
inline int max_block_threads(const void* kernel, int device) {
  return memo_query(std::make_pair(kernel, device), [&] {
    cudaFuncAttributes attr;
    C10_CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
    return attr.maxThreadsPerBlock;
  });
}

inline int pow2_ceil(int64_t v) {
  int p = 1;
  while (p < v) p <<= 1;
  return p;
}

// ---- row kernels (adaln, gated residual) -----------------------------------------
//
// One group of `tpr` threads per row; every thread holds `cache` vectors of its row in
// registers (the row is read once; longer rows re-read the rest). One vector per thread
// while a row fits in kMaxRowThreads threads keeps registers low, so many rows per SM
// are in flight; 2 or 4 vectors per thread only for longer rows. tpr is a power of two
// up to 32 (shuffle width), else a multiple of 32 (row_sum adds per-warp sums); short
// rows share a block. Measured 2026-12-02: this plan helped gated_residual and left
// adaln unchanged, but made rmsnorm and the q/k prologue slower than their own
// deeper-cache launch, which they keep (benchmarks/NOTES.md).
constexpr int kMaxRowThreads = 512;
constexpr int kRowBlock = 256;

struct RowPlan {
  int tpr;
  int cache;  // vectors per thread held in registers: 1, 2 or 4
  int block;
  unsigned grid;
};

// min_cache: vectors per thread to start from when the row has at least a warp's worth
// per vector (adaln asks 2: with one 16-byte vector of x per thread and ~70 registers it
// keeps only ~12 KB per SM in flight, 2026-12-03 ncu).
inline RowPlan plan_rows(int64_t rows, int64_t nvec, int max_cache, int device, int min_cache = 1) {
  RowPlan p{};
  p.cache = 1;
  while (p.cache < std::min(min_cache, max_cache) && nvec >= 64LL * p.cache) p.cache *= 2;
  while (p.cache < max_cache && nvec > static_cast<int64_t>(kMaxRowThreads) * p.cache) p.cache *= 2;
  const int64_t per = std::max<int64_t>(1, ceil_div(nvec, p.cache));
  p.tpr = per <= 32 ? pow2_ceil(per)
                    : static_cast<int>(std::min<int64_t>(kMaxRowThreads, ceil_div(per, 32) * 32));
  const int groups = std::max(1, kRowBlock / p.tpr);
  p.block = groups * p.tpr;
  // A block per row group (grid_cap); a grid-stride loop covers rows beyond the grid.
  p.grid = static_cast<unsigned>(std::min(ceil_div(rows, groups), grid_cap(device, 64)));
  return p;
}

}  // namespace ltx::cuda
