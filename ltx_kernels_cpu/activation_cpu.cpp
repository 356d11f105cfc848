// GELU (erf / tanh) and gated GELU on the CPU: the CUDA kernel's math and cast
// points (see gelu_launch / geglu_launch in torch_binding.h), parallel over
// (row, column chunk) tasks so both many short rows and one long row spread.
//
// ATen's CPU GELU uses vectorised erf/tanh approximations; std::erf/std::tanh here
// may differ from them in the last fp32 bit, so CPU results match F.gelu within
// one ulp of the output dtype rather than bit for bit (shared/docs/op-semantics.md 2.1).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../torch-ext/torch_binding.h"
#include "cpu_common.h"

namespace ltx {
namespace {

constexpr int64_t kChunk = 4096;  // elements per task along a row

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2_SqrtPi = 1.12837916709551257390;
constexpr float kAlpha = static_cast<float>(kSqrt1_2);
constexpr float kBeta = static_cast<float>(kSqrt2 * k2_SqrtPi * 0.5);
constexpr float kKappa = static_cast<float>(0.044715);

// A: float (the fp32 constants above, as before) or double (float64 for gradcheck:
// the constants in double, the same expression).
template <GeluKind K, typename A>
inline A gelu_f(A x) {
  constexpr bool kD = std::is_same_v<A, double>;
  const A alpha = kD ? static_cast<A>(kSqrt1_2) : static_cast<A>(kAlpha);
  const A beta = kD ? static_cast<A>(kSqrt2 * k2_SqrtPi * 0.5) : static_cast<A>(kBeta);
  const A kappa = kD ? static_cast<A>(0.044715) : static_cast<A>(kKappa);
  if constexpr (K == GeluKind::kTanh) {
    const A x_cube = x * x * x;
    const A inner = beta * (x + kappa * x_cube);
    return A(0.5) * x * (A(1) + std::tanh(inner));
  } else {
    return x * A(0.5) * (A(1) + std::erf(x * alpha));
  }
}

// out[r, c] = act(gate[r, c], value[r, c]) for a [rows, cols] problem.
template <typename T, GeluKind K, bool kGated>
void run(T* out, const T* gate, const T* value, int64_t rows, int64_t cols, int64_t in_stride,
         int64_t out_stride) {
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::min(cols, kChunk));
  at::parallel_for(0, rows * chunks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / chunks;
      const int64_t c0 = (t - r * chunks) * kChunk;
      const int64_t c1 = std::min(cols, c0 + kChunk);
      const T* g = gate + r * in_stride;
      const T* v = value + r * in_stride;
      T* o = out + r * out_stride;
      using A = cpu::acc_t<T>;
      for (int64_t c = c0; c < c1; ++c) {
        const A a = gelu_f<K>(static_cast<A>(g[c]));
        if constexpr (kGated) {
          o[c] = static_cast<T>(static_cast<A>(v[c]) * static_cast<A>(static_cast<T>(a)));
        } else {
          o[c] = static_cast<T>(a);
        }
      }
    }
  });
}

template <bool kGated>
void dispatch(const at::Tensor& like, GeluKind kind, void* out, const void* gate,
              const void* value, int64_t rows, int64_t cols, int64_t in_stride,
              int64_t out_stride) {
  cpu::dispatch_float_or_double(like.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    auto* o = static_cast<T*>(out);
    const auto* g = static_cast<const T*>(gate);
    const auto* v = static_cast<const T*>(value);
    if (kind == GeluKind::kTanh) {
      run<T, GeluKind::kTanh, kGated>(o, g, v, rows, cols, in_stride, out_stride);
    } else {
      run<T, GeluKind::kErf, kGated>(o, g, v, rows, cols, in_stride, out_stride);
    }
  });
}

}  // namespace

void gelu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind) {
  int64_t rows = x2d.size(0);
  int64_t cols = x2d.size(1);
  if (rows > 1 && x2d.stride(0) == cols && out2d.stride(0) == cols) {  // dense: one long row
    cols *= rows;
    rows = 1;
  }
  const void* x = x2d.const_data_ptr();
  dispatch<false>(x2d, kind, out2d.mutable_data_ptr(), x, x, rows, cols, x2d.stride(0),
                  out2d.stride(0));
}

void geglu_launch(const at::Tensor& out2d, const at::Tensor& x2d, GeluKind kind, bool gate_first) {
  const int64_t d = x2d.size(1) / 2;
  const char* first = static_cast<const char*>(x2d.const_data_ptr());
  const char* second = first + d * static_cast<int64_t>(x2d.element_size());
  dispatch<true>(x2d, kind, out2d.mutable_data_ptr(), gate_first ? first : second,
                 gate_first ? second : first, x2d.size(0), d, x2d.stride(0), out2d.stride(0));
}

}  // namespace ltx
