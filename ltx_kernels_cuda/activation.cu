// GELU (erf / tanh) and gated GELU (GEGLU) on CUDA.
//
// Elementwise and memory bound in principle, but issue bound in practice: tanhf is ~16
// instructions (two MUFU) per element, so with 2-byte types every instruction of index
// math or of a split store shows in the time (2026-12-04 ncu, bf16 gelu_tanh: ours and
// inductor's kernels both at 84-89% of issue slots, 61-67% of DRAM). The kernel therefore
// does no division and no per-element index math: a block owns one tile column (U * tpr
// vectors) of its rows and walks down them by offset increments (GELU on strided rows: 32
// blocks per SM down the rows; GEGLU: a 128-thread block per row group, so rarely a walk);
// each thread issues all of its loads (U per operand) before any math. Contiguous GELU
// inputs run as a single long row (with a scalar tail), one tile per block.
//
// Large bf16 / fp16 GELU calls (not the gated ones) take act_table_kernel instead: GELU of
// 16-bit values from a table in shared memory (bf16: the compact one, 2^-16 <= |x| < 8;
// fp16: the whole 128 KB table), only on GPUs with enough DRAM bandwidth per SM
// (gelu_table_pays: the H200, not the H100).
//
// Numerics: fp32 with ATen's CUDA expressions (ActivationGeluKernel.cu), so the
// result is bit-identical to F.gelu in every dtype. The gated form rounds the GELU
// to the storage dtype before the product, as eager `h * F.gelu(g)` does (16-bit: then
// one packed multiply per pair, the same bits).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <type_traits>

#include "../torch-ext/torch_binding.h"
#include "common/dispatch.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kBlock = 256;   // most threads per block
// Vectors per thread per tile: 4 loads in flight per thread either way (gated
// forms load two operands per vector).
template <bool kGated>
constexpr int kUnroll = kGated ? 2 : 4;
constexpr int kMinBlocks = 4; // resident blocks per SM the register budget must allow (<= 64 regs)
constexpr int kRowBlocks = 32; // blocks per SM down the rows at most; each walks on from there

// Constants exactly as ATen computes them (double math, then one cast to float).
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2_SqrtPi = 1.12837916709551257390;
constexpr float kAlpha = static_cast<float>(kSqrt1_2);
constexpr float kBeta = static_cast<float>(kSqrt2 * k2_SqrtPi * 0.5);
constexpr float kKappa = static_cast<float>(0.044715);

// The same expression trees as ATen, so nvcc contracts them the same way
// (x + kKappa * x_cube becomes one FMA in both).
template <GeluKind K>
__device__ __forceinline__ float gelu_f(float x) {
  if constexpr (K == GeluKind::kTanh) {
    const float x_cube = x * x * x;
    const float inner = kBeta * (x + kKappa * x_cube);
    return 0.5f * x * (1.0f + tanhf(inner));
  } else {
    return x * 0.5f * (1.0f + erff(x * kAlpha));
  }
}

// ---- GELU-tanh on MUFU, rounded as the exact one (16-bit outputs) ------------------------
//
// GELU-tanh(x) = 0.5 x (1 + tanh u) = x e / (1 + e) with e = 2^a, a = 2u log2(e): ex2.approx
// and rcp.approx (one MUFU each) and two multiplies, against tanhf's ~16 instructions and
// the add and multiplies around it. Where tanhf is the time (act_kernel is issue bound, see
// the top of the file), that beats the lookup table's index math and bank conflicts too. It
// is not eager's tanhf, so each element is checked. Its fp32 value v is within a relative
// (4 + 1.4 |a|) 2^-24 of the true GELU (ex2.approx 2 ulp, rcp.approx 1, the argument's two
// roundings scaled by |a| ln 2, the products), eager's within |x| 2^-23.5 + |v| 2^-23 of it
// (tanhf 2 ulp, the roundings of 1 + t and of the products). B = |x| 2^-21 + |v| (|a| + 4)
// 2^-22 covers both, 2.8x over. Rounding to T is monotone, so where v - B and v + B round to
// the same value, eager's value, between them, rounds to it too: that is the result. The
// other elements (near a rounding midpoint; very negative x, where v is tiny against B;
// infinities; under randn inputs 0.6% of bf16 elements, 1.7% of fp16) are computed with
// tanhf. a is clamped to +-64 (e = inf would give inf * 0). Simulated with those error
// bounds on every 16-bit pattern (tools/gelu_fast_model.py: none wrong);
// tests/test_activation.py checks every pattern on the GPU, bit-exact.
constexpr float kBeta2Log2e = static_cast<float>(kSqrt2 * k2_SqrtPi * 0.5 * 2.0 * 1.44269504088896340736);

// Whether a and b round to the same T (16-bit): both narrowed by one paired conversion.
template <typename T>
__device__ __forceinline__ bool rounds_alike(float a, float b) {
  uint32_t w;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 pair = __floats2bfloat162_rn(a, b);
    memcpy(&w, &pair, sizeof(w));
  } else {
    const __half2 pair = __floats2half2_rn(a, b);
    memcpy(&w, &pair, sizeof(w));
  }
  return (w >> 16) == (w & 0xffffu);
}

