// Per-row element offsets of operands broadcast against x's leading dims.
//
// Ops that modulate x row by row (AdaLN scale/shift, residual gates) take operands
// such as [B, 1, D], [B, T, D], [B, F, 1, D] or the strided views LTX makes with
// `(table + temb.reshape(B, T, 6, D)).unbind(2)`. Instead of copying them to x's
// shape, the binding describes x's leading dims as a small "row space" (size-1
// dims dropped, dims that every operand can flatten merged; at most kMaxRowDims
// remain) and gives each operand one element stride per row-space dim (0 where
// it broadcasts). Row r of x then reads operand elements starting at
//   offset(r) = sum_d idx_d(r) * stride[d],  idx = r unravelled over size[]
// and the operand's last dim is contiguous. Plain structs, light on includes:
// the CUDA and CPU launchers both use them.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LTX_HOST_DEVICE __host__ __device__ __forceinline__
#define LTX_UNROLL _Pragma("unroll")
#else
#define LTX_HOST_DEVICE inline
#define LTX_UNROLL
#endif

namespace ltx {

constexpr int kMaxRowDims = 4;
constexpr int kMaxRowOperands = 2;

// n / d for 32-bit n by one high multiply, a subtraction and two shifts, d's magic number
// worked out once on the host (Granlund and Montgomery, "Division by invariant integers
// using multiplication", 1994, section 4: l = ceil(log2 d), m = 2^32 (2^l - d) / d + 1,
// q = (t + (n - t) / 2) >> (l - 1) with t = high word of m n; exact for every n < 2^32 and
// 2 <= d <= 2^31). A `/` by a run-time value is ~20 dependent instructions on sm_90 with an
// I2F and a MUFU.RCP in the chain (SASS, nvcc 13.0), once per row of the direct AdaLN and
// gated-residual kernels (RowSpace below) and per token of the q/k prologue (qk_prologue.cu),
// whose rows are a few hundred instructions.
struct DivU32 {
  uint32_t magic = 0;
  uint32_t shift = 0;  // l - 1

  DivU32() = default;  // no divisor (a dim that is never divided by)
  explicit DivU32(uint32_t d) {  // 2 <= d <= 2^31 (0 or 1: left without one, not divided by)
    if (d < 2) return;
    uint32_t l = 1;
    while ((uint64_t{1} << l) < d) ++l;
    magic = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << l) - d) / d + 1);
    shift = l - 1;
  }

  LTX_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, magic);
#else
    const uint32_t t = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (t + ((n - t) >> 1)) >> shift;  // t <= n: no wrap
  }
};

struct RowSpace {
  // Dims are right-aligned: size[kMaxRowDims - ndim .. kMaxRowDims - 1] are used,
  // outermost first; their product is the row count. Unused dims have size 1.
  int ndim = 0;                        // 0: a single row
  int64_t size[kMaxRowDims] = {1, 1, 1, 1};
  int64_t stride[kMaxRowOperands][kMaxRowDims] = {};  // per operand, in elements
  bool rows32 = false;                 // rows <= INT32_MAX: unravel with div[] (use_rows32)
  DivU32 div[kMaxRowDims];             // by size[d], set with rows32

  // For a row count <= INT32_MAX (so every size is): 32-bit unravelling, by multiplies.
  // offsets() divides by the dims inside the outermost used one, which are >= 2 (the row
  // space drops dims of size 1).
  void use_rows32() {
    rows32 = true;
    for (int d = kMaxRowDims - ndim + 1; d < kMaxRowDims; ++d) {
      div[d] = DivU32(static_cast<uint32_t>(size[d]));
    }
  }

  // The gcd of operand k's row strides (0 if every row is the same): each row
  // offset is a multiple of it, which is what the vector-width choice needs.
  LTX_HOST_DEVICE int64_t stride_gcd(int k) const {
    int64_t g = 0;
    for (int d = 0; d < kMaxRowDims; ++d) {
      int64_t a = stride[k][d], b = g;
      while (b != 0) {
        const int64_t t = a % b;
        a = b;
        b = t;
      }
      g = a;
    }
    return g;
  }

  // Element offsets of row `row` for the first kN operands. The row index is
  // unravelled once and shared; all loops have constant bounds (no local memory).
  // kByMultiply: with rows32, divide by div[] (DivU32) instead of `/`. The direct AdaLN
  // kernels and the gated residual take it (sm_90: 40-48 fewer SASS instructions, 4 fewer
  // MUFU.RCP, registers unchanged); in adaln_kernel and adaln_stream_kernel ptxas then held
  // 11-18 more registers (fewer blocks per SM at some block sizes), so they keep `/`. The
  // CPU backend takes it, so CI runs the multiply on every row space the tests make.
  template <int kN, bool kByMultiply = false>
  LTX_HOST_DEVICE void offsets(int64_t row, int64_t (&off)[kN]) const {
    static_assert(kN >= 1 && kN <= kMaxRowOperands, "operand count");
    const int first = kMaxRowDims - ndim;
LTX_UNROLL
    for (int k = 0; k < kN; ++k) off[k] = 0;
    if (rows32) {
      uint32_t r = static_cast<uint32_t>(row);
LTX_UNROLL
      for (int d = kMaxRowDims - 1; d >= 0; --d) {
        if (d < first) break;
        uint32_t i = r;
        if (d > first) {
          const uint32_t s = static_cast<uint32_t>(size[d]);
          const uint32_t q = kByMultiply ? div[d].div(r) : r / s;
          i = r - q * s;
          r = q;
        }
LTX_UNROLL
        for (int k = 0; k < kN; ++k) off[k] += static_cast<int64_t>(i) * stride[k][d];
      }
    } else {
      int64_t r = row;
LTX_UNROLL
      for (int d = kMaxRowDims - 1; d >= 0; --d) {
        if (d < first) break;
        int64_t i = r;
        if (d > first) {
          const int64_t q = r / size[d];
          i = r - q * size[d];
          r = q;
        }
LTX_UNROLL
        for (int k = 0; k < kN; ++k) off[k] += i * stride[k][d];
      }
    }
  }
};

}  // namespace ltx
