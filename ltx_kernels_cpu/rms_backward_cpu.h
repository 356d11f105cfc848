// Row-wise RMSNorm backward shared by the CPU rmsnorm and q/k prologue backward kernels (stub, to be filled).
#pragma once
