// Stand-alone self-test and micro-benchmark of the reduction kernels (build with
// -DSHVD_BUILD_SELFTEST=ON; target shvd_reduce_selftest).
//
//   shvd_reduce_selftest                 all checks on every ISA this CPU runs, then timings
//   shvd_reduce_selftest --quick         skip the 1000003-element cases
//   shvd_reduce_selftest --exhaustive    also convert all 2^32 float32 patterns to float16/bfloat16
//   shvd_reduce_selftest --no-bench      skip the timings
//   shvd_reduce_selftest --isa=avx2      test only that ISA (repeatable)
//
// Every result is compared against an independent scalar reference written here (the float16 and
// bfloat16 references use frexp/nearbyint, not bit tricks, and are themselves checked against the
// compiler's _Float16 where it exists) byte for byte, NaNs included, and every ISA's output must
// match the first ISA's byte for byte.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/types.h"
#include "reduce/kernels.h"
#include "reduce/reduce.h"

using namespace shvd;
using shvd::reduce_detail::KernelTable;

namespace {

long g_checks = 0;
long g_failures = 0;

#define CHECK(cond, ...)                                                  \
  do {                                                                    \
    ++g_checks;                                                           \
    if (!(cond)) {                                                        \
      if (++g_failures <= 40) {                                           \
        std::fprintf(stderr, "FAIL %s:%d [%s]: ", __FILE__, __LINE__, #cond); \
        std::fprintf(stderr, __VA_ARGS__);                                \
        std::fputc('\n', stderr);                                         \
      }                                                                   \
    }                                                                     \
  } while (0)

const DType kAllTypes[] = {DType::kUInt8,   DType::kInt8,     DType::kInt16,   DType::kUInt16,
                           DType::kInt32,   DType::kInt64,    DType::kFloat16, DType::kBFloat16,
                           DType::kFloat32, DType::kFloat64};
const ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

// ------------------------------------------------------------------------------------------------
// Random numbers (splitmix64: deterministic, no <random> distribution differences).

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }  // [0, 1)
};

uint32_t fbits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float bitsf(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
double bitsd(uint64_t u) { double f; std::memcpy(&f, &u, 8); return f; }

// ------------------------------------------------------------------------------------------------
// Reference float16 / bfloat16 conversions (deliberately a different method from the kernels').

float ref_f16_to_f32(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) ? 0x80000000u : 0u;
  const int e = (h >> 10) & 0x1f;
  const int m = h & 0x3ff;
  if (e == 31) return bitsf(sign | 0x7f800000u | (m ? 0x400000u | (static_cast<uint32_t>(m) << 13) : 0u));
  const double v = e == 0 ? std::ldexp(static_cast<double>(m), -24) : std::ldexp(static_cast<double>(1024 + m), e - 25);
  return static_cast<float>(sign ? -v : v);
}

uint16_t ref_f32_to_f16(float f) {
  const uint32_t x = fbits(f);
  const uint16_t sign = (x >> 31) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00u | ((x >> 13) & 0x3ffu));
  const double v = std::fabs(static_cast<double>(f));
  if (v >= 65520.0) return static_cast<uint16_t>(sign | 0x7c00u);
  if (v < std::ldexp(1.0, -14)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(v * std::ldexp(1.0, 24))));
  int e2;
  std::frexp(v, &e2);
  int E = e2 - 1;  // v in [2^E, 2^(E+1))
  double q = std::nearbyint(std::ldexp(v, 10 - E));
  if (q == 2048.0) { q = 1024.0; ++E; }
  if (E > 15) return static_cast<uint16_t>(sign | 0x7c00u);
  return static_cast<uint16_t>(sign | ((E + 15) << 10) | (static_cast<int>(q) - 1024));
}

float ref_bf16_to_f32(uint16_t h) { return bitsf(static_cast<uint32_t>(h) << 16); }

uint16_t ref_f32_to_bf16(float f) {
  const uint32_t x = fbits(f);
  const uint16_t sign = (x >> 31) ? 0x8000 : 0;
  if (std::isnan(f)) return static_cast<uint16_t>((x >> 16) | 0x40u);
  const double v = std::fabs(static_cast<double>(f));
  if (std::isinf(f)) return static_cast<uint16_t>(sign | 0x7f80u);
  if (v < std::ldexp(1.0, -126)) return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(v * std::ldexp(1.0, 133))));
  int e2;
  std::frexp(v, &e2);
  int E = e2 - 1;
  double q = std::nearbyint(std::ldexp(v, 7 - E));
  if (q == 256.0) { q = 128.0; ++E; }
  if (E > 127) return static_cast<uint16_t>(sign | 0x7f80u);
  return static_cast<uint16_t>(sign | ((E + 127) << 7) | (static_cast<int>(q) - 128));
}

// ------------------------------------------------------------------------------------------------
// Element access by dtype: integers as int64 (uint8 zero-extended), floats as double (16-bit ones
// through the reference conversions). Results are rounded/wrapped back by store.

bool is_int(DType t) { return dtype_is_integer(t); }

int64_t load_i(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kUInt8: return p[i];
    case DType::kInt8: { int8_t v; std::memcpy(&v, p + i, 1); return v; }
    case DType::kInt16: { int16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::kUInt16: { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
    case DType::kInt32: { int32_t v; std::memcpy(&v, p + 4 * i, 4); return v; }
    case DType::kInt64: { int64_t v; std::memcpy(&v, p + 8 * i, 8); return v; }
    default: std::abort();
  }
}

// Stores the low bits (wrap-around).
void store_i(DType t, uint8_t* p, size_t i, uint64_t v) {
  switch (t) {
    case DType::kUInt8:
    case DType::kInt8: p[i] = static_cast<uint8_t>(v); break;
    case DType::kInt16:
    case DType::kUInt16: { uint16_t w = static_cast<uint16_t>(v); std::memcpy(p + 2 * i, &w, 2); break; }
    case DType::kInt32: { uint32_t w = static_cast<uint32_t>(v); std::memcpy(p + 4 * i, &w, 4); break; }
    case DType::kInt64: std::memcpy(p + 8 * i, &v, 8); break;
    default: std::abort();
  }
}

uint16_t load_u16(const uint8_t* p, size_t i) { uint16_t v; std::memcpy(&v, p + 2 * i, 2); return v; }
void store_u16(uint8_t* p, size_t i, uint16_t v) { std::memcpy(p + 2 * i, &v, 2); }

// Float element as float (f16/bf16/f32) — the precision the kernels compute in.
float load_f(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kFloat16: return ref_f16_to_f32(load_u16(p, i));
    case DType::kBFloat16: return ref_bf16_to_f32(load_u16(p, i));
    case DType::kFloat32: { float v; std::memcpy(&v, p + 4 * i, 4); return v; }
    default: std::abort();
  }
}
void store_f(DType t, uint8_t* p, size_t i, float v) {
  switch (t) {
    case DType::kFloat16: store_u16(p, i, ref_f32_to_f16(v)); break;
    case DType::kBFloat16: store_u16(p, i, ref_f32_to_bf16(v)); break;
    case DType::kFloat32: std::memcpy(p + 4 * i, &v, 4); break;
    default: std::abort();
  }
}
double load_d(const uint8_t* p, size_t i) { double v; std::memcpy(&v, p + 8 * i, 8); return v; }
void store_d(uint8_t* p, size_t i, double v) { std::memcpy(p + 8 * i, &v, 8); }

