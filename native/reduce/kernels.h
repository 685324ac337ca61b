// Internal interface between the per-ISA kernel translation units and the dispatcher.
// Not part of the public API: include reduce/reduce.h instead.
//
// This header must stay free of inline functions and templates that emit code: it is included by
// translation units compiled with AVX2/AVX-512 flags, and any out-of-line copy of an inline function
// made there could be picked by the linker for baseline callers (SIGILL on older CPUs).
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace shvd {
namespace reduce_detail {

// Every entry point assumes validated arguments: valid dtype and op values (Average is treated as
// Sum), count > 0, n >= 2 for reduce_many, and for divide_int an integer dtype and divisor != 0.
struct KernelTable {
  const char* name;
  void (*reduce_into)(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);
  void (*reduce_many)(void* out, const void* const* inputs, size_t n, size_t count, DType dtype,
                      ReduceOp op);
  void (*scale)(void* buf, size_t count, DType dtype, double factor);
  void (*divide_int)(void* buf, size_t count, DType dtype, int64_t divisor);
  // Raw conversions (exposed for the self-test). The 16-bit sides need no alignment.
  void (*f16_to_f32)(const void* src, float* dst, size_t count);
  void (*f32_to_f16)(const float* src, void* dst, size_t count);
  void (*bf16_to_f32)(const void* src, float* dst, size_t count);
  void (*f32_to_bf16)(const float* src, void* dst, size_t count);
};

namespace baseline { const KernelTable* kernel_table(); }
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX2)
namespace avx2 { const KernelTable* kernel_table(); }
#endif
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX512)
namespace avx512 { const KernelTable* kernel_table(); }
#endif

// For tests and benchmarks: the table of a named ISA if it is compiled in and this CPU runs it,
// else nullptr.
const KernelTable* table_for_isa(const char* name);
// Make the public functions use the named ISA from now on (process-wide). Returns false, changing
// nothing, if table_for_isa(name) is nullptr.
bool force_isa(const char* name);

}  // namespace reduce_detail
}  // namespace shvd