// GELU of a whole vector, computed (tanhf / erff): the rare path of the fast GELU-tanh (below)
// and of the compact table (table_vec). Not inlined, so the N tanhf's / erff's registers do
// not count against the calling kernel's (inlined into the fast form, it spilled 4-32 bytes
// under act_kernel's 64; the table loop holds 40 at 3 x 512 threads). The bits of act_vec's
// ungated form.
template <typename T, GeluKind K, int N>
__device__ __noinline__ Vec<T, N> computed_vec(const Vec<T, N> x) {
  float r[N];
#pragma unroll
  for (int k = 0; k < N; ++k) r[k] = gelu_f<K>(to_float(x.v[k]));
  return pack_from_float<T, N>(r);
}

// GELU-tanh of a vector of 16-bit values, eager's bits (see above). Fallback elements
// share one branch per vector, so a warp diverges once per vector at most.
template <typename T, int N>
__device__ __forceinline__ Vec<T, N> gelu_tanh_fast_vec(const Vec<T, N>& xv) {
  static_assert(sizeof(T) == 2, "16-bit dtypes: fp32 outputs need tanhf's own value");
  float r[N];
  uint32_t exact = 0;  // bit k: element k computed exactly
#pragma unroll
  for (int k = 0; k < N; ++k) {
    const float x = to_float(xv.v[k]);
    const float a = fminf(fmaxf((x + kKappa * (x * x * x)) * kBeta2Log2e, -64.0f), 64.0f);
    float e, rcp;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(a));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(rcp) : "f"(e + 1.0f));
    r[k] = x * (e * rcp);
    const float b = fmaf(fabsf(x), 0x1p-21f, fabsf(r[k]) * ((fabsf(a) + 4.0f) * 0x1p-22f));
    exact |= rounds_alike<T>(r[k] - b, r[k] + b) ? 0u : 1u << k;
  }
  Vec<T, N> g = pack_from_float<T, N>(r);
  if (exact != 0) {
    const Vec<T, N> e = computed_vec<T, GeluKind::kTanh, N>(xv);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      if (exact & (1u << k)) g.v[k] = e.v[k];
    }
  }
  return g;
}

// gated: value * round_T(gelu(gate)); otherwise gelu(gate). Product in fp32, rounded once.
template <typename T, GeluKind K, bool kGated>
__device__ __forceinline__ float act_f(T gate, T value) {
  const float g = gelu_f<K>(to_float(gate));
  if constexpr (kGated) {
    return to_float(value) * to_float(from_float<T>(g));
  } else {
    return g;
  }
}
template <typename T, GeluKind K, bool kGated>
__device__ __forceinline__ T act(T gate, T value) {
  return from_float<T>(act_f<T, K, kGated>(gate, value));
}

struct ActParams {
  const void* gate;   // the GELU input (the whole x when not gated)
  const void* value;  // gated only: the multiplied half
  void* out;
  int64_t rows;
  int64_t nvec;        // vectors per row
  int64_t in_stride;   // elements between rows of gate/value (0: one row)
  int64_t out_stride;  // elements between rows of out
  int tpr;             // threads per row
  int tail;            // one-row launches: elements after the last whole vector
};

// The single-row tail (elements after the last whole vector), done by block (0, 0).
template <typename T, int N, GeluKind K, bool kGated>
__device__ __forceinline__ void act_tail(const ActParams& p, const T* gate, const T* value,
                                         T* out) {
  if (blockIdx.x == 0 && blockIdx.y == 0 && static_cast<int>(threadIdx.x) < p.tail) {
    const int64_t c = p.nvec * N + threadIdx.x;
    out[c] = act<T, K, kGated>(gate[c], kGated ? value[c] : gate[c]);
  }
}

// Whether the gated product can run on pairs of T (a 16-bit dtype, an even vector).
template <typename T, int N>
constexpr bool kPairProduct = sizeof(T) == 2 && N % 2 == 0;

// One vector of output from one vector of gate (and value), narrowed in pairs
// (pack_from_float: one conversion per two elements). Gated, 16-bit, kPacked: the GELUs
// narrowed in pairs, then value * GELU as one packed multiply per pair (mul_rn: the exact
// product rounded once, the bits of eager's fp32 product rounded to T, see vec.cuh). Per
// element that drops the per-element narrow + widen of the GELU, the widening of value and
// the fp32 multiply (bf16 SASS, sm_90: ~4.5 instructions, one on the conversion pipe,
// down to ~1); kPacked = false keeps the fp32 product (LTX_KERNELS_GEGLU_PACKED=0, A/B).
// kFast (16-bit, tanh, even N; LTX_KERNELS_GELU_FAST=1): the GELU by gelu_tanh_fast_vec.
template <typename T, int N, GeluKind K, bool kGated, bool kPacked = true, bool kFast = false>
__device__ __forceinline__ Vec<T, N> act_vec(const Vec<T, N>& gv, const Vec<T, N>& vv) {
  float r[N];
  if constexpr (kFast) {
    static_assert(K == GeluKind::kTanh && kPairProduct<T, N> && kPacked, "16-bit tanh, packed");
    const Vec<T, N> g = gelu_tanh_fast_vec<T, N>(gv);
    if constexpr (kGated) {
      return mul_rn(vv, g);
    } else {
      return g;
    }
  } else if constexpr (kGated && kPacked && kPairProduct<T, N>) {
#pragma unroll
    for (int k = 0; k < N; ++k) r[k] = gelu_f<K>(to_float(gv.v[k]));
    return mul_rn(vv, pack_from_float<T, N>(r));
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) r[k] = act_f<T, K, kGated>(gv.v[k], vv.v[k]);
    return pack_from_float<T, N>(r);
  }
}

