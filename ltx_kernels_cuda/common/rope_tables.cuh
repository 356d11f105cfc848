// Reading interleaved-RoPE tables (fp32) for one vector of N channels, shared by the q/k
// prologue's forward and backward kernels.
//
// Two table forms: one value per channel ([B, S, D], diffusers' LTX-Video tables after
// their repeat_interleave(2)), or one value per pair ([B, S, D/2]: value i serves channels
// 2i and 2i+1), which moves half the table bytes for the same rotation.
#pragma once

#include <ATen/core/Tensor.h>

#include "vec.cuh"

namespace ltx::cuda {

// Table kinds as template ints (g++ 12 mis-parses enum-class kernel template arguments).
constexpr int kNoTables = 0;
constexpr int kFullTables = 1;
constexpr int kPairTables = 2;

// Table entries a vector of N channels reads.
template <int kTab, int N>
constexpr int table_span() {
  return kTab == kPairTables ? N / 2 : N;
}

// The N per-channel values for channels [j*N, j*N + N) of a table row: M = table_span
// values read (kVec: accesses of up to 16 bytes, aligned by the launcher), then, for pair
// tables, each value given to both channels of its pair.
template <int N, bool kVec, int kTab>
__device__ __forceinline__ void load_table(const float* row, int j, float* out) {
  constexpr int M = table_span<kTab, N>();
  float v[M];
  const float* p = row + static_cast<int64_t>(j) * M;
  if constexpr (kVec && M > 1) {
    constexpr int C = M < 4 ? M : 4;
#pragma unroll
    for (int i = 0; i < M; i += C) {
      const Vec<float, C> t = Vec<float, C>::load(p + i);
#pragma unroll
      for (int k = 0; k < C; ++k) v[i + k] = t.v[k];
    }
  } else {
#pragma unroll
    for (int k = 0; k < M; ++k) v[k] = __ldg(p + k);
  }
#pragma unroll
  for (int k = 0; k < N; ++k) out[k] = v[kTab == kPairTables ? k / 2 : k];
}

// A call's table kind from its [B, S, R] table view (undefined: no tables) and row width.
inline int table_kind(const at::Tensor& cos, int64_t cols) {
  if (!cos.defined()) return kNoTables;
  return cos.size(2) * 2 == cols ? kPairTables : kFullTables;
}

// Whether tables of this kind can be read with vector accesses for vectors of `vec`
// channels: base pointers and row strides aligned to one access (min(span, 4) floats).
inline bool tables_vectorizable(int kind, int vec, const void* cos, const void* sin,
                                std::initializer_list<int64_t> strides) {
  const int64_t span = kind == kPairTables ? vec / 2 : vec;
  const int64_t access = (span < 4 ? span : 4) * static_cast<int64_t>(sizeof(float));
  if (reinterpret_cast<uintptr_t>(cos) % access != 0 ||
      reinterpret_cast<uintptr_t>(sin) % access != 0) {
    return false;
  }
  for (int64_t st : strides) {
    if (st % span != 0) return false;
  }
  return true;
}

}  // namespace ltx::cuda
