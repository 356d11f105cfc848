// Argument checks and the 2-D "row view" every op works on.
//
// All ops here act on the last dim of their inputs. The kernels take a
// [rows, cols] view whose last dim is contiguous and whose rows are evenly
// strided; that covers contiguous tensors and slices of fused projections
// (q = qkv[..., :D]) without a copy. Anything else is copied once here.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <optional>
#include <sstream>
#include <string>

namespace ltx {

inline bool is_float_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

inline void check_float_dtype(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(is_float_dtype(t.scalar_type()), "ltx_kernels.", op, ": ", name,
              " must be float32, float16 or bfloat16, got ", t.scalar_type());
}

// Training ops also accept float64 on the CPU (torch.autograd.gradcheck runs there in
// float64); the CUDA kernels are float32/float16/bfloat16 only.
inline void check_float_dtype_or_cpu_double(const at::Tensor& t, const char* op, const char* name) {
  if (t.scalar_type() == at::kDouble) {
    TORCH_CHECK(t.device().is_cpu(), "ltx_kernels.", op, ": ", name,
                " is float64 on ", t.device(), "; float64 is supported on the CPU only "
                "(for gradcheck), use float32, float16 or bfloat16 on GPUs");
    return;
  }
  TORCH_CHECK(is_float_dtype(t.scalar_type()), "ltx_kernels.", op, ": ", name,
              " must be float32, float16 or bfloat16 (or float64 on the CPU), got ", t.scalar_type());
}

inline void check_same_device(const at::Tensor& t, const at::Tensor& x, const char* op,
                              const char* name) {
  TORCH_CHECK(t.device() == x.device(), "ltx_kernels.", op, ": ", name, " is on ", t.device(),
              " but x is on ", x.device(), "; all tensors must be on one device");
}

inline void check_eps(double eps, const char* op) {
  TORCH_CHECK(std::isfinite(eps) && eps >= 0.0, "ltx_kernels.", op,
              ": eps must be a finite number >= 0, got ", eps);
}

inline std::string shape_str(at::IntArrayRef s) {
  std::ostringstream o;
  o << s;
  return o.str();
}

// Row stride of t if its leading dims collapse into one evenly strided row dim
// and its last dim is contiguous; nullopt otherwise. Size-1 dims never matter.
inline std::optional<int64_t> collapsed_row_stride(const at::Tensor& t) {
  const int64_t cols = t.size(-1);
  if (cols > 1 && t.stride(-1) != 1) return std::nullopt;
  std::optional<int64_t> row_stride;
  int64_t outer_needed = 0;  // the stride the next outer non-trivial dim must have
  for (int64_t d = t.dim() - 2; d >= 0; --d) {
    const int64_t size = t.size(d);
    const int64_t stride = t.stride(d);
    if (size == 1) continue;
    if (!row_stride) {
      row_stride = stride;
    } else if (stride != outer_needed) {
      return std::nullopt;
    }
    outer_needed = stride * size;
  }
  return row_stride ? *row_stride : cols;
}

inline int64_t row_count(const at::Tensor& t) {
  return t.size(-1) == 0 ? 0 : t.numel() / t.size(-1);
}

// A [rows, cols] view of t sharing its storage; copies t first when its layout
// cannot be expressed as evenly strided rows.
inline at::Tensor as_rows(const at::Tensor& t) {
  std::optional<int64_t> rs = collapsed_row_stride(t);
  const at::Tensor src = rs ? t : t.contiguous();
  const int64_t stride = rs ? *rs : src.size(-1);
  return src.as_strided({row_count(src), src.size(-1)}, {stride, 1});
}

// Outputs must be writable as rows without aliasing one another.
inline at::Tensor as_output_rows(const at::Tensor& out, const char* op) {
  std::optional<int64_t> rs = collapsed_row_stride(out);
  const int64_t rows = row_count(out);
  TORCH_CHECK(rs && (rows <= 1 || *rs >= out.size(-1)), "ltx_kernels.", op,
              ": out must have a contiguous last dim and non-overlapping, evenly strided rows"
              " (got strides ",
              shape_str(out.strides()), " for shape ", shape_str(out.sizes()), ")");
  return out.as_strided({rows, out.size(-1)}, {*rs, 1});
}

}  // namespace ltx
