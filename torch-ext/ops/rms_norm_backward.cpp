// rms_norm backward ops: schemas, argument checks, registration (stub, to be filled).
#include "ops/rms_norm_backward.h"
#include "ops/backward_ops.h"
#include "ops/register.h"

namespace ltx {

void register_rms_norm_backward(torch::Library& ops) { (void)ops; }

}  // namespace ltx
