// Host side of row_index.h: checks that operands broadcast against x, and builds
// the RowSpace the launchers use to find each operand's row without a copy.
//
// Zero-copy: any operand whose last dim is contiguous (or D == 1) and equals x's
// last dim, whatever its leading strides (stride 0, unbind views with row stride
// 6*D, [B, F, 1, D] against x [B, F, S, D], ...), as long as the leading dims
// that do not flatten jointly number at most kMaxRowDims. Copied once here: an
// operand broadcasting over the last dim ([..., 1]) or with a strided last dim;
// in the (exotic) case of more than kMaxRowDims non-flattening dims, the
// operands are expanded to x's shape.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <vector>

#include "ops/row_index.h"
#include "ops/rows.h"

namespace ltx {

// t, checked to broadcast to x's shape, in a layout the kernels read: its last
// dim has x's size and is contiguous. Names `name` in every error.
inline at::Tensor broadcast_operand(const at::Tensor& t, const at::Tensor& x, const char* op,
                                    const char* name) {
  check_float_dtype_or_cpu_double(t, op, name);  // float64: CPU only (gradcheck)
  check_same_device(t, x, op, name);
  const int64_t xd = x.dim();
  bool ok = t.dim() <= xd;
  for (int64_t j = 0; ok && j < t.dim(); ++j) {
    const int64_t ts = t.size(j);
    ok = ts == 1 || ts == x.size(j + xd - t.dim());
  }
  TORCH_CHECK(ok, "ltx_kernels.", op, ": ", name, " must broadcast to x's shape ",
              shape_str(x.sizes()), ", got ", shape_str(t.sizes()));
  at::Tensor u = t.dim() == 0 ? t.reshape({1}) : t;
  const int64_t cols = x.size(-1);
  if (u.size(-1) != cols) {  // broadcast over the last dim: materialise it
    std::vector<int64_t> sizes(u.sizes().begin(), u.sizes().end());
    sizes.back() = cols;
    u = u.expand(sizes).contiguous();
  } else if (cols > 1 && u.stride(-1) != 1) {
    u = u.contiguous();
  }
  return u;
}

namespace detail {

// x's leading dims with x size > 1, each with every operand's element stride
// (0 where the operand broadcasts), merged where all operands flatten.
struct RowDim {
  int64_t size;
  int64_t stride[kMaxRowOperands];
};

inline std::vector<RowDim> row_dims(const at::Tensor& x, at::Tensor* const* operands, int n) {
  std::vector<RowDim> dims;  // outermost first
  const int64_t lead = x.dim() - 1;
  for (int64_t i = 0; i < lead; ++i) {
    if (x.size(i) == 1) continue;
    RowDim d{x.size(i), {}};
    for (int k = 0; k < n; ++k) {
      const at::Tensor& t = *operands[k];
      const int64_t j = i - (x.dim() - t.dim());
      d.stride[k] = (j >= 0 && t.size(j) != 1) ? t.stride(j) : 0;
    }
    if (!dims.empty()) {
      RowDim& outer = dims.back();
      bool merge = true;
      for (int k = 0; k < n; ++k) merge = merge && outer.stride[k] == d.stride[k] * d.size;
      if (merge) {
        outer.size *= d.size;
        for (int k = 0; k < n; ++k) outer.stride[k] = d.stride[k];
        continue;
      }
    }
    dims.push_back(d);
  }
  return dims;
}

}  // namespace detail

// The row space of x (rows = numel / size(-1)) for n operands already passed
// through broadcast_operand. May replace operands with copies (see the top).
inline RowSpace make_row_space(const at::Tensor& x, at::Tensor* const* operands, int n) {
  TORCH_CHECK(n >= 1 && n <= kMaxRowOperands, "ltx_kernels: internal error: operand count");
  std::vector<detail::RowDim> dims = detail::row_dims(x, operands, n);
  if (static_cast<int>(dims.size()) > kMaxRowDims) {
    for (int k = 0; k < n; ++k) *operands[k] = operands[k]->expand(x.sizes()).contiguous();
    dims = detail::row_dims(x, operands, n);
  }
  TORCH_CHECK(static_cast<int>(dims.size()) <= kMaxRowDims,
              "ltx_kernels: internal error: row space has ", dims.size(), " dims");
  RowSpace rs;
  rs.ndim = static_cast<int>(dims.size());
  const int first = kMaxRowDims - rs.ndim;
  for (int d = 0; d < rs.ndim; ++d) {
    rs.size[first + d] = dims[d].size;
    for (int k = 0; k < n; ++k) rs.stride[k][first + d] = dims[d].stride[k];
  }
  if (row_count(x) <= INT32_MAX) rs.use_rows32();
  return rs;
}

}  // namespace ltx