bool elem_is_nan(DType t, const uint8_t* p, size_t i) {
  switch (t) {
    case DType::kFloat16: return (load_u16(p, i) & 0x7fff) > 0x7c00;
    case DType::kBFloat16: return (load_u16(p, i) & 0x7fff) > 0x7f80;
    case DType::kFloat32: return std::isnan(load_f(t, p, i));
    case DType::kFloat64: return std::isnan(load_d(p, i));
    default: return false;
  }
}

// Arithmetic NaN results are the positive default quiet NaN (see reduce.h).
template <class F>
F canon(F v) { return std::isnan(v) ? static_cast<F>(NAN) : v; }

template <class F>
F ref_float_op(ReduceOp op, F a, F b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return canon(a + b);
    case ReduceOp::kProduct: return canon(a * b);
    case ReduceOp::kMin: return std::isnan(a) ? a : std::isnan(b) ? b : (a <= b ? a : b);
    case ReduceOp::kMax: return std::isnan(a) ? a : std::isnan(b) ? b : (a >= b ? a : b);
  }
  std::abort();
}

uint64_t ref_int_op(ReduceOp op, int64_t a, int64_t b) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage: return static_cast<uint64_t>(a) + static_cast<uint64_t>(b);
    case ReduceOp::kProduct: return static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
    case ReduceOp::kMin: return static_cast<uint64_t>(a < b ? a : b);
    case ReduceOp::kMax: return static_cast<uint64_t>(a > b ? a : b);
  }
  std::abort();
}

// out[i] = in[0][i] op ... op in[n-1][i]; floats in float32 (f16/bf16/f32) or float64, rounded once.
void ref_reduce(DType t, ReduceOp op, uint8_t* out, const std::vector<const uint8_t*>& in, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    if (is_int(t)) {
      int64_t acc = load_i(t, in[0], i);
      for (size_t k = 1; k < in.size(); ++k) {
        uint64_t r = ref_int_op(op, acc, load_i(t, in[k], i));
        store_i(t, out, i, r);  // wrap to the type, then reload (sign-extend) for the next step
        acc = load_i(t, out, i);
      }
      store_i(t, out, i, static_cast<uint64_t>(acc));
    } else if (t == DType::kFloat64) {
      double acc = load_d(in[0], i);
      for (size_t k = 1; k < in.size(); ++k) acc = ref_float_op(op, acc, load_d(in[k], i));
      store_d(out, i, acc);
    } else {
      float acc = load_f(t, in[0], i);
      for (size_t k = 1; k < in.size(); ++k) acc = ref_float_op(op, acc, load_f(t, in[k], i));
      store_f(t, out, i, acc);
    }
  }
}

// ------------------------------------------------------------------------------------------------
// Test data.

void fill_random(DType t, uint8_t* p, size_t count, Rng& rng, bool specials = true) {
  for (size_t i = 0; i < count; ++i) {
    const uint64_t r = rng.next();
    switch (t) {
      case DType::kUInt8:
      case DType::kInt8:
      case DType::kInt16:
      case DType::kUInt16:
      case DType::kInt32:
      case DType::kInt64:
        // Mostly full-range bits (wrap-around), sometimes small values (ordinary arithmetic).
        store_i(t, p, i, (r & 3) == 0 ? static_cast<uint64_t>(static_cast<int64_t>(r >> 58) - 32) : rng.next());
        break;
      case DType::kFloat16:
      case DType::kBFloat16:
        if (specials && (r & 1)) {
          store_u16(p, i, static_cast<uint16_t>(r >> 16));  // any pattern: NaN, inf, subnormals...
        } else {
          // Moderate magnitudes so sums and products round rather than overflow.
          store_f(t, p, i, static_cast<float>(std::ldexp(rng.uniform() * 2 - 1, static_cast<int>((r >> 8) % 12) - 4)));
        }
        break;
      case DType::kFloat32:
      case DType::kFloat64: {
        double v;
        const int kind = specials ? static_cast<int>(r % 64) : 63;
        switch (kind) {
          case 0: v = NAN; break;
          case 1: v = INFINITY; break;
          case 2: v = -INFINITY; break;
          case 3: v = 0.0; break;
          case 4: v = -0.0; break;
          case 5: v = t == DType::kFloat32 ? 1e-40 * (rng.uniform() - 0.5) : 1e-310 * (rng.uniform() - 0.5); break;
          case 6: v = t == DType::kFloat32 ? 3e38 : 1.7e308; break;
          default: v = std::ldexp(rng.uniform() * 2 - 1, static_cast<int>((r >> 8) % 40) - 20); break;
        }
        if (t == DType::kFloat32) {
          float f = static_cast<float>(v);
          if (kind == 0) f = bitsf(0x7f800001u | static_cast<uint32_t>(r >> 41) | (static_cast<uint32_t>(r >> 40) & 0x80000000u));  // signalling/quiet, any sign
          std::memcpy(p + 4 * i, &f, 4);
        } else {
          if (kind == 0) v = bitsd(0x7ff0000000000001ull | (r >> 13) | (r & 0x8000000000000000ull));
          store_d(p, i, v);
        }
        break;
      }
    }
  }
}

