// Vectorised global loads/stores and float conversions shared by every kernel.
//
// Kernels keep data in its storage type (float, __half, __nv_bfloat16) and do all
// arithmetic in fp32. A Vec<T, N> is N consecutive elements moved with one
// 16/8/4/2-byte access; the host picks N per call from the pointers' alignment,
// the row stride and the row length (pick_vec_width in dispatch.cuh).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

namespace ltx::cuda {

// ---- conversions (round to nearest even, as PyTorch's casts) -------------------
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// fp32 rounded to bf16 and widened back, in integer ops (3-4 ALU instructions at full
// rate) instead of a conversion instruction plus a shift: the bf16 row kernels round
// at up to four eager op boundaries per element (adaln), and the conversion pipe is
// narrower than the integer one. Same value as __float2bfloat16_rn for every finite
// value and infinity (a carry out of the mantissa rounds up the exponent, to inf at
// the top); NaN stays NaN (PyTorch's canonical 0x7fc0 pattern).
__device__ __forceinline__ float bf16_round_trip(float v) {
  const uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return __uint_as_float(0x7fc00000u);
  return __uint_as_float((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

// Rounding to a narrower dtype and back, modelling an eager op boundary.
enum class Round : int { kNone = 0, kHalf = 1, kBFloat16 = 2 };

__device__ __forceinline__ float round_through(float v, Round r) {
  switch (r) {
    case Round::kHalf: return __half2float(__float2half_rn(v));
    case Round::kBFloat16: return bf16_round_trip(v);
    default: return v;
  }
}

// ---- vectors --------------------------------------------------------------------
template <int kBytes>
struct RawOf;
template <>
struct RawOf<16> { using type = uint4; };
template <>
struct RawOf<8> { using type = uint2; };
template <>
struct RawOf<4> { using type = uint32_t; };
template <>
struct RawOf<2> { using type = uint16_t; };

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  static constexpr int kBytes = static_cast<int>(sizeof(T)) * N;
  using Raw = typename RawOf<kBytes>::type;
  T v[N];

  // p must be aligned to kBytes (the host guarantees it when choosing N).
  __device__ __forceinline__ static Vec load(const T* p) {
    const Raw raw = __ldg(reinterpret_cast<const Raw*>(p));
    Vec out;
    memcpy(&out, &raw, sizeof(raw));
    return out;
  }
  __device__ __forceinline__ void store(T* p) const {
    Raw raw;
    memcpy(&raw, this, sizeof(raw));
    *reinterpret_cast<Raw*>(p) = raw;
  }
};

}  // namespace ltx::cuda
