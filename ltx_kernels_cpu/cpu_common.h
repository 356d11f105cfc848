// Shared helpers for the CPU kernels: dtype dispatch and round-to-nearest-even casts.
// c10::Half / c10::BFloat16 convert from float with round-to-nearest-even, the
// same rounding PyTorch applies at every eager op boundary.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Exception.h>
#include <c10/util/Half.h>

#include <type_traits>
#include <utility>

namespace ltx::cpu {

// Calls f(T{}) with the C++ element type of a float dtype.
template <typename F>
void dispatch_float(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat: return f(float{});
    case at::kHalf: return f(c10::Half{});
    case at::kBFloat16: return f(c10::BFloat16{});
    default: TORCH_CHECK(false, "ltx_kernels: unsupported dtype ", t);
  }
}

// As dispatch_float, plus double: the CPU ops also run in float64 so that
// torch.autograd.gradcheck can check their backward (rows.h: check_float_dtype_or_cpu_double).
template <typename F>
void dispatch_float_or_double(at::ScalarType t, F&& f) {
  if (t == at::kDouble) return f(double{});
  dispatch_float(t, std::forward<F>(f));
}

// The accumulation / arithmetic type for storage type T: double for double
// (gradcheck needs float64 math throughout), float for everything else.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// Rounds v to dtype t and back (float: no-op). Models an eager op boundary.
inline float round_through(at::ScalarType t, float v) {
  switch (t) {
    case at::kHalf: return static_cast<float>(c10::Half(v));
    case at::kBFloat16: return static_cast<float>(c10::BFloat16(v));
    default: return v;
  }
}

// Sum of squares of n values in fp32, with independent partial sums so the loop
// vectorises; the order differs from PyTorch's but stays within fp32 rounding.
template <typename T>
float sum_of_squares(const T* x, int64_t n) {
  constexpr int kLanes = 8;
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) {
      const float v = static_cast<float>(x[i + l]);
      acc[l] += v * v;
    }
  }
  float s = 0.f;
  for (; i < n; ++i) {
    const float v = static_cast<float>(x[i]);
    s += v * v;
  }
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  return s;
}

}  // namespace ltx::cpu