// A byte buffer whose data starts `misalign` bytes after a 64-byte boundary.
struct Buf {
  std::vector<uint8_t> storage;
  uint8_t* p = nullptr;
  Buf() = default;
  Buf(size_t bytes, size_t misalign) : storage(bytes + 128) {
    uintptr_t base = reinterpret_cast<uintptr_t>(storage.data());
    p = storage.data() + ((64 - base % 64) % 64) + misalign;
  }
};

// Element-wise comparison: equal bytes (NaNs included), or both NaN when `nan_equal`.
bool compare(DType t, const uint8_t* got, const uint8_t* want, size_t count, const std::string& what,
             bool nan_equal = false) {
  const size_t sz = dtype_size(t);
  if (count == 0 || std::memcmp(got, want, count * sz) == 0) {
    ++g_checks;
    return true;
  }
  for (size_t i = 0; i < count; ++i) {
    if (std::memcmp(got + i * sz, want + i * sz, sz) == 0) continue;
    if (nan_equal && elem_is_nan(t, got, i) && elem_is_nan(t, want, i)) continue;
    uint64_t g = 0, w = 0;
    std::memcpy(&g, got + i * sz, sz);
    std::memcpy(&w, want + i * sz, sz);
    CHECK(false, "%s: %s element %zu of %zu: got 0x%llx want 0x%llx", what.c_str(), dtype_name(t), i, count,
          static_cast<unsigned long long>(g), static_cast<unsigned long long>(w));
    return false;
  }
  ++g_checks;
  return true;
}

std::string label(const char* isa, const char* fn, DType t, ReduceOp op, size_t count, size_t mis) {
  char b[200];
  std::snprintf(b, sizeof(b), "[%s] %s %s/%s count=%zu misalign=%zu", isa, fn, dtype_name(t), reduce_op_name(op), count, mis);
  return b;
}

std::vector<std::string> g_isas;

// Runs fn once per ISA (forcing it), comparing each ISA's output bytes with the first one's.
template <class Fn>
void per_isa_consistent(DType t, size_t count, const std::string& what, Fn fn) {
  std::vector<uint8_t> first;
  for (size_t k = 0; k < g_isas.size(); ++k) {
    reduce_detail::force_isa(g_isas[k].c_str());
    const uint8_t* out = fn(g_isas[k].c_str());
    if (k == 0) {
      first.assign(out, out + count * dtype_size(t));
    } else {
      compare(t, out, first.data(), count, what + " [" + g_isas[k] + " vs " + g_isas[0] + "]");
    }
  }
}

// ------------------------------------------------------------------------------------------------
// reduce_into / reduce_inplace.

void test_reduce_into(const std::vector<size_t>& counts) {
  Rng rng(1);
  for (DType t : kAllTypes) {
    const size_t sz = dtype_size(t);
    for (ReduceOp op : kAllOps) {
      for (size_t count : counts) {
        for (size_t mis : {size_t(0), size_t(1), size_t(3)}) {
          if (count > 100000 && mis == 3) continue;
          Buf a(count * sz, mis), b(count * sz, mis == 0 ? 0 : mis + 2), want(count * sz, 0), out(count * sz, mis + 1);
          fill_random(t, a.p, count, rng);
          fill_random(t, b.p, count, rng);
          ref_reduce(t, op, want.p, {a.p, b.p}, count);
          per_isa_consistent(t, count, label("*", "reduce_into", t, op, count, mis), [&](const char* isa) {
            const size_t bytes = count * sz;
            // out separate
            std::memset(out.p, 0xcd, bytes);
            reduce_into(out.p, a.p, b.p, count, t, op);
            compare(t, out.p, want.p, count, label(isa, "reduce_into", t, op, count, mis));
            // out == a
            Buf c(bytes, mis);
            if (bytes) std::memcpy(c.p, a.p, bytes);
            reduce_into(c.p, c.p, b.p, count, t, op);
            compare(t, c.p, want.p, count, label(isa, "reduce_into(out=a)", t, op, count, mis));
            // out == b
            if (bytes) std::memcpy(c.p, b.p, bytes);
            reduce_into(c.p, a.p, c.p, count, t, op);
            compare(t, c.p, want.p, count, label(isa, "reduce_into(out=b)", t, op, count, mis));
            // inplace
            if (bytes) std::memcpy(c.p, a.p, bytes);
            reduce_inplace(c.p, b.p, count, t, op);
            compare(t, c.p, want.p, count, label(isa, "reduce_inplace", t, op, count, mis));
            // the guard bytes after out are untouched
            CHECK(out.p[bytes] == 0 && out.p[bytes + 1] == 0, "%s wrote past the end", label(isa, "reduce_into", t, op, count, mis).c_str());
            return out.p;
          });
        }
      }
    }
  }
  // count == 0 with null pointers
  for (DType t : kAllTypes)
    for (ReduceOp op : kAllOps) {
      reduce_into(nullptr, nullptr, nullptr, 0, t, op);
      reduce_inplace(nullptr, nullptr, 0, t, op);
      reduce_many(nullptr, nullptr, 0 + 3, 0, t, op);
    }
}

// ------------------------------------------------------------------------------------------------
// reduce_many.

