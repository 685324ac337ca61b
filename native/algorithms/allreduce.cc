// Allreduce: every rank ends with the reduction of all ranks' tensors, in place.
//
// Small tensors reach every rank (in one round, or in a few rounds of relayed blocks at large p:
// block_allgather.h) and each rank reduces all of them locally in rank order, so all ranks get identical
// bits (for direct calls the tensors travel inside the descriptor round itself); larger ones take the
// pipelined ring, ordered host by host, or across several hosts the hierarchy (hierarchical_allreduce.cc).
// Prescaling happens before anything is sent, Average's division and the postscale after: on the ring, to each rank's chunk as its last
// reduction produces it, so the allgather carries finished values; elsewhere, over the whole result.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/block_allgather.h"
#include "algorithms/collective_op.h"
#include "algorithms/ring.h"
#include "reduce/reduce.h"

namespace shvd {

void ring_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts,
                    const void* source, const Finish& finish) {
  if (mesh.size() == 1) {
    if (source != nullptr && source != data) std::memcpy(data, source, count * dtype_size(dtype));
    apply_finish(data, count, dtype, finish);
    return;
  }
  RingItems ring(2 * mesh.size());
  add_ring_allreduce(ring.sends, ring.recvs, host_ordered_ring(mesh), static_cast<uint8_t*>(data), count, dtype, op,
                     static_cast<const uint8_t*>(source), finish);
  ring.run(mesh, opts);
}

void direct_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts,
                      ByteBuffer& slots) {
  const int size = mesh.size();
  const int rank = mesh.rank();
  if (size == 1) return;
  const size_t bytes = count * dtype_size(dtype);
  // Every rank's whole tensor to every rank (block_allgather.h picks the schedule);
  // slot r then holds rank r's.
  slots.resize(std::max<size_t>(bytes * size_t(size), 1));
  std::vector<GatherBlock> blocks(size);
  for (int r = 0; r < size; ++r) {
    blocks[r].dst = slots.data() + size_t(r) * bytes;
    blocks[r].len = bytes;
  }
  blocks[rank].data = static_cast<const uint8_t*>(data);
  GatherItems items;
  allgather_blocks(mesh, blocks, opts.deadline, opts.tag, items);
  std::vector<const void*> inputs(size);
  for (int r = 0; r < size; ++r) inputs[r] = blocks[r].data;
  reduce_many(data, inputs.data(), inputs.size(), count, dtype, op);
}

namespace {

// An out-of-place call whose path reads and writes one buffer gets its input copied into its output.
void take_source(OpContext& ctx, const CallInfo& call, void* data) {
  if (ctx.source == nullptr) return;
  if (ctx.source != data) std::memcpy(data, ctx.source, call_bytes(call));
  ctx.source = nullptr;
}

InlineBytes prepare_allreduce(OpContext& ctx, const CallInfo& call, void* data) {
  if (call.prescale != 1.0) {
    take_source(ctx, call, data);
    scale(data, element_count(call.shape), call.dtype, call.prescale);
  }
  return offer_tensor(ctx, call, data);
}

OwnedResult run_allreduce(OpContext& ctx, const CallInfo& call, void* data, const Agreed& agreed) {
  const int size = ctx.mesh.size();
  const size_t count = element_count(call.shape);
  const size_t bytes = call_bytes(call);
  const Finish finish = finish_for(call.dtype, call.op, size, call.postscale);
  if (size > 1 && all_inline(agreed, [&](int) { return bytes; })) {
    take_source(ctx, call, data);
    reduce_inline(agreed, ctx.mesh.rank(), static_cast<uint8_t*>(data), 0, count, call.dtype, call.op);
  } else if (use_hierarchical_allreduce(ctx.mesh, bytes)) {
    take_source(ctx, call, data);
    hierarchical_allreduce(ctx.mesh, data, count, call.dtype, call.op, ctx.options, ctx.slots);
  } else if (is_small_call(bytes, size)) {
    take_source(ctx, call, data);
    direct_allreduce(ctx.mesh, data, count, call.dtype, call.op, ctx.options, ctx.slots);
  } else {
    // The ring reads the input where it is (no copy into the output first) and finishes each rank's
    // chunk as it is reduced (no pass over the whole result after).
    ring_allreduce(ctx.mesh, data, count, call.dtype, call.op, ctx.options, ctx.source, finish);
    ctx.source = nullptr;
    return {};
  }
  apply_finish(data, count, call.dtype, finish);
  return {};
}

}  // namespace

const CollectiveOp kAllreduceOp{agree_on(kDtype | kShape | kOp | kScales), kCacheable, kInPlace, nullptr,
                                prepare_allreduce, run_allreduce};

}  // namespace shvd
