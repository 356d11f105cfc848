// Rotary embeddings on CUDA (both layouts; see rope_launch in torch_binding.h).
//
// Work split: one group of lanes x slots threads per token (b, s). The rotation pairs of a row are
// cut into units of U consecutive elements (16-byte accesses for the inputs on the fast path; fp32
// tables take two 16-byte accesses per unit of 8). Each lane loads the cos/sin units it owns once
// per token (interleaved pair tables: half a unit) and applies them to every head of both tensors,
// the heads being spread over the slots; so the tables are read from memory once per token whatever
// the number of heads. The kernel visits tokens (s outer, b inner); the launcher passes the batch
// as the outer index (batch-major: see rope_rotate_launch for why). All offsets are int64,
// the token loop is grid-stride, products and sums use __fmul_rn/__fadd_rn (never fused to FMA),
// exactly as eager PyTorch evaluates them. kInverse applies the transposed rotation
// (the backward, rope_backward.h): dx_a = g_a c_a + g_b s_b, dx_b = g_b c_b - g_a s_a,
// always in fp32 with one rounding. Llama-style calls (rotate-half forward, half-dtype x and
// tables, no pass-through channels) take rope_half_lean_kernel instead: a thread per
// (token, head, unit), no table reuse in registers (the tables are L1 / L2 hits).
#include <algorithm>
#include <numeric>
#include <type_traits>
#include <utility>

#include "../torch-ext/ops/rope_backward.h"
#include "../torch-ext/torch_binding.h"
#include "common/dispatch.cuh"
#include "common/pdl.cuh"
#include "common/vec.cuh"

