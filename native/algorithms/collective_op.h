// One collective's whole contract, defined once in its own file (allreduce.cc, allgather.cc, ...) and
// run by both drivers: the communicator's direct calls and the engine.
//
// A driver validates the request (validate_call), lets the op prepare this rank's tensor, agrees with
// the other ranks (the communicator's descriptor round, or the engine's negotiation), and then runs
// the op with what the ranks agreed on. A new collective, or a changed rule, is one edit in one file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/agreement.h"
#include "algorithms/call.h"
#include "algorithms/collective_options.h"
#include "common/byte_buffer.h"
#include "transport/mesh.h"

namespace shvd {

// A call whose tensors, summed over the peers, stay under this many bytes goes to every peer at once
// (inside the descriptor round, for direct calls) and each rank combines them locally in rank order:
// one round instead of 2(p-1) ring steps.
constexpr size_t kSmallCallBytes = 64 << 10;
inline bool is_small_call(size_t bytes, int size) { return bytes * size_t(size - 1) <= kSmallCallBytes; }

// Memory an op allocated for a result whose size only the peers know (allgather, alltoall, reducescatter).
struct OwnedResult {
  std::unique_ptr<uint8_t[]> data;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;  // alltoall: rows received from each rank
};

// Bytes one rank sent inside the descriptor round.
struct InlineBytes {
  const uint8_t* data = nullptr;
  size_t len = 0;
};

// What the ranks agreed on that may differ between them, in rank order.
struct Agreed {
  std::vector<int64_t> first_dims;    // allgather: every rank's first dimension
  std::vector<int64_t> split_matrix;  // alltoall: row r holds rank r's splits
  // Direct calls: what every rank sent inside the descriptor round. Empty for the engine.
  std::vector<InlineBytes> inline_data;
};
// The per-rank parts of a call, from every rank's request (by_rank[r] is rank r's, for r < size).
Agreed agreed_from(CollectiveKind kind, const CallInfo* const* by_rank, size_t size);
// The same into `agreed`, whose buffers are reused (direct calls keep one from call to call).
void fill_agreed(CollectiveKind kind, const CallInfo* const* by_rank, size_t size, Agreed& agreed);

// Where an op runs, and the buffers it may reuse from one call to the next.
struct OpContext {
  Mesh& mesh;
  CollectiveOptions options;
  ByteBuffer& slots;  // every rank's copy of a small allreduce
  ByteBuffer& work;   // reducescatter's working copy of its input
  // An allreduce's input when it is not the output (the engine's out-of-place requests), or nullptr.
  // An op that cannot read it where it is copies it into the output first and clears this.
  const void* source = nullptr;
};

// Each op's file defines one, in this field order.
struct CollectiveOp {
  AgreementRules rules;
  // Identical on every rank, so the engine's response cache may name a repeat by a small id.
  bool cacheable;
  // The op allocates its output (OwnedResult); otherwise it works in place, or has no tensor.
  bool returns_result;
  // Checks one rank can make alone, before anything is sent; may complete the call (even splits).
  // nullptr: none.
  void (*validate)(CallInfo& call, int size);
  // Readies this rank's tensor (prescaling, a working copy) and offers the bytes a direct call may send
  // inside the descriptor round; data == nullptr offers none.
  InlineBytes (*prepare)(OpContext& ctx, const CallInfo& call, void* data);
  // Moves the data once every rank agreed. `call` is this rank's request. nullptr: nothing runs (join).
  OwnedResult (*run)(OpContext& ctx, const CallInfo& call, void* data, const Agreed& agreed);
};
enum : bool { kNotCacheable = false, kCacheable = true };
enum : bool { kInPlace = false, kReturnsResult = true };

// For ops without a tensor to offer (alltoall's splits differ between ranks; barrier and join have none).
InlineBytes offer_nothing(OpContext& ctx, const CallInfo& call, void* data);
// For ops that offer the tensor as it is.
InlineBytes offer_tensor(OpContext& ctx, const CallInfo& call, void* data);

// The ops, one per file.
extern const CollectiveOp kAllreduceOp, kAllgatherOp, kBroadcastOp, kAlltoallOp, kReducescatterOp, kBarrierOp,
    kJoinOp;
const CollectiveOp& op_for(CollectiveKind kind);

// The local checks of every call, then its op's own; throws kInvalidArgument naming the call.
void validate_call(CallInfo& call, int size);
// For an op's validate: the call needs a first dimension to split or gather along.
void require_rows(const CallInfo& call);

// Direct calls whose tensors all came inside the descriptor round: reduces `count` elements at byte
// `offset` of every rank's copy into this rank's `local` copy, in rank order, so every rank gets the
// same bits.
void reduce_inline(const Agreed& agreed, int me, uint8_t* local, size_t offset, size_t count, DType dtype, ReduceOp op);
// Whether every rank's tensor arrived inside the descriptor round, each `expected(r)` bytes long.
template <typename Expected>
bool all_inline(const Agreed& agreed, Expected expected) {
  if (agreed.inline_data.empty()) return false;
  for (size_t r = 0; r < agreed.inline_data.size(); ++r) {
    if (agreed.inline_data[r].len != expected(int(r))) return false;
  }
  return true;
}

}  // namespace shvd
