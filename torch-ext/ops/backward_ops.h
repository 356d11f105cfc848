// The backward (training) ops of each family, defined and registered by its
// torch-ext/ops/<family>_backward.cpp, and the forward ops' Autograd kernels
// (ops/autograd.cpp); torch_binding.cpp calls these from its TORCH_LIBRARY block so every
// op stays in the one library of this build.
#pragma once

#include <torch/library.h>

namespace ltx {

void register_rms_norm_backward(torch::Library& ops);
void register_activation_backward(torch::Library& ops);
void register_rope_backward(torch::Library& ops);
void register_adaln_backward(torch::Library& ops);
void register_qk_prologue_backward(torch::Library& ops);

}  // namespace ltx

namespace ltx::autograd {

// The Autograd kernels of the differentiable forward ops (ops/autograd.cpp).
void register_autograd(torch::Library& ops);

}  // namespace ltx::autograd
