// Row-wise RMSNorm backward shared by rmsnorm_backward.cu and qk_prologue_backward.cu (stub, to be filled).
#pragma once
