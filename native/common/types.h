// Element types and reduce operations shared by every layer of the native core.
// The numeric values are part of the Python binding's contract: keep them stable.
#pragma once
#include <cstddef>
#include <cstdint>

namespace shvd {

enum class DType : int32_t {
  kUInt8 = 0,
  kInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat16 = 4,
  kBFloat16 = 5,
  kFloat32 = 6,
  kFloat64 = 7,
};
constexpr int kNumDTypes = 8;

enum class ReduceOp : int32_t {
  kSum = 0,
  kAverage = 1,
  kMin = 2,
  kMax = 3,
  kProduct = 4,
};
constexpr int kNumReduceOps = 5;

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::kUInt8:
    case DType::kInt8: return 1;
    case DType::kFloat16:
    case DType::kBFloat16: return 2;
    case DType::kInt32:
    case DType::kFloat32: return 4;
    case DType::kInt64:
    case DType::kFloat64: return 8;
  }
  return 0;
}

inline bool dtype_is_integer(DType t) {
  return t == DType::kUInt8 || t == DType::kInt8 || t == DType::kInt32 || t == DType::kInt64;
}

const char* dtype_name(DType t);
const char* reduce_op_name(ReduceOp op);

}  // namespace shvd
