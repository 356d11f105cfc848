// qk_prologue backward kernels on CUDA (stub, to be filled).
#include "../torch-ext/ops/qk_prologue_backward.h"
