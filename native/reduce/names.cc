#include "common/types.h"

namespace shvd {

const char* dtype_name(DType t) {
  switch (t) {
#define SHVD_DTYPE_NAME(enumerator, code, name, bytes) \
  case DType::enumerator:                              \
    return name;
    SHVD_DTYPES(SHVD_DTYPE_NAME)
#undef SHVD_DTYPE_NAME
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
#define SHVD_OP_NAME(enumerator, code, python_name, name) \
  case ReduceOp::enumerator:                              \
    return name;
    SHVD_REDUCE_OPS(SHVD_OP_NAME)
#undef SHVD_OP_NAME
  }
  return "unknown";
}

}  // namespace shvd