// Grid: x = tile columns (U * tpr vectors of a row each), y = row groups walked with a
// stride of gridDim.y groups. A thread's columns are fixed, so its bounds checks are
// hoisted out of the row loop and its addresses only advance by a constant per row.
//
// (A pipelined walk, each thread queueing its next row by cp.async before computing this one,
// lost on the H100 twice and was never timed on an H200: removed 2026-12-07, benchmarks/NOTES.md
// 2026-12-06 (13:55).)
template <typename T, int N, GeluKind K, bool kGated, bool kPacked = true, bool kFast = false>
__global__ void __launch_bounds__(kBlock, kMinBlocks) act_kernel(ActParams p) {
  using V = Vec<T, N>;
  constexpr int U = kUnroll<kGated>;
  const T* gate = static_cast<const T*>(p.gate);
  const T* value = static_cast<const T*>(p.value);
  T* out = static_cast<T*>(p.out);
  act_tail<T, N, K, kGated>(p, gate, value, out);

  const int lane = static_cast<int>(threadIdx.x) % p.tpr;
  const int sub = static_cast<int>(threadIdx.x) / p.tpr;
  const int groups = static_cast<int>(blockDim.x) / p.tpr;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.x) * U * p.tpr;
  const int64_t j0 = tile0 + lane;
  const int64_t du = static_cast<int64_t>(p.tpr) * N;  // elements between a thread's vectors

  int64_t row = static_cast<int64_t>(blockIdx.y) * groups + sub;
  const int64_t row_step = static_cast<int64_t>(gridDim.y) * groups;
  // Offsets in elements: the pointers are formed only for rows that exist.
  int64_t gi = row * p.in_stride + j0 * N;
  int64_t oi = row * p.out_stride + j0 * N;
  const int64_t gstep = row_step * p.in_stride;
  const int64_t ostep = row_step * p.out_stride;

  // kFull: the whole tile lies inside the row (every block but a partial last column), so
  // the loop has no bounds check per vector.
  auto walk = [&](auto full) {
    constexpr bool kFull = decltype(full)::value;
    bool live[U];
#pragma unroll
    for (int u = 0; u < U; ++u) live[u] = kFull || j0 + static_cast<int64_t>(u) * p.tpr < p.nvec;
    using Vv = V[kGated ? U : 1];
    auto load_row = [&](int64_t at, V (&gd)[U], Vv& vd) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        // A partial tile's vectors zeroed first (Vec::set_zero): left undefined, bf16 ones
        // were kept in 16-bit pieces (sm_90, the fast GELU-tanh: 16 bytes spilled).
        if constexpr (!kFull) {
          gd[u].set_zero();
          if constexpr (kGated) vd[u].set_zero();
        }
        if (live[u]) {
          gd[u] = V::load(gate + at + u * du);
          if constexpr (kGated) vd[u] = V::load(value + at + u * du);
        }
      }
    };
    auto store_row = [&](T* o, const V (&gd)[U], const Vv& vd) {
#pragma unroll
      for (int u = 0; u < U; ++u) {
        if (live[u]) {
          if constexpr (kGated) {
            act_vec<T, N, K, true, kPacked, kFast>(gd[u], vd[u]).store(o + u * du);
          } else {
            act_vec<T, N, K, false, true, kFast>(gd[u], gd[u]).store(o + u * du);
          }
        }
      }
    };
    V gv[U];
    [[maybe_unused]] Vv vv;
    for (; row < p.rows; row += row_step, gi += gstep, oi += ostep) {
      load_row(gi, gv, vv);
      store_row(out + oi, gv, vv);
    }
  };
  if (tile0 + static_cast<int64_t>(U) * p.tpr <= p.nvec) {
    walk(std::true_type{});
  } else {
    walk(std::false_type{});
  }
}


// Sets p.tpr, the threads per row, for U vectors each of p.nvec, and returns the block
// size (at most max_block). Short rows share a block (a power of two threads each);
// longer rows get as few tiles as max_block threads allow, then as few whole warps as
// fill them evenly (d = 5120 bf16 at 256: 2 tiles of 160 threads, not a full and a
// quarter-full 256).
inline int row_block(ActParams& p, int U, int max_block) {
  const int64_t want = std::max<int64_t>(1, ceil_div(p.nvec, U));
  if (want <= 16) {
    p.tpr = pow2_ceil(want);
    return max_block;
  }
  const int64_t tiles = ceil_div(want, max_block);
  p.tpr = static_cast<int>(std::min<int64_t>(max_block, ceil_div(ceil_div(want, tiles), 32) * 32));
  return (max_block / p.tpr) * p.tpr;
}

