// AVX2 kernels. Compiled with -mavx2 -mfma -mf16c (see CMakeLists.txt); only called on CPUs that
// report those features.
#if !defined(__AVX2__) || !defined(__F16C__)
#error "kernels_avx2.cc must be compiled with -mavx2 -mfma -mf16c"
#endif
#define SHVD_ISA_NS avx2
#include "reduce/kernels_impl.h"
