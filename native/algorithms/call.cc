#include "algorithms/call.h"

namespace shvd {

// Indexed by code: kinds count from 1.
#define SHVD_KIND_NAME(enumerator, code, python_name, name) name,
#define SHVD_KIND_PHASE(enumerator, code, python_name, name) python_name,
#define SHVD_NEGOTIATE_PHASE(enumerator, code, python_name, name) "NEGOTIATE_" python_name,
constexpr const char* kKindNames[] = {"unknown collective", SHVD_COLLECTIVE_KINDS(SHVD_KIND_NAME)};
constexpr const char* kKindPhases[] = {"COLLECTIVE", SHVD_COLLECTIVE_KINDS(SHVD_KIND_PHASE)};
constexpr const char* kNegotiatePhases[] = {"NEGOTIATE", SHVD_COLLECTIVE_KINDS(SHVD_NEGOTIATE_PHASE)};
#undef SHVD_KIND_NAME
#undef SHVD_KIND_PHASE
#undef SHVD_NEGOTIATE_PHASE

const char* collective_name(CollectiveKind kind) {
  return is_collective_kind(int64_t(kind)) ? kKindNames[int(kind)] : kKindNames[0];
}

const char* collective_phase(CollectiveKind kind) {
  return is_collective_kind(int64_t(kind)) ? kKindPhases[int(kind)] : kKindPhases[0];
}

const char* negotiate_phase(CollectiveKind kind) {
  return is_collective_kind(int64_t(kind)) ? kNegotiatePhases[int(kind)] : kNegotiatePhases[0];
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
