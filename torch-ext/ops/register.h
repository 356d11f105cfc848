// Registration helpers shared by torch_binding.cpp and the ops/*_backward.cpp files:
// each op gets this variant's kernel for its own device and, for the other device, a
// clear error naming the arguments and the variant (instead of the dispatcher's
// generic "no kernel" message).
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <torch/library.h>

#include <sstream>
#include <string>
#include <utility>

namespace ltx::reg {

#if defined(CUDA_KERNEL)
constexpr const char* kVariant = "CUDA";
constexpr c10::DeviceType kOtherDevice = c10::DeviceType::CPU;
#elif defined(CPU_KERNEL)
constexpr const char* kVariant = "CPU";
constexpr c10::DeviceType kOtherDevice = c10::DeviceType::CUDA;
#else
#error "define CUDA_KERNEL or CPU_KERNEL"
#endif

inline std::string public_name(const c10::OperatorHandle& op) {
  const std::string& full = op.schema().name();
  const auto sep = full.rfind("::");
  return "ltx_kernels." + (sep == std::string::npos ? full : full.substr(sep + 2));
}

// Registered for the device this variant has no kernels for. Names the
// offending argument(s) so the user sees what to move or which variant to load.
inline void wrong_device(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& args = op.schema().arguments();
  const size_t first = stack->size() - args.size();
  std::ostringstream where;
  bool mixed = false;
  c10::optional<c10::Device> seen;
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& v = (*stack)[first + i];
    if (!v.isTensor()) continue;
    const c10::Device d = v.toTensor().device();
    if (seen && *seen != d) mixed = true;
    if (!seen) seen = d;
    where << (where.tellp() > 0 ? ", " : "") << args[i].name() << " on " << d;
  }
  TORCH_CHECK(!mixed, public_name(op), ": tensors on different devices (", where.str(),
              "); all tensors must be on one device");
  TORCH_CHECK(false, public_name(op), ": ", where.str(), ", but this build of ltx-kernels is the ",
              kVariant, " variant and has no kernels for that device. Move the tensors, or load ",
              "the matching variant (kernels.get_kernel(..., backend=...)).");
}

#if defined(CUDA_KERNEL)
constexpr c10::DeviceType kDevice = c10::DeviceType::CUDA;
#else
constexpr c10::DeviceType kDevice = c10::DeviceType::CPU;
#endif

// Registers this variant's kernel for its device, and wrong_device for the other.
template <typename Fn>
void impl(torch::Library& ops, const char* name, Fn&& fn) {
  ops.impl(name, kDevice, std::forward<Fn>(fn));
  ops.impl(name, kOtherDevice, torch::CppFunction::makeFromBoxedFunction<&wrong_device>());
}

}  // namespace ltx::reg
