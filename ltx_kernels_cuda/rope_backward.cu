// rope backward on CUDA: the transposed rotation of the forward kernel
// (rope.cu, inverse = true); see rope_backward.h for the math.
#include "../torch-ext/ops/rope_backward.h"

namespace ltx {

void rope_backward_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                          const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                          RopeLayout layout) {
  rope_rotate_launch(out0, in0, out1, in1, cos, sin, layout, /*inverse=*/true);
}

}  // namespace ltx