// ---- lookup-table path (bf16 / fp16 GELU) ----------------------------------------------
//
// A 16-bit dtype has 65536 values, so GELU of every one of them fits a 128 KB table,
// built on the GPU by act<T, K, false> itself: the table path is bit-identical to the
// computed one, and so to F.gelu, by construction (tests/test_activation.py checks every
// bit pattern). act_table_kernel copies the table into shared memory once per persistent
// block and replaces the ~16-25 instructions of tanhf / erff per element by one 16-bit
// shared-memory load, turning an issue-bound kernel (act_kernel and inductor's: 84-89% of
// issue slots, 61-67% of DRAM, 2026-12-04 ncu) into a memory-bound one. Random table
// indices meet ~3.5-way bank conflicts; one 1024-thread block per SM (the table takes
// 128 KB of shared memory), so U vectors per thread keep 64 KB per SM in flight.
// Measured (H200 bf16 [2, 8064, 8192], 2026-12-05, benchmarks/ab_kernels.py): tanh 150.0 ->
// 139.7 µs, erf 168.5 -> 138.4 µs. GEGLU keeps act_kernel: its table form was 1-2% slower
// (one lookup per 6 bytes moved instead of 4, so the bank conflicts show).
// The compact table (CompactLookup, below) replaced it as bf16's default on 2026-12-05.
// LTX_KERNELS_GELU_TABLE=0 / full (read per call: a developer's A/B switch) computes instead
// / takes the full table.
constexpr int kTableEntries = 1 << 16;
// Calls smaller than this keep act_kernel: every block reads the whole table first.
constexpr int64_t kTableMinElements = int64_t{1} << 22;

template <typename T>
__device__ __forceinline__ uint16_t bits_of(T v) {
  uint16_t b;
  memcpy(&b, &v, sizeof(b));
  return b;
}
template <typename T>
__device__ __forceinline__ T from_bits(uint16_t b) {
  T v;
  memcpy(&v, &b, sizeof(b));
  return v;
}

// The whole table: entry b is GELU of bit pattern b. One 1024-thread block per SM.
struct FullLookup {
  static constexpr bool kCompact = false;
  static constexpr int kEntries = kTableEntries;
  static constexpr int kBytes = kEntries * static_cast<int>(sizeof(uint16_t));
  static constexpr int kBlockThreads = 1024;
  static constexpr int kMinBlocks = 1;
  __device__ __forceinline__ static uint16_t pattern(int i) { return static_cast<uint16_t>(i); }
};

// Magnitudes the compact table holds: bit patterns [kLo, kLo + kSpan) of |x|, i.e.
// 2^-16 <= |x| < 8 for bf16 (2 x 2432 entries, 9.5 KB) and 2^-14 <= |x| < 8 for fp16 (its
// normal numbers below 8: 2 x 17408 entries, 68 KB). Positive floats order like their bit
// patterns, so a band of magnitudes is one range of patterns per sign.
template <typename T>
struct CompactBand;
template <>
struct CompactBand<__nv_bfloat16> {
  static constexpr uint32_t kLo = 111u << 7;            // 2^-16: biased exponent 111
  static constexpr uint32_t kSpan = (130u << 7) - kLo;  // up to 2^3: exponent 130
};
template <>
struct CompactBand<__half> {
  static constexpr uint32_t kLo = 1u << 10;             // 2^-14, the smallest normal
  static constexpr uint32_t kSpan = (18u << 10) - kLo;  // up to 2^3: exponent 18
};

// The compact table (bf16 GELU's default; fp16's band is 7x larger, see launch_act_table):
// the table only for the magnitudes activations take,
// [sign][pattern - kLo]; a vector with any element outside the band (zeros, |x| >= 8, tiny
// values, inf / NaN: rare in activations) is computed instead, so it stays bit-exact (a
// tensor of such values runs at the computed kernel's speed). Why: the 128 KB table costs
// every SM a 128 KB copy before its first store (17 MB of L2 reads at once on an H200) and
// holds the SM to one 1024-thread block; 9.5 KB (bf16) lets three 512-thread blocks share an
// SM and copies 1/13 of the bytes; the bank conflicts of the lookups stay (the same entries
// are hot). H200 bf16 [2, 8064, 8192], 2026-12-05 10:24 (RESULTS.md): tanh 139.4 -> 138.7 µs,
// erf 139.1 -> 137.7. GEGLU: 99.8 -> 98.8 µs at 2 x 4096 rows but 190.5 -> 191.6 at 16128,
// so GEGLU keeps act_kernel unless LTX_KERNELS_GEGLU_TABLE=compact.
template <typename T, GeluKind K>
struct CompactLookup {
  static constexpr bool kCompact = true;
  static constexpr uint32_t kLo = CompactBand<T>::kLo;
  static constexpr uint32_t kSpan = CompactBand<T>::kSpan;
  static constexpr int kEntries = static_cast<int>(2 * kSpan);
  static constexpr int kBytes = kEntries * static_cast<int>(sizeof(uint16_t));
  static constexpr int kBlockThreads = 512;
  // 3 blocks (40 registers) only where CUDA 13.0's ptxas fits the kernel in them without
  // spilling (sm_90; sm_80 / 86 / 89 / 100 spilled 4-40 bytes, sm_120 24-32, and sm_75 holds
  // 1024 threads per SM); 2 elsewhere.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ == 900
  static constexpr int kMinBlocks = 3;
#else
  static constexpr int kMinBlocks = 2;
#endif
  __device__ __forceinline__ static uint16_t pattern(int i) {
    const uint32_t u = static_cast<uint32_t>(i);
    return static_cast<uint16_t>((u >= kSpan ? 0x8000u : 0u) | (kLo + u % kSpan));
  }
};

