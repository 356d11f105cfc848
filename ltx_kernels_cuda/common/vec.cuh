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
#include <type_traits>

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

// The kind fixed at compile time: the fast paths of the row kernels use this, because a
// run-time kind is a branch per element and rounding point (adaln has four), and those
// branches split the unrolled element loop into many basic blocks (2026-12-03 PTX:
// 333 branches in the bf16x8 adaln kernel).
template <Round R>
__device__ __forceinline__ float round_to(float v) {
  if constexpr (R == Round::kHalf) {
    return __half2float(__float2half_rn(v));
  } else if constexpr (R == Round::kBFloat16) {
    return bf16_round_trip(v);
  } else {
    return v;
  }
}

// The kind read at run time (generic kernels, rare dtype mixes).
__device__ __forceinline__ float round_through(float v, Round r) {
  switch (r) {
    case Round::kHalf: return round_to<Round::kHalf>(v);
    case Round::kBFloat16: return round_to<Round::kBFloat16>(v);
    default: return v;
  }
}

// Every element of v rounded through R's dtype. On sm_80+ two at a time: one packed
// cvt.rn.{bf16x2,f16x2}.f32 plus two widening moves per pair. 2026-12-03 (ncu, H200): the
// integer bf16_round_trip at three rounding points per element made adaln ALU-bound
// (72 M instructions vs 23 M for inductor's kernel of the same expression). sm_75 has no
// bf16 conversion instruction (it would be emulated): integer rounding per element there.
template <Round R, int N>
__device__ __forceinline__ void round_all(float (&v)[N]) {
  if constexpr (R == Round::kNone) {
    return;
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int k = 0; k < N; k += 2) {
      if constexpr (R == Round::kBFloat16) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
        v[k] = bf16_round_trip(v[k]);
        v[k + 1] = bf16_round_trip(v[k + 1]);
#else
        const float2 f = __bfloat1622float2(__floats2bfloat162_rn(v[k], v[k + 1]));
        v[k] = f.x;
        v[k + 1] = f.y;
#endif
      } else {
        const float2 f = __half22float2(__floats2half2_rn(v[k], v[k + 1]));
        v[k] = f.x;
        v[k + 1] = f.y;
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) v[k] = round_to<R>(v[k]);
  }
}

// The same with the kind read at run time (generic kernels).
template <int N>
__device__ __forceinline__ void round_all(float (&v)[N], Round r) {
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = round_through(v[k], r);
}

// The rounding a storage type implies (fp32: none).
template <typename T>
struct RoundOf {
  static constexpr Round value = Round::kNone;
};
template <>
struct RoundOf<__half> {
  static constexpr Round value = Round::kHalf;
};
template <>
struct RoundOf<__nv_bfloat16> {
  static constexpr Round value = Round::kBFloat16;
};

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

  // Sets all bits to zero, written as one raw word (not element by element). A register
  // array of vectors that a kernel loads under conditions (rows past the end, lanes past the
  // row) is best zeroed so first: left undefined, or zeroed by assigning a zero Vec (its
  // elements copied one by one), nvcc 13.0 kept bf16 vectors as 16-bit pieces on sm_90 (q/k
  // prologue 122-128 registers instead of 80; AdaLN C = 8 spilled them as STL.S16 at its cap).
  __device__ __forceinline__ void set_zero() {
    const Raw raw{};
    memcpy(this, &raw, sizeof(raw));
  }
  // p must be aligned to kBytes (the host guarantees it when choosing N).
  __device__ __forceinline__ static Vec load(const T* p) {
    const Raw raw = __ldg(reinterpret_cast<const Raw*>(p));
    Vec out;
    memcpy(&out, &raw, sizeof(raw));
    return out;
  }
  // load() without allocating the line in L1 (read-once data, so L1 keeps what the SM's
  // other blocks read again). 16-byte vectors.
  __device__ __forceinline__ static Vec load_stream(const T* p) {
    static_assert(kBytes == 16, "16-byte vectors");
    Raw raw;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
        : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w)
        : "l"(p));
    Vec out;
    memcpy(&out, &raw, sizeof(raw));
    return out;
  }
  // A load with an L2 eviction policy from l2_evict_last_policy() (16-byte vectors; a plain
  // load below sm_80): Triton's form of tl.load(..., eviction_policy='evict_last'), coherent
  // (no .nc), evict_last in L1 too. RoPE's interleaved forward loads its tables and x so (what
  // inductor's kernel for LTX's q/k call does with its tables; 1.2% faster there on the H200,
  // RESULTS.md 2026-12-07 18:31). Its evict_first twin and a store with a policy lost or tied
  // (x of per-head rmsnorm, RoPE's outputs; 2026-12-07 18:31): removed.
  __device__ __forceinline__ static Vec load_last(const T* p, uint64_t policy) {
    static_assert(kBytes == 16, "16-byte vectors");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    Raw raw;
    asm("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
        : "=r"(raw.x), "=r"(raw.y), "=r"(raw.z), "=r"(raw.w) : "l"(p), "l"(policy));
    Vec out;
    memcpy(&out, &raw, sizeof(raw));
    return out;
#else
    return load(p);
#endif
  }
  // 16- and 8-byte stores are written as one st.global.v4/v2 in PTX: from a plain uint4
  // assignment NVVM emitted four st.global.v2.u16 per 16 bytes when the Vec came from
  // packed pairs (activation kernels, nvcc 13, 2026-12-04: four STG.E per vector in SASS).
  // The "memory" clobber keeps the compiler from moving other accesses across it, as it
  // would not move a plain store (in-place calls read and write the same addresses).
  __device__ __forceinline__ void store(T* p) const {
    Raw raw;
    memcpy(&raw, this, sizeof(raw));
    if constexpr (kBytes == 16) {
      asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"l"(p), "r"(raw.x), "r"(raw.y),
                   "r"(raw.z), "r"(raw.w)
                   : "memory");
    } else if constexpr (kBytes == 8) {
      asm volatile("st.global.v2.b32 [%0], {%1, %2};\n" ::"l"(p), "r"(raw.x), "r"(raw.y)
                   : "memory");
    } else {
      *reinterpret_cast<Raw*>(p) = raw;
    }
  }
};

