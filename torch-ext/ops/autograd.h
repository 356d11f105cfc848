// Helpers for the forward ops' autograd in C++ (ops/autograd.cpp: a torch::autograd::Function
// per differentiable op, registered for the Autograd key; the gradients are the family
// backward ops of ops/<family>_backward.cpp).
//
// Why C++ and not torch.library.register_autograd: a Python autograd kernel runs on every
// call of the op whose inputs carry the Autograd key, i.e. every call outside
// torch.inference_mode(), grad or no grad. On CI's CPU that was ~9 µs of the ~13.5 µs a
// tiny rms_norm call took (4.5 µs under inference_mode): the whole cost of a small-shape
// eager call on a GPU, where the kernel itself takes 2-3 µs (benchmarks/NOTES.md).
//
// The Functions call the ops through the dispatcher, never the C++ functions directly:
// under torch.compile the Autograd kernel runs on fake tensors, and only a dispatcher call
// reaches the fake kernels (torch-ext/ltx_kernels/*.py) and the tracer.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>

#define LTX_AUTOGRAD_STR_IMPL(A) #A
#define LTX_AUTOGRAD_STR(A) LTX_AUTOGRAD_STR_IMPL(A)

namespace ltx::autograd {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The op `name` of this build's library (TORCH_EXTENSION_NAME is its namespace), typed by
// the C++ function registered for it (Fn: a function type, e.g. decltype(ltx::rms_norm)).
// Call sites keep it in a function-local static: the lookup is a hash-map search.
template <typename Fn>
c10::TypedOperatorHandle<Fn> op(const char* name) {
  const std::string full = std::string(LTX_AUTOGRAD_STR(TORCH_EXTENSION_NAME)) + "::" + name;
  return c10::Dispatcher::singleton().findSchemaOrThrow(full.c_str(), "").typed<Fn>();
}

// Whether each of a forward's N tensor arguments needs a gradient. present[i]: argument i
// was a defined tensor (an absent optional one never needs a gradient). The context
// numbers its edges over the defined tensor arguments only, hence the mapping.
template <size_t N>
std::array<bool, N> needs_grad(const AutogradContext* ctx, const std::array<bool, N>& present) {
  std::array<bool, N> need{};
  size_t edge = 0;
  for (size_t i = 0; i < N; ++i) {
    if (present[i]) need[i] = ctx->needs_input_grad(edge++);
  }
  return need;
}

// An optional tensor argument from a saved variable (undefined: absent).
inline std::optional<at::Tensor> maybe(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// The forward op of Function F (F::kName, typed by F::Op), looked up once.
template <typename F>
const c10::TypedOperatorHandle<typename F::Op>& forward_op() {
  static const auto handle = op<typename F::Op>(F::kName);
  return handle;
}

// Runs F's forward op below autograd (Function::forward runs with grad mode off, but the
// op would re-enter its Autograd kernel without the guard).
template <typename F, typename... Args>
auto below_autograd(const Args&... args) {
  at::AutoDispatchBelowADInplaceOrView guard;
  return forward_op<F>().call(args...);
}

// Whether a call must record a graph: grad mode on and some tensor argument requiring
// grad. When not, the Autograd kernels call the op below autograd directly: a
// Function::apply that records nothing still builds its node and copies every input's
// metadata (~1.5-2 µs of host time per call on CI's CPU).
inline bool requires_grad(const at::Tensor& t) { return t.defined() && t.requires_grad(); }
inline bool requires_grad(const std::optional<at::Tensor>& t) { return t && requires_grad(*t); }
template <typename T>
bool requires_grad(const T&) {
  return false;
}

template <typename... Args>
bool graph_needed(const Args&... args) {
  return at::GradMode::is_enabled() && (requires_grad(args) || ...);
}

// The Autograd kernel of F's op: F::apply when a graph is needed, else the op itself.
// F::forward returns a Tensor, or a variable_list for ops with two outputs.
template <typename F, typename... Args>
auto run(const Args&... args) {
  using Result = decltype(below_autograd<F>(args...));
  if (!graph_needed(args...)) return below_autograd<F>(args...);
  auto outputs = F::apply(args...);
  if constexpr (std::is_same_v<decltype(outputs), variable_list>) {
    return Result{std::move(outputs[0]), std::move(outputs[1])};
  } else {
    return outputs;
  }
}

// Registers fn (TORCH_FN of a function that calls a Function's apply) as op `name`'s
// Autograd kernel, for every device.
template <typename F>
void impl_autograd(torch::Library& ops, const char* name, F&& fn) {
  ops.impl(name, torch::dispatch(c10::DispatchKey::Autograd, std::forward<F>(fn)));
}

}  // namespace ltx::autograd
