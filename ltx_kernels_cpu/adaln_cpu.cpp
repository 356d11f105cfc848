// AdaLN modulation and gated residual on the CPU. One row per step of
// at::parallel_for; each row is converted to fp32 buffers, computed with the
// eager chain's rounding points (torch_binding.h, torch-ext/ops/adaln.cpp), and
// converted back. Dtype dispatch is per operand (linear, not a product of types).
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../torch-ext/torch_binding.h"
#include "cpu_common.h"

// Every product and sum below is a separate eager op that rounds on its own: no
// fused multiply-add (GCC contracts by default where the target has FMA).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace ltx {
namespace {

// Rows are computed in A: float (fp32/fp16/bf16 data), or double when the result is
// float64 (CPU only, for gradcheck). The float path is the original fp32 one.
template <typename A>
void load_row(const void* base, at::ScalarType t, int64_t off, int64_t n, A* dst) {
  cpu::dispatch_float_or_double(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(base) + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<A>(p[i]);
  });
}

template <typename A>
void store_row(void* base, at::ScalarType t, int64_t off, int64_t n, const A* src) {
  cpu::dispatch_float_or_double(t, [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(base) + off;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(src[i]);
  });
}

// v[i] = A(t(v[i])): an eager op boundary in dtype t. kFloat (and kDouble) are no
// extra rounding; in the double path only half-precision boundaries are modelled.
template <typename A>
void round_row(at::ScalarType t, A* v, int64_t n) {
  if (t != at::kHalf && t != at::kBFloat16) return;
  cpu::dispatch_float(t, [&](auto tag) {
    using T = decltype(tag);
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<A>(static_cast<T>(static_cast<float>(v[i])));
  });
}

// Sum of term(i) over [0, n) in A: 8 independent lanes (vectorisable) within
// blocks of 256, block sums added in order; the error grows like n / 256 + 32
// roundings rather than n / 8 (near ATen's cascade sum in accuracy).
template <typename A, typename F>
A blocked_sum(int64_t n, F term) {
  constexpr int kLanes = 8;
  constexpr int64_t kBlock = 256;
  A total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    A acc[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= e; i += kLanes) {
      for (int l = 0; l < kLanes; ++l) acc[l] += term(i + l);
    }
    A s = 0;
    for (; i < e; ++i) s += term(i);
    s += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    total += s;
  }
  return total;
}

int64_t grain_for(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }


template <typename A>
void adaln_rows(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& scale,
                const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
                const RowSpace& rows, double eps, AdaLnNorm norm, const AdaLnRounding& r) {
  const int64_t nrows = x2d.size(0);
  const int64_t cols = x2d.size(1);
  const int64_t x_stride = x2d.stride(0);
  const int64_t out_stride = out2d.stride(0);
  const A eps_f = static_cast<A>(eps);
  const A inv_cols = A(1) / static_cast<A>(cols);
  const void* x = x2d.const_data_ptr();
  const void* s = scale.const_data_ptr();
  const void* h = shift ? shift->const_data_ptr() : nullptr;
  const A* w = weight ? weight->const_data_ptr<A>() : nullptr;
  void* out = out2d.mutable_data_ptr();
  const at::ScalarType xt = x2d.scalar_type(), st = scale.scalar_type(),
                       ht = shift ? shift->scalar_type() : st, ot = out2d.scalar_type();

  at::parallel_for(0, nrows, grain_for(cols), [&](int64_t begin, int64_t end) {
    std::vector<A> nb(cols), sb(cols), hb(h ? cols : 0);
    A* n = nb.data();
    A* s1 = sb.data();
    for (int64_t row = begin; row < end; ++row) {
      int64_t off[2];
      rows.offsets<2, true>(row, off);
      load_row(x, xt, row * x_stride, cols, n);
      A inv, mean = 0;
      if (norm == AdaLnNorm::kRms) {
        const A ss = blocked_sum<A>(cols, [n](int64_t i) { return n[i] * n[i]; });
        inv = A(1) / std::sqrt(ss / static_cast<A>(cols) + eps_f);
      } else {
        mean = blocked_sum<A>(cols, [n](int64_t i) { return n[i]; }) * inv_cols;
        const A ss = blocked_sum<A>(cols, [n, mean](int64_t i) {
          const A d = n[i] - mean;
          return d * d;
        });
        inv = A(1) / std::sqrt(ss * inv_cols + eps_f);
      }
      if (norm == AdaLnNorm::kRms) {
        for (int64_t c = 0; c < cols; ++c) n[c] = n[c] * inv;
      } else {
        for (int64_t c = 0; c < cols; ++c) n[c] = (n[c] - mean) * inv;
      }
      round_row(r.mid, n, cols);
      if (w) {
        for (int64_t c = 0; c < cols; ++c) n[c] = n[c] * w[c];
      }
      round_row(r.norm, n, cols);

      load_row(s, st, off[0], cols, s1);
      for (int64_t c = 0; c < cols; ++c) s1[c] = A(1) + s1[c];
      round_row(r.scale1, s1, cols);
      for (int64_t c = 0; c < cols; ++c) n[c] = n[c] * s1[c];
      if (h) {
        round_row(r.prod, n, cols);
        load_row(h, ht, off[1], cols, hb.data());
        for (int64_t c = 0; c < cols; ++c) n[c] = n[c] + hb[c];
      }
      store_row(out, ot, row * out_stride, cols, n);
    }
  });
}

