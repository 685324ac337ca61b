// Public entry points of the reduction kernels: argument checks, then the per-ISA kernel table
// chosen once at run time.
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/error.h"
#include "reduce/kernels.h"
#include "reduce/reduce.h"

namespace shvd {
namespace reduce_detail {
namespace {

// libgcc/compiler-rt only report AVX features when the OS saves the YMM/ZMM state (XCR0).
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX2)
bool cpu_runs_avx2() {
  __builtin_cpu_init();
  bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#if !defined(__clang__)
  ok = ok && __builtin_cpu_supports("f16c");  // every AVX2 CPU has it; clang lacks the name
#endif
  return ok;
}
#endif

#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX512)
bool cpu_runs_avx512() {
  __builtin_cpu_init();
  bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
            __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#if !defined(__clang__)
  ok = ok && __builtin_cpu_supports("f16c");
#endif
  return ok;
}
#endif

// Best first.
const KernelTable* best_table() {
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX512)
  if (cpu_runs_avx512()) return avx512::kernel_table();
#endif
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX2)
  if (cpu_runs_avx2()) return avx2::kernel_table();
#endif
  return baseline::kernel_table();
}

int isa_level(const char* name) {
  if (std::strcmp(name, "baseline") == 0) return 0;
  if (std::strcmp(name, "avx2") == 0) return 1;
  if (std::strcmp(name, "avx512") == 0) return 2;
  return -1;
}

std::atomic<const KernelTable*> g_table{nullptr};

const KernelTable* table() {
  const KernelTable* t = g_table.load(std::memory_order_acquire);
  if (t != nullptr) return t;
  const KernelTable* expected = nullptr;
  t = best_table();
  if (!g_table.compare_exchange_strong(expected, t, std::memory_order_acq_rel)) t = expected;
  return t;
}

}  // namespace

const KernelTable* table_for_isa(const char* name) {
  if (name == nullptr) return nullptr;
  switch (isa_level(name)) {
    case 0: return baseline::kernel_table();
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX2)
    case 1: return cpu_runs_avx2() ? avx2::kernel_table() : nullptr;
#endif
#if defined(__x86_64__) && !defined(SHVD_REDUCE_NO_AVX512)
    case 2: return cpu_runs_avx512() ? avx512::kernel_table() : nullptr;
#endif
    default: return nullptr;
  }
}

bool force_isa(const char* name) {
  const KernelTable* t = table_for_isa(name);
  if (t == nullptr) return false;
  g_table.store(t, std::memory_order_release);
  return true;
}

}  // namespace reduce_detail

bool limit_reduce_isa(const char* name) {
  using namespace reduce_detail;
  const int cap = name == nullptr ? -1 : isa_level(name);
  if (cap < 0) fail(ErrorKind::kInvalidArgument, std::string("unknown instruction set '") + (name ? name : "") +
                                                   "'; use baseline, avx2 or avx512");
  if (cap >= isa_level(table()->name)) return false;
  return force_isa(name);
}

namespace {

void check_dtype(DType t, const char* fn) {
  const int v = static_cast<int>(t);
  if (v < 0 || v >= kNumDTypes) fail(ErrorKind::kInvalidArgument, std::string(fn) + ": invalid dtype " + std::to_string(v));
}

void check_op(ReduceOp op, const char* fn) {
  const int v = static_cast<int>(op);
  if (v < 0 || v >= kNumReduceOps) fail(ErrorKind::kInvalidArgument, std::string(fn) + ": invalid reduce op " + std::to_string(v));
}

ReduceOp kernel_op(ReduceOp op) { return op == ReduceOp::kAverage ? ReduceOp::kSum : op; }

}  // namespace

void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op) {
  check_dtype(dtype, "reduce_into");
  check_op(op, "reduce_into");
  if (count == 0) return;
  reduce_detail::table()->reduce_into(out, a, b, count, dtype, kernel_op(op));
}

void reduce_inplace(void* dst, const void* src, size_t count, DType dtype, ReduceOp op) {
  check_dtype(dtype, "reduce_inplace");
  check_op(op, "reduce_inplace");
  if (count == 0) return;
  reduce_detail::table()->reduce_into(dst, dst, src, count, dtype, kernel_op(op));
}

void reduce_many(void* out, const void* const* inputs, size_t n, size_t count, DType dtype, ReduceOp op) {
  check_dtype(dtype, "reduce_many");
  check_op(op, "reduce_many");
  if (n == 0) fail(ErrorKind::kInvalidArgument, "reduce_many: no inputs");
  if (count == 0) return;
  if (n == 1) {
    if (out != inputs[0]) std::memmove(out, inputs[0], count * dtype_size(dtype));
    return;
  }
  // Two inputs: reduce_into already rounds float16/bfloat16 once, which is exactly the rule here.
  if (n == 2) {
    reduce_detail::table()->reduce_into(out, inputs[0], inputs[1], count, dtype, kernel_op(op));
    return;
  }
  reduce_detail::table()->reduce_many(out, inputs, n, count, dtype, kernel_op(op));
}

void scale(void* buf, size_t count, DType dtype, double factor) {
  check_dtype(dtype, "scale");
  if (count == 0 || factor == 1.0) return;
  reduce_detail::table()->scale(buf, count, dtype, factor);
}

void divide(void* buf, size_t count, DType dtype, int64_t divisor) {
  check_dtype(dtype, "divide");
  if (!dtype_is_integer(dtype)) {
    scale(buf, count, dtype, 1.0 / static_cast<double>(divisor));
    return;
  }
  if (divisor == 0) fail(ErrorKind::kInvalidArgument, "divide: integer division by zero");
  if (count == 0 || divisor == 1) return;
  reduce_detail::table()->divide_int(buf, count, dtype, divisor);
}

Finish finish_for(DType dtype, ReduceOp op, int world_size, double postscale) {
  Finish finish;
  finish.factor = postscale;
  if (op == ReduceOp::kAverage) {
    if (dtype_is_integer(dtype) && postscale == 1.0) {
      finish.divisor = world_size;
    } else {
      finish.factor = postscale / double(world_size);
    }
  }
  return finish;
}

void apply_finish(void* buf, size_t count, DType dtype, const Finish& finish) {
  if (finish.divisor != 1) divide(buf, count, dtype, finish.divisor);
  if (finish.factor != 1.0) scale(buf, count, dtype, finish.factor);
}

const char* reduce_isa() { return reduce_detail::table()->name; }

}  // namespace shvd
