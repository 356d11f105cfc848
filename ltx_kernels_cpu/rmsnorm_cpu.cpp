// RMSNorm on the CPU: one row per task, fp32 accumulation, the same cast
// points as the CUDA kernel (see rms_norm_launch in torch_binding.h).
#include <ATen/Parallel.h>

#include <cmath>
#include <type_traits>

#include "../torch-ext/torch_binding.h"
#include "cpu_common.h"
#include "rms_backward_cpu.h"

namespace ltx {

void rms_norm_launch(const at::Tensor& out2d, const at::Tensor& x2d,
                     const std::optional<at::Tensor>& weight, double eps,
                     at::ScalarType mid_dtype) {
  const int64_t rows = x2d.size(0);
  const int64_t cols = x2d.size(1);
  const int64_t x_stride = x2d.stride(0);
  const int64_t out_stride = out2d.stride(0);
  const at::ScalarType w_dtype = weight ? weight->scalar_type() : x2d.scalar_type();

  cpu::dispatch_float_or_double(x2d.scalar_type(), [&](auto x_tag) {
    using Tx = decltype(x_tag);
    cpu::dispatch_float_or_double(w_dtype, [&](auto w_tag) {
      using Tw = decltype(w_tag);
      cpu::dispatch_float_or_double(out2d.scalar_type(), [&](auto out_tag) {
        using To = decltype(out_tag);
        using Acc = cpu::acc_t<Tx>;  // float64 (CPU only, for gradcheck): double throughout
        const Acc eps_a = static_cast<Acc>(eps);
        const Tx* x = x2d.const_data_ptr<Tx>();
        const Tw* w = weight ? weight->const_data_ptr<Tw>() : nullptr;
        To* out = out2d.mutable_data_ptr<To>();
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(cols, 1));
        at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const Tx* xr = x + r * x_stride;
            To* orow = out + r * out_stride;
            const Acc mean = cpu::sum_sq_acc<Acc>(xr, cols) / static_cast<Acc>(cols);
            const Acc inv = Acc(1) / std::sqrt(mean + eps_a);
            for (int64_t c = 0; c < cols; ++c) {
              Acc v = static_cast<Acc>(xr[c]) * inv;
              // With float64 the binding allows only float64 weights: no rounding point.
              if constexpr (std::is_same_v<Acc, float>) v = cpu::round_through(mid_dtype, v);
              if (w) v *= static_cast<Acc>(w[c]);
              orow[c] = static_cast<To>(v);
            }
          }
        });
      });
    });
  });
}

}  // namespace ltx
