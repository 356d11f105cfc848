// activation backward kernels on CUDA (stub, to be filled).
#include "../torch-ext/ops/activation_backward.h"
