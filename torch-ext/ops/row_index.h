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

struct RowSpace {
  // Dims are right-aligned: size[kMaxRowDims - ndim .. kMaxRowDims - 1] are used,
  // outermost first; their product is the row count. Unused dims have size 1.
  int ndim = 0;                        // 0: a single row
  int64_t size[kMaxRowDims] = {1, 1, 1, 1};
  int64_t stride[kMaxRowOperands][kMaxRowDims] = {};  // per operand, in elements
  bool rows32 = false;                 // rows <= INT32_MAX: unravel with 32-bit division

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
  template <int kN>
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
          const uint32_t q = r / s;
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
