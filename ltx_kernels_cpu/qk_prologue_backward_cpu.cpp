// qk_prologue backward kernels on the CPU (stub, to be filled).
#include "../torch-ext/ops/qk_prologue_backward.h"