void test_reduce_many(bool big) {
  Rng rng(2);
  std::vector<size_t> counts = {0, 1, 7, 1000, 5000};
  if (big) counts.push_back(1000003);
  for (DType t : kAllTypes) {
    const size_t sz = dtype_size(t);
    for (ReduceOp op : kAllOps) {
      for (size_t count : counts) {
        for (size_t n : {1, 2, 3, 4, 7}) {
          if (count > 100000 && n != 3 && n != 4) continue;
          const size_t bytes = count * sz;
          const size_t mis = (n + count) % 4;
          std::vector<Buf> ins;
          for (size_t k = 0; k < n; ++k) {
            ins.emplace_back(bytes, (mis + k) % 5);
            fill_random(t, ins.back().p, count, rng);
          }
          std::vector<const uint8_t*> inp;
          for (auto& x : ins) inp.push_back(x.p);
          Buf want(bytes, 0), seq(bytes, 0);
          ref_reduce(t, op, want.p, inp, count);
          if (n == 1 && bytes) std::memcpy(want.p, inp[0], bytes);  // n == 1 is an exact copy (no NaN quieting)
          // For floats 32/64 and integers, reduce_many must equal chained reduce_into (index order).
          const bool chained = !(t == DType::kFloat16 || t == DType::kBFloat16);
          for (int alias = 0; alias < 3; ++alias) {  // 0: separate out, 1: out = in[0], 2: out = in[n-1]
            if (alias == 2 && n < 3) continue;
            per_isa_consistent(t, count, label("*", "reduce_many", t, op, count, mis), [&](const char* isa) {
              std::vector<Buf> work;
              std::vector<const void*> ptrs;
              for (size_t k = 0; k < n; ++k) {
                work.emplace_back(bytes, (mis + k) % 5);
                if (bytes) std::memcpy(work.back().p, ins[k].p, bytes);
              }
              for (auto& w : work) ptrs.push_back(w.p);
              Buf sep(bytes, mis);
              uint8_t* out = alias == 0 ? sep.p : alias == 1 ? work[0].p : work[n - 1].p;
              reduce_many(out, ptrs.data(), n, count, t, op);
              char what[64];
              std::snprintf(what, sizeof(what), "reduce_many(n=%zu, alias=%d)", n, alias);
              compare(t, out, want.p, count, label(isa, what, t, op, count, mis));
              if (chained && count > 0) {
                std::memcpy(seq.p, ins[0].p, bytes);
                for (size_t k = 1; k < n; ++k) reduce_into(seq.p, seq.p, ins[k].p, count, t, op);
                compare(t, out, seq.p, count, label(isa, (std::string(what) + " vs chained reduce_into").c_str(), t, op, count, mis));
              }
              // keep the output alive past this lambda
              static std::vector<uint8_t> keep;
              keep.assign(out, out + bytes);
              return keep.data();
            });
          }
        }
      }
    }
  }
  // n == 0 is an error
  bool threw = false;
  try {
    float x = 0;
    reduce_many(&x, nullptr, 0, 1, DType::kFloat32, ReduceOp::kSum);
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::kInvalidArgument;
  }
  CHECK(threw, "reduce_many with n == 0 must throw kInvalidArgument");
}

// ------------------------------------------------------------------------------------------------
// scale and divide.

int64_t ref_truncate_saturate(DType t, double v) {
  if (std::isnan(v)) return 0;
  double r = std::trunc(v);
  double lo, hi;
  switch (t) {
    case DType::kUInt8: lo = 0; hi = 255; break;
    case DType::kInt8: lo = -128; hi = 127; break;
    case DType::kInt16: lo = -32768; hi = 32767; break;
    case DType::kUInt16: lo = 0; hi = 65535; break;
    case DType::kInt32: lo = -2147483648.0; hi = 2147483647.0; break;
    default:
      if (r >= 9223372036854775808.0) return INT64_MAX;
      if (r <= -9223372036854775808.0) return INT64_MIN;
      return static_cast<int64_t>(r);
  }
  if (r < lo) r = lo;
  if (r > hi) r = hi;
  return static_cast<int64_t>(r);
}

void ref_scale(DType t, uint8_t* p, size_t count, double f) {
  if (f == 1.0) return;  // documented no-op
  for (size_t i = 0; i < count; ++i) {
    if (is_int(t)) store_i(t, p, i, static_cast<uint64_t>(ref_truncate_saturate(t, static_cast<double>(load_i(t, p, i)) * f)));
    else if (t == DType::kFloat64) store_d(p, i, canon(load_d(p, i) * f));
    else store_f(t, p, i, canon(load_f(t, p, i) * static_cast<float>(f)));
  }
}

void test_scale_divide(const std::vector<size_t>& counts) {
  Rng rng(3);
  const double factors[] = {0.5, 1.0 / 3.0, -2.5, 1.0, 0.0, 3.0, 1e10, -1e-3, 0.125, 1e300, NAN, -INFINITY};
  for (DType t : kAllTypes) {
    const size_t sz = dtype_size(t);
    for (size_t count : counts) {
      for (double f : factors) {
        const size_t mis = count % 3 + 1;
        Buf src(count * sz, mis), want(count * sz, 0);
        fill_random(t, src.p, count, rng);
        if (count) std::memcpy(want.p, src.p, count * sz);
        ref_scale(t, want.p, count, f);
        char what[64];
        std::snprintf(what, sizeof(what), "scale(%g)", f);
        per_isa_consistent(t, count, label("*", what, t, ReduceOp::kSum, count, mis), [&](const char* isa) {
          Buf w(count * sz, mis);
          if (count) std::memcpy(w.p, src.p, count * sz);
          scale(w.p, count, t, f);
          compare(t, w.p, want.p, count, label(isa, what, t, ReduceOp::kSum, count, mis));
          static std::vector<uint8_t> keep;
          keep.assign(w.p, w.p + count * sz);
          return keep.data();
        });
      }
      const int64_t divisors[] = {1, -1, 2, 3, -3, 4, 7, -8, 16, 1000, int64_t{1} << 40, -(int64_t{1} << 40),
                                  INT64_MIN, INT64_MAX, int64_t{1} << 62, 255, -128};
      for (int64_t d : divisors) {
        const size_t mis = (count + 1) % 3;
        Buf src(count * sz, mis), want(count * sz, 0);
        fill_random(t, src.p, count, rng);
        if (count) std::memcpy(want.p, src.p, count * sz);
        if (is_int(t)) {
          for (size_t i = 0; i < count; ++i) {
            const int64_t x = load_i(t, want.p, i);
            const uint64_t q = d == -1 ? 0 - static_cast<uint64_t>(x) : static_cast<uint64_t>(x / d);
            store_i(t, want.p, i, q);
          }
        } else {
          ref_scale(t, want.p, count, 1.0 / static_cast<double>(d));
        }
        char what[64];
        std::snprintf(what, sizeof(what), "divide(%lld)", static_cast<long long>(d));
        per_isa_consistent(t, count, label("*", what, t, ReduceOp::kAverage, count, mis), [&](const char* isa) {
          Buf w(count * sz, mis);
          if (count) std::memcpy(w.p, src.p, count * sz);
          divide(w.p, count, t, d);
          compare(t, w.p, want.p, count, label(isa, what, t, ReduceOp::kAverage, count, mis));
          static std::vector<uint8_t> keep;
          keep.assign(w.p, w.p + count * sz);
          return keep.data();
        });
      }
    }
    // Integer division by zero throws (even for count == 0); float division by zero multiplies by inf.
    bool threw = false;
    try {
      uint8_t dummy[8] = {};
      divide(dummy, 1, t, 0);
    } catch (const Error& e) {
      threw = e.kind() == ErrorKind::kInvalidArgument;
    }
    CHECK(threw == is_int(t), "divide(%s, 0): threw=%d", dtype_name(t), threw);
  }
}

