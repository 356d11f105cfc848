// rope backward kernels on CUDA (stub, to be filled).
#include "../torch-ext/ops/rope_backward.h"
