// activation backward ops: schemas, argument checks, registration (stub, to be filled).
#include "ops/activation_backward.h"
#include "ops/backward_ops.h"
#include "ops/register.h"

namespace ltx {

void register_activation_backward(torch::Library& ops) { (void)ops; }

}  // namespace ltx
