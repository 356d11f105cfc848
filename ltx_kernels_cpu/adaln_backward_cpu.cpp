// adaln backward kernels on the CPU (stub, to be filled).
#include "../torch-ext/ops/adaln_backward.h"
