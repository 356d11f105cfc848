// qk_prologue backward ops: schemas, argument checks, registration (stub, to be filled).
#include "ops/qk_prologue_backward.h"
#include "ops/backward_ops.h"
#include "ops/register.h"

namespace ltx {

void register_qk_prologue_backward(torch::Library& ops) { (void)ops; }

}  // namespace ltx