// ------------------------------------------------------------------------------------------------
// Hand-picked cases: wrap-around, NaN handling, rounding ties.

template <class T>
T into1(T a, T b, DType t, ReduceOp op) {
  T out;
  reduce_into(&out, &a, &b, 1, t, op);
  return out;
}

void test_specials() {
  for (const std::string& isa : g_isas) {
    reduce_detail::force_isa(isa.c_str());
    const char* I = isa.c_str();
    CHECK(std::strcmp(reduce_isa(), I) == 0, "reduce_isa() = %s, forced %s", reduce_isa(), I);
    // Wrap-around.
    CHECK(into1<int8_t>(127, 1, DType::kInt8, ReduceOp::kSum) == -128, "%s int8 127+1", I);
    CHECK(into1<int8_t>(-128, -1, DType::kInt8, ReduceOp::kSum) == 127, "%s int8 -128-1", I);
    CHECK(into1<uint8_t>(255, 1, DType::kUInt8, ReduceOp::kSum) == 0, "%s uint8 255+1", I);
    CHECK(into1<uint8_t>(16, 16, DType::kUInt8, ReduceOp::kProduct) == 0, "%s uint8 16*16", I);
    CHECK(into1<int8_t>(-128, -1, DType::kInt8, ReduceOp::kProduct) == -128, "%s int8 -128*-1", I);
    CHECK(into1<int32_t>(INT32_MAX, 1, DType::kInt32, ReduceOp::kSum) == INT32_MIN, "%s int32 max+1", I);
    CHECK(into1<int32_t>(65536, 65536, DType::kInt32, ReduceOp::kProduct) == 0, "%s int32 2^16*2^16", I);
    CHECK(into1<int64_t>(INT64_MAX, 1, DType::kInt64, ReduceOp::kSum) == INT64_MIN, "%s int64 max+1", I);
    CHECK(into1<int64_t>(INT64_MIN, -1, DType::kInt64, ReduceOp::kProduct) == INT64_MIN, "%s int64 min*-1", I);
    CHECK(into1<int8_t>(-5, 3, DType::kInt8, ReduceOp::kMin) == -5, "%s int8 min", I);
    CHECK(into1<uint8_t>(200, 3, DType::kUInt8, ReduceOp::kMax) == 200, "%s uint8 max (unsigned compare)", I);
    // NaN propagation, both operand orders, all float types.
    const float qn = NAN;
    for (ReduceOp op : {ReduceOp::kMin, ReduceOp::kMax}) {
      CHECK(std::isnan(into1<float>(qn, 1.0f, DType::kFloat32, op)), "%s f32 %s(NaN,1)", I, reduce_op_name(op));
      CHECK(std::isnan(into1<float>(1.0f, qn, DType::kFloat32, op)), "%s f32 %s(1,NaN)", I, reduce_op_name(op));
      CHECK(std::isnan(into1<double>(NAN, 1.0, DType::kFloat64, op)), "%s f64 %s(NaN,1)", I, reduce_op_name(op));
      CHECK(std::isnan(into1<double>(1.0, NAN, DType::kFloat64, op)), "%s f64 %s(1,NaN)", I, reduce_op_name(op));
      CHECK((into1<uint16_t>(0x7e00, 0x3c00, DType::kFloat16, op) & 0x7fff) > 0x7c00, "%s f16 %s(NaN,1)", I, reduce_op_name(op));
      CHECK((into1<uint16_t>(0x3c00, 0x7e00, DType::kFloat16, op) & 0x7fff) > 0x7c00, "%s f16 %s(1,NaN)", I, reduce_op_name(op));
      CHECK((into1<uint16_t>(0x7fc0, 0x3f80, DType::kBFloat16, op) & 0x7fff) > 0x7f80, "%s bf16 %s(NaN,1)", I, reduce_op_name(op));
      CHECK((into1<uint16_t>(0x3f80, 0x7fc0, DType::kBFloat16, op) & 0x7fff) > 0x7f80, "%s bf16 %s(1,NaN)", I, reduce_op_name(op));
      // The first operand's NaN wins when both are NaN.
      CHECK(fbits(into1<float>(bitsf(0x7fc00001), bitsf(0xffc00002), DType::kFloat32, op)) == 0x7fc00001u, "%s f32 %s(NaN1,NaN2)", I, reduce_op_name(op));
    }
    CHECK(into1<float>(-1.0f, INFINITY, DType::kFloat32, ReduceOp::kMin) == -1.0f, "%s f32 min(-1,inf)", I);
    CHECK(into1<float>(-1.0f, INFINITY, DType::kFloat32, ReduceOp::kMax) == INFINITY, "%s f32 max(-1,inf)", I);
    CHECK(std::isnan(into1<float>(INFINITY, -INFINITY, DType::kFloat32, ReduceOp::kSum)), "%s f32 inf-inf", I);
    // float16: 1 + 2^-11 is a tie between 1 and 1+2^-10 -> even (1); 1+2^-10 + 2^-11 -> 1+2^-9.
    CHECK(into1<uint16_t>(0x3c00, 0x1000, DType::kFloat16, ReduceOp::kSum) == 0x3c00, "%s f16 tie to even (down)", I);
    CHECK(into1<uint16_t>(0x3c01, 0x1000, DType::kFloat16, ReduceOp::kSum) == 0x3c02, "%s f16 tie to even (up)", I);
    CHECK(into1<uint16_t>(0x7bff, 0x7bff, DType::kFloat16, ReduceOp::kSum) == 0x7c00, "%s f16 overflow to inf", I);
    CHECK(into1<uint16_t>(0x0001, 0x0001, DType::kFloat16, ReduceOp::kSum) == 0x0002, "%s f16 subnormal sum", I);
    CHECK(into1<uint16_t>(0x0001, 0x3800, DType::kFloat16, ReduceOp::kProduct) == 0x0000, "%s f16 2^-24*0.5 ties to 0", I);
    CHECK(into1<uint16_t>(0x0003, 0x3800, DType::kFloat16, ReduceOp::kProduct) == 0x0002, "%s f16 3*2^-24*0.5 ties to 2", I);
    // bfloat16: 1 + 2^-8 is a tie -> 1; largest finite doubled -> inf; a NaN stays a NaN.
    CHECK(into1<uint16_t>(0x3f80, 0x3b80, DType::kBFloat16, ReduceOp::kSum) == 0x3f80, "%s bf16 tie to even", I);
    CHECK(into1<uint16_t>(0x7f7f, 0x7f7f, DType::kBFloat16, ReduceOp::kSum) == 0x7f80, "%s bf16 overflow to inf", I);
    CHECK((into1<uint16_t>(0x7f81, 0x3f80, DType::kBFloat16, ReduceOp::kSum) & 0x7fff) > 0x7f80, "%s bf16 sNaN + 1 is NaN", I);
    CHECK((into1<uint16_t>(0xff81, 0x0000, DType::kBFloat16, ReduceOp::kProduct) & 0x7fff) > 0x7f80, "%s bf16 -sNaN * 0 is NaN", I);
    // scale/divide spot checks.
    int8_t i8[4] = {5, -5, 127, -128};
    scale(i8, 4, DType::kInt8, 0.5);  // 2.5 -> 2, -2.5 -> -2, 63.5 -> 63, -64 (toward zero)
    CHECK(i8[0] == 2 && i8[1] == -2 && i8[2] == 63 && i8[3] == -64, "%s int8 scale 0.5: %d %d %d %d", I, i8[0], i8[1], i8[2], i8[3]);
    scale(i8, 4, DType::kInt8, 100.0);  // saturates
    CHECK(i8[0] == 127 && i8[1] == -128, "%s int8 scale saturates: %d %d", I, i8[0], i8[1]);
    int32_t i32[3] = {7, -7, INT32_MIN};
    divide(i32, 3, DType::kInt32, 2);
    CHECK(i32[0] == 3 && i32[1] == -3 && i32[2] == INT32_MIN / 2, "%s int32 divide truncates", I);
    int32_t m32 = INT32_MIN;
    divide(&m32, 1, DType::kInt32, -1);
    CHECK(m32 == INT32_MIN, "%s int32 MIN / -1 wraps", I);
    int64_t i64[4] = {-9, 9, INT64_MIN, INT64_MAX};
    divide(i64, 4, DType::kInt64, 4);
    CHECK(i64[0] == -2 && i64[1] == 2 && i64[2] == INT64_MIN / 4 && i64[3] == INT64_MAX / 4, "%s int64 divide by 4", I);
    uint8_t u8 = 200;
    divide(&u8, 1, DType::kUInt8, -1);
    CHECK(u8 == 56, "%s uint8 200 / -1 wraps to 56, got %d", I, u8);
    int64_t big = (int64_t{1} << 53) + 1;
    scale(&big, 1, DType::kInt64, 1.0);
    CHECK(big == (int64_t{1} << 53) + 1, "%s int64 scale(1.0) is a no-op", I);
  }
  // Invalid arguments.
  bool threw = false;
  try {
    reduce_into(nullptr, nullptr, nullptr, 0, static_cast<DType>(99), ReduceOp::kSum);
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::kInvalidArgument;
  }
  CHECK(threw, "invalid dtype must throw");
  threw = false;
  try {
    reduce_inplace(nullptr, nullptr, 0, DType::kFloat32, static_cast<ReduceOp>(-1));
  } catch (const Error& e) {
    threw = e.kind() == ErrorKind::kInvalidArgument;
  }
  CHECK(threw, "invalid op must throw");
  // Names.
  const char* tn[] = {"uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32", "float64", "int16", "uint16"};
  static_assert(sizeof(tn) / sizeof(tn[0]) == kNumDTypes, "a name for every dtype");
  for (int i = 0; i < kNumDTypes; ++i) CHECK(std::strcmp(dtype_name(static_cast<DType>(i)), tn[i]) == 0, "dtype_name(%d)", i);
  const char* on[] = {"Sum", "Average", "Min", "Max", "Product"};
  for (int i = 0; i < kNumReduceOps; ++i) CHECK(std::strcmp(reduce_op_name(static_cast<ReduceOp>(i)), on[i]) == 0, "reduce_op_name(%d)", i);
}