// The L2 eviction policy for Vec::load_last (createpolicy, sm_80+; 0 below, unused): every
// line the access touches gets evict_last priority in L2.
__device__ __forceinline__ uint64_t l2_evict_last_policy() {
  uint64_t policy = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;\n" : "=l"(policy));
#endif
  return policy;
}

// N fp32 values narrowed to T in pairs (one cvt.rn.{bf16x2,f16x2}.f32 per two elements
// on sm_80+ instead of one per element), same round-to-nearest-even as from_float.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> pack_from_float(const float (&f)[N]) {
  Vec<T, N> o;
  if constexpr (N % 2 == 0 && !std::is_same_v<T, float>) {
#pragma unroll
    for (int k = 0; k < N; k += 2) {
      if constexpr (std::is_same_v<T, __half>) {
        const __half2 h = __floats2half2_rn(f[k], f[k + 1]);
        o.v[k] = __low2half(h);
        o.v[k + 1] = __high2half(h);
      } else {
        const __nv_bfloat162 h = __floats2bfloat162_rn(f[k], f[k + 1]);
        o.v[k] = __low2bfloat16(h);
        o.v[k + 1] = __high2bfloat16(h);
      }
    }
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_float<T>(f[k]);
  }
  return o;
}

// ---- packed half arithmetic --------------------------------------------------------
// a * b, a + b and a - b elementwise for T = __half / __nv_bfloat16, two at a time, each
// result rounded once to T (HMUL2 / HADD2: sm_80+ for bf16, sm_53+ for fp16; the headers emulate
// bf16 through fp32 on sm_75). Equal to eager's fp32 op followed by the cast back to T:
// rounding a product or sum of two p-bit values first to q bits and then to p bits is
// innocuous when q >= 2p + 2 (fp32's q = 24; p = 8 for bf16, 11 for fp16). One packed
// instruction per pair replaces widen x2, fp32 op x2 and a narrowing cvt (2026-12-03 ncu:
// adaln executed 42 M warp instructions vs inductor's 23 M). The _rn forms also keep the
// compiler from contracting a product and a following sum into one fma, a single rounding
// that eager does not do.
template <typename T>
struct Pair2;
template <>
struct Pair2<__half> { using type = __half2; };
template <>
struct Pair2<__nv_bfloat16> { using type = __nv_bfloat162; };

template <typename T, int N, typename Op>
__device__ __forceinline__ Vec<T, N> pairwise(const Vec<T, N>& a, const Vec<T, N>& b, Op op) {
  static_assert(N % 2 == 0 && !std::is_same_v<T, float>, "pairs of half values");
  using P = typename Pair2<T>::type;
  Vec<T, N> o;
#pragma unroll
  for (int k = 0; k < N; k += 2) {
    P pa, pb;
    memcpy(&pa, &a.v[k], sizeof(P));
    memcpy(&pb, &b.v[k], sizeof(P));
    const P r = op(pa, pb);
    memcpy(&o.v[k], &r, sizeof(P));
  }
  return o;
}
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> mul_rn(const Vec<T, N>& a, const Vec<T, N>& b) {
  using P = typename Pair2<T>::type;
  return pairwise(a, b, [](P x, P y) { return __hmul2_rn(x, y); });
}
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> add_rn(const Vec<T, N>& a, const Vec<T, N>& b) {
  using P = typename Pair2<T>::type;
  return pairwise(a, b, [](P x, P y) { return __hadd2_rn(x, y); });
}
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> sub_rn(const Vec<T, N>& a, const Vec<T, N>& b) {
  using P = typename Pair2<T>::type;
  return pairwise(a, b, [](P x, P y) { return __hsub2_rn(x, y); });
}

}  // namespace ltx::cuda
