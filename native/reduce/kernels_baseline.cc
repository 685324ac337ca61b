// Baseline kernels: the compiler's default target (SSE2 on x86-64, NEON on AArch64...).
#define SHVD_ISA_NS baseline
#include "reduce/kernels_impl.h"