constexpr int kCompactMaxEntries = CompactLookup<__half, GeluKind::kTanh>::kEntries;
static_assert(CompactLookup<__nv_bfloat16, GeluKind::kTanh>::kEntries <= kCompactMaxEntries);
static_assert(CompactLookup<__half, GeluKind::kTanh>::kBytes % 16 == 0 &&
              CompactLookup<__nv_bfloat16, GeluKind::kTanh>::kBytes % 16 == 0,
              "tables are copied 16 bytes at a time");

// The kernel that reads L's table of kind K: the full table's kernel never computes, so
// one instantiation serves both kinds.
template <GeluKind K, class L>
constexpr GeluKind kTableKernelKind = L::kCompact ? K : GeluKind::kTanh;

// One table per (kind, dtype) and device: module globals, so each device has its own.
__device__ __align__(16) uint16_t g_gelu_tables[2][2][kTableEntries];  // 16-byte copies
__device__ __align__(16) uint16_t g_gelu_compact_tables[2][2][kCompactMaxEntries];

template <typename T, GeluKind K, class L>
__global__ void build_gelu_table_kernel(uint16_t* table) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < L::kEntries; i += gridDim.x * blockDim.x) {
    const T x = from_bits<T>(L::pattern(i));
    table[i] = bits_of(act<T, K, false>(x, x));
  }
}

// GELU of one vector from the table in shared memory.
template <typename T, GeluKind K, class L, int N>
__device__ __forceinline__ Vec<T, N> table_vec(const Vec<T, N>& x, const uint16_t* tab) {
  Vec<T, N> o;
  if constexpr (!L::kCompact) {
#pragma unroll
    for (int k = 0; k < N; ++k) o.v[k] = from_bits<T>(tab[bits_of(x.v[k])]);
  } else {
    bool outside = false;
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const uint32_t b = bits_of(x.v[k]);
      const uint32_t i = (b & 0x7fffu) - L::kLo;  // wraps below the band
      const bool in = i < L::kSpan;
      outside |= !in;
      o.v[k] = from_bits<T>(tab[in ? i + (b >> 15) * L::kSpan : 0]);
    }
    if (outside) o = computed_vec<T, K, N>(x);  // rare: computed, all N
  }
  return o;
}

// Geometry of a table launch: tiles of `groups` rows x U * tpr vectors, walked by
// persistent blocks (tile = blockIdx.x, + gridDim.x, ...; row group = tile / col_tiles).
struct TableGrid {
  int64_t col_tiles;
  int64_t tiles;
};

// out = GELU(gate) from the table, or value * GELU(gate) (kGated: the GELU in T, then the
// product in fp32 rounded once, as eager's `h * F.gelu(g)`).
template <typename T, int N, bool kGated>
__device__ __forceinline__ Vec<T, N> gated_product(const Vec<T, N>& g, const Vec<T, N>& v) {
  if constexpr (!kGated) {
    return g;
  } else {
    if constexpr (kPairProduct<T, N>) {
      return mul_rn(v, g);  // one packed multiply per pair, as act_vec's packed form
    } else {
      float r[N];
#pragma unroll
      for (int k = 0; k < N; ++k) r[k] = to_float(v.v[k]) * to_float(g.v[k]);
      return pack_from_float<T, N>(r);
    }
  }
}

// The gated form holds two operands' vectors: capped for 3 blocks it spilled (sm_90), so 2.
template <typename T, GeluKind K, class L, bool kGated>
__global__ void __launch_bounds__(L::kBlockThreads, kGated ? std::min(2, L::kMinBlocks) : L::kMinBlocks)
    act_table_kernel(ActParams p, const uint16_t* table, TableGrid tg) {
  static_assert(sizeof(T) == 2, "16-bit dtypes");
  constexpr int N = 8;
  constexpr int U = kUnroll<kGated>;
  using V = Vec<T, N>;
  extern __shared__ __align__(16) uint16_t tab[];
  const T* x = static_cast<const T*>(p.gate);
  const T* value = static_cast<const T*>(p.value);
  T* out = static_cast<T*>(p.out);
  const int lane = static_cast<int>(threadIdx.x) % p.tpr;
  const int sub = static_cast<int>(threadIdx.x) / p.tpr;
  const int groups = static_cast<int>(blockDim.x) / p.tpr;
  const int64_t du = static_cast<int64_t>(p.tpr) * N;  // elements between a thread's vectors

  bool have_table = false;
  for (int64_t t = blockIdx.x; t < tg.tiles; t += gridDim.x) {
    // Row group and column tile of tile t; the 64-bit division only where both vary.
    int64_t rg = t, ct = 0;
    if (p.rows == 1) {
      rg = 0;
      ct = t;
    } else if (tg.col_tiles > 1) {
      rg = t / tg.col_tiles;
      ct = t - rg * tg.col_tiles;
    }
    const int64_t j0 = ct * U * p.tpr + lane;
    const int64_t row = rg * groups + sub;
    const bool active = row < p.rows;
    const int64_t xi = (active ? row : 0) * p.in_stride + j0 * N;
    const int64_t oi = (active ? row : 0) * p.out_stride + j0 * N;
    bool live[U];
    V xv[U];
    [[maybe_unused]] V vv[kGated ? U : 1];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      live[u] = active && j0 + static_cast<int64_t>(u) * p.tpr < p.nvec;
      if (live[u]) {
        xv[u] = V::load(x + xi + u * du);
        if constexpr (kGated) vv[u] = V::load(value + xi + u * du);
      }
    }
    if (!have_table) {  // the first tile's loads are in flight meanwhile
      const uint4* src = reinterpret_cast<const uint4*>(table);
      uint4* dst = reinterpret_cast<uint4*>(tab);
      for (int i = threadIdx.x; i < L::kBytes / static_cast<int>(sizeof(uint4)); i += blockDim.x) {
        dst[i] = src[i];
      }
      __syncthreads();
      have_table = true;
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (live[u]) {
        gated_product<T, N, kGated>(table_vec<T, K, L, N>(xv[u], tab), vv[kGated ? u : 0])
            .store(out + oi + u * du);
      }
    }
  }
  // The single-row tail (elements after the last whole vector): block 0, which had a tile.
  if (blockIdx.x == 0 && static_cast<int>(threadIdx.x) < p.tail) {
    const int64_t c = p.nvec * N + threadIdx.x;
    const Vec<T, 1> g = table_vec<T, K, L, 1>(Vec<T, 1>{{x[c]}}, tab);
    out[c] = gated_product<T, 1, kGated>(g, Vec<T, 1>{{kGated ? value[c] : x[c]}}).v[0];
  }
}

