#include "algorithms/collective_op.h"

#include "common/error.h"
#include "reduce/reduce.h"

namespace shvd {

// A join has no data and no rules: the engine's coordinator counts it, and nothing runs.
const CollectiveOp kJoinOp{agree_on(0), kNotCacheable, kInPlace, nullptr, offer_nothing, nullptr};

InlineBytes offer_nothing(OpContext&, const CallInfo&, void*) { return {}; }

InlineBytes offer_tensor(OpContext&, const CallInfo& call, void* data) {
  return {static_cast<const uint8_t*>(data), call_bytes(call)};
}

void reduce_inline(const Agreed& agreed, int me, uint8_t* local, size_t offset, size_t count, DType dtype, ReduceOp op) {
  std::vector<const void*> inputs(agreed.inline_data.size());
  for (size_t r = 0; r < inputs.size(); ++r) {
    inputs[r] = (int(r) == me ? local : agreed.inline_data[r].data) + offset;
  }
  reduce_many(local + offset, inputs.data(), inputs.size(), count, dtype, op);
}

const CollectiveOp& op_for(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return kAllreduceOp;
    case CollectiveKind::kAllgather: return kAllgatherOp;
    case CollectiveKind::kBroadcast: return kBroadcastOp;
    case CollectiveKind::kAlltoall: return kAlltoallOp;
    case CollectiveKind::kReducescatter: return kReducescatterOp;
    case CollectiveKind::kBarrier: return kBarrierOp;
    case CollectiveKind::kJoin: return kJoinOp;
  }
  fail(ErrorKind::kInvalidArgument, "unknown collective kind " + std::to_string(uint32_t(kind)));
}

void validate_call(CallInfo& call, int size) {
  for (int64_t d : call.shape) {
    if (d < 0) fail(ErrorKind::kInvalidArgument, call_label(call) + ": negative dimension in shape " + shape_text(call.shape));
  }
  const CollectiveOp& op = op_for(call.kind);
  if (op.validate) op.validate(call, size);
}

void require_rows(const CallInfo& call) {
  if (call.shape.empty()) fail(ErrorKind::kInvalidArgument, call_label(call) + " needs a tensor with at least one dimension");
}

void fill_agreed(CollectiveKind kind, const CallInfo* const* by_rank, size_t size, Agreed& agreed) {
  agreed.first_dims.clear();
  agreed.split_matrix.clear();
  agreed.inline_data.clear();
  for (size_t r = 0; r < size && kind == CollectiveKind::kAllgather; ++r) {
    agreed.first_dims.push_back(by_rank[r]->shape.empty() ? 0 : by_rank[r]->shape[0]);
  }
  for (size_t r = 0; r < size && kind == CollectiveKind::kAlltoall; ++r) {
    agreed.split_matrix.insert(agreed.split_matrix.end(), by_rank[r]->splits.begin(), by_rank[r]->splits.end());
  }
}

Agreed agreed_from(CollectiveKind kind, const CallInfo* const* by_rank, size_t size) {
  Agreed agreed;
  fill_agreed(kind, by_rank, size, agreed);
  return agreed;
}

}  // namespace shvd
