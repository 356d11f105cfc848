// adaln / gated_residual backward on the CPU: one row per step of at::parallel_for,
// each row converted to buffers of A (float; double for float64 results, gradcheck),
// the row statistics recomputed as in the forward, the terms written in their dtypes.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../torch-ext/ops/adaln_backward.h"
#include "cpu_common.h"

namespace ltx {
namespace {

template <typename A>
void load_row(const void* base, at::ScalarType t, int64_t off, int64_t n, A* dst) {
  cpu::dispatch_float_or_double(t, [&](auto tag) {
    using T = decltype(tag);
    const T* p = static_cast<const T*>(base) + off;
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<A>(p[i]);
  });
}

template <typename A>
void store_row(const at::Tensor& dst, int64_t row, int64_t n, const A* src) {
  cpu::dispatch_float_or_double(dst.scalar_type(), [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(dst.mutable_data_ptr()) + row * n;
    for (int64_t i = 0; i < n; ++i) p[i] = static_cast<T>(src[i]);
  });
}

// Sum over a row in A with 8 independent lanes (fixed order: deterministic).
template <typename A>
A lane_sum(const A* v, int64_t n) {
  constexpr int kLanes = 8;
  A acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += v[i + l];
  }
  A s = 0;
  for (; i < n; ++i) s += v[i];
  return s + (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
}

int64_t grain_for(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

template <typename A>
void adaln_bwd_rows(const at::Tensor& dx2d, const at::Tensor& gn2d, const at::Tensor& dw2d,
                    const at::Tensor& g2d, const at::Tensor& x2d, const at::Tensor& scale,
                    const std::optional<at::Tensor>& weight, const RowSpace& rows, double eps,
                    bool layer) {
  const int64_t nrows = x2d.size(0), cols = x2d.size(1);
  const int64_t xs = x2d.stride(0), gs = g2d.stride(0);
  const A* w = weight ? weight->const_data_ptr<A>() : nullptr;
  const A inv_cols = A(1) / static_cast<A>(cols);
  at::parallel_for(0, nrows, grain_for(cols), [&](int64_t begin, int64_t end) {
    std::vector<A> xb(cols), gb(cols), sb(cols), tb(cols);
    A *xh = xb.data(), *g = gb.data(), *s = sb.data(), *t = tb.data();
    for (int64_t row = begin; row < end; ++row) {
      int64_t off[1];
      rows.offsets<1, true>(row, off);
      load_row(x2d.const_data_ptr(), x2d.scalar_type(), row * xs, cols, xh);
      load_row(g2d.const_data_ptr(), g2d.scalar_type(), row * gs, cols, g);
      load_row(scale.const_data_ptr(), scale.scalar_type(), off[0], cols, s);
      A mean = 0;
      if (layer) mean = lane_sum(xh, cols) * inv_cols;
      for (int64_t c = 0; c < cols; ++c) t[c] = (xh[c] - mean) * (xh[c] - mean);
      const A r = A(1) / std::sqrt(lane_sum(t, cols) * inv_cols + static_cast<A>(eps));
      for (int64_t c = 0; c < cols; ++c) xh[c] = (xh[c] - mean) * r;
      if (gn2d.defined()) {
        for (int64_t c = 0; c < cols; ++c) t[c] = g[c] * (w ? xh[c] * w[c] : xh[c]);
        store_row(gn2d, row, cols, t);
      }
      for (int64_t c = 0; c < cols; ++c) s[c] = g[c] * (A(1) + s[c]);  // s := dn
      if (dw2d.defined()) {
        for (int64_t c = 0; c < cols; ++c) t[c] = s[c] * xh[c];
        store_row(dw2d, row, cols, t);
      }
      if (!dx2d.defined()) continue;
      if (w) {
        for (int64_t c = 0; c < cols; ++c) s[c] = s[c] * w[c];  // s := dxh
      }
      for (int64_t c = 0; c < cols; ++c) t[c] = s[c] * xh[c];
      const A a = lane_sum(t, cols) * inv_cols;
      const A b = layer ? lane_sum(s, cols) * inv_cols : A(0);
      for (int64_t c = 0; c < cols; ++c) t[c] = r * (s[c] - b - xh[c] * a);
      store_row(dx2d, row, cols, t);
    }
  });
}

template <typename A>
void gated_bwd_rows(const at::Tensor& dy2d, const at::Tensor& dg2d, const at::Tensor& g2d,
                    const at::Tensor& y, const at::Tensor& gate, const RowSpace& rows) {
  const int64_t nrows = g2d.size(0), cols = g2d.size(1), gs = g2d.stride(0);
  at::parallel_for(0, nrows, grain_for(cols), [&](int64_t begin, int64_t end) {
    std::vector<A> gb(cols), ob(cols), tb(cols);
    for (int64_t row = begin; row < end; ++row) {
      int64_t off[2];
      rows.offsets<2, true>(row, off);
      load_row(g2d.const_data_ptr(), g2d.scalar_type(), row * gs, cols, gb.data());
      if (dy2d.defined()) {
        load_row(gate.const_data_ptr(), gate.scalar_type(), off[1], cols, ob.data());
        for (int64_t c = 0; c < cols; ++c) tb[c] = gb[c] * ob[c];
        store_row(dy2d, row, cols, tb.data());
      }
      if (dg2d.defined()) {
        load_row(y.const_data_ptr(), y.scalar_type(), off[0], cols, ob.data());
        for (int64_t c = 0; c < cols; ++c) tb[c] = gb[c] * ob[c];
        store_row(dg2d, row, cols, tb.data());
      }
    }
  });
}

bool any_double(std::initializer_list<at::Tensor> ts) {
  for (const at::Tensor& t : ts) {
    if (t.defined() && t.scalar_type() == at::kDouble) return true;
  }
  return false;
}

}  // namespace

void adaln_backward_launch(const at::Tensor& dx2d, const at::Tensor& gn2d, const at::Tensor& dw2d,
                           const at::Tensor& g2d, const at::Tensor& x2d, const at::Tensor& scale,
                           const std::optional<at::Tensor>& weight, const RowSpace& rows,
                           double eps, bool layer) {
  const bool dbl = any_double({g2d, x2d, scale, weight ? *weight : at::Tensor(), dx2d, gn2d, dw2d});
  if (dbl) {
    adaln_bwd_rows<double>(dx2d, gn2d, dw2d, g2d, x2d, scale, weight, rows, eps, layer);
  } else {
    adaln_bwd_rows<float>(dx2d, gn2d, dw2d, g2d, x2d, scale, weight, rows, eps, layer);
  }
}

void gated_residual_backward_launch(const at::Tensor& dy2d, const at::Tensor& dgate2d,
                                    const at::Tensor& g2d, const at::Tensor& y,
                                    const at::Tensor& gate, const RowSpace& rows) {
  if (any_double({g2d, y, gate})) {
    gated_bwd_rows<double>(dy2d, dgate2d, g2d, y, gate, rows);
  } else {
    gated_bwd_rows<float>(dy2d, dgate2d, g2d, y, gate, rows);
  }
}

}  // namespace ltx
