#include "algorithms/call.h"

namespace shvd {

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
#define SHVD_KIND_NAME(enumerator, code, python_name, name) \
  case CollectiveKind::enumerator:                          \
    return name;
    SHVD_COLLECTIVE_KINDS(SHVD_KIND_NAME)
#undef SHVD_KIND_NAME
  }
  return "unknown collective";
}

const char* collective_phase(CollectiveKind kind) {
  switch (kind) {
#define SHVD_KIND_PHASE(enumerator, code, python_name, name) \
  case CollectiveKind::enumerator:                           \
    return python_name;
    SHVD_COLLECTIVE_KINDS(SHVD_KIND_PHASE)
#undef SHVD_KIND_PHASE
  }
  return "COLLECTIVE";
}

std::string call_label(const CallInfo& call) { return std::string(collective_name(call.kind)) + " '" + call.name + "'"; }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t element_count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

std::vector<int64_t> trailing_shape(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

size_t row_elements(const std::vector<int64_t>& shape) { return element_count(trailing_shape(shape)); }

size_t call_bytes(const CallInfo& call) { return element_count(call.shape) * dtype_size(call.dtype); }

}  // namespace shvd
