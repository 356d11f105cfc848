// GELU / GEGLU ops as registered in torch_binding.cpp.
#pragma once

#include <ATen/core/Tensor.h>

#include <string_view>

namespace ltx {

// gelu(Tensor x) -> Tensor                      erf GELU, fp32, rounded once
// gelu_tanh(Tensor x) -> Tensor                 tanh-approximate GELU, fp32, rounded once
at::Tensor gelu(const at::Tensor& x);
at::Tensor gelu_tanh(const at::Tensor& x);

// gelu_out(Tensor! out, Tensor x) -> ()         out may be x itself (in place)
// gelu_tanh_out(Tensor! out, Tensor x) -> ()
void gelu_out(const at::Tensor& out, const at::Tensor& x);
void gelu_tanh_out(const at::Tensor& out, const at::Tensor& x);

// geglu(Tensor x, str approximate="none", bool gate_first=False) -> Tensor
// geglu_out(Tensor! out, Tensor x, str approximate="none", bool gate_first=False) -> ()
// x: [..., 2d]; out: [..., d]. See geglu_launch in torch_binding.h for the math.
at::Tensor geglu(const at::Tensor& x, std::string_view approximate, bool gate_first);
void geglu_out(const at::Tensor& out, const at::Tensor& x, std::string_view approximate,
               bool gate_first);

}  // namespace ltx
