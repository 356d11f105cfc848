// Rotary embeddings on the CPU: one (batch, position) token per task, every head of
// both tensors per token, the same cast points as the CUDA kernel (rope_launch in
// torch_binding.h). Built with -ffp-contract=off (build.toml): a product followed by
// a sum must not become an FMA, or the result would differ from eager PyTorch.
// Also the transposed rotation for the backward (rope_rotate_launch in
// rope_backward.h), and float64 (gradcheck), computed in double.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "../torch-ext/ops/rope_backward.h"
#include "../torch-ext/torch_binding.h"
#include "cpu_common.h"

namespace ltx {
namespace {

template <typename T>
struct Side {
  const T* in = nullptr;
  T* out = nullptr;
  int64_t heads = 0;
  int64_t in_b = 0, in_s = 0, in_h = 0;
  int64_t out_b = 0, out_s = 0, out_h = 0;
  bool copy_pass = false;  // channels >= R must be copied (not in place)
};

template <typename T>
Side<T> side(const at::Tensor& out, const at::Tensor& in) {
  Side<T> s;
  if (!in.defined()) return s;
  s.in = in.const_data_ptr<T>();
  s.out = out.mutable_data_ptr<T>();
  s.heads = in.size(2);
  s.in_b = in.stride(0), s.in_s = in.stride(1), s.in_h = in.stride(2);
  s.out_b = out.stride(0), s.out_s = out.stride(1), s.out_h = out.stride(2);
  s.copy_pass = !(static_cast<const void*>(s.in) == static_cast<const void*>(s.out) &&
                  in.strides() == out.strides());
  return s;
}

// Step-rounded (tables in T, like eager half-precision PyTorch): each product and the
// sum round to T. Otherwise A (fp32, or double for double) throughout and one rounding.
template <typename T, bool kStep, typename A>
inline A rnd(A v) {
  if constexpr (kStep) {
    return static_cast<A>(static_cast<T>(v));
  } else {
    return v;
  }
}

// a*c - b*s and a*c + b*s, each product rounded separately (never fused).
template <typename T, bool kStep, typename A>
inline T mul_sub(A a, A c, A b, A s) {
  const A p = rnd<T, kStep>(a * c);
  const A q = rnd<T, kStep>(b * s);
  return static_cast<T>(p - q);
}
template <typename T, bool kStep, typename A>
inline T mul_add(A a, A c, A b, A s) {
  const A p = rnd<T, kStep>(a * c);
  const A q = rnd<T, kStep>(b * s);
  return static_cast<T>(p + q);
}

// One pair (x_a, x_b) with tables (c_a, s_a), (c_b, s_b) into (o_a, o_b).
//   forward:  o_a = x_a c_a - x_b s_a,  o_b = x_b c_b + x_a s_b
//   inverse:  o_a = x_a c_a + x_b s_b,  o_b = x_b c_b - x_a s_a   (the transpose)
template <typename T, bool kStep, bool kInverse, typename A>
inline void rotate_pair(A xa, A xb, A ca, A sa, A cb, A sb, T* oa, T* ob) {
  if constexpr (kInverse) {
    *oa = mul_add<T, false>(xa, ca, xb, sb);
    *ob = mul_sub<T, false>(xb, cb, xa, sa);
  } else {
    *oa = mul_sub<T, kStep>(xa, ca, xb, sa);
    *ob = mul_add<T, kStep>(xb, cb, xa, sb);
  }
}

template <typename T, typename Tc, bool kInverse>
void run(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
         const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin, bool interleaved) {
  using A = cpu::acc_t<T>;
  // Eager's per-step rounding only exists for half tables applied to half inputs.
  constexpr bool kStep = std::is_same_v<T, Tc> && !std::is_same_v<T, float> &&
                         !std::is_same_v<T, double>;
  const int64_t seq = in0.size(1), dim = in0.size(3);
  const int64_t tokens = in0.size(0) * seq;
  const int64_t rdim = cos.size(2), half = rdim / 2;
  const int64_t heads = in0.size(2) + (in1.defined() ? in1.size(2) : 0);
  const Side<T> sides[2] = {side<T>(out0, in0), side<T>(out1, in1)};
  const Tc* cbase = cos.const_data_ptr<Tc>();
  const Tc* sbase = sin.const_data_ptr<Tc>();
  const int64_t cb = cos.stride(0), cs = cos.stride(1);
  const int64_t sb = sin.stride(0), ss = sin.stride(1);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, dim * heads));
  auto f = [](auto v) { return static_cast<A>(v); };
  at::parallel_for(0, tokens, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / seq, s = t % seq;
      const Tc* c = cbase + b * cb + s * cs;
      const Tc* sn = sbase + b * sb + s * ss;
      for (const Side<T>& sd : sides) {
        for (int64_t h = 0; h < sd.heads; ++h) {
          const T* x = sd.in + b * sd.in_b + s * sd.in_s + h * sd.in_h;
          T* o = sd.out + b * sd.out_b + s * sd.out_s + h * sd.out_h;
          if (interleaved) {
            // Pair tables (rdim == dim / 2): table index i >> 1 serves both channels.
            const int sh = rdim * 2 == dim ? 1 : 0;
            for (int64_t i = 0; i < dim; i += 2) {
              const int64_t ta = i >> sh, tb = (i + 1) >> sh;
              rotate_pair<T, kStep, kInverse>(f(x[i]), f(x[i + 1]), f(c[ta]), f(sn[ta]),
                                              f(c[tb]), f(sn[tb]), o + i, o + i + 1);
            }
          } else {
            for (int64_t i = 0; i < half; ++i) {
              const int64_t j = i + half;
              rotate_pair<T, kStep, kInverse>(f(x[i]), f(x[j]), f(c[i]), f(sn[i]), f(c[j]),
                                              f(sn[j]), o + i, o + j);
            }
            if (sd.copy_pass) std::copy(x + rdim, x + dim, o + rdim);
          }
        }
      }
    }
  });
}

}  // namespace

void rope_rotate_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                        const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                        RopeLayout layout, bool inverse) {
  const int64_t tokens = in0.size(0) * in0.size(1);
  if (tokens == 0 || in0.size(3) == 0) return;
  const bool interleaved = layout == RopeLayout::kInterleaved;
  cpu::dispatch_float_or_double(in0.scalar_type(), [&](auto x_tag) {
    using T = decltype(x_tag);
    cpu::dispatch_float_or_double(cos.scalar_type(), [&](auto c_tag) {
      using Tc = decltype(c_tag);
      if constexpr (std::is_same_v<Tc, T> || std::is_same_v<Tc, float>) {
        if (inverse) {
          run<T, Tc, true>(out0, in0, out1, in1, cos, sin, interleaved);
        } else {
          run<T, Tc, false>(out0, in0, out1, in1, cos, sin, interleaved);
        }
      } else {
        TORCH_CHECK(false, "ltx_kernels.rope: tables must be float32 or the input dtype");
      }
    });
  });
}

void rope_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                 const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                 RopeLayout layout) {
  rope_rotate_launch(out0, in0, out1, in1, cos, sin, layout, /*inverse=*/false);
}

}  // namespace ltx
