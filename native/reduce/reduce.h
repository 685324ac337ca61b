// Element-wise reduction kernels used by every collective algorithm.
//
// All functions pick a vectorised implementation (AVX-512, AVX2 or baseline) once, at run time, from
// the CPU's features; limit_reduce_isa() caps the choice (it can lower it, never raise it above what
// the CPU supports). Every ISA produces bit-identical results
// (NaNs included, see below), so ranks on different CPUs agree.
//
// Common rules:
// - count == 0 is always accepted and does nothing (pointers may then be null).
// - Pointers need no alignment at all, not even to the element size.
// - "May alias" means the very same address; partially overlapping buffers are not supported.
// - Integer Sum/Product wrap around (two's complement, like numpy); Min/Max on floats return NaN if
//   either operand is NaN (numpy's np.minimum/np.maximum; the first operand's NaN when both are).
// - float16/bfloat16 are computed in float32 and rounded back to nearest-even.
// - NaN bits are deterministic: a NaN produced by Sum/Product/scale/divide is the positive default
//   quiet NaN (float32 0x7fc00000, float64 0x7ff8000000000000, float16 0x7e00, bfloat16 0x7fc0);
//   Min/Max return the NaN operand itself (float16/bfloat16: quieted by the float32 round trip).
// - Invalid dtype/op values, n == 0 inputs for reduce_many and divisor == 0 for integer divide throw
//   shvd::Error with ErrorKind::kInvalidArgument.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/types.h"

namespace shvd {

// dst[i] = dst[i] (op) src[i]. Average behaves as Sum here (the division happens in divide/scale).
void reduce_inplace(void* dst, const void* src, size_t count, DType dtype, ReduceOp op);

// out[i] = a[i] (op) b[i]; out may alias a or b. Average behaves as Sum.
void reduce_into(void* out, const void* a, const void* b, size_t count, DType dtype, ReduceOp op);

// Reduce n inputs into out: out[i] = in[0][i] op in[1][i] op ... op in[n-1][i], combined in index
// order 0..n-1 so that every caller gets bit-identical results. float16/bfloat16 accumulate all n
// inputs in float32 and round once (so for n > 2 this is not the same as chained reduce_into).
// out may alias any input. n == 1 copies inputs[0] bit for bit. Average behaves as Sum.
void reduce_many(void* out, const void* const* inputs, size_t n, size_t count, DType dtype, ReduceOp op);

// buf[i] *= factor.
// - float32: x * float(factor); float64: x * factor; float16/bfloat16: float(x) * float(factor)
//   computed in float32 and rounded to nearest-even.
// - Integers: double(x) * factor truncated toward zero (as Horovod scales integers: 9 * 1.5 -> 13,
//   -9 * 1.5 -> -13), then SATURATED to the type's range (NaN becomes 0). Note int64 values beyond
//   2^53 lose precision in the double product.
// - factor == 1.0 leaves the buffer untouched (so int64 keeps full precision).
void scale(void* buf, size_t count, DType dtype, double factor);

// Average's final step.
// - Integers: buf[i] = buf[i] / divisor with C semantics (the quotient of the mathematical values,
//   truncated toward zero), then wrapped into the type (e.g. int64 MIN / -1 == MIN, uint8 200 / -1 == 56).
//   divisor == 0 throws.
// - Floats: scale(buf, count, dtype, 1.0 / divisor) (float16/bfloat16 via float32).
void divide(void* buf, size_t count, DType dtype, int64_t divisor);

// What ends a reduction once every rank's values are summed: Average's division and the postscale.
// It is element-wise, so each part of a result can be finished on its own (the ring finishes each
// piece of the chunk it completes as soon as it is reduced, while it is in cache) with the same bits
// as one pass over the whole.
struct Finish {
  int64_t divisor = 1;  // integer Average without a postscale: an exact integer division
  double factor = 1.0;  // otherwise 1/size and the postscale folded into one scale
  bool needed() const { return divisor != 1 || factor != 1.0; }
};
// Horovod's rule: Average folds 1/size into the postscale, and an integer scale truncates once
// (7 * (2.0 / 2) is 7, not (7 / 2) * 2); integers without a postscale divide exactly.
Finish finish_for(DType dtype, ReduceOp op, int world_size, double postscale);
void apply_finish(void* buf, size_t count, DType dtype, const Finish& finish);

// The instruction set in use: "avx512", "avx2" or "baseline".
const char* reduce_isa();

// Caps the instruction set at `name` ("baseline", "avx2" or "avx512"); returns true if that lowered it.
// Unknown names throw kInvalidArgument.
bool limit_reduce_isa(const char* name);

}  // namespace shvd
