#include "algorithms/agreement.h"

#include <algorithm>
#include <map>
#include <string>

#include "algorithms/collective_op.h"
#include "common/error.h"

namespace shvd {
namespace {

// In the order they are checked: the first field that differs is the one reported.
enum class Field { kKind, kName, kDtype, kShape, kTrailingShape, kOp, kRoot, kScales };
constexpr Field kFields[] = {Field::kKind,          Field::kName, Field::kDtype, Field::kShape,
                             Field::kTrailingShape, Field::kOp,   Field::kRoot,  Field::kScales};

const char* field_name(Field field) {
  switch (field) {
    case Field::kKind: return "kind";
    case Field::kName: return "name";
    case Field::kDtype: return "dtype";
    case Field::kShape: return "shape";
    case Field::kTrailingShape: return "trailing shape";
    case Field::kOp: return "op";
    case Field::kRoot: return "root";
    case Field::kScales: break;
  }
  return "scales";
}

std::string describe_field(const CallInfo& c, Field field) {
  switch (field) {
    case Field::kKind: return collective_name(c.kind);
    case Field::kName: return "'" + c.name + "'";
    case Field::kDtype: return dtype_name(c.dtype);
    case Field::kShape:
    case Field::kTrailingShape: return shape_text(c.shape);
    case Field::kOp: return reduce_op_name(c.op);
    case Field::kRoot: return std::to_string(c.root);
    case Field::kScales: break;
  }
  return "prescale " + std::to_string(c.prescale) + ", postscale " + std::to_string(c.postscale);
}

bool trailing_shapes_differ(const CallInfo& a, const CallInfo& b) {
  if (a.shape.empty() || b.shape.empty()) return a.shape.size() != b.shape.size();
  return a.shape.size() != b.shape.size() || !std::equal(a.shape.begin() + 1, a.shape.end(), b.shape.begin() + 1);
}

// Runs on every call of every rank, so it compares fields, never their names.
bool differs(const CallInfo& a, const CallInfo& base, const AgreementRules& rules, Field field) {
  switch (field) {
    case Field::kKind: return a.kind != base.kind;
    case Field::kName: return a.name != base.name;
    case Field::kDtype: return rules.dtype && a.dtype != base.dtype;
    case Field::kShape: return rules.shape && a.shape != base.shape;
    case Field::kTrailingShape: return rules.trailing_shape && trailing_shapes_differ(a, base);
    case Field::kOp: return rules.op && a.op != base.op;
    case Field::kRoot: return rules.root && a.root != base.root;
    case Field::kScales: break;
  }
  return rules.scales && (a.prescale != base.prescale || a.postscale != base.postscale);
}

// "rank 0, 2: float32; rank 1: float64": ranks grouped by what they passed.
std::string who_passed_what(const std::vector<const CallInfo*>& calls, const std::vector<int>& ranks, Field field) {
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
  const AgreementRules& rules = op_for(base.kind).rules;
  for (const Field field : kFields) {
    bool any = false;
    for (const CallInfo* c : calls) any |= differs(*c, base, rules, field);
    if (!any) continue;
    const CallInfo& me = *calls[mine];
    fail(ErrorKind::kMismatch, std::string("ranks disagree on the ") + field_name(field) + " of " + call_label(me) +
                                   " (call #" + std::to_string(me.seq) + "): " + who_passed_what(calls, ranks, field));
  }
}

}  // namespace shvd
