#include "common/types.h"

namespace shvd {

const char* dtype_name(DType t) {
#define SHVD_DTYPE_NAME(enumerator, code, name, bytes) name,
  static constexpr const char* kNames[] = {SHVD_DTYPES(SHVD_DTYPE_NAME)};
#undef SHVD_DTYPE_NAME
  return is_dtype(int64_t(t)) ? kNames[int(t)] : "unknown";
}

const char* supported_dtypes() {
#define SHVD_DTYPE_LISTED(enumerator, code, name, bytes) ", " name
  static const char* const text = &(SHVD_DTYPES(SHVD_DTYPE_LISTED))[2];
#undef SHVD_DTYPE_LISTED
  return text;
}

const char* reduce_op_name(ReduceOp op) {
#define SHVD_OP_NAME(enumerator, code, python_name, name) name,
  static constexpr const char* kNames[] = {SHVD_REDUCE_OPS(SHVD_OP_NAME)};
#undef SHVD_OP_NAME
  return is_reduce_op(int64_t(op)) ? kNames[int(op)] : "unknown";
}

}  // namespace shvd
