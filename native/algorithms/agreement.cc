#include "algorithms/agreement.h"

#include <map>
#include <string>

#include "algorithms/collective_op.h"
#include "common/error.h"

namespace shvd {
namespace {

// In the order they are checked: the first field that differs is the one reported.
constexpr const char* kFields[] = {"kind", "name", "dtype", "shape", "trailing shape", "op", "root", "scales"};

std::string describe_field(const CallInfo& c, const std::string& field) {
  if (field == "kind") return collective_name(c.kind);
  if (field == "name") return "'" + c.name + "'";
  if (field == "dtype") return dtype_name(c.dtype);
  if (field == "shape" || field == "trailing shape") return shape_text(c.shape);
  if (field == "op") return reduce_op_name(c.op);
  if (field == "root") return std::to_string(c.root);
  return "prescale " + std::to_string(c.prescale) + ", postscale " + std::to_string(c.postscale);
}

bool trailing_shapes_differ(const CallInfo& a, const CallInfo& b) {
  if (a.shape.empty() || b.shape.empty()) return a.shape.size() != b.shape.size();
  return trailing_shape(a.shape) != trailing_shape(b.shape);
}

bool differs(const CallInfo& a, const CallInfo& base, const std::string& field) {
  const AgreementRules& rules = op_for(base.kind).rules;
  if (field == "kind") return a.kind != base.kind;
  if (field == "name") return a.name != base.name;
  if (field == "dtype") return rules.dtype && a.dtype != base.dtype;
  if (field == "shape") return rules.shape && a.shape != base.shape;
  if (field == "trailing shape") return rules.trailing_shape && trailing_shapes_differ(a, base);
  if (field == "op") return rules.op && a.op != base.op;
  if (field == "root") return rules.root && a.root != base.root;
  return rules.scales && (a.prescale != base.prescale || a.postscale != base.postscale);
}

// "rank 0, 2: float32; rank 1: float64": ranks grouped by what they passed.
std::string who_passed_what(const std::vector<const CallInfo*>& calls, const std::vector<int>& ranks,
                            const std::string& field) {
  std::map<std::string, std::string> groups;
  for (size_t i = 0; i < calls.size(); ++i) {
    std::string& who = groups[describe_field(*calls[i], field)];
    who += (who.empty() ? "" : ", ") + std::to_string(ranks[i]);
  }
  std::string detail;
  for (auto& [value, who] : groups) detail += (detail.empty() ? "" : "; ") + std::string("rank ") + who + ": " + value;
  return detail;
}

}  // namespace

void check_agreement(const std::vector<const CallInfo*>& calls, const std::vector<int>& ranks, size_t mine) {
  const CallInfo& base = *calls[0];
  for (const std::string field : kFields) {
    bool any = false;
    for (const CallInfo* c : calls) any |= differs(*c, base, field);
    if (!any) continue;
    const CallInfo& me = *calls[mine];
    fail(ErrorKind::kMismatch, "ranks disagree on the " + field + " of " + call_label(me) + " (call #" +
                                   std::to_string(me.seq) + "): " + who_passed_what(calls, ranks, field));
  }
}

}  // namespace shvd
