// Backward of the fused q/k RMSNorm + interleaved RoPE on the CPU: per token row, the
// grad goes back through the rotation (its transpose, with the same tables) into an Acc
// buffer, then through torch.nn.RMSNorm (rms_backward_cpu.h). q's row and k's row of a
// token are done together, as in the forward. Roundings of the forward are identity here.
#include "../torch-ext/ops/qk_prologue_backward.h"

#include <algorithm>
#include <vector>

#include "cpu_common.h"
#include "rms_backward_cpu.h"

namespace ltx {

void rmsnorm_rope_qk_backward_launch(const at::Tensor& dq2d, const at::Tensor& gq2d,
                                     const at::Tensor& q2d, const at::Tensor& dk2d,
                                     const at::Tensor& gk2d, const at::Tensor& k2d,
                                     const std::optional<at::Tensor>& q_weight,
                                     const std::optional<at::Tensor>& k_weight,
                                     const at::Tensor& cos, const at::Tensor& sin, int64_t seq,
                                     double eps, const at::Tensor& dqw, const at::Tensor& dkw) {
  const int64_t d = q2d.size(1);
  const int64_t rows = std::max(q2d.size(0), k2d.size(0));
  if (rows == 0 || d == 0) return;
  const bool rope = cos.defined();
  const at::ScalarType w_dtype =
      q_weight ? q_weight->scalar_type() : (k_weight ? k_weight->scalar_type() : q2d.scalar_type());
  cpu::dispatch_float_or_double(q2d.scalar_type(), [&](auto x_tag) {
    using T = decltype(x_tag);
    using Acc = cpu::acc_t<T>;  // also the tables' type (fp32; double for gradcheck)
    cpu::dispatch_float_or_double(gq2d.scalar_type(), [&](auto g_tag) {
      using Tg = decltype(g_tag);
      cpu::dispatch_float_or_double(w_dtype, [&](auto w_tag) {
        using Tw = decltype(w_tag);
        const at::Tensor* xs[2] = {&q2d, &k2d};
        const at::Tensor* gs[2] = {&gq2d, &gk2d};
        const at::Tensor* ds[2] = {&dq2d, &dk2d};
        const std::optional<at::Tensor>* ws[2] = {&q_weight, &k_weight};
        const T* x[2];
        const Tg* g[2];
        T* dx[2];
        const Tw* w[2];
        int64_t n[2], x_s[2], g_s[2], d_s[2];
        for (int i = 0; i < 2; ++i) {
          x[i] = xs[i]->const_data_ptr<T>();
          g[i] = gs[i]->const_data_ptr<Tg>();
          dx[i] = ds[i]->mutable_data_ptr<T>();
          w[i] = *ws[i] ? (*ws[i])->const_data_ptr<Tw>() : nullptr;
          n[i] = xs[i]->size(0);
          x_s[i] = xs[i]->stride(0);
          g_s[i] = gs[i]->stride(0);
          d_s[i] = ds[i]->stride(0);
        }
        const Acc* cb = rope ? cos.const_data_ptr<Acc>() : nullptr;
        const Acc* sb = rope ? sin.const_data_ptr<Acc>() : nullptr;
        const int64_t c_b = rope ? cos.stride(0) : 0, c_s = rope ? cos.stride(1) : 0;
        const int64_t s_b = rope ? sin.stride(0) : 0, s_s = rope ? sin.stride(1) : 0;
        Acc* const dws[2] = {dqw.defined() ? dqw.mutable_data_ptr<Acc>() : nullptr,
                             dkw.defined() ? dkw.mutable_data_ptr<Acc>() : nullptr};
        const Acc eps_a = static_cast<Acc>(eps);
        const int sh = rope && cos.size(2) * 2 == d ? 1 : 0;  // pair tables: index j >> 1
        const int64_t grain = std::max<int64_t>(1, 8192 / d);
        cpu::rows_with_weight_grads<Acc>(rows, d, grain, dws, 2, [&](int64_t r, Acc* const* p) {
          thread_local std::vector<Acc> buf;
          if (rope) buf.resize(static_cast<size_t>(d));
          for (int i = 0; i < 2; ++i) {
            if (r >= n[i]) continue;
            const Tg* gr = g[i] + r * g_s[i];
            if (!rope) {
              cpu::rms_backward_row<Acc>(x[i] + r * x_s[i], gr, w[i], d, eps_a,
                                         dx[i] + r * d_s[i], p[i]);
              continue;
            }
            // Transpose of out[2j] = n0 c0 - n1 s0, out[2j+1] = n1 c1 + n0 s1.
            const Acc* c = cb + (r / seq) * c_b + (r % seq) * c_s;
            const Acc* s = sb + (r / seq) * s_b + (r % seq) * s_s;
            for (int64_t j = 0; j < d; j += 2) {
              const int64_t ta = j >> sh, tb = (j + 1) >> sh;
              const Acc g0 = static_cast<Acc>(gr[j]), g1 = static_cast<Acc>(gr[j + 1]);
              buf[j] = g0 * c[ta] + g1 * s[tb];
              buf[j + 1] = g1 * c[tb] - g0 * s[ta];
            }
            cpu::rms_backward_row<Acc>(x[i] + r * x_s[i], buf.data(), w[i], d, eps_a,
                                       dx[i] + r * d_s[i], p[i]);
          }
        });
      });
    });
  });
}

}  // namespace ltx
