// rms_norm backward kernels on the CPU (stub, to be filled).
#include "../torch-ext/ops/rms_norm_backward.h"
