// rope backward kernels on the CPU (stub, to be filled).
#include "../torch-ext/ops/rope_backward.h"