// ------------------------------------------------------------------------------------------------
// Conversions, straight from each ISA's table.

void test_conversions(bool exhaustive) {
#if defined(__FLT16_MAX__)
  // First make sure the reference agrees with the compiler's own float16 conversions.
  for (uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7fff) > 0x7c00) continue;
    _Float16 x;
    std::memcpy(&x, &h, 2);
    CHECK(fbits(static_cast<float>(x)) == fbits(ref_f16_to_f32(static_cast<uint16_t>(h))), "ref f16->f32 0x%x", h);
  }
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 4093) {
    const float f = bitsf(static_cast<uint32_t>(u));
    if (std::isnan(f)) continue;
    _Float16 x = static_cast<_Float16>(f);
    uint16_t h;
    std::memcpy(&h, &x, 2);
    CHECK(h == ref_f32_to_f16(f), "ref f32->f16 0x%08x: _Float16 0x%04x ref 0x%04x", static_cast<uint32_t>(u), h, ref_f32_to_f16(f));
  }
#endif
  // float32 inputs to check: a stride through all patterns plus, around every float16/bfloat16
  // rounding midpoint, the midpoint itself and its neighbours.
  std::vector<float> probe;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 997) probe.push_back(bitsf(static_cast<uint32_t>(u)));
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t s : {0u, 0x8000u}) {
      const double lo = ref_f16_to_f32(static_cast<uint16_t>(h | s));
      const double hi = h + 1 == 0x7c00 ? (s ? -65536.0 : 65536.0) : ref_f16_to_f32(static_cast<uint16_t>((h + 1) | s));
      const uint32_t mid = fbits(static_cast<float>((lo + hi) / 2));  // exact in float32
      for (int d = -2; d <= 2; ++d) probe.push_back(bitsf(mid + d));
    }
  }
  for (uint32_t h = 0; h < 0x7f80; h += 1) {
    const uint32_t mid = (h << 16) | 0x8000u;
    for (int d = -1; d <= 1; ++d) {
      probe.push_back(bitsf(mid + d));
      probe.push_back(bitsf((mid + d) | 0x80000000u));
    }
  }
  for (uint32_t nan : {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0xff800001u, 0x7f802000u, 0x7fbfe000u, 0x7f800000u, 0xff800000u})
    probe.push_back(bitsf(nan));
  std::vector<uint16_t> want16(probe.size()), wantbf(probe.size());
  for (size_t i = 0; i < probe.size(); ++i) {
    want16[i] = ref_f32_to_f16(probe[i]);
    wantbf[i] = ref_f32_to_bf16(probe[i]);
  }
  std::vector<uint16_t> all16(65536);
  for (uint32_t h = 0; h < 65536; ++h) all16[h] = static_cast<uint16_t>(h);

  for (const std::string& isa : g_isas) {
    const KernelTable* kt = reduce_detail::table_for_isa(isa.c_str());
    const char* I = isa.c_str();
    // float16 -> float32, all patterns, NaN payloads exact; unaligned source (odd address).
    std::vector<uint8_t> raw(2 * 65536 + 1);
    std::memcpy(raw.data() + 1, all16.data(), 2 * 65536);
    std::vector<float> f(65536);
    kt->f16_to_f32(raw.data() + 1, f.data(), 65536);
    long bad = 0;
    for (uint32_t h = 0; h < 65536; ++h)
      if (fbits(f[h]) != fbits(ref_f16_to_f32(static_cast<uint16_t>(h))) && bad++ < 3)
        CHECK(false, "%s f16->f32 0x%04x: got 0x%08x want 0x%08x", I, h, fbits(f[h]), fbits(ref_f16_to_f32(static_cast<uint16_t>(h))));
    CHECK(bad == 0, "%s f16->f32: %ld mismatches", I, bad);
    kt->bf16_to_f32(raw.data() + 1, f.data(), 65536);
    bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) bad += fbits(f[h]) != fbits(ref_bf16_to_f32(static_cast<uint16_t>(h)));
    CHECK(bad == 0, "%s bf16->f32: %ld mismatches", I, bad);
    // float32 -> float16/bfloat16 on the probes, odd destination address.
    std::vector<uint8_t> out(2 * probe.size() + 1);
    for (int which = 0; which < 2; ++which) {
      (which == 0 ? kt->f32_to_f16 : kt->f32_to_bf16)(probe.data(), out.data() + 1, probe.size());
      const std::vector<uint16_t>& want = which == 0 ? want16 : wantbf;
      bad = 0;
      for (size_t i = 0; i < probe.size(); ++i) {
        uint16_t g;
        std::memcpy(&g, out.data() + 1 + 2 * i, 2);
        if (g != want[i] && bad++ < 3)
          CHECK(false, "%s f32->%s 0x%08x: got 0x%04x want 0x%04x", I, which ? "bf16" : "f16", fbits(probe[i]), g, want[i]);
      }
      CHECK(bad == 0, "%s f32->%s: %ld mismatches of %zu", I, which ? "bf16" : "f16", bad, probe.size());
    }
    // Tails of every length up to 40 (masked / padded paths).
    for (size_t n = 0; n <= 40; ++n) {
      std::vector<uint8_t> o(2 * n + 4, 0xee);
      kt->f32_to_f16(probe.data() + 12345, o.data() + 1, n);
      CHECK(o[0] == 0xee && o[2 * n + 1] == 0xee, "%s f32->f16 tail %zu wrote outside", I, n);
      for (size_t i = 0; i < n; ++i) {
        uint16_t g;
        std::memcpy(&g, o.data() + 1 + 2 * i, 2);
        CHECK(g == want16[12345 + i], "%s f32->f16 tail n=%zu i=%zu", I, n, i);
      }
      std::vector<float> fo(n + 2, -7.0f);
      kt->f16_to_f32(raw.data() + 1 + 2 * 30000, fo.data() + 1, n);
      CHECK(fo[0] == -7.0f && fo[n + 1] == -7.0f, "%s f16->f32 tail %zu wrote outside", I, n);
      for (size_t i = 0; i < n; ++i) CHECK(fbits(fo[1 + i]) == fbits(ref_f16_to_f32(static_cast<uint16_t>(30000 + i))), "%s f16->f32 tail", I);
    }
  }
  if (exhaustive) {
    // All 2^32 float32 patterns: every ISA must match the first one (normally the baseline's
    // software conversion) bit for bit, and the first must match the compiler's _Float16.
    std::printf("  exhaustive float32 -> float16/bfloat16 on %zu ISAs...\n", g_isas.size());
    std::fflush(stdout);
    const size_t kChunk = size_t{1} << 20;
    std::vector<float> src(kChunk);
    std::vector<uint16_t> first16(kChunk), firstbf(kChunk), o16(kChunk), obf(kChunk);
    std::vector<long> bad16(g_isas.size()), badbf(g_isas.size());
    long bad_cc = 0;
    for (uint64_t base = 0; base < (uint64_t{1} << 32); base += kChunk) {
      for (size_t i = 0; i < kChunk; ++i) src[i] = bitsf(static_cast<uint32_t>(base + i));
      for (size_t k = 0; k < g_isas.size(); ++k) {
        const KernelTable* kt = reduce_detail::table_for_isa(g_isas[k].c_str());
        uint16_t* d16 = k == 0 ? first16.data() : o16.data();
        uint16_t* dbf = k == 0 ? firstbf.data() : obf.data();
        kt->f32_to_f16(src.data(), d16, kChunk);
        kt->f32_to_bf16(src.data(), dbf, kChunk);
        if (k == 0) continue;
        for (size_t i = 0; i < kChunk; ++i) {
          bad16[k] += o16[i] != first16[i];
          badbf[k] += obf[i] != firstbf[i];
        }
      }
#if defined(__FLT16_MAX__)
      for (size_t i = 0; i < kChunk; ++i) {
        if (std::isnan(src[i])) continue;
        const _Float16 x = static_cast<_Float16>(src[i]);
        uint16_t h;
        std::memcpy(&h, &x, 2);
        bad_cc += h != first16[i];
      }
#endif
    }
    for (size_t k = 1; k < g_isas.size(); ++k)
      CHECK(bad16[k] == 0 && badbf[k] == 0, "exhaustive %s vs %s: %ld f16 and %ld bf16 mismatches", g_isas[k].c_str(),
            g_isas[0].c_str(), bad16[k], badbf[k]);
    CHECK(bad_cc == 0, "exhaustive %s vs _Float16: %ld mismatches", g_isas[0].c_str(), bad_cc);
  }
}

