// Row-wise RMSNorm backward shared by the CPU rmsnorm and q/k prologue backward kernels.
//
// The forward's intermediate roundings (to half precision) are identity for the gradient
// (autograd through a cast passes the grad unchanged), so every semantics has the same
// backward: r = 1/sqrt(mean(x^2) + eps), xh = x*r, gw = g*w,
//   dx = r * (gw - xh * mean(gw * xh)),   dw = sum over rows of g * xh.
// Math in Acc (fp32, double for double). The weight gradient is reduced deterministically:
// rows are split into a number of blocks that depends only on the shape, each block sums
// its rows in order into its own partial, then the partials are added in block order.
#pragma once

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "cpu_common.h"

namespace ltx::cpu {

// Sum of squares in Acc: the forward's own fp32 helper (same order as the forward, so r
// matches it bit for bit), a plain double loop for double.
template <typename Acc, typename T>
Acc sum_sq_acc(const T* x, int64_t n) {
  if constexpr (std::is_same_v<Acc, float>) {
    return sum_of_squares(x, n);
  } else {
    Acc s = 0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<Acc>(x[i]) * static_cast<Acc>(x[i]);
    return s;
  }
}

// One row: dx (in T) from x, the output grad g and the weight w (nullptr: none);
// dw_acc (nullptr: not wanted) += g * xh.
template <typename Acc, typename T, typename Tg, typename Tw>
void rms_backward_row(const T* x, const Tg* g, const Tw* w, int64_t d, Acc eps, T* dx,
                      Acc* dw_acc) {
  const Acc r = Acc(1) / std::sqrt(sum_sq_acc<Acc>(x, d) / static_cast<Acc>(d) + eps);
  Acc dot = 0;  // sum(gw * x)
  for (int64_t c = 0; c < d; ++c) {
    Acc gw = static_cast<Acc>(g[c]);
    if (w) gw *= static_cast<Acc>(w[c]);
    dot += gw * static_cast<Acc>(x[c]);
  }
  // mean(gw * xh) * r = r^2 * dot / d: the factor of xh's correction in dx / r.
  const Acc k = r * r * dot / static_cast<Acc>(d);
  for (int64_t c = 0; c < d; ++c) {
    const Acc xv = static_cast<Acc>(x[c]);
    Acc gw = static_cast<Acc>(g[c]);
    if (dw_acc) dw_acc[c] += gw * (xv * r);
    if (w) gw *= static_cast<Acc>(w[c]);
    dx[c] = static_cast<T>(r * (gw - xv * k));
  }
}

// Runs row_fn(r, parts) for every row r, where parts[i] is the Acc [d] partial of output i
// (of n_out, at most 2) for the block holding r, or nullptr when dw[i] is nullptr; then
// writes dw[i] = sum of its partials in block order. Deterministic for a given shape.
template <typename Acc, typename RowFn>
void rows_with_weight_grads(int64_t rows, int64_t d, int64_t grain, Acc* const dw[2], int n_out,
                            RowFn&& row_fn) {
  bool any = false;
  for (int i = 0; i < n_out; ++i) any = any || dw[i] != nullptr;
  if (!any) {
    at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
      Acc* none[2] = {nullptr, nullptr};
      for (int64_t r = begin; r < end; ++r) row_fn(r, none);
    });
    return;
  }
  // At most 256 blocks of whole rows: bounded partial memory, enough tasks for the threads.
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(256, (rows + 31) / 32));
  const int64_t per = (rows + blocks - 1) / blocks;
  std::vector<Acc> parts[2];
  for (int i = 0; i < n_out; ++i) {
    if (dw[i]) parts[i].assign(static_cast<size_t>(blocks * d), Acc(0));
  }
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      Acc* p[2] = {nullptr, nullptr};
      for (int i = 0; i < n_out; ++i) p[i] = dw[i] ? parts[i].data() + b * d : nullptr;
      for (int64_t r = b * per; r < std::min(rows, (b + 1) * per); ++r) row_fn(r, p);
    }
  });
  for (int i = 0; i < n_out; ++i) {
    if (!dw[i]) continue;
    const Acc* p = parts[i].data();
    at::parallel_for(0, d, 256, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        Acc s = 0;
        for (int64_t b = 0; b < blocks; ++b) s += p[b * d + c];
        dw[i][c] = s;
      }
    });
  }
}

}  // namespace ltx::cpu
