// adaln backward ops: schemas, argument checks, registration (stub, to be filled).
#include "ops/adaln_backward.h"
#include "ops/backward_ops.h"
#include "ops/register.h"

namespace ltx {

void register_adaln_backward(torch::Library& ops) { (void)ops; }

}  // namespace ltx