namespace ltx::cuda {
namespace {

constexpr int kBlock = 256;       // threads per block
// Two resident blocks per SM (<= 128 registers). With the block size alone, this
// ptxas trades a few spills for occupancy on some instantiations; no spills this way.
constexpr int kMinBlocks = 2;
// Lanes per token (units of one row): up to a lane per unit of a whole block, so LTX's
// D = 2048 rows (256 16-byte units) are one pass of one unit per thread, a token per block,
// as inductor's programs are, instead of 128 lanes taking two units each in turn. H100 bf16,
// 2026-12-05 21:28 (RESULTS.md, ab_kernels.py): rope_ltx [2, 8064, 2048] 130.40 -> 129.47 µs,
// the q/k pair-table call 130.05 -> 129.18 (a copy of the same bytes: 129.54 / 130.02).
// Capping the pair-table kernel's registers for 6 blocks per SM (60 -> 40) instead of 4
// changed nothing measurable (130.27; with the lanes 129.02): not kept.
constexpr int kMaxLanes = kBlock;
constexpr int kGroupTarget = 64;  // threads per token the head split aims for

struct RopeSide {
  const void* in;
  void* out;
  int64_t in_b, in_s, in_h;  // element strides; 0 for size-1 dims
  int64_t out_b, out_s, out_h;
  int heads;
  bool copy_pass;  // rotate-half: copy channels >= R (false when in place)
};

struct RopeParams {
  RopeSide side[2];
  const void* cos;
  const void* sin;
  int64_t cos_b, cos_s, sin_b, sin_s;
  // The token walk, s outer and b inner: batch / seq hold the inner / outer sizes (and the
  // *_b / *_s strides go with them), which the launcher sets to positions / batch entries.
  int64_t batch;
  int64_t seq;
  int64_t step_s, step_b;  // the grid's token step, as (outer, inner) index steps
  uint32_t batch32;        // batch clamped to 2^32-1 (beyond, every first token has s = 0)
  int half;        // rotate-half: R / 2
  int rot_items;   // units of rotation work per row
  int pass_items;  // rotate-half: units of pass-through channels per row
  int pass_start;  // rotate-half: R
  int lanes;       // power of two
  int slots;       // power of two
};

// U consecutive elements kept in their storage type (fewer registers than floats),
// moved with accesses of C elements each; get/set convert one element.
template <typename T, int U, int C>
struct Unit {
  Vec<T, C> v[U / C];
  // kStream: 16-byte accesses skip L1 (Vec::load_stream; data read once).
  template <bool kStream = false>
  __device__ __forceinline__ void load(const T* p) {
#pragma unroll
    for (int i = 0; i < U / C; ++i) {
      if constexpr (kStream && Vec<T, C>::kBytes == 16) {
        v[i] = Vec<T, C>::load_stream(p + i * C);
      } else {
        v[i] = Vec<T, C>::load(p + i * C);
      }
    }
  }
  __device__ __forceinline__ void store(T* p) const {
#pragma unroll
    for (int i = 0; i < U / C; ++i) v[i].store(p + i * C);
  }
  // With an L2 eviction policy (Vec::load_last; 16-byte accesses).
  __device__ __forceinline__ void load_last(const T* p, uint64_t policy) {
#pragma unroll
    for (int i = 0; i < U / C; ++i) v[i] = Vec<T, C>::load_last(p + i * C, policy);
  }
  __device__ __forceinline__ float get(int i) const { return to_float(v[i / C].v[i % C]); }
  __device__ __forceinline__ void set(int i, float f) { v[i / C].v[i % C] = from_float<T>(f); }
};

// Elements per access for U-element units of T: 16 bytes at most; 1 in scalar mode.
template <typename T, int U>
constexpr int chunk_of() {
  return U == 1 ? 1 : (U * static_cast<int>(sizeof(T)) > 16 ? 16 / static_cast<int>(sizeof(T)) : U);
}

// An eager op boundary in T when kStep (tables in the input's half dtype).
template <typename T, bool kStep>
__device__ __forceinline__ float rnd(float v) {
  if constexpr (kStep) {
    return to_float(from_float<T>(v));
  } else {
    return v;
  }
}

// a*c - b*s and a*c + b*s, each product rounded on its own (no FMA).
template <typename T, bool kStep>
__device__ __forceinline__ float mul_sub(float a, float c, float b, float s) {
  return __fsub_rn(rnd<T, kStep>(__fmul_rn(a, c)), rnd<T, kStep>(__fmul_rn(b, s)));
}
template <typename T, bool kStep>
__device__ __forceinline__ float mul_add(float a, float c, float b, float s) {
  return __fadd_rn(rnd<T, kStep>(__fmul_rn(a, c)), rnd<T, kStep>(__fmul_rn(b, s)));
}

// One pair (x_a, x_b) with tables (c_a, s_a), (c_b, s_b), written back into (x_a, x_b):
//   forward:  x_a c_a - x_b s_a,  x_b c_b + x_a s_b
//   inverse:  x_a c_a + x_b s_b,  x_b c_b - x_a s_a   (the transpose; never step-rounded)
template <typename T, bool kStep, bool kInverse>
__device__ __forceinline__ void rotate_pair(float& xa, float& xb, float ca, float sa, float cb,
                                            float sb) {
  const float a = xa, b = xb;
  if constexpr (kInverse) {
    xa = mul_add<T, false>(a, ca, b, sb);
    xb = mul_sub<T, false>(b, cb, a, sa);
  } else {
    xa = mul_sub<T, kStep>(a, ca, b, sa);
    xb = mul_add<T, kStep>(b, cb, a, sb);
  }
}

// One interleaved unit in place: pairs (2i, 2i+1) of v rotated with table units c / sn, whose
// entry for channel i is i (full tables) or i / 2 (kPair: one value per pair).
template <typename Tx, int kUnit, bool kStep, bool kInverse, bool kPair, typename UX, typename UT>
__device__ __forceinline__ void rotate_interleaved_unit(UX& v, const UT& c, const UT& sn) {
  auto at = [](int i) { return kPair ? i / 2 : i; };
#pragma unroll
  for (int i = 0; i < kUnit; i += 2) {
    float x0 = v.get(i), x1 = v.get(i + 1);
    rotate_pair<Tx, kStep, kInverse>(x0, x1, c.get(at(i)), sn.get(at(i)), c.get(at(i + 1)), sn.get(at(i + 1)));
    v.set(i, x0);
    v.set(i + 1, x1);
  }
}

// kPacked (rotate-half forward only, Tx = Tc a half dtype, U = 8: the Llama call with
// cos/sin in the model's dtype): the rotation as packed pair ops on whole 16-byte
// vectors, x_a c_a - x_b s_a and x_b c_b + x_a s_b with each product and the sum rounded
// once to T (mul_rn / sub_rn / add_rn, common/vec.cuh: equal to the step-rounded fp32 form),
// no fp32 values held. Why: that instantiation holds the four table units and both heads'
// values as floats, 126 registers on sm_90, so 2 blocks of 256 per SM and ~32 KB in flight
// per SM (rope_llama bf16 at 67% of copy, 2026-12-04). The packed form fits 4 blocks per SM
// (sm_90: 60 registers), except on sm_75, whose bf16 pair ops are emulated through fp32 and
// spill under that cap. Measured (H200 bf16, 2026-12-05, benchmarks/ab_kernels.py):
// 16-19% faster than the fp32 form at every rope_llama shape (q 32 x 8192 x 128, k 8
// heads: 56.3 -> 45.6 µs).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
constexpr int kPackedMinBlocks = 2;
#else
constexpr int kPackedMinBlocks = 4;
#endif
// rope_half_lean_kernel: a whole SM's threads (<= 32 registers where that is 2 048 threads);
// ptxas ignores, with a warning, a minimum beyond the SM's thread limit.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ == 800 || __CUDA_ARCH__ == 900 || __CUDA_ARCH__ == 1000
constexpr int kLeanMinBlocks = 8;  // 2 048 threads per SM
#elif __CUDA_ARCH__ < 800
constexpr int kLeanMinBlocks = 4;  // sm_75: 1 024
#else
constexpr int kLeanMinBlocks = 6;  // sm_86 / 89 / 120: 1 536
#endif

// kPair (interleaved only): pair tables [B, S, D/2], value i for channels 2i and 2i+1, so a
// unit of kUnit channels reads kUnit/2 table values (half the table bytes).
// kStream (the default for the interleaved forward of one head with full tables, diffusers'
// LTX call on x alone; LTX_KERNELS_ROPE_STREAM=0: never, =1: every interleaved forward): x and
// the tables loaded without allocating in L1 (each is read once per token: the table unit is
// held in registers for the token's heads). Why: LTX's calls trailed inductor's kernel by 1-3%
// on the H100 (RESULTS.md 2026-12-07 10:04), and AdaLN's per-token form had gained from x
// without L1 (2026-12-06 07:48). Measured (H100 bf16, RESULTS.md 2026-12-07 10:13-10:21,
// medians of 3), [2, 8064, 2048] with fp32 tables: x alone, tables [B, S, D], 128.80 -> 125.22
// µs (compile 128.35); but slower with two heads a token, q and k with those tables 168.93 ->
// 171.20 (compile 167.97), with pair tables [B, S, D/2] 126.78 -> 130.24 (compile 124.58).
// Why two heads lose is not known (an ncu of the pair-table call, 10:15: 0% L1 hits either way;
// inductor at 66% occupancy, 40 registers, ours 42%, 59). Nor is the q/k calls' gap to inductor
// (H100 pair tables 1.8%, full 0.6%) the registers or the load path: a thread-per-unit kernel at
// 35-40 registers and plain coherent loads (not ld.global.nc) timed within 0.2% of this kernel
// (RESULTS.md 2026-12-07 14:38, 15:24); inductor's table cache policy was half of it (kHint).
//
// kHint (the interleaved forward of 16-byte units of a half dtype with fp32 tables, not
// kStream; LTX_KERNELS_ROPE_HINT): L2 eviction policies, a mask. Default kHintTablesLast |
// kHintXLast: the tables and x loaded evict_last (inductor's kernel for LTX's q/k call loads the
// tables so, and re-reads x's pair partner evict_last); =tables_last: the tables alone (the
// 2026-12-07 16:35 default); =none: plain loads. Measured: H100 bf16 (RESULTS.md 2026-12-07
// 16:35, medians of 3) tables evict_last q/k pair 128.26 -> 127.17 µs (compile 126.02), q/k
// full tables 170.53 -> 170.46; H200 bf16 (RESULTS.md 2026-12-07 18:31, medians of 3) q/k pair
// none 92.54, tables 91.74, tables + x **90.61** (compile 91.36), full tables 120.93 / 120.83 /
// 120.90 (compile 120.42). Outputs stored evict_first: -0.2% on the H100 q/k full, +0.2% on
// the H200 pair (dropped); evict_last +1.4% on the H100 (dropped).
constexpr int kHintNone = 0, kHintTablesLast = 1, kHintXLast = 2;

template <typename Tx, typename Tc, int U, bool kInterleaved, bool kInverse, bool kPacked = false,
          bool kPair = false, bool kStream = false, int kHint = kHintNone>
__global__ void __launch_bounds__(kBlock, kPacked ? kPackedMinBlocks : kMinBlocks)
    rope_kernel(const RopeParams p) {
  static_assert(!kStream || (kInterleaved && !kInverse), "the stream form is the interleaved forward");
  static_assert(kHint == kHintNone || (kInterleaved && !kInverse && !kStream && U == 8 &&
                                       sizeof(Tx) == 2 && std::is_same_v<Tc, float>),
                "L2 hints: the interleaved forward of 16-byte units with fp32 tables");
  static_assert(!kPacked || (U == 8 && std::is_same_v<Tx, Tc> && !std::is_same_v<Tx, float> &&
                             !kInterleaved && !kInverse),
                "the packed form is the rotate-half forward on 16-byte vectors of one half dtype");
  static_assert(!kPair || kInterleaved, "pair tables are an interleaved-layout form");
  constexpr int kUnit = (kInterleaved && U < 2) ? 2 : U;  // a unit holds whole pairs
  constexpr int kTabUnit = kPair ? kUnit / 2 : kUnit;     // table values per unit
  constexpr int CX = chunk_of<Tx, U>();
  constexpr int CC = chunk_of<Tc, U>();
  constexpr int CT = kPair ? chunk_of<Tc, kTabUnit>() : CC;  // U = 1: scalar mode, CT = 1
  constexpr bool kStep = std::is_same_v<Tx, Tc> && !std::is_same_v<Tx, float>;
  using UX = Unit<Tx, kUnit, CX>;
  using UC = Unit<Tc, kUnit, CC>;
  using UT = Unit<Tc, kTabUnit, CT>;  // the interleaved layout's table unit

  const int group = p.lanes * p.slots;
  const int lane = threadIdx.x & (p.lanes - 1);
  const int slot = (threadIdx.x / p.lanes) & (p.slots - 1);
  const int per_block = blockDim.x / group;
  const int h0 = p.side[0].heads;
  const int h1 = p.side[1].heads;
  const int heads = h0 + h1;

  const Tc* cos = static_cast<const Tc*>(p.cos);
  const Tc* sin = static_cast<const Tc*>(p.sin);
  // Launched with PDL (sm_90+, common/pdl.cuh): wait for the previous kernel before the
  // first global access, and let the next one be scheduled now.
  pdl_wait();
  pdl_launch_dependents();
  [[maybe_unused]] const uint64_t keep = kHint != kHintNone ? l2_evict_last_policy() : 0;

  // Token t = s * batch + b, stepped by the grid without a 64-bit division (a call).
  const uint32_t t0 = blockIdx.x * static_cast<uint32_t>(per_block) + threadIdx.x / group;
  int64_t s = t0 / p.batch32;
  int64_t b = t0 - s * p.batch32;
  for (; s < p.seq; s += p.step_s, b += p.step_b) {
    if (b >= p.batch) {
      b -= p.batch;
      ++s;
      if (s >= p.seq) break;
    }
    const Tc* cr = cos + b * p.cos_b + s * p.cos_s;
    const Tc* sr = sin + b * p.sin_b + s * p.sin_s;
    const RopeSide& A = p.side[0];
    const RopeSide& B = p.side[1];
    const Tx* in0 = static_cast<const Tx*>(A.in) + b * A.in_b + s * A.in_s;
    Tx* out0 = static_cast<Tx*>(A.out) + b * A.out_b + s * A.out_s;
    const Tx* in1 = static_cast<const Tx*>(B.in) + b * B.in_b + s * B.in_s;
    Tx* out1 = static_cast<Tx*>(B.out) + b * B.out_b + s * B.out_s;

    // Head hh of the token: side 0's heads, then side 1's. fn(x, o, x2, o2, two) gets
    // two heads at a time (q and k for the interleaved pair), so each thread has both
    // heads' loads in flight before it stores.
    auto in_row = [&](int hh) {
      return hh < h0 ? in0 + hh * A.in_h : in1 + (hh - h0) * B.in_h;
    };
    auto out_row = [&](int hh) {
      return hh < h0 ? out0 + hh * A.out_h : out1 + (hh - h0) * B.out_h;
    };
    auto for_heads = [&](auto&& fn) {
      for (int hh = slot; hh < heads; hh += 2 * p.slots) {
        const bool two = hh + p.slots < heads;
        const int hh2 = two ? hh + p.slots : hh;
        fn(in_row(hh), out_row(hh), in_row(hh2), out_row(hh2), two);
      }
    };

    for (int j = lane; j < p.rot_items; j += p.lanes) {
      if constexpr (kInterleaved) {
        const int off = j * kUnit;
        UT c, sn;
        if constexpr ((kHint & kHintTablesLast) != 0) {
          c.load_last(cr + j * kTabUnit, keep);
          sn.load_last(sr + j * kTabUnit, keep);
        } else {
          c.template load<kStream>(cr + j * kTabUnit);
          sn.template load<kStream>(sr + j * kTabUnit);
        }
        auto rotate = [&](UX& v) { rotate_interleaved_unit<Tx, kUnit, kStep, kInverse, kPair>(v, c, sn); };
        for_heads([&](const Tx* x, Tx* o, const Tx* x2, Tx* o2, bool two) {
          UX v, w;
          if constexpr ((kHint & kHintXLast) != 0) {
            v.load_last(x + off, keep);
            if (two) w.load_last(x2 + off, keep);
          } else {
            v.template load<kStream>(x + off);
            if (two) w.template load<kStream>(x2 + off);
          }
          rotate(v);
          v.store(o + off);
          if (two) {
            rotate(w);
            w.store(o2 + off);
          }
        });
      } else {
        const int lo = j * kUnit;
        const int hi = lo + p.half;
        // Each head's two halves, and both heads' loads before either is rotated and stored
        // (bytes in flight). load(ptr) gives a unit, rotate(a, z) rotates one head's halves.
        auto rotate_heads = [&](auto load, auto rotate) {
          for_heads([&](const Tx* x, Tx* o, const Tx* x2, Tx* o2, bool two) {
            auto a = load(x + lo);
            auto z = load(x + hi);
            decltype(a) a2, z2;
            if (two) {
              a2 = load(x2 + lo);
              z2 = load(x2 + hi);
            }
            rotate(a, z);
            a.store(o + lo);
            z.store(o + hi);
            if (two) {
              rotate(a2, z2);
              a2.store(o2 + lo);
              z2.store(o2 + hi);
            }
          });
        };
        if constexpr (kPacked) {
          using V = Vec<Tx, 8>;
          const V c1 = V::load(cr + lo), c2 = V::load(cr + hi);
          const V s1 = V::load(sr + lo), s2 = V::load(sr + hi);
          rotate_heads([](const Tx* ptr) { return V::load(ptr); },
                       [&](V& a, V& z) {  // a: first half, z: second half
                         const V na = sub_rn(mul_rn(a, c1), mul_rn(z, s1));
                         z = add_rn(mul_rn(z, c2), mul_rn(a, s2));
                         a = na;
                       });
        } else {
          UC c1, c2, s1, s2;
          c1.load(cr + lo);
          c2.load(cr + hi);
          s1.load(sr + lo);
          s2.load(sr + hi);
          rotate_heads(
              [](const Tx* ptr) {
                UX u;
                u.load(ptr);
                return u;
              },
              [&](UX& a, UX& z) {  // a: first half, z: second half
#pragma unroll
                for (int i = 0; i < kUnit; ++i) {
                  float x1 = a.get(i), x2 = z.get(i);
                  rotate_pair<Tx, kStep, kInverse>(x1, x2, c1.get(i), s1.get(i), c2.get(i),
                                                   s2.get(i));
                  a.set(i, x1);
                  z.set(i, x2);
                }
              });
        }
      }
    }

    if constexpr (!kInterleaved) {
      // Channels >= R: copied unchanged (nothing to do in place).
      using V = Vec<Tx, CX>;
      auto copy_row = [&](const Tx* x, Tx* o, int off) {
#pragma unroll
        for (int i = 0; i < kUnit; i += CX) V::load(x + off + i).store(o + off + i);
      };
      for (int j = lane; j < p.pass_items; j += p.lanes) {
        const int off = p.pass_start + j * kUnit;
        for (int hh = slot; hh < heads; hh += p.slots) {
          if (hh < h0 ? A.copy_pass : B.copy_pass) copy_row(in_row(hh), out_row(hh), off);
        }
      }
    }
  }
}


// rope_half_lean_kernel (the default since 2026-12-07; LTX_KERNELS_ROPE_LEAN=0 gives these
// calls back to rope_kernel's packed form): the packed form's calls (rotate-half forward, x
// and tables of one half dtype, 16-byte units) without pass-through channels (R = D), one
// thread per (token, head, unit) and no loop: a and z and the unit's four table vectors,
// then two stores. Why: Nsight Compute (H100, 2026-12-07 07:00) has rope_kernel's packed
// form at 44% achieved occupancy (60 registers: the token walk's state, both sides' row
// pointers) and Liger at 85% (32 registers), 57.5 vs 56.6 µs; the geometries with more bytes
// per thread (4 heads per pass) or fewer passes (wide slots at any token count) lost or tied.
// Here the state is one flat index, split by DivU32s (row_index.h), for a whole SM's threads.
// Measured (H100 bf16, 2026-12-07 08:14, RESULTS.md, clean cold L2, medians of 3): Llama
// q 32 x 8192 x 128 + k 8 heads 59.18 -> 58.50 µs, 2048 tokens 15.55 -> 15.46, head_dim 64
// (32 + 32 heads) 23.47 -> 22.91; decode under graph replay 1.78 -> 1.32 (1 token), 1.91 ->
// 1.50 (16 x 1), 256 tokens 2.58 -> 2.44, 512 tokens 3.62 -> 3.44. With outputs in the
// input's storage order (torch-ext/ops/rope.cpp empty_in_order), 8192 tokens 56.61 µs against
// Liger's 56.75 in place (08:46). Tried, dropped (08:31 / 08:39): 2 or 4 heads of a token per
// thread, the unit's tables loaded once for them (48 / 70 registers): within +-0.5% at 2048 and
// 8192 tokens, 25% slower on decode under graph replay.
// `items` = tokens x heads x units < 2^32 (the launcher checks); a divisor of 1 is skipped.
struct LeanSplit {
  DivU32 by_units, by_heads, by_batch;  // unit of a row, head of a token, (s, b) of a token
  uint32_t units, heads, batch, items;
};

LTX_HOST_DEVICE uint32_t div_by(const DivU32& d, uint32_t size, uint32_t n) {
  return size == 1 ? n : d.div(n);
}

template <typename T>
__global__ void __launch_bounds__(kBlock, kLeanMinBlocks)
    rope_half_lean_kernel(const RopeParams p, const LeanSplit q) {
  using V = Vec<T, 8>;
  pdl_wait();
  pdl_launch_dependents();
  const uint32_t i = blockIdx.x * kBlock + threadIdx.x;
  if (i >= q.items) return;
  const uint32_t row = div_by(q.by_units, q.units, i);  // token * heads + head
  const uint32_t t = div_by(q.by_heads, q.heads, row);
  const uint32_t s = div_by(q.by_batch, q.batch, t);
  const int64_t b = t - s * q.batch;
  const int hh = static_cast<int>(row - t * q.heads);
  const int lo = static_cast<int>(i - row * q.units) * 8;
  const int hi = lo + p.half;
  const RopeSide& S = p.side[hh < p.side[0].heads ? 0 : 1];
  const int64_t h = hh < p.side[0].heads ? hh : hh - p.side[0].heads;
  const T* x = static_cast<const T*>(S.in) + b * S.in_b + s * S.in_s + h * S.in_h;
  T* o = static_cast<T*>(S.out) + b * S.out_b + s * S.out_s + h * S.out_h;
  const T* cr = static_cast<const T*>(p.cos) + b * p.cos_b + s * p.cos_s;
  const T* sr = static_cast<const T*>(p.sin) + b * p.sin_b + s * p.sin_s;
  const V a = V::load(x + lo), z = V::load(x + hi);
  // All six 16-byte loads still issue before the two stores (sm_90 SASS: LDG.E.128.CONSTANT
  // x 6, then STG.E.128 x 2); with the tables read inside the expressions ptxas fits 32
  // registers without spills, with them named up front it spilled 12 bytes. The tables are
  // L1 / L2 hits after a token's first head; a and z come from DRAM.
  sub_rn(mul_rn(a, V::load(cr + lo)), mul_rn(z, V::load(sr + lo))).store(o + lo);
  add_rn(mul_rn(z, V::load(cr + hi)), mul_rn(a, V::load(sr + hi))).store(o + hi);
}

// Stride of dim d, 0 where the dim has size 1 (it is never stepped).
int64_t stride_of(const at::Tensor& t, int64_t d) { return t.size(d) > 1 ? t.stride(d) : 0; }

RopeSide make_side(const at::Tensor& out, const at::Tensor& in) {
  RopeSide s{};
  s.in = in.const_data_ptr();
  s.out = out.mutable_data_ptr();
  s.in_b = stride_of(in, 0), s.in_s = stride_of(in, 1), s.in_h = stride_of(in, 2);
  s.out_b = stride_of(out, 0), s.out_s = stride_of(out, 1), s.out_h = stride_of(out, 2);
  s.heads = static_cast<int>(in.size(2));
  s.copy_pass = !(s.in == s.out && s.in_b == s.out_b && s.in_s == s.out_s && s.in_h == s.out_h);
  return s;
}

// Whether U-element units are accessible for an operand: its base pointer and every
// stride keep each access (chunk elements) aligned.
bool unit_ok(const void* ptr, int elem, int chunk, std::initializer_list<int64_t> strides) {
  if (reinterpret_cast<uintptr_t>(ptr) % (static_cast<uintptr_t>(chunk) * elem) != 0) return false;
  for (int64_t st : strides) {
    if (st % chunk != 0) return false;
  }
  return true;
}

// The widest unit U in {8, 4, 2} whose accesses stay aligned for every operand, or 1
// (scalar accesses). U divides `cols` (the row length or the rotary half). Pair tables
// read U / 2 table values per unit.
int pick_unit(const RopeParams& p, int xs, int cs, int64_t cols, bool pair) {
  for (int u : {8, 4, 2}) {
    if (u * xs > 16 || cols % u != 0) continue;
    const int cx = std::min(u, 16 / xs);
    const int tu = pair ? u / 2 : u;
    const int cc = tu == 1 ? 1 : std::min(tu, 16 / cs);
    bool ok = unit_ok(p.cos, cs, cc, {p.cos_b, p.cos_s}) && unit_ok(p.sin, cs, cc, {p.sin_b, p.sin_s});
    for (const RopeSide& s : p.side) {
      if (s.heads == 0) continue;
      ok = ok && unit_ok(s.in, xs, cx, {s.in_b, s.in_s, s.in_h}) &&
           unit_ok(s.out, xs, cx, {s.out_b, s.out_s, s.out_h});
    }
    if (ok) return u;
  }
  return 1;
}

// The slot count, `slots` or a smaller power of two, that leaves the fewest idle head
// places over a slot's passes (two heads a pass): slots * 2 * passes - heads; the larger
// count on a tie (fewer passes per thread).
int fitted_slots(int64_t heads, int slots) {
  int best = slots;
  int64_t best_idle = INT64_MAX;
  for (int s = slots; s >= 1; s /= 2) {  // largest first: a tie keeps the larger
    const int64_t idle = ceil_div(heads, int64_t{2} * s) * 2 * s - heads;
    if (idle < best_idle) best = s, best_idle = idle;
  }
  return best;
}

int pow2_floor(int64_t v) {
  int p = 1;
  while (static_cast<int64_t>(p) * 2 <= v) p <<= 1;
  return p;
}

}  // namespace
}  // namespace ltx::cuda

