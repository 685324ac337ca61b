// Reduction kernel templates, compiled once per instruction set.
//
// Include this only from kernels_<isa>.cc, after defining SHVD_ISA_NS (the inner namespace, e.g.
// avx2). Each such translation unit is compiled with its own -m flags; the instruction set is
// picked up from the compiler's predefined macros (__AVX2__, __AVX512F__, __F16C__ ...).
//
// Rules that keep the per-ISA copies apart and the results identical everywhere:
// - Everything except kernel_table() lives in an anonymous namespace (internal linkage), so no
//   out-of-line copy compiled with wide-ISA flags can be shared with (and run by) baseline code.
// - No <cmath>/<algorithm> inline wrappers; only builtins, <cstring> and <type_traits>.
// - The build passes -ffp-contract=off: no a*b+c is fused into an FMA in one ISA and not another.
// - Loads and stores go through memcpy, so pointers need no alignment (GCC turns these into plain,
//   unaligned vector moves).
#ifndef SHVD_ISA_NS
#error "define SHVD_ISA_NS before including reduce/kernels_impl.h"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "common/types.h"
#include "reduce/kernels.h"

#if defined(__x86_64__) && (defined(__F16C__) || defined(__AVX512F__))
#include <immintrin.h>
#endif

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__F16C__)
#define SHVD_F16_HW 512
#elif defined(__AVX__) && defined(__F16C__)
#define SHVD_F16_HW 256
#else
#define SHVD_F16_HW 0
#endif

// "No loop-carried dependencies": lets the vectoriser skip its run-time overlap checks, which would
// otherwise send the common in-place case (out == a) down the scalar path. Element-wise kernels
// with out exactly equal to an input are safe under this promise.
#if defined(__clang__)
#define SHVD_IVDEP _Pragma("clang loop vectorize(assume_safety)")
#elif defined(__GNUC__)
#define SHVD_IVDEP _Pragma("GCC ivdep")
#else
#define SHVD_IVDEP
#endif

