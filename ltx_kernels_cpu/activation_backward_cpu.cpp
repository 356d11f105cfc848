// activation backward kernels on the CPU (stub, to be filled).
#include "../torch-ext/ops/activation_backward.h"
