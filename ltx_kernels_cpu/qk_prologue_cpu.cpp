// Fused q/k RMSNorm + interleaved RoPE on the CPU: one token row per task, q's row and
// k's row together, the cos/sin row read once for both. Cast points as the CUDA kernel
// (rmsnorm_rope_qk_launch in torch_binding.h). Built with -ffp-contract=off (build.toml):
// the rotation's products and sums must not become FMAs, as in eager PyTorch.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "../torch-ext/torch_binding.h"
#include "cpu_common.h"
#include "rms_backward_cpu.h"

namespace ltx {
namespace {

template <typename T, typename Tw>
struct Row {
  const T* in = nullptr;
  T* out = nullptr;
  const Tw* w = nullptr;
  int64_t rows = 0, in_stride = 0, out_stride = 0;
};

template <typename T, typename Tw>
Row<T, Tw> make_row(const at::Tensor& out, const at::Tensor& in,
                    const std::optional<at::Tensor>& w) {
  Row<T, Tw> r;
  r.in = in.const_data_ptr<T>();
  r.out = out.mutable_data_ptr<T>();
  r.w = w ? w->const_data_ptr<Tw>() : nullptr;
  r.rows = in.size(0);
  r.in_stride = in.stride(0);
  r.out_stride = out.stride(0);
  return r;
}

// torch.nn.RMSNorm of one row into `n` (Acc values already rounded to T).
template <typename T, typename Tw, typename Acc>
void normalise(const T* x, const Tw* w, int64_t d, Acc eps, Acc* n) {
  const Acc inv = Acc(1) / std::sqrt(cpu::sum_sq_acc<Acc>(x, d) / static_cast<Acc>(d) + eps);
  for (int64_t c = 0; c < d; ++c) {
    Acc v = static_cast<Acc>(x[c]) * inv;
    if (w) v = v * static_cast<Acc>(w[c]);
    n[c] = static_cast<Acc>(static_cast<T>(v));
  }
}

}  // namespace

void rmsnorm_rope_qk_launch(const at::Tensor& q_out2d, const at::Tensor& q2d,
                            const at::Tensor& k_out2d, const at::Tensor& k2d,
                            const std::optional<at::Tensor>& q_weight,
                            const std::optional<at::Tensor>& k_weight, const at::Tensor& cos,
                            const at::Tensor& sin, int64_t seq, double eps) {
  const int64_t d = q2d.size(1);
  const int64_t rows = std::max(q2d.size(0), k2d.size(0));
  if (rows == 0 || d == 0) return;
  const bool rope = cos.defined();
  const at::ScalarType w_dtype =
      q_weight ? q_weight->scalar_type() : (k_weight ? k_weight->scalar_type() : q2d.scalar_type());

  cpu::dispatch_float_or_double(q2d.scalar_type(), [&](auto x_tag) {
    using T = decltype(x_tag);
    cpu::dispatch_float_or_double(w_dtype, [&](auto w_tag) {
      using Tw = decltype(w_tag);
      if constexpr (std::is_same_v<Tw, T> || std::is_same_v<Tw, float>) {
        using Acc = cpu::acc_t<T>;  // also the tables' type: fp32, or double for float64 q
        const Acc eps_f = static_cast<Acc>(eps);
        const Row<T, Tw> sides[2] = {make_row<T, Tw>(q_out2d, q2d, q_weight),
                                     make_row<T, Tw>(k_out2d, k2d, k_weight)};
        const Acc* cb = rope ? cos.const_data_ptr<Acc>() : nullptr;
        const Acc* sb = rope ? sin.const_data_ptr<Acc>() : nullptr;
        const int64_t c_b = rope ? cos.stride(0) : 0, c_s = rope ? cos.stride(1) : 0;
        const int64_t s_b = rope ? sin.stride(0) : 0, s_s = rope ? sin.stride(1) : 0;
        const int sh = rope && cos.size(2) * 2 == d ? 1 : 0;  // pair tables: index j >> 1
        const int64_t grain = std::max<int64_t>(1, 16384 / d);
        at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
          std::vector<Acc> nq(d), nk(d);
          Acc* n[2] = {nq.data(), nk.data()};
          for (int64_t r = begin; r < end; ++r) {
            bool live[2];
            for (int i = 0; i < 2; ++i) {
              live[i] = r < sides[i].rows;
              if (live[i]) normalise(sides[i].in + r * sides[i].in_stride, sides[i].w, d, eps_f, n[i]);
            }
            if (!rope) {
              for (int i = 0; i < 2; ++i) {
                if (!live[i]) continue;
                T* o = sides[i].out + r * sides[i].out_stride;
                for (int64_t c = 0; c < d; ++c) o[c] = static_cast<T>(n[i][c]);
              }
              continue;
            }
            const Acc* c = cb + (r / seq) * c_b + (r % seq) * c_s;
            const Acc* s = sb + (r / seq) * s_b + (r % seq) * s_s;
            T* oq = sides[0].out + r * sides[0].out_stride;
            T* ok = sides[1].out + r * sides[1].out_stride;
            for (int64_t j = 0; j < d; j += 2) {
              const int64_t ta = j >> sh, tb = (j + 1) >> sh;
              const Acc c0 = c[ta], c1 = c[tb], s0 = s[ta], s1 = s[tb];
              const Acc q0 = nq[j], q1 = nq[j + 1], k0 = nk[j], k1 = nk[j + 1];
              oq[j] = static_cast<T>(q0 * c0 - q1 * s0);
              oq[j + 1] = static_cast<T>(q1 * c1 + q0 * s1);
              ok[j] = static_cast<T>(k0 * c0 - k1 * s0);
              ok[j + 1] = static_cast<T>(k1 * c1 + k0 * s1);
            }
          }
        });
      } else {
        TORCH_CHECK(false, "ltx_kernels.rmsnorm_rope_qk: weights must be float32 or q's dtype");
      }
    });
  });
}

}  // namespace ltx