// ------------------------------------------------------------------------------------------------
// Timing.

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <class Fn>
double best_of(int reps, Fn fn) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double t0 = seconds_now();
    fn();
    const double t = seconds_now() - t0;
    if (t < best) best = t;
  }
  return best;
}

void bench() {
  const size_t kBytes = size_t{64} << 20;
  std::vector<uint8_t> a(kBytes + 64), b(kBytes + 64), c(kBytes + 64), d(kBytes + 64);
  Rng rng(9);
  fill_random(DType::kFloat32, a.data(), kBytes / 4, rng, false);
  fill_random(DType::kFloat32, b.data(), kBytes / 4, rng, false);
  fill_random(DType::kFloat32, c.data(), kBytes / 4, rng, false);
  fill_random(DType::kFloat32, d.data(), kBytes / 4, rng, false);
  std::vector<uint8_t> h1(kBytes / 2), h2(kBytes / 2);
  fill_random(DType::kFloat16, h1.data(), kBytes / 4, rng, false);
  fill_random(DType::kFloat16, h2.data(), kBytes / 4, rng, false);
  const double MB = double(kBytes);
  std::printf("\nTimings (best of 7, 64 MiB per buffer; 'GB/s' = buffer bytes / time, traffic in parentheses):\n");
  for (const std::string& isa : g_isas) {
    reduce_detail::force_isa(isa.c_str());
    const double t_sum = best_of(7, [&] { reduce_inplace(a.data(), b.data(), kBytes / 4, DType::kFloat32, ReduceOp::kSum); });
    const double t_sum_u = best_of(7, [&] { reduce_inplace(a.data() + 1, b.data() + 3, kBytes / 4, DType::kFloat32, ReduceOp::kSum); });
    const double t_max = best_of(7, [&] { reduce_inplace(a.data(), b.data(), kBytes / 4, DType::kFloat32, ReduceOp::kMax); });
    const double t_f16 = best_of(7, [&] { reduce_inplace(h1.data(), h2.data(), kBytes / 4, DType::kFloat16, ReduceOp::kSum); });
    const double t_bf16 = best_of(7, [&] { reduce_inplace(h1.data(), h2.data(), kBytes / 4, DType::kBFloat16, ReduceOp::kSum); });
    const void* ins[4] = {a.data(), b.data(), c.data(), d.data()};
    const double t_many = best_of(7, [&] { reduce_many(a.data(), ins, 4, kBytes / 4, DType::kFloat32, ReduceOp::kSum); });
    const double t_scale = best_of(7, [&] { scale(a.data(), kBytes / 4, DType::kFloat32, 0.999); });
    std::printf("  %-8s f32 Sum inplace       %6.2f GB/s (%6.2f GB/s traffic)\n", isa.c_str(), MB / t_sum / 1e9, 3 * MB / t_sum / 1e9);
    std::printf("  %-8s f32 Sum unaligned     %6.2f GB/s\n", isa.c_str(), MB / t_sum_u / 1e9);
    std::printf("  %-8s f32 Max inplace       %6.2f GB/s\n", isa.c_str(), MB / t_max / 1e9);
    std::printf("  %-8s f16 Sum inplace (32 MiB buffers)  %6.2f GB/s\n", isa.c_str(), MB / 2 / t_f16 / 1e9);
    std::printf("  %-8s bf16 Sum inplace (32 MiB buffers) %6.2f GB/s\n", isa.c_str(), MB / 2 / t_bf16 / 1e9);
    std::printf("  %-8s f32 reduce_many n=4   %6.2f GB/s of output (%6.2f GB/s traffic)\n", isa.c_str(), MB / t_many / 1e9, 5 * MB / t_many / 1e9);
    std::printf("  %-8s f32 scale             %6.2f GB/s\n", isa.c_str(), MB / t_scale / 1e9);
  }
  // A plain memcpy, as the machine's yardstick.
  const double t_cpy = best_of(7, [&] { std::memcpy(a.data(), b.data(), kBytes); });
  std::printf("  memcpy 64 MiB            %6.2f GB/s (%6.2f GB/s traffic)\n", MB / t_cpy / 1e9, 2 * MB / t_cpy / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false, exhaustive = false, do_bench = true;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--quick") quick = true;
    else if (arg == "--exhaustive") exhaustive = true;
    else if (arg == "--no-bench") do_bench = false;
    else if (arg.rfind("--isa=", 0) == 0) only.push_back(arg.substr(6));
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--exhaustive] [--no-bench] [--isa=NAME]...\n", argv[0]);
      return 2;
    }
  }
  std::printf("dispatcher picked: %s\n", reduce_isa());
  for (const char* isa : {"baseline", "avx2", "avx512"}) {
    const bool runs = reduce_detail::table_for_isa(isa) != nullptr;
    bool wanted = only.empty();
    for (const std::string& o : only) wanted = wanted || o == isa;
    std::printf("  %-8s %s\n", isa, runs ? (wanted ? "tested" : "available, skipped") : "not available");
    if (runs && wanted) g_isas.push_back(isa);
  }
  if (g_isas.empty()) {
    std::fprintf(stderr, "no ISA to test\n");
    return 2;
  }
  std::vector<size_t> counts = {0, 1, 7, 1000};
  if (!quick) counts.push_back(1000003);
  const double t0 = seconds_now();
  test_specials();
  std::printf("specials done (%.1fs)\n", seconds_now() - t0);
  test_conversions(exhaustive);
  std::printf("conversions done (%.1fs)\n", seconds_now() - t0);
  test_reduce_into(counts);
  std::printf("reduce_into done (%.1fs)\n", seconds_now() - t0);
  test_reduce_many(!quick);
  std::printf("reduce_many done (%.1fs)\n", seconds_now() - t0);
  test_scale_divide(counts);
  std::printf("scale/divide done (%.1fs)\n", seconds_now() - t0);
  std::fflush(stdout);
  std::printf("%ld checks, %ld failures\n", g_checks, g_failures);
  if (do_bench && g_failures == 0) bench();
  return g_failures == 0 ? 0 : 1;
}
