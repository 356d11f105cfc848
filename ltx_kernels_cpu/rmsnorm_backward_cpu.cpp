// rms_norm backward on the CPU: one row per task (rms_backward_cpu.h does the row math and
// the deterministic weight-grad reduction).
#include "../torch-ext/ops/rms_norm_backward.h"

#include "cpu_common.h"
#include "rms_backward_cpu.h"

namespace ltx {

void rms_norm_backward_launch(const at::Tensor& dx2d, const at::Tensor& g2d,
                              const at::Tensor& x2d, const std::optional<at::Tensor>& weight,
                              double eps, const at::Tensor& dw) {
  const int64_t rows = x2d.size(0);
  const int64_t d = x2d.size(1);
  if (rows == 0 || d == 0) return;
  const at::ScalarType w_dtype = weight ? weight->scalar_type() : x2d.scalar_type();
  cpu::dispatch_float_or_double(x2d.scalar_type(), [&](auto x_tag) {
    using T = decltype(x_tag);
    using Acc = cpu::acc_t<T>;
    cpu::dispatch_float_or_double(g2d.scalar_type(), [&](auto g_tag) {
      using Tg = decltype(g_tag);
      cpu::dispatch_float_or_double(w_dtype, [&](auto w_tag) {
        using Tw = decltype(w_tag);
        const T* x = x2d.const_data_ptr<T>();
        const Tg* g = g2d.const_data_ptr<Tg>();
        const Tw* w = weight ? weight->const_data_ptr<Tw>() : nullptr;
        T* dx = dx2d.mutable_data_ptr<T>();
        const int64_t xs = x2d.stride(0), gs = g2d.stride(0), ds = dx2d.stride(0);
        Acc* const dws[2] = {dw.defined() ? dw.mutable_data_ptr<Acc>() : nullptr, nullptr};
        const Acc eps_a = static_cast<Acc>(eps);
        const int64_t grain = std::max<int64_t>(1, 16384 / d);
        cpu::rows_with_weight_grads<Acc>(rows, d, grain, dws, 1, [&](int64_t r, Acc* const* p) {
          cpu::rms_backward_row<Acc>(x + r * xs, g + r * gs, w, d, eps_a, dx + r * ds, p[0]);
        });
      });
    });
  });
}

}  // namespace ltx
