// adaln backward: op declarations and the backend launchers (stub, to be filled).
#pragma once

#include <ATen/core/Tensor.h>

namespace ltx {}  // namespace ltx
