// Checks for caller-provided outputs: device, dtype, shape, and aliasing.
#pragma once

#include <ATen/MemoryOverlap.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "ops/rows.h"

namespace ltx {

inline void check_device(const char* op, const char* name, const at::Tensor& t,
                         const char* ref_name, const at::Tensor& ref) {
  TORCH_CHECK(t.device() == ref.device(), "ltx_kernels.", op, ": ", name, " is on ", t.device(),
              " but ", ref_name, " is on ", ref.device(), "; all tensors must be on one device");
}

// `out` receives the result computed from `in`: same device, dtype and shape, no
// self-overlap, and either `in` itself (in place, same strides) or separate memory.
inline void check_out(const char* op, const char* name, const at::Tensor& out,
                      const char* in_name, const at::Tensor& in) {
  check_device(op, name, out, in_name, in);
  TORCH_CHECK(out.scalar_type() == in.scalar_type(), "ltx_kernels.", op, ": ", name,
              " must have ", in_name, "'s dtype ", in.scalar_type(), ", got ", out.scalar_type());
  TORCH_CHECK(out.sizes() == in.sizes(), "ltx_kernels.", op, ": ", name, " must have ", in_name,
              "'s shape ", shape_str(in.sizes()), ", got ", shape_str(out.sizes()));
  TORCH_CHECK(at::has_internal_overlap(out) != at::MemOverlap::Yes, "ltx_kernels.", op, ": ",
              name, " must not overlap itself (got strides ", shape_str(out.strides()),
              ", e.g. an expanded tensor)");
  const at::MemOverlapStatus s = at::get_overlap_status(out, in);
  TORCH_CHECK(s != at::MemOverlapStatus::Partial &&
                  (s != at::MemOverlapStatus::Full || out.strides() == in.strides()),
              "ltx_kernels.", op, ": ", name, " partially overlaps ", in_name, "; pass ", in_name,
              " itself (in place) or separate memory");
}

// Two tensors that must not share memory (an output and another op's input or output).
inline void check_disjoint(const char* op, const char* a_name, const at::Tensor& a,
                           const char* b_name, const at::Tensor& b) {
  const at::MemOverlapStatus s = at::get_overlap_status(a, b);
  TORCH_CHECK(s != at::MemOverlapStatus::Full && s != at::MemOverlapStatus::Partial,
              "ltx_kernels.", op, ": ", a_name, " overlaps ", b_name,
              "; outputs must not alias the other input or each other");
}

}  // namespace ltx
