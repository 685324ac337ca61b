// AVX-512 kernels. Compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c -mfma (see
// CMakeLists.txt); only called on CPUs that report those features.
#if !defined(__AVX512F__) || !defined(__AVX512BW__) || !defined(__AVX512VL__) || !defined(__AVX512DQ__) || \
    !defined(__F16C__)
#error "kernels_avx512.cc must be compiled with -mavx512f -mavx512bw -mavx512vl -mavx512dq -mf16c -mfma"
#endif
#define SHVD_ISA_NS avx512
#include "reduce/kernels_impl.h"
