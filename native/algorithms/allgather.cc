// Allgather: every rank's rows, concatenated along the first dimension in rank order. First
// dimensions may differ between ranks; the other dimensions must agree.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/collective_op.h"
#include "algorithms/ring.h"

namespace shvd {

void ring_allgatherv(Mesh& mesh, uint8_t* out, const std::vector<size_t>& byte_offset,
                     const std::vector<size_t>& byte_len, const CollectiveOptions& opts) {
  if (mesh.size() == 1) return;
  RingItems ring(mesh.size());
  // Shift -1: the first block this rank sends is its own. Blocks are numbered by ring position.
  add_ring_allgather(ring.sends, ring.recvs, host_ordered_ring(mesh), out, in_ring_order(mesh, byte_offset),
                     in_ring_order(mesh, byte_len), -1, nullptr);
  ring.run(mesh, opts);
}

namespace {

// Where each rank's rows go in the output.
struct AllgatherPlan {
  std::vector<size_t> byte_offset, byte_len;
  size_t total_rows = 0;
  size_t total_bytes = 0;
};

AllgatherPlan plan_allgather(const std::vector<int64_t>& first_dims, size_t row_bytes) {
  AllgatherPlan plan;
  for (int64_t rows : first_dims) {
    plan.byte_offset.push_back(plan.total_bytes);
    plan.byte_len.push_back(size_t(rows) * row_bytes);
    plan.total_rows += size_t(rows);
    plan.total_bytes += plan.byte_len.back();
  }
  return plan;
}

void validate_allgather(CallInfo& call, int) { require_rows(call); }

OwnedResult run_allgather(OpContext& ctx, const CallInfo& call, void* data, const Agreed& agreed) {
  const int me = ctx.mesh.rank();
  AllgatherPlan plan = plan_allgather(agreed.first_dims, dtype_size(call.dtype) * row_elements(call.shape));
  OwnedResult out;
  out.shape = call.shape;
  out.shape[0] = int64_t(plan.total_rows);
  out.data.reset(new uint8_t[std::max<size_t>(plan.total_bytes, 1)]);
  std::memcpy(out.data.get() + plan.byte_offset[me], data, plan.byte_len[me]);
  // Every rank sees the same blocks, so every rank makes the same choice here.
  if (all_inline(agreed, [&](int r) { return plan.byte_len[r]; })) {
    for (int r = 0; r < ctx.mesh.size(); ++r) {
      if (r != me) std::memcpy(out.data.get() + plan.byte_offset[r], agreed.inline_data[r].data, plan.byte_len[r]);
    }
  } else {
    ring_allgatherv(ctx.mesh, out.data.get(), plan.byte_offset, plan.byte_len, ctx.options);
  }
  return out;
}

}  // namespace

// First dimensions may differ: they are what the ranks gather.
const CollectiveOp kAllgatherOp{agree_on(kDtype | kTrailingShape), kNotCacheable, kReturnsResult, validate_allgather,
                                offer_tensor, run_allgather};

}  // namespace shvd
