// The one check that every rank asked for the same collective, used by direct calls (after the
// descriptor round), by the engine's coordinator and by the MPI backend (through the binding). Each
// op says which fields must agree (CollectiveOp::rules); a disagreement becomes the same clear error
// on every rank instead of a hang or garbage.
#pragma once
#include <cstddef>
#include <vector>

#include "algorithms/call.h"

namespace shvd {

// Which fields must agree across ranks for one kind of collective.
struct AgreementRules {
  bool dtype = false;
  bool shape = false;           // the whole shape
  bool trailing_shape = false;  // all but the first dimension
  bool op = false;
  bool root = false;
  bool scales = false;
};

// The rules from a set of fields: agree_on(kDtype | kShape) reads as what it says.
enum AgreedField : unsigned { kDtype = 1, kShape = 2, kTrailingShape = 4, kOp = 8, kRoot = 16, kScales = 32 };
constexpr AgreementRules agree_on(unsigned fields) {
  return AgreementRules{(fields & kDtype) != 0, (fields & kShape) != 0, (fields & kTrailingShape) != 0,
                        (fields & kOp) != 0,    (fields & kRoot) != 0,  (fields & kScales) != 0};
}

// Throws kMismatch, naming the tensor, the field and what each rank passed, if the calls disagree.
// calls[i] came from rank ranks[i]; calls[mine] is this rank's, whose name and number the message quotes.
void check_agreement(const std::vector<const CallInfo*>& calls, const std::vector<int>& ranks, size_t mine);

}  // namespace shvd