// The device's table for (T, K, L), built on first use; nullptr where the table path
// cannot run: a device without the table's opt-in shared memory per block (the 128 KB
// table: sm_75 / 86 / 89 / 120), or a first use inside CUDA-graph capture (the build must
// not become part of the graph).
template <typename T, GeluKind K, class L>
const uint16_t* gelu_table(int device, cudaStream_t stream) {
  constexpr int kMaxDevices = 64;
  static std::mutex mu;
  static int state[kMaxDevices] = {};  // 0 unknown, 1 built, -1 not possible
  static uint16_t* built[kMaxDevices] = {};
  if (device < 0 || device >= kMaxDevices) return nullptr;
  const std::lock_guard<std::mutex> lock(mu);
  if (state[device] != 0) return state[device] > 0 ? built[device] : nullptr;
  void* base = nullptr;  // this device's copy of the module global (the guard set the device)
  const int slot = static_cast<int>(K) * 2 + (std::is_same_v<T, __half> ? 1 : 0);
  if constexpr (L::kCompact) {
    C10_CUDA_CHECK(cudaGetSymbolAddress(&base, g_gelu_compact_tables));
  } else {
    C10_CUDA_CHECK(cudaGetSymbolAddress(&base, g_gelu_tables));
  }
  uint16_t* table = static_cast<uint16_t*>(base) +
                    slot * (L::kCompact ? kCompactMaxEntries : kTableEntries);
  int optin = 0;
  C10_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  if (optin < L::kBytes) {
    state[device] = -1;
    return nullptr;
  }
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  C10_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return nullptr;  // built on a later call
  build_gelu_table_kernel<T, K, L><<<64, 1024, 0, stream>>>(table);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  // Later calls may come on other streams: the table must be complete before any of them.
  C10_CUDA_CHECK(cudaStreamSynchronize(stream));
  built[device] = table;
  state[device] = 1;
  return table;
}

// Launches act_table_kernel<T, K, L, kGated>; false, launching nothing, where its table
// cannot be had.
template <typename T, GeluKind K, class L, bool kGated>
bool launch_table_kernel(ActParams p, int device, cudaStream_t stream) {
  const uint16_t* table = gelu_table<T, K, L>(device, stream);
  if (table == nullptr) return false;
  constexpr int U = kUnroll<kGated>;
  const int block = row_block(p, U, L::kBlockThreads);
  const int64_t groups = block / p.tpr;
  TableGrid tg{};
  tg.col_tiles = ceil_div(p.nvec, static_cast<int64_t>(U) * p.tpr);
  tg.tiles = ceil_div(p.rows, groups) * tg.col_tiles;
  const auto kernel = act_table_kernel<T, kTableKernelKind<K, L>, L, kGated>;
  // Over 48 KB of dynamic shared memory is opt-in, per kernel and device (once each).
  memo_query(std::make_pair(reinterpret_cast<const void*>(kernel), device), [&] {
    C10_CUDA_CHECK(cudaFuncSetAttribute(reinterpret_cast<const void*>(kernel),
                                        cudaFuncAttributeMaxDynamicSharedMemorySize, L::kBytes));
    return 1;
  });
  const int per_sm = resident_blocks(reinterpret_cast<const void*>(kernel), block, L::kBytes, device);
  const auto grid = static_cast<unsigned>(
      std::min<int64_t>(tg.tiles, static_cast<int64_t>(sm_count(device)) * per_sm));
  kernel<<<grid, block, L::kBytes, stream>>>(p, table, tg);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return true;
}

// Whether GELU's table beats computing it on this device: where DRAM feeds each SM fast
// enough that tanhf's / erff's instructions, not the bytes, set the time. H200 (4916 GB/s
// peak, 37 GB/s per SM): bf16 [2, 8064, 8192] tanh compact table 138.2 µs, computed 150.0,
// fp16 full 138.5 vs 145.6 (RESULTS.md 2026-12-05 12:06); erf 138.4 vs 168.5 (03:16). H100
// SXM (3352, 25 per SM): tanh computed 175.5 µs, compact table 185.4; fp16 computed 174.9,
// full 187.5 (RESULTS.md 15:07); erf computed 183.6, table 186.0 (18:08): there the
// computed kernel is already at or near the copy rate and the table kernel (a table copy
// per block, bank conflicts) is not.
inline bool gelu_table_pays(int device) {
  return dram_peak_gbps(device) >= 30 * sm_count(device);
}

