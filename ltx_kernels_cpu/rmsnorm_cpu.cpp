// RMSNorm on the CPU: one row per task, fp32 accumulation, the same cast
// points as the CUDA kernel (see rms_norm_launch in torch_binding.h).
#include <ATen/Parallel.h>

#include <cmath>

#include "../torch-ext/torch_binding.h"
#include "cpu_common.h"

namespace ltx {

void rms_norm_launch(const at::Tensor& out2d, const at::Tensor& x2d,
                     const std::optional<at::Tensor>& weight, double eps,
                     at::ScalarType mid_dtype) {
  const int64_t rows = x2d.size(0);
  const int64_t cols = x2d.size(1);
  const int64_t x_stride = x2d.stride(0);
  const int64_t out_stride = out2d.stride(0);
  const float eps_f = static_cast<float>(eps);
  const at::ScalarType w_dtype = weight ? weight->scalar_type() : x2d.scalar_type();

  cpu::dispatch_float(x2d.scalar_type(), [&](auto x_tag) {
    using Tx = decltype(x_tag);
    cpu::dispatch_float(w_dtype, [&](auto w_tag) {
      using Tw = decltype(w_tag);
      cpu::dispatch_float(out2d.scalar_type(), [&](auto out_tag) {
        using To = decltype(out_tag);
        const Tx* x = x2d.const_data_ptr<Tx>();
        const Tw* w = weight ? weight->const_data_ptr<Tw>() : nullptr;
        To* out = out2d.mutable_data_ptr<To>();
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
        at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const Tx* xr = x + r * x_stride;
            To* orow = out + r * out_stride;
            const float mean = cpu::sum_of_squares(xr, cols) / static_cast<float>(cols);
            const float inv = 1.0f / std::sqrt(mean + eps_f);
            for (int64_t c = 0; c < cols; ++c) {
              float v = cpu::round_through(mid_dtype, static_cast<float>(xr[c]) * inv);
              if (w) v *= static_cast<float>(w[c]);
              orow[c] = static_cast<To>(v);
            }
          }
        });
      });
    });
  });
}

}  // namespace ltx