namespace shvd {
namespace reduce_detail {
namespace SHVD_ISA_NS {
namespace {

constexpr size_t kBlockBytes = 8192;  // working block of the n-input reduction (stays in L1)
constexpr size_t kHalfBlock = 1024;   // elements per float32 staging block for float16/bfloat16

// ---------------------------------------------------------------------------------------------
// Unaligned element access.

template <class T>
inline T ld(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const unsigned char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}

template <class T>
inline void st(void* p, size_t i, T v) {
  std::memcpy(static_cast<unsigned char*>(p) + i * sizeof(T), &v, sizeof(T));
}

inline const void* at(const void* p, size_t byte_offset) {
  return static_cast<const unsigned char*>(p) + byte_offset;
}
inline void* at(void* p, size_t byte_offset) { return static_cast<unsigned char*>(p) + byte_offset; }

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// ---------------------------------------------------------------------------------------------
// Element operations.

template <class T>
using Unsigned = typename std::make_unsigned<T>::type;

// NaN results of arithmetic are replaced by the positive default quiet NaN. Which operand's payload
// x86 passes through depends on operand order, which the compiler picks freely for a commutative
// a + b (and differently per ISA and per loop); canonical NaNs keep every result bit-identical.
inline float canon(float r) { return r != r ? __builtin_nanf("") : r; }
inline double canon(double r) { return r != r ? __builtin_nan("") : r; }

template <ReduceOp OP, class T>
inline T apply(T a, T b) {
  if constexpr (OP == ReduceOp::kSum) {
    if constexpr (std::is_integral<T>::value) {
      // Wrap-around in the unsigned type: no signed-overflow UB. For 8/16-bit types the sum is
      // computed in int (it cannot overflow there) and truncated by the conversion (modular).
      return static_cast<T>(static_cast<Unsigned<T>>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b)));
    } else {
      return canon(a + b);
    }
  } else if constexpr (OP == ReduceOp::kProduct) {
    if constexpr (std::is_integral<T>::value) {
      // Types narrower than int would promote to (signed) int, where 65535 * 65535 overflows: multiply
      // them as unsigned int instead, and truncate (modular).
      using Wide = typename std::conditional<(sizeof(T) < sizeof(unsigned)), unsigned, Unsigned<T>>::type;
      return static_cast<T>(static_cast<Unsigned<T>>(static_cast<Wide>(static_cast<Unsigned<T>>(a)) *
                                                     static_cast<Wide>(static_cast<Unsigned<T>>(b))));
    } else {
      return canon(a * b);
    }
  } else if constexpr (OP == ReduceOp::kMin) {
    // Floats: a if a is NaN, b if b is NaN, ties (e.g. -0 vs +0) keep a. (The NaN operand itself is
    // returned, so the result's bits are deterministic without canon().)
    return (a <= b || a != a) ? a : b;
  } else {  // kMax
    return (a >= b || a != a) ? a : b;
  }
}

// out[i] = a[i] op b[i]; out may be a or b.
template <ReduceOp OP, class T>
void binop(void* out, const void* a, const void* b, size_t n) {
  SHVD_IVDEP
  for (size_t i = 0; i < n; ++i) st<T>(out, i, apply<OP, T>(ld<T>(a, i), ld<T>(b, i)));
}

// ---------------------------------------------------------------------------------------------
// float16 / bfloat16 <-> float32.
//
// Software versions (used by the baseline build, and for bfloat16 everywhere) are branch-free so
// they vectorise; they produce exactly what F16C's vcvtph2ps / vcvtps2ph (round to nearest even)
// produce, NaN payloads included: NaNs are quieted and keep their top payload bits.

// All-ones if c, else zero; and a bitwise select. Plain ?: chains here get turned into branches
// that the vectoriser then refuses ("control flow in loop").
inline uint32_t mask_if(bool c) { return 0u - static_cast<uint32_t>(c); }
inline uint32_t select(uint32_t mask, uint32_t if_set, uint32_t if_clear) {
  return (if_set & mask) | (if_clear & ~mask);
}

inline float f16_to_f32_sw(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;                                  // exponent and mantissa
  const uint32_t normal = (em << 13) + 0x38000000u;                 // rebias 15 -> 127
  const uint32_t special = (normal + 0x38000000u) | (mask_if(em > 0x7c00u) & 0x00400000u);  // inf/NaN (quieted)
  // Zero/subnormal: em * 2^-24, exact.
  const uint32_t sub = f32_bits(static_cast<float>(static_cast<int32_t>(em)) * 5.9604644775390625e-8f);
  uint32_t r = select(mask_if(em >= 0x7c00u), special, normal);
  r = select(mask_if(em < 0x0400u), sub, r);
  return bits_f32(r | sign);
}

inline uint16_t f32_to_f16_sw(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  // Normal result: add the rounding bias (round to nearest even at bit 13), rebias 127 -> 15. A
  // carry out of the mantissa correctly bumps the exponent.
  const uint32_t normal = (ax + 0x0fffu + ((ax >> 13) & 1u) - 0x38000000u) >> 13;
  // Subnormal/zero result (|f| < 2^-14): adding 0.5 makes the FPU round |f| to a multiple of 2^-24
  // (nearest even); the low bits of the sum are then the half's subnormal encoding.
  const uint32_t sub = f32_bits(bits_f32(ax) + 0.5f) - 0x3f000000u;
  const uint32_t nan = 0x7e00u | ((ax >> 13) & 0x03ffu);  // quiet, keep the payload's top bits
  uint32_t r = select(mask_if(ax < 0x38800000u), sub, normal);
  r = select(mask_if(ax >= 0x477ff000u), 0x7c00u, r);     // >= 65520 (and inf): inf
  r = select(mask_if(ax > 0x7f800000u), nan, r);
  return static_cast<uint16_t>(r | sign);
}

inline void f16_to_f32_block(const void* src, float* dst, size_t n) {
  size_t i = 0;
#if SHVD_F16_HW == 512
  // (maskz_ forms: the plain _mm512_cvtph_ps trips GCC 12's -Wmaybe-uninitialized in its header.)
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_maskz_cvtph_ps(0xffff, _mm256_loadu_si256(static_cast<const __m256i*>(at(src, 2 * i)))));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(dst + i, m, _mm512_maskz_cvtph_ps(m, _mm256_maskz_loadu_epi16(m, at(src, 2 * i))));
  }
#elif SHVD_F16_HW == 256
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(static_cast<const __m128i*>(at(src, 2 * i)))));
  if (i < n) {
    alignas(16) uint16_t hin[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    alignas(32) float fout[8];
    std::memcpy(hin, at(src, 2 * i), 2 * (n - i));
    _mm256_store_ps(fout, _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(hin))));
    std::memcpy(dst + i, fout, 4 * (n - i));
  }