// Launches a table kernel for a call that suits it (a 16-bit dtype, 16-byte vectors, at
// least kTableMinElements); false otherwise. GELU: bf16 the compact table, fp16 the full
// one (where gelu_table_pays), unless LTX_KERNELS_GELU_TABLE says 0 (computed), full
// or compact. GEGLU: computed unless LTX_KERNELS_GEGLU_TABLE=compact (its full-table form
// was 1-2% slower, the compact one mixed: 2026-12-05 10:24 and 12:06).
// fp16's compact table is 68 KB (its band holds 17408 patterns per sign against bf16's
// 2432), so it saves little of the full table's copy and shares an SM among fewer blocks;
// H200 fp16 [2, 8064, 8192] tanh, 2026-12-05 12:06 (RESULTS.md): compact 144.4 µs, full
// 138.5, computed 145.6.
template <typename T, bool kGated>
bool launch_act_table(ActParams p, int vec, GeluKind kind, int device, cudaStream_t stream) {
  if constexpr (sizeof(T) != 2) {
    return false;
  } else {
    if (vec != 8 || p.rows * p.nvec * 8 < kTableMinElements) return false;
    auto mode = ab_switch(kGated ? "LTX_KERNELS_GEGLU_TABLE" : "LTX_KERNELS_GELU_TABLE");
    if (!kGated && mode.empty()) {
      mode = !gelu_table_pays(device)     ? "0"
             : std::is_same_v<T, __half> ? "full"
                                         : "compact";
    }
    if (mode == "compact") {
      return kind == GeluKind::kTanh
                 ? launch_table_kernel<T, GeluKind::kTanh, CompactLookup<T, GeluKind::kTanh>, kGated>(p, device, stream)
                 : launch_table_kernel<T, GeluKind::kErf, CompactLookup<T, GeluKind::kErf>, kGated>(p, device, stream);
    }
    // The full table has no gated kernel (GEGLU's full-table form was dropped).
    if (kGated || mode != "full") return false;
    return kind == GeluKind::kTanh
               ? launch_table_kernel<T, GeluKind::kTanh, FullLookup, false>(p, device, stream)
               : launch_table_kernel<T, GeluKind::kErf, FullLookup, false>(p, device, stream);
  }
}

