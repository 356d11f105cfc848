// GELU / GEGLU backward on the CPU: ATen's gelu_backward derivative formulas (erf
// and tanh forms) in fp32 (double for float64, for gradcheck), parallel over
// (row, column chunk) tasks like the forward.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "../torch-ext/ops/activation_backward.h"
#include "cpu_common.h"

namespace ltx {
namespace {

constexpr int64_t kChunk = 4096;  // elements per task along a row

constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kSqrt2 = 1.41421356237309504880;
constexpr double k2_SqrtPi = 1.12837916709551257390;

// exp without glibc's exp@GLIBC_2.29 symbol (the Hub's manylinux_2_28 ABI check rejects
// it; expf, expm1 and ldexp are older): exp(v) = 2^k * (expm1(r) + 1), r = v - k ln2,
// |r| <= ln2 / 2, so the + 1 loses nothing. Only the float64 (gradcheck) path uses it.
inline double exp_compat(double v) {
  if (!(v > -745.2)) return v != v ? v : 0.0;  // NaN stays NaN; below the subnormal range: 0
  if (v > 709.8) return HUGE_VAL;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln2 split so k * kLn2Hi is exact
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double k = std::nearbyint(v * 1.44269504088896338700);
  const double r = (v - k * kLn2Hi) - k * kLn2Lo;
  return std::ldexp(std::expm1(r) + 1.0, static_cast<int>(k));
}
inline float exp_compat(float v) { return std::exp(v); }

// gelu(x) and gelu'(x) together (they share erf / tanh), in A = float or double.
template <GeluKind K, typename A>
inline void gelu_and_grad(A x, A& f, A& df) {
  if constexpr (K == GeluKind::kTanh) {
    const A beta = static_cast<A>(kSqrt2 * k2_SqrtPi * 0.5);
    const A kappa = static_cast<A>(0.044715);
    const A x_sq = x * x;
    const A inner = beta * (x + kappa * x_sq * x);
    const A t = std::tanh(inner);
    const A left = A(0.5) * x;
    const A right = A(1) + t;
    f = left * right;
    // d/dx [0.5 x (1 + tanh(u))] = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) u'
    df = A(0.5) * right + left * (A(1) - t * t) * (beta * (A(1) + A(3) * kappa * x_sq));
  } else {
    const A alpha = static_cast<A>(kSqrt1_2);
    const A beta = static_cast<A>(k2_SqrtPi * kSqrt1_2 * 0.5);  // 1 / sqrt(2 pi)
    const A cdf = A(0.5) * (A(1) + std::erf(x * alpha));
    f = x * cdf;
    df = cdf + x * beta * exp_compat(A(-0.5) * x * x);
  }
}

// Runs body(r, c0, c1) over [rows, cols] in parallel chunks.
template <typename F>
void for_chunks(int64_t rows, int64_t cols, F&& body) {
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::min(cols, kChunk));
  at::parallel_for(0, rows * chunks, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / chunks;
      const int64_t c0 = (t - r * chunks) * kChunk;
      body(r, c0, std::min(cols, c0 + kChunk));
    }
  });
}

template <typename T, GeluKind K>
void gelu_bwd(T* dx, const T* grad, const T* x, int64_t rows, int64_t cols, int64_t gs,
              int64_t xs, int64_t ds) {
  using A = cpu::acc_t<T>;
  for_chunks(rows, cols, [&](int64_t r, int64_t c0, int64_t c1) {
    const T* g = grad + r * gs;
    const T* xr = x + r * xs;
    T* o = dx + r * ds;
    for (int64_t c = c0; c < c1; ++c) {
      A f, df;
      gelu_and_grad<K>(static_cast<A>(xr[c]), f, df);
      o[c] = static_cast<T>(static_cast<A>(g[c]) * df);
    }
  });
}

template <typename T, GeluKind K>
void geglu_bwd(T* dx, const T* grad, const T* x, int64_t rows, int64_t d, int64_t gs, int64_t xs,
               int64_t ds, bool gate_first) {
  using A = cpu::acc_t<T>;
  for_chunks(rows, d, [&](int64_t r, int64_t c0, int64_t c1) {
    const T* g = grad + r * gs;
    const T* first = x + r * xs;
    const T* second = first + d;
    T* o_first = dx + r * ds;
    T* o_second = o_first + d;
    for (int64_t c = c0; c < c1; ++c) {
      const A gr = static_cast<A>(g[c]);
      const A gate = static_cast<A>(gate_first ? first[c] : second[c]);
      const A value = static_cast<A>(gate_first ? second[c] : first[c]);
      A f, df;
      gelu_and_grad<K>(gate, f, df);
      const T d_gate = static_cast<T>(gr * value * df);
      const T d_value = static_cast<T>(gr * f);
      o_first[c] = gate_first ? d_gate : d_value;
      o_second[c] = gate_first ? d_value : d_gate;
    }
  });
}

template <typename F>
void dispatch(const at::Tensor& like, GeluKind kind, F&& f) {
  cpu::dispatch_float_or_double(like.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    if (kind == GeluKind::kTanh) {
      f(T{}, std::integral_constant<GeluKind, GeluKind::kTanh>{});
    } else {
      f(T{}, std::integral_constant<GeluKind, GeluKind::kErf>{});
    }
  });
}

}  // namespace

void gelu_backward_launch(const at::Tensor& dx2d, const at::Tensor& grad2d, const at::Tensor& x2d,
                          GeluKind kind) {
  int64_t rows = x2d.size(0);
  int64_t cols = x2d.size(1);
  int64_t gs = grad2d.stride(0), xs = x2d.stride(0), ds = dx2d.stride(0);
  if (rows > 1 && gs == cols && xs == cols && ds == cols) {  // all dense: one long row
    cols *= rows;
    rows = 1;
  }
  dispatch(x2d, kind, [&](auto t, auto k) {
    using T = decltype(t);
    gelu_bwd<T, decltype(k)::value>(static_cast<T*>(dx2d.mutable_data_ptr()),
                                    static_cast<const T*>(grad2d.const_data_ptr()),
                                    static_cast<const T*>(x2d.const_data_ptr()), rows, cols, gs,
                                    xs, ds);
  });
}

void geglu_backward_launch(const at::Tensor& dx2d, const at::Tensor& grad2d, const at::Tensor& x2d,
                           GeluKind kind, bool gate_first) {
  dispatch(x2d, kind, [&](auto t, auto k) {
    using T = decltype(t);
    geglu_bwd<T, decltype(k)::value>(static_cast<T*>(dx2d.mutable_data_ptr()),
                                     static_cast<const T*>(grad2d.const_data_ptr()),
                                     static_cast<const T*>(x2d.const_data_ptr()), x2d.size(0),
                                     grad2d.size(1), grad2d.stride(0), x2d.stride(0),
                                     dx2d.stride(0), gate_first);
  });
}

}  // namespace ltx