#else
  for (; i < n; ++i) dst[i] = f16_to_f32_sw(ld<uint16_t>(src, i));
#endif
}

inline void f32_to_f16_block(const float* src, void* dst, size_t n) {
  size_t i = 0;
#if SHVD_F16_HW == 512
  // (maskz_ forms: the plain _mm512_cvtps_ph trips GCC 12's -Wmaybe-uninitialized in its header.)
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(static_cast<__m256i*>(at(dst, 2 * i)), _mm512_maskz_cvtps_ph(0xffff, _mm512_loadu_ps(src + i), kRound));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm256_mask_storeu_epi16(at(dst, 2 * i), m, _mm512_maskz_cvtps_ph(m, _mm512_maskz_loadu_ps(m, src + i), kRound));
  }
#elif SHVD_F16_HW == 256
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(static_cast<__m128i*>(at(dst, 2 * i)), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), kRound));
  if (i < n) {
    alignas(32) float fin[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    alignas(16) uint16_t hout[8];
    std::memcpy(fin, src + i, 4 * (n - i));
    _mm_store_si128(reinterpret_cast<__m128i*>(hout), _mm256_cvtps_ph(_mm256_load_ps(fin), kRound));
    std::memcpy(at(dst, 2 * i), hout, 2 * (n - i));
  }
#else
  for (; i < n; ++i) st<uint16_t>(dst, i, f32_to_f16_sw(src[i]));
#endif
}

inline void bf16_to_f32_block(const void* src, float* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = bits_f32(static_cast<uint32_t>(ld<uint16_t>(src, i)) << 16);
}

// Round to nearest even; NaNs are quieted (never rounded into an inf); overflow gives inf.
// (Not vcvtneps2bf16: that one flushes subnormals.)
inline void f32_to_bf16_block(const float* src, void* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t x = f32_bits(src[i]);
    const uint32_t rounded = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    const uint32_t nan = (x >> 16) | 0x0040u;
    st<uint16_t>(dst, i, static_cast<uint16_t>((x & 0x7fffffffu) > 0x7f800000u ? nan : rounded));
  }
}

enum class Half { kF16, kBF16 };

template <Half H>
inline void half_to_f32(const void* src, float* dst, size_t n) {
  if constexpr (H == Half::kF16) f16_to_f32_block(src, dst, n);
  else bf16_to_f32_block(src, dst, n);
}

template <Half H>
inline void f32_to_half(const float* src, void* dst, size_t n) {
  if constexpr (H == Half::kF16) f32_to_f16_block(src, dst, n);
  else f32_to_bf16_block(src, dst, n);
}

// ---------------------------------------------------------------------------------------------
// Two inputs.

template <ReduceOp OP, Half H>
void half_binop(void* out, const void* a, const void* b, size_t n) {
  alignas(64) float fa[kHalfBlock];
  alignas(64) float fb[kHalfBlock];
  for (size_t i0 = 0; i0 < n; i0 += kHalfBlock) {
    const size_t m = n - i0 < kHalfBlock ? n - i0 : kHalfBlock;
    half_to_f32<H>(at(a, 2 * i0), fa, m);
    half_to_f32<H>(at(b, 2 * i0), fb, m);
    binop<OP, float>(fa, fa, fb, m);
    f32_to_half<H>(fa, at(out, 2 * i0), m);
  }
}