template <typename A>
void gated_rows(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& y,
                const at::Tensor& gate, const RowSpace& rows, at::ScalarType prod) {
  const int64_t nrows = x2d.size(0);
  const int64_t cols = x2d.size(1);
  const int64_t x_stride = x2d.stride(0);
  const int64_t out_stride = out2d.stride(0);
  const void* x = x2d.const_data_ptr();
  const void* yp = y.const_data_ptr();
  const void* gp = gate.const_data_ptr();
  void* out = out2d.mutable_data_ptr();
  const at::ScalarType xt = x2d.scalar_type(), yt = y.scalar_type(), gt = gate.scalar_type(),
                       ot = out2d.scalar_type();

  at::parallel_for(0, nrows, grain_for(cols), [&](int64_t begin, int64_t end) {
    std::vector<A> xb(cols), yb(cols), gb(cols);
    for (int64_t row = begin; row < end; ++row) {
      int64_t off[2];
      rows.offsets<2, true>(row, off);
      load_row(yp, yt, off[0], cols, yb.data());
      load_row(gp, gt, off[1], cols, gb.data());
      for (int64_t c = 0; c < cols; ++c) yb[c] = yb[c] * gb[c];
      round_row(prod, yb.data(), cols);
      load_row(x, xt, row * x_stride, cols, xb.data());
      for (int64_t c = 0; c < cols; ++c) xb[c] = xb[c] + yb[c];
      store_row(out, ot, row * out_stride, cols, xb.data());
    }
  });
}

}  // namespace

void adaln_launch(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& scale,
                  const std::optional<at::Tensor>& shift, const std::optional<at::Tensor>& weight,
                  const RowSpace& rows, double eps, AdaLnNorm norm, const AdaLnRounding& r) {
  // float64 operands promote the result to float64 (adaln.cpp), so out's dtype decides.
  if (out2d.scalar_type() == at::kDouble) {
    adaln_rows<double>(out2d, x2d, scale, shift, weight, rows, eps, norm, r);
  } else {
    adaln_rows<float>(out2d, x2d, scale, shift, weight, rows, eps, norm, r);
  }
}

void gated_residual_launch(const at::Tensor& out2d, const at::Tensor& x2d, const at::Tensor& y,
                           const at::Tensor& gate, const RowSpace& rows, at::ScalarType prod) {
  if (out2d.scalar_type() == at::kDouble) {
    gated_rows<double>(out2d, x2d, y, gate, rows, prod);
  } else {
    gated_rows<float>(out2d, x2d, y, gate, rows, prod);
  }
}

}  // namespace ltx
