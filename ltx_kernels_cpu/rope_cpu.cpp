// Rotary embeddings on the CPU: one (batch, position) token per task, every head of
// both tensors per token, the same cast points as the CUDA kernel (rope_launch in
// torch_binding.h). Built with -ffp-contract=off (build.toml): a product followed by
// a sum must not become an FMA, or the result would differ from eager PyTorch.
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>

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
// sum round to T. Otherwise fp32 throughout and one rounding.
template <typename T, bool kStep>
inline float rnd(float v) {
  if constexpr (kStep) {
    return static_cast<float>(static_cast<T>(v));
  } else {
    return v;
  }
}

// a*c - b*s and a*c + b*s, each product rounded separately (never fused).
template <typename T, bool kStep>
inline T mul_sub(float a, float c, float b, float s) {
  const float p = rnd<T, kStep>(a * c);
  const float q = rnd<T, kStep>(b * s);
  return static_cast<T>(p - q);
}
template <typename T, bool kStep>
inline T mul_add(float a, float c, float b, float s) {
  const float p = rnd<T, kStep>(a * c);
  const float q = rnd<T, kStep>(b * s);
  return static_cast<T>(p + q);
}

}  // namespace

void rope_launch(const at::Tensor& out0, const at::Tensor& in0, const at::Tensor& out1,
                 const at::Tensor& in1, const at::Tensor& cos, const at::Tensor& sin,
                 RopeLayout layout) {
  const int64_t batch = in0.size(0), seq = in0.size(1), dim = in0.size(3);
  const int64_t tokens = batch * seq;
  if (tokens == 0 || dim == 0) return;
  const int64_t rdim = cos.size(2), half = rdim / 2;
  const int64_t heads = in0.size(2) + (in1.defined() ? in1.size(2) : 0);
  const bool interleaved = layout == RopeLayout::kInterleaved;

  cpu::dispatch_float(in0.scalar_type(), [&](auto x_tag) {
    using T = decltype(x_tag);
    cpu::dispatch_float(cos.scalar_type(), [&](auto c_tag) {
      using Tc = decltype(c_tag);
      if constexpr (std::is_same_v<Tc, T> || std::is_same_v<Tc, float>) {
        constexpr bool kStep = std::is_same_v<T, Tc> && !std::is_same_v<T, float>;
        const Side<T> sides[2] = {side<T>(out0, in0), side<T>(out1, in1)};
        const Tc* cbase = cos.const_data_ptr<Tc>();
        const Tc* sbase = sin.const_data_ptr<Tc>();
        const int64_t cb = cos.stride(0), cs = cos.stride(1);
        const int64_t sb = sin.stride(0), ss = sin.stride(1);
        const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, dim * heads));
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
                  for (int64_t i = 0; i < dim; i += 2) {
                    const float x0 = static_cast<float>(x[i]);
                    const float x1 = static_cast<float>(x[i + 1]);
                    o[i] = mul_sub<T, kStep>(x0, static_cast<float>(c[i]), x1,
                                             static_cast<float>(sn[i]));
                    o[i + 1] = mul_add<T, kStep>(x1, static_cast<float>(c[i + 1]), x0,
                                                 static_cast<float>(sn[i + 1]));
                  }
                } else {
                  for (int64_t i = 0; i < half; ++i) {
                    const float x1 = static_cast<float>(x[i]);
                    const float x2 = static_cast<float>(x[i + half]);
                    o[i] = mul_sub<T, kStep>(x1, static_cast<float>(c[i]), x2,
                                             static_cast<float>(sn[i]));
                    o[i + half] = mul_add<T, kStep>(x2, static_cast<float>(c[i + half]), x1,
                                                    static_cast<float>(sn[i + half]));
                  }
                  if (sd.copy_pass) std::copy(x + rdim, x + dim, o + rdim);
                }
              }
            }
          }
        });
      } else {
        TORCH_CHECK(false, "ltx_kernels.rope: tables must be float32 or the input dtype");
      }
    });
  });
}

}  // namespace ltx