// Chooses the launch shape for `rows` rows of `cols` elements moved N at a time,
// fills the shape fields of p and launches.
template <bool kGated>
void launch(ActParams p, int64_t rows, int64_t cols, int vec, const at::Tensor& like,
            GeluKind kind, const char* op) {
  const c10::cuda::CUDAGuard guard(like.device());
  const int device = like.device().index();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();

  p.rows = rows;
  p.nvec = cols / vec;
  p.tail = static_cast<int>(cols - p.nvec * vec);
  TORCH_CHECK(p.tail == 0 || rows == 1, "ltx_kernels.", op, ": internal error: tail on ", rows,
              " rows");
  // Candidate (LTX_KERNELS_GELU_FAST=1, read per call: an A/B switch): 16-bit GELU-tanh and
  // GEGLU-tanh on 16-byte vectors by gelu_tanh_fast_vec in act_kernel, no table. (Decided here
  // for the calls it takes, so the others keep their table path.)
  const bool fast = kind == GeluKind::kTanh && like.element_size() == 2 && vec == 8 &&
                    ab_switch("LTX_KERNELS_GELU_FAST") == "1";
  // 16-bit dtypes, large calls: a lookup-table kernel where it runs (launch_act_table).
  bool done = false;
  if (!fast) {
    dispatch_float(like.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      done = launch_act_table<T, kGated>(p, vec, kind, device, stream);
    });
  }
  if (done) return;

  constexpr int U = kUnroll<kGated>;
  // GEGLU: a block per row group of at most 128 threads (inductor's GEGLU grid shape:
  // short-lived blocks, consecutive blocks on consecutive bytes) instead of 32 blocks per
  // SM walking ~8 row groups each, whose SMs idle at the end when their last block starts
  // late. H100, bf16 [16128, 16384] -> 8192, 2026-12-05 17:12 (RESULTS.md): 261.4 -> 256.0
  // µs (compile 256.0, Liger 255.5); [2, 4096, 16384]: 131.8 -> 131.0 (a block per row
  // group of 256 threads: 257.0 / 131.7). GELU keeps the walk (one long row when
  // contiguous, where the grid is one tile per block either way; strided rows not timed).
  // Not on the H200 (where gelu_table_pays: DRAM fast enough per SM that the instructions
  // set the time): there GEGLU keeps the walk, 2026-12-06 03:10 (RESULTS.md, bf16, medians
  // of 3): [16128, 16384] -> 8192 rows128 193.31 µs, walk 189.07 (compile 186.83);
  // [2, 4096, 16384] 100.54 -> 97.95 (compile 97.06).
  // LTX_KERNELS_ACT_GRID=walk | rows | rows128 (read per call, developer A/B) forces one.
  std::string_view grid_form = ab_switch("LTX_KERNELS_ACT_GRID");
  if (grid_form.empty()) grid_form = kGated && !gelu_table_pays(device) ? "rows128" : "walk";
  const bool block_per_row = grid_form == "rows" || grid_form == "rows128";
  const int block = row_block(p, U, grid_form == "rows128" ? 128 : kBlock);
  const int64_t groups = block / p.tpr;
  const int64_t col_tiles = std::max<int64_t>(1, ceil_div(p.nvec, static_cast<int64_t>(U) * p.tpr));
  TORCH_CHECK(col_tiles <= INT32_MAX, "ltx_kernels.", op, ": tensor too large");
  // Down the rows: enough blocks to fill the GPU several times over, at most the grid's
  // y limit; every block walks on by gridDim.y row groups.
  const int64_t row_groups = ceil_div(rows, groups);
  // kRowBlocks per SM (shared by every column tile), or a block per row group.
  const int64_t want_y =
      block_per_row ? row_groups : std::max<int64_t>(1, int64_t{sm_count(device)} * kRowBlocks / col_tiles);
  const dim3 grid(static_cast<unsigned>(col_tiles),
                  static_cast<unsigned>(std::min({row_groups, want_y, int64_t{65535}})));
  // GEGLU's product on packed pairs (act_vec; H100 2026-12-05 17:12: 261.9 -> 261.4 µs at
  // 16128 rows, 132.1 -> 131.8 at 2 x 4096); LTX_KERNELS_GEGLU_PACKED=0 (read per call)
  // keeps the fp32 product, for the A/B (read for gated calls only).
  const bool packed = !kGated || ab_switch("LTX_KERNELS_GEGLU_PACKED") != "0";

  dispatch_float(like.scalar_type(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kPairs8 = kGated && kPairProduct<T, 8>;  // (not in the inner lambda: g++)
    constexpr bool kFast8 = sizeof(T) == 2;
    dispatch_vec(vec, [&](auto n) {
      constexpr int N = decltype(n)::value;
      if constexpr (N * sizeof(T) <= 16) {
        if constexpr (kFast8 && N == 8) {
          if (fast) {
            act_kernel<T, N, GeluKind::kTanh, kGated, true, true><<<grid, block, 0, stream>>>(p);
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            return;
          }
        }
        if constexpr (kPairs8 && N == 8) {
          if (!packed) {  // 16-byte vectors only: the shapes A/B times
            if (kind == GeluKind::kTanh) {
              act_kernel<T, N, GeluKind::kTanh, true, false><<<grid, block, 0, stream>>>(p);
            } else {
              act_kernel<T, N, GeluKind::kErf, true, false><<<grid, block, 0, stream>>>(p);
            }
            C10_CUDA_KERNEL_LAUNCH_CHECK();
            return;
          }
        }
        if (kind == GeluKind::kTanh) {
          act_kernel<T, N, GeluKind::kTanh, kGated><<<grid, block, 0, stream>>>(p);
        } else {
          act_kernel<T, N, GeluKind::kErf, kGated><<<grid, block, 0, stream>>>(p);
        }
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      } else {
        TORCH_CHECK(false, "ltx_kernels.", op, ": internal error: vector width ", N);
      }
    });
  });
}

// pick_vec_width's row-length argument for a launch: a single row may end in a
// scalar tail, so any width divides it; otherwise every row must split evenly.
int64_t width_cols(int64_t rows, int64_t cols) { return rows == 1 ? 8 : cols; }

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void gelu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind) {
  using namespace ltx::cuda;
  const char* op = kind == GeluKind::kTanh ? "gelu_tanh" : "gelu";
  int64_t rows = x2d.size(0);
  int64_t cols = x2d.size(1);
  int64_t xs = rows > 1 ? x2d.stride(0) : 0;
  int64_t os = rows > 1 ? out2d.stride(0) : 0;
  if (rows > 1 && xs == cols && os == cols) {  // both dense: one long row
    cols *= rows;
    rows = 1;
    xs = os = 0;
  }
  ActParams p{};
  p.gate = x2d.const_data_ptr();
  p.value = p.gate;
  p.out = out2d.mutable_data_ptr();
  p.in_stride = xs;
  p.out_stride = os;
  const int64_t es = x2d.element_size();
  const int vec = pick_vec_width(width_cols(rows, cols), {{p.gate, es, xs}, {p.out, es, os}});
  launch<false>(p, rows, cols, vec, x2d, kind, op);
}

void geglu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind, bool gate_first) {
  using namespace ltx::cuda;
  const int64_t rows = x2d.size(0);
  const int64_t d = x2d.size(1) / 2;
  const int64_t xs = rows > 1 ? x2d.stride(0) : 0;
  const int64_t os = rows > 1 ? out2d.stride(0) : 0;
  const int64_t es = x2d.element_size();
  const char* first = static_cast<const char*>(x2d.const_data_ptr());
  const char* second = first + d * es;  // may be less aligned than the row start
  ActParams p{};
  p.gate = gate_first ? first : second;
  p.value = gate_first ? second : first;
  p.out = out2d.mutable_data_ptr();
  p.in_stride = xs;
  p.out_stride = os;
  const int vec =
      pick_vec_width(width_cols(rows, d), {{first, es, xs}, {second, es, xs}, {p.out, es, os}});
  launch<true>(p, rows, d, vec, x2d, kind, "geglu");
}

}  // namespace ltx