template <ReduceOp OP>
void reduce_into_op(void* out, const void* a, const void* b, size_t n, DType t) {
  switch (t) {
    case DType::kUInt8: binop<OP, uint8_t>(out, a, b, n); break;
    case DType::kInt8: binop<OP, int8_t>(out, a, b, n); break;
    case DType::kInt16: binop<OP, int16_t>(out, a, b, n); break;
    case DType::kUInt16: binop<OP, uint16_t>(out, a, b, n); break;
    case DType::kInt32: binop<OP, int32_t>(out, a, b, n); break;
    case DType::kInt64: binop<OP, int64_t>(out, a, b, n); break;
    case DType::kFloat16: half_binop<OP, Half::kF16>(out, a, b, n); break;
    case DType::kBFloat16: half_binop<OP, Half::kBF16>(out, a, b, n); break;
    case DType::kFloat32: binop<OP, float>(out, a, b, n); break;
    case DType::kFloat64: binop<OP, double>(out, a, b, n); break;
  }
}

void reduce_into_entry(void* out, const void* a, const void* b, size_t n, DType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: reduce_into_op<ReduceOp::kSum>(out, a, b, n, t); break;
    case ReduceOp::kMin: reduce_into_op<ReduceOp::kMin>(out, a, b, n, t); break;
    case ReduceOp::kMax: reduce_into_op<ReduceOp::kMax>(out, a, b, n, t); break;
    case ReduceOp::kProduct: reduce_into_op<ReduceOp::kProduct>(out, a, b, n, t); break;
  }
}

// ---------------------------------------------------------------------------------------------
// n inputs (n >= 2), block by block so the running result stays in L1.

inline bool overlaps(const void* p, const void* q, size_t bytes) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + bytes && b < a + bytes;
}

template <ReduceOp OP, class T>
void many(void* out, const void* const* in, size_t n, size_t count) {
  const size_t bytes = count * sizeof(T);
  // The running result is built in place in out unless out overlaps an input that is still to be
  // read after the first step (in[2..]); then it is built in a stack block and copied out.
  bool staged = false;
  for (size_t k = 2; k < n; ++k) staged = staged || overlaps(out, in[k], bytes);
  alignas(64) unsigned char stage[kBlockBytes];
  constexpr size_t kBlock = kBlockBytes / sizeof(T);
  for (size_t i0 = 0; i0 < count; i0 += kBlock) {
    const size_t m = count - i0 < kBlock ? count - i0 : kBlock;
    const size_t off = i0 * sizeof(T);
    void* acc = staged ? static_cast<void*>(stage) : at(out, off);
    binop<OP, T>(acc, at(in[0], off), at(in[1], off), m);
    for (size_t k = 2; k < n; ++k) binop<OP, T>(acc, acc, at(in[k], off), m);
    if (staged) std::memcpy(at(out, off), stage, m * sizeof(T));
  }
}

// float16/bfloat16: all inputs are combined in float32 and rounded once.
template <ReduceOp OP, Half H>
void half_many(void* out, const void* const* in, size_t n, size_t count) {
  alignas(64) float acc[kHalfBlock];
  alignas(64) float tmp[kHalfBlock];
  for (size_t i0 = 0; i0 < count; i0 += kHalfBlock) {
    const size_t m = count - i0 < kHalfBlock ? count - i0 : kHalfBlock;
    half_to_f32<H>(at(in[0], 2 * i0), acc, m);
    for (size_t k = 1; k < n; ++k) {
      half_to_f32<H>(at(in[k], 2 * i0), tmp, m);
      binop<OP, float>(acc, acc, tmp, m);
    }
    f32_to_half<H>(acc, at(out, 2 * i0), m);
  }
}

template <ReduceOp OP>
void reduce_many_op(void* out, const void* const* in, size_t n, size_t count, DType t) {
  switch (t) {
    case DType::kUInt8: many<OP, uint8_t>(out, in, n, count); break;
    case DType::kInt8: many<OP, int8_t>(out, in, n, count); break;
    case DType::kInt16: many<OP, int16_t>(out, in, n, count); break;
    case DType::kUInt16: many<OP, uint16_t>(out, in, n, count); break;
    case DType::kInt32: many<OP, int32_t>(out, in, n, count); break;
    case DType::kInt64: many<OP, int64_t>(out, in, n, count); break;
    case DType::kFloat16: half_many<OP, Half::kF16>(out, in, n, count); break;
    case DType::kBFloat16: half_many<OP, Half::kBF16>(out, in, n, count); break;
    case DType::kFloat32: many<OP, float>(out, in, n, count); break;
    case DType::kFloat64: many<OP, double>(out, in, n, count); break;
  }
}

