// Element types, reduce operations and collective kinds shared by every layer of the native core.
//
// Each is defined once, as a table: the enum, its names and sizes are generated from it, and so is the
// Python enum the binding exports, which every Python module imports instead of numbering codes
// itself. The codes are part of the wire format and of the binding: keep them stable.
#pragma once
#include <cstddef>
#include <cstdint>

namespace shvd {

// The codes of each table count up by one, in table order (dtypes and ops from 0, kinds from 1): names
// are looked up by code.

// X(enumerator, code, Python name, bytes per element)
#define SHVD_DTYPES(X)          \
  X(kUInt8, 0, "uint8", 1)      \
  X(kInt8, 1, "int8", 1)        \
  X(kInt32, 2, "int32", 4)      \
  X(kInt64, 3, "int64", 8)      \
  X(kFloat16, 4, "float16", 2)  \
  X(kBFloat16, 5, "bfloat16", 2) \
  X(kFloat32, 6, "float32", 4)  \
  X(kFloat64, 7, "float64", 8)  \
  X(kInt16, 8, "int16", 2)      \
  X(kUInt16, 9, "uint16", 2)

// X(enumerator, code, Python name, name in messages)
#define SHVD_REDUCE_OPS(X)            \
  X(kSum, 0, "SUM", "Sum")            \
  X(kAverage, 1, "AVERAGE", "Average") \
  X(kMin, 2, "MIN", "Min")            \
  X(kMax, 3, "MAX", "Max")            \
  X(kProduct, 4, "PRODUCT", "Product")

// X(enumerator, code, Python name, name in messages). kJoin is engine only: this rank ran out of data.
#define SHVD_COLLECTIVE_KINDS(X)                  \
  X(kAllreduce, 1, "ALLREDUCE", "allreduce")      \
  X(kAllgather, 2, "ALLGATHER", "allgather")      \
  X(kBroadcast, 3, "BROADCAST", "broadcast")      \
  X(kAlltoall, 4, "ALLTOALL", "alltoall")         \
  X(kReducescatter, 5, "REDUCESCATTER", "reducescatter") \
  X(kBarrier, 6, "BARRIER", "barrier")            \
  X(kJoin, 7, "JOIN", "join")

#define SHVD_ENUMERATOR(enumerator, code, ...) enumerator = code,
#define SHVD_COUNT(...) +1

enum class DType : int32_t { SHVD_DTYPES(SHVD_ENUMERATOR) };
enum class ReduceOp : int32_t { SHVD_REDUCE_OPS(SHVD_ENUMERATOR) };
enum class CollectiveKind : uint32_t { SHVD_COLLECTIVE_KINDS(SHVD_ENUMERATOR) };

constexpr int kNumDTypes = 0 SHVD_DTYPES(SHVD_COUNT);
constexpr int kNumReduceOps = 0 SHVD_REDUCE_OPS(SHVD_COUNT);

// Whether a number from a peer or a caller is a code of the table.
inline bool is_dtype(int64_t code) { return code >= 0 && code < kNumDTypes; }
inline bool is_reduce_op(int64_t code) { return code >= 0 && code < kNumReduceOps; }
inline bool is_collective_kind(int64_t code) {
  switch (code) {
#define SHVD_KIND_CODE(enumerator, code, ...) case code:
    SHVD_COLLECTIVE_KINDS(SHVD_KIND_CODE)
#undef SHVD_KIND_CODE
    return true;
  }
  return false;
}

inline size_t dtype_size(DType t) {
  switch (t) {
#define SHVD_DTYPE_SIZE(enumerator, code, name, bytes) \
  case DType::enumerator:                              \
    return bytes;
    SHVD_DTYPES(SHVD_DTYPE_SIZE)
#undef SHVD_DTYPE_SIZE
  }
  return 0;
}

inline bool dtype_is_integer(DType t) {
  return t == DType::kUInt8 || t == DType::kInt8 || t == DType::kInt16 || t == DType::kUInt16 ||
         t == DType::kInt32 || t == DType::kInt64;
}

const char* dtype_name(DType t);
// "uint8, int8, ...": what collectives accept, in the one wording every error message uses.
const char* supported_dtypes();
const char* reduce_op_name(ReduceOp op);
const char* collective_name(CollectiveKind kind);
// The kind as the timeline's phase names it: "ALLREDUCE", ...
const char* collective_phase(CollectiveKind kind);
// The phase of a collective's negotiation, as Horovod's timeline names it: "NEGOTIATE_ALLREDUCE", ...
const char* negotiate_phase(CollectiveKind kind);

}  // namespace shvd