namespace ltx {

void rope_rotate_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                        const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                        RopeLayout layout, bool inverse) {
  using namespace ltx::cuda;
  const int64_t batch = in0.size(0), seq = in0.size(1), dim = in0.size(3);
  const int64_t tokens = batch * seq;
  const int64_t heads = in0.size(2) + (in1.defined() ? in1.size(2) : 0);
  if (tokens == 0 || dim == 0 || heads == 0) return;
  TORCH_CHECK(dim <= INT32_MAX / 2 && heads <= INT32_MAX, "ltx_kernels.rope: row too large");
  const c10::cuda::CUDAGuard guard(in0.device());
  const int device = in0.device().index();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  const bool interleaved = layout == RopeLayout::kInterleaved;
  const int64_t rdim = cos.size(2);

  RopeParams p{};
  p.side[0] = make_side(out0, in0);
  if (in1.defined()) {
    p.side[1] = make_side(out1, in1);
  } else {
    p.side[1] = p.side[0];  // valid pointers, no heads
    p.side[1].heads = 0;
  }
  p.cos = cos.const_data_ptr();
  p.sin = sin.const_data_ptr();
  p.cos_b = stride_of(cos, 0), p.cos_s = stride_of(cos, 1);
  p.sin_b = stride_of(sin, 0), p.sin_s = stride_of(sin, 1);
  if (rdim == 0) p.cos = p.sin = in0.const_data_ptr();  // nothing to rotate; keep them aligned
  p.batch = batch;
  p.seq = seq;
  // Tokens batch-major: the kernel walks (s outer, b inner) as named, so batch and positions
  // trade places (sizes and strides). Fewer DRAM streams at a time (q, k and their outputs
  // of one batch entry, not all of them), though a batch sharing its tables (stride 0) then
  // reads them once per entry instead of neighbouring blocks sharing them through L2. H100
  // bf16, 2026-12-05 22:34 (RESULTS.md, ab_kernels.py): rope_ltx [2, 8064, 2048] 129.38 ->
  // 128.96 µs, LTX's q/k pair-table call 129.06 -> 128.35 (compile 128.19 / 126.11). Folding
  // such a batch into heads, so one thread loads each table unit for every entry, changed
  // nothing (129.38 / 129.02): the L2 already served the second read.
  // LTX_KERNELS_ROPE_ORDER=position (read per call: an A/B switch) keeps position-major.
  if (batch > 1 && ab_switch("LTX_KERNELS_ROPE_ORDER") != "position") {
    std::swap(p.batch, p.seq);
    std::swap(p.cos_b, p.cos_s), std::swap(p.sin_b, p.sin_s);
    for (RopeSide& sd : p.side) std::swap(sd.in_b, sd.in_s), std::swap(sd.out_b, sd.out_s);
  }
  p.batch32 = static_cast<uint32_t>(std::min<int64_t>(p.batch, UINT32_MAX));
  p.half = static_cast<int>(rdim / 2);
  p.pass_start = static_cast<int>(rdim);

  const int xs = static_cast<int>(in0.element_size());
  const int cs = static_cast<int>(cos.element_size());
  const int64_t cols = interleaved ? dim : std::gcd(rdim / 2, dim);
  const bool pair = interleaved && rdim * 2 == dim;  // pair tables [B, S, D/2]
  const int u = pick_unit(p, xs, cs, cols, pair);
  const int unit = interleaved ? std::max(u, 2) : u;
  p.rot_items = static_cast<int>((interleaved ? dim : rdim / 2) / unit);
  p.pass_items = interleaved ? 0 : static_cast<int>((dim - rdim) / unit);
  p.lanes = std::min(kMaxLanes, pow2_ceil(std::max({p.rot_items, p.pass_items, 1})));
  p.slots = std::min(pow2_floor(heads), std::max(1, kGroupTarget / p.lanes));
  // Calls of few tokens (decoding, short prompts) get as many slots as take every pair of
  // heads in one pass, while the grid stays within 2 blocks per SM (every rope_kernel
  // instantiation keeps 2 resident). A slot's heads are rotated a pair at a time, loads then
  // stores, so with the split above a decode token's 40 heads (Llama q 32 + k 8, 8 slots)
  // cost 3 dependent memory round trips, and a 256-token prompt ran 64 blocks of 4 tokens
  // on half the SMs; 32 slots make it 1 round trip, one token per block.
  // (pow2_ceil(ceil(heads / 2)) <= pow2_floor(heads): no slot is left without a head.)
  // H200 bf16 under CUDA-graph replay, q 32 + k 8 heads x 128 (RESULTS.md, 2026-12-05):
  // within 1 block per SM (12:06) 1 token 2.32 -> 1.67 µs, 16 tokens 2.76 -> 1.77 (Liger in
  // place 1.81 / 1.82, compile 2.80 / 2.97); within 2 (13:16) 256 tokens 3.02 -> 2.52 (Liger
  // 2.50; within 4: 2.51), 512 tokens unchanged at any limit (3.49; Liger 3.23).
  // LTX_KERNELS_ROPE_WIDE_SLOTS (read per call: an A/B switch): 0 keeps the split above,
  // 1 / 4 set the blocks-per-SM limit; "all" takes the wide split at any token count (short
  // blocks of one round trip and many waves, as Liger's programs: Nsight Compute, H100
  // 2026-12-07 07:00, ours 1.94 waves of 5-pass blocks, Liger 3.88 waves). Not the default:
  // H100 bf16 (RESULTS.md 07:04) q 32 x 8192 x 128 + k 8 60.16 -> 59.74 µs, but 2048 tokens
  // 15.97 -> 16.10 and head_dim 64 23.65 -> 23.74.
  const std::string_view wide_switch = ab_switch("LTX_KERNELS_ROPE_WIDE_SLOTS");
  const int64_t wide_per_sm = wide_switch == "1" ? 1 : wide_switch == "4" ? 4 : 2;
  const int wide = std::min(kBlock / p.lanes, pow2_ceil(ceil_div(heads, int64_t{2})));
  if (wide > p.slots && wide_switch != "0" &&
      (wide_switch == "all" ||
       ceil_div(tokens, static_cast<int64_t>(kBlock / (p.lanes * wide))) <= sm_count(device) * wide_per_sm)) {
    p.slots = wide;
  } else if (ab_switch("LTX_KERNELS_ROPE_SLOTS") != "0") {
    // Calls of many tokens: fewer slots where that fills every pass. A slot rotates its
    // heads two per pass, so Llama's 32 + 8 heads on 8 slots took 3 passes of which the last
    // holds one head (5 heads in 3 memory round trips, the last with half the bytes in
    // flight); on 4 slots, 5 full passes and twice the tokens per block. Only while the
    // fitted grid still has a block per SM: below that (prompts of <= ~1000 tokens) the
    // passes per thread, not the bytes in flight, decide. H100 bf16, 2026-12-05 19:34
    // (RESULTS.md): q 32 x 8192 x 128 + k 8 heads 60.45 -> 59.58 µs, 2048 tokens 16.16 ->
    // 15.81; already full (q 32 + k 32 heads of 64, LTX's forms): unchanged.
    // LTX_KERNELS_ROPE_SLOTS=0 (read per call: an A/B switch) keeps the power-of-two split.
    const int fit = fitted_slots(heads, p.slots);
    if (ceil_div(tokens, static_cast<int64_t>(kBlock / (p.lanes * fit))) >= sm_count(device)) p.slots = fit;
  }
  const int per_block = kBlock / (p.lanes * p.slots);
  // A block per token group (grid_cap; LTX_KERNELS_GRID=walk: at most 32 blocks per SM
  // walking the tokens, where rope_ltx [2, 8064, 2048] ran 8064 token pairs on 4224 blocks).
  const int64_t max_blocks = grid_cap(device, 32);
  const unsigned grid = static_cast<unsigned>(std::min(ceil_div(tokens, per_block), max_blocks));
  const int64_t step = static_cast<int64_t>(grid) * per_block;
  // Programmatic dependent launch on sm_90+ (common/pdl.cuh).
  const bool pdl = pdl_requested(device);
  // rope_half_lean_kernel: the packed form's calls with R = D and fewer units than
  // 2^32 - kBlock (its 32-bit thread index stays below 2^32 in the last block).
  const int64_t lean_items = tokens * heads * p.rot_items;
  // (the switch's environment read last: only calls the kernel could take pay for it)
  const bool lean = !interleaved && !inverse && u == 8 && p.pass_items == 0 &&
                    lean_items <= (int64_t{1} << 32) - kBlock && p.batch <= (int64_t{1} << 31) &&
                    heads <= (int64_t{1} << 31) && ab_switch("LTX_KERNELS_ROPE_LEAN") != "0";
  LeanSplit lean_split{};
  if (lean) {
    lean_split.units = static_cast<uint32_t>(p.rot_items);
    lean_split.heads = static_cast<uint32_t>(heads);
    lean_split.batch = static_cast<uint32_t>(p.batch);
    lean_split.items = static_cast<uint32_t>(lean_items);
    lean_split.by_units = DivU32(lean_split.units);
    lean_split.by_heads = DivU32(lean_split.heads);
    lean_split.by_batch = DivU32(lean_split.batch);
  }
  p.step_s = step / p.batch;
  p.step_b = step % p.batch;
  // L2 policies of the interleaved forward (kHint; the switch read for interleaved calls only).
  int hint = kHintNone;
  if (interleaved && !inverse) {
    const std::string_view hint_switch = ab_switch("LTX_KERNELS_ROPE_HINT");
    hint = hint_switch == "none"          ? kHintNone
           : hint_switch == "tables_last" ? kHintTablesLast
                                          : kHintTablesLast | kHintXLast;
  }

  dispatch_float(in0.scalar_type(), [&](auto xt) {
    using Tx = typename decltype(xt)::type;
    dispatch_float(cos.scalar_type(), [&](auto ct) {
      using Tc = typename decltype(ct)::type;
      if constexpr (std::is_same_v<Tc, Tx> || std::is_same_v<Tc, float>) {
        dispatch_vec(u, [&](auto n) {
          constexpr int U = decltype(n)::value;
          if constexpr (U * sizeof(Tx) <= 16) {
            auto launch = [&](auto inv) {
              constexpr bool kInv = decltype(inv)::value;
              if (interleaved) {
                if constexpr (std::is_same_v<Tc, float>) {
                  // rope_kernel's instantiation for the table form and kStream.
                  auto launch_interleaved = [&](auto streamed_tag) {
                    constexpr bool kS = decltype(streamed_tag)::value;
                    if constexpr (!kS && !kInv && U == 8 && sizeof(Tx) == 2) {
                      auto launch_hint = [&](auto hint_tag) {
                        constexpr int H = decltype(hint_tag)::value;
                        launch_pdl(pair ? rope_kernel<Tx, Tc, U, true, false, false, true, false, H>
                                        : rope_kernel<Tx, Tc, U, true, false, false, false, false, H>,
                                   grid, kBlock, stream, pdl, p);
                      };
                      constexpr int kT = kHintTablesLast, kTX = kT | kHintXLast;
                      if (hint == kT) return launch_hint(std::integral_constant<int, kT>{});
                      if (hint == kTX) return launch_hint(std::integral_constant<int, kTX>{});
                    }
                    launch_pdl(pair ? rope_kernel<Tx, Tc, U, true, kInv, false, true, kS>
                                    : rope_kernel<Tx, Tc, U, true, kInv, false, false, kS>,
                               grid, kBlock, stream, pdl, p);
                  };
                  if constexpr (!kInv) {
                    // kStream: the forward of one head with full tables (=1: every forward; =0: none).
                    const std::string_view stream_switch = ab_switch("LTX_KERNELS_ROPE_STREAM");
                    if (stream_switch == "1" || (stream_switch != "0" && !pair && heads == 1)) {
                      launch_interleaved(std::true_type{});
                    } else {
                      launch_interleaved(std::false_type{});
                    }
                  } else {
                    launch_interleaved(std::false_type{});
                  }
                  C10_CUDA_KERNEL_LAUNCH_CHECK();
                } else {
                  TORCH_CHECK(false, "ltx_kernels.rope_interleaved: tables must be float32");
                }
              } else if constexpr (!kInv && U == 8 && std::is_same_v<Tc, Tx> &&
                                   !std::is_same_v<Tx, float>) {
                if (lean) {
                  const auto lean_grid = static_cast<unsigned>(ceil_div(lean_split.items, kBlock));
                  launch_pdl(rope_half_lean_kernel<Tx>, lean_grid, kBlock, stream, pdl, p, lean_split);
                } else {
                  launch_pdl(rope_kernel<Tx, Tc, U, false, false, true>, grid, kBlock, stream, pdl, p);
                }
                C10_CUDA_KERNEL_LAUNCH_CHECK();
              } else {
                launch_pdl(rope_kernel<Tx, Tc, U, false, kInv>, grid, kBlock, stream, pdl, p);
                C10_CUDA_KERNEL_LAUNCH_CHECK();
              }
            };
            if (inverse) {
              launch(std::true_type{});
            } else {
              launch(std::false_type{});
            }
          } else {
            TORCH_CHECK(false, "ltx_kernels.rope: internal error: unit ", U);
          }
        });
      } else {
        TORCH_CHECK(false, "ltx_kernels.rope: tables must be float32 or the input dtype");
      }
    });
  });
}

void rope_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                 const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                 RopeLayout layout) {
  rope_rotate_launch(out0, in0, out1, in1, cos, sin, layout, /*inverse=*/false);
}

}  // namespace ltx