void reduce_many_entry(void* out, const void* const* in, size_t n, size_t count, DType t, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: reduce_many_op<ReduceOp::kSum>(out, in, n, count, t); break;
    case ReduceOp::kMin: reduce_many_op<ReduceOp::kMin>(out, in, n, count, t); break;
    case ReduceOp::kMax: reduce_many_op<ReduceOp::kMax>(out, in, n, count, t); break;
    case ReduceOp::kProduct: reduce_many_op<ReduceOp::kProduct>(out, in, n, count, t); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Scaling.

template <class T>
void scale_float(void* buf, size_t n, T factor) {
  SHVD_IVDEP
  for (size_t i = 0; i < n; ++i) st<T>(buf, i, canon(ld<T>(buf, i) * factor));
}

template <Half H>
void half_scale(void* buf, size_t n, float factor) {
  alignas(64) float f[kHalfBlock];
  for (size_t i0 = 0; i0 < n; i0 += kHalfBlock) {
    const size_t m = n - i0 < kHalfBlock ? n - i0 : kHalfBlock;
    half_to_f32<H>(at(buf, 2 * i0), f, m);
    for (size_t i = 0; i < m; ++i) f[i] = canon(f[i] * factor);
    f32_to_half<H>(f, at(buf, 2 * i0), m);
  }
}

// v truncated toward zero (what Horovod's cast of the double product gives), then saturated into T;
// NaN gives 0.
template <class T>
inline T truncate_saturate(double v) {
  double t = __builtin_trunc(v);
  if constexpr (sizeof(T) == 8) {
    if (t >= 9223372036854775808.0) return static_cast<T>(INT64_MAX);
    if (t <= -9223372036854775808.0) return static_cast<T>(INT64_MIN);
    if (t != t) return 0;
    return static_cast<T>(static_cast<int64_t>(t));
  } else {
    constexpr double lo = static_cast<double>(std::is_signed<T>::value ? -(int64_t{1} << (8 * sizeof(T) - 1)) : 0);
    constexpr double hi = static_cast<double>(std::is_signed<T>::value ? (int64_t{1} << (8 * sizeof(T) - 1)) - 1
                                                                        : (int64_t{1} << (8 * sizeof(T))) - 1);
    if (t != t) t = 0.0;
    t = t < lo ? lo : t;
    t = t > hi ? hi : t;
    return static_cast<T>(static_cast<int64_t>(t));
  }
}

template <class T>
void scale_int(void* buf, size_t n, double factor) {
  for (size_t i = 0; i < n; ++i) st<T>(buf, i, truncate_saturate<T>(static_cast<double>(ld<T>(buf, i)) * factor));
}

void scale_entry(void* buf, size_t n, DType t, double factor) {
  switch (t) {
    case DType::kUInt8: scale_int<uint8_t>(buf, n, factor); break;
    case DType::kInt8: scale_int<int8_t>(buf, n, factor); break;
    case DType::kInt16: scale_int<int16_t>(buf, n, factor); break;
    case DType::kUInt16: scale_int<uint16_t>(buf, n, factor); break;
    case DType::kInt32: scale_int<int32_t>(buf, n, factor); break;
    case DType::kInt64: scale_int<int64_t>(buf, n, factor); break;
    case DType::kFloat16: half_scale<Half::kF16>(buf, n, static_cast<float>(factor)); break;
    case DType::kBFloat16: half_scale<Half::kBF16>(buf, n, static_cast<float>(factor)); break;
    case DType::kFloat32: scale_float<float>(buf, n, static_cast<float>(factor)); break;
    case DType::kFloat64: scale_float<double>(buf, n, factor); break;
  }
}

// ---------------------------------------------------------------------------------------------
// Integer division, truncating toward zero, result wrapped into T.

template <class T>
void negate_wrap(void* buf, size_t n) {
  SHVD_IVDEP
  for (size_t i = 0; i < n; ++i)
    st<T>(buf, i, static_cast<T>(static_cast<Unsigned<T>>(Unsigned<T>(0) - static_cast<Unsigned<T>>(ld<T>(buf, i)))));
}

// 8/16/32-bit values, |divisor| >= 2: the double quotient truncates to the exact integer quotient
// (|x| < 2^31, so a non-integer x/d is never rounded onto an integer), and |q| <= |x| fits int32.
// For uint8/uint16 with a negative divisor the negative quotient wraps, as in C.
template <class T>
void divide_small(void* buf, size_t n, int64_t divisor) {
  const double d = static_cast<double>(divisor);
  SHVD_IVDEP
  for (size_t i = 0; i < n; ++i)
    st<T>(buf, i, static_cast<T>(static_cast<int32_t>(static_cast<double>(ld<T>(buf, i)) / d)));
}

void divide_int64(void* buf, size_t n, int64_t divisor) {
  if (divisor > 0 && (divisor & (divisor - 1)) == 0) {
    // Power of two: arithmetic shift after biasing negatives, i.e. truncation toward zero.
    const int shift = __builtin_ctzll(static_cast<unsigned long long>(divisor));
    const uint64_t bias = static_cast<uint64_t>(divisor) - 1;
    SHVD_IVDEP
    for (size_t i = 0; i < n; ++i) {
      const int64_t x = ld<int64_t>(buf, i);
      const uint64_t biased = static_cast<uint64_t>(x) + (x < 0 ? bias : 0);  // no overflow: x < 0
      st<int64_t>(buf, i, static_cast<int64_t>(biased) >> shift);
    }
    return;
  }
  for (size_t i = 0; i < n; ++i) st<int64_t>(buf, i, ld<int64_t>(buf, i) / divisor);  // divisor != 0, -1
}

template <class T>
void divide_typed(void* buf, size_t n, int64_t divisor) {
  if (divisor == 1) return;
  if (divisor == -1) {
    negate_wrap<T>(buf, n);
    return;
  }
  if constexpr (sizeof(T) == 8) divide_int64(buf, n, divisor);
  else divide_small<T>(buf, n, divisor);
}

void divide_int_entry(void* buf, size_t n, DType t, int64_t divisor) {
  switch (t) {
    case DType::kUInt8: divide_typed<uint8_t>(buf, n, divisor); break;
    case DType::kInt8: divide_typed<int8_t>(buf, n, divisor); break;
    case DType::kInt16: divide_typed<int16_t>(buf, n, divisor); break;
    case DType::kUInt16: divide_typed<uint16_t>(buf, n, divisor); break;
    case DType::kInt32: divide_typed<int32_t>(buf, n, divisor); break;
    case DType::kInt64: divide_typed<int64_t>(buf, n, divisor); break;
    default: break;  // floats never get here
  }
}

// ---------------------------------------------------------------------------------------------

void f16_to_f32_entry(const void* src, float* dst, size_t n) { f16_to_f32_block(src, dst, n); }
void f32_to_f16_entry(const float* src, void* dst, size_t n) { f32_to_f16_block(src, dst, n); }
void bf16_to_f32_entry(const void* src, float* dst, size_t n) { bf16_to_f32_block(src, dst, n); }
void f32_to_bf16_entry(const float* src, void* dst, size_t n) { f32_to_bf16_block(src, dst, n); }

#define SHVD_STR2(x) #x
#define SHVD_STR(x) SHVD_STR2(x)

const KernelTable kTable = {
    SHVD_STR(SHVD_ISA_NS), reduce_into_entry, reduce_many_entry, scale_entry, divide_int_entry,
    f16_to_f32_entry,      f32_to_f16_entry,  bf16_to_f32_entry, f32_to_bf16_entry,
};

#undef SHVD_STR
#undef SHVD_STR2

}  // namespace

const KernelTable* kernel_table() { return &kTable; }

}  // namespace SHVD_ISA_NS
}  // namespace reduce_detail
}  // namespace shvd
