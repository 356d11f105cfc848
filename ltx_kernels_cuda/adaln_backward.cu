// adaln backward kernels on CUDA (stub, to be filled).
#include "../torch-ext/ops/adaln_backward.h"
