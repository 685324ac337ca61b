// Reducescatter: the reduction of every rank's tensor, of which rank r keeps its share of the first
// dimension (the first rows % size ranks get one row more). The input stays intact: the reduction
// works on a copy.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/collective_op.h"
#include "algorithms/ring.h"
#include "reduce/reduce.h"

namespace shvd {

void ring_reducescatter(Mesh& mesh, void* data, const std::vector<size_t>& elem_offset,
                        const std::vector<size_t>& elem_count, DType dtype, ReduceOp op,
                        const CollectiveOptions& opts, const Finish& finish) {
  if (mesh.size() == 1) {
    apply_finish(static_cast<uint8_t*>(data) + elem_offset[0] * dtype_size(dtype), elem_count[0], dtype, finish);
    return;
  }
  RingItems ring(mesh.size());
  // Shift -1 so that each ring position ends holding its own rank's chunk (chunks listed in ring order).
  add_ring_reduce_scatter(ring.sends, ring.recvs, host_ordered_ring(mesh), static_cast<uint8_t*>(data),
                          in_ring_order(mesh, elem_offset), in_ring_order(mesh, elem_count), dtype, op, -1);
  // The last receive completes this rank's chunk: it is finished piece by piece as it is reduced.
  ring.recvs.back().finish = finish;
  ring.run(mesh, opts);
}

namespace {

void validate_reducescatter(CallInfo& call, int) { require_rows(call); }

// Each rank's share, in elements.
struct ReducescatterPlan {
  std::vector<size_t> elem_offset, elem_count;
  std::vector<size_t> rows;
};

ReducescatterPlan plan_reducescatter(const CallInfo& call, int size) {
  const size_t row_elems = row_elements(call.shape);
  Partition parts = split_rows(size_t(call.shape[0]), size);
  ReducescatterPlan plan;
  for (int i = 0; i < size; ++i) {
    plan.elem_offset.push_back(parts.offset[i] * row_elems);
    plan.elem_count.push_back(parts.rows[i] * row_elems);
  }
  plan.rows = std::move(parts.rows);
  return plan;
}

// The working copy, prescaled, is what this rank contributes.
InlineBytes prepare_reducescatter(OpContext& ctx, const CallInfo& call, void* data) {
  const size_t bytes = call_bytes(call);
  ctx.work.resize(std::max<size_t>(bytes, 1));
  std::memcpy(ctx.work.data(), data, bytes);
  if (call.prescale != 1.0) scale(ctx.work.data(), element_count(call.shape), call.dtype, call.prescale);
  return {ctx.work.data(), bytes};
}

OwnedResult run_reducescatter(OpContext& ctx, const CallInfo& call, void*, const Agreed& agreed) {
  const int size = ctx.mesh.size();
  const int me = ctx.mesh.rank();
  const size_t elem = dtype_size(call.dtype);
  const size_t bytes = call_bytes(call);
  ReducescatterPlan plan = plan_reducescatter(call, size);
  uint8_t* work = ctx.work.data();
  const size_t mine_at = plan.elem_offset[me] * elem;
  const size_t my_count = plan.elem_count[me];
  const Finish finish = finish_for(call.dtype, call.op, size, call.postscale);
  if (size > 1 && all_inline(agreed, [&](int) { return bytes; })) {
    reduce_inline(agreed, me, work, mine_at, my_count, call.dtype, call.op);
    apply_finish(work + mine_at, my_count, call.dtype, finish);
  } else {
    ring_reducescatter(ctx.mesh, work, plan.elem_offset, plan.elem_count, call.dtype, call.op, ctx.options, finish);
  }
  OwnedResult out;
  out.shape = call.shape;
  out.shape[0] = int64_t(plan.rows[me]);
  out.data.reset(new uint8_t[std::max<size_t>(my_count * elem, 1)]);
  std::memcpy(out.data.get(), work + mine_at, my_count * elem);
  return out;
}

}  // namespace

const CollectiveOp kReducescatterOp{agree_on(kDtype | kShape | kOp | kScales), kCacheable, kReturnsResult,
                                    validate_reducescatter, prepare_reducescatter, run_reducescatter};

}  // namespace shvd
