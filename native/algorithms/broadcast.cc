// Broadcast: every rank ends with the root's tensor, in place. Small tensors travel inside a direct
// call's descriptor round; larger ones down a pipelined chain.
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/collective_op.h"
#include "common/error.h"

namespace shvd {

void chain_broadcast(Mesh& mesh, void* data, size_t bytes, int root, const CollectiveOptions& opts) {
  const int size = mesh.size();
  if (size == 1) return;
  // The chain follows the host-ordered ring from the root, so it crosses each host boundary once.
  const std::vector<int>& ring = mesh.layout().ring;
  const int at = mesh.layout().ring_position[mesh.rank()];
  const int position = (at - mesh.layout().ring_position[root] + size) % size;
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  sends.reserve(1);
  recvs.reserve(1);
  if (position > 0) {
    RecvItem r;
    r.peer = ring[(at - 1 + size) % size];
    r.dst = static_cast<uint8_t*>(data);
    r.len = bytes;
    recvs.push_back(std::move(r));
  }
  if (position < size - 1) {
    SendItem s;
    s.peer = ring[(at + 1) % size];
    s.data = static_cast<uint8_t*>(data);
    s.len = bytes;
    s.gate = position > 0 ? &recvs.back().done : nullptr;
    sends.push_back(s);
  }
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

namespace {

void validate_broadcast(CallInfo& call, int size) {
  if (call.root < 0 || call.root >= size) {
    fail(ErrorKind::kInvalidArgument, call_label(call) + ": root_rank " + std::to_string(call.root) +
                                          " is outside [0, " + std::to_string(size) + ")");
  }
}

// Only the root has something to send.
InlineBytes offer_root_tensor(OpContext& ctx, const CallInfo& call, void* data) {
  if (ctx.mesh.rank() != call.root) return {};
  return {static_cast<const uint8_t*>(data), call_bytes(call)};
}

OwnedResult run_broadcast(OpContext& ctx, const CallInfo& call, void* data, const Agreed& agreed) {
  const size_t bytes = call_bytes(call);
  const bool came_inline = !agreed.inline_data.empty() && agreed.inline_data[call.root].len == bytes;
  if (!came_inline) {
    chain_broadcast(ctx.mesh, data, bytes, call.root, ctx.options);
  } else if (ctx.mesh.rank() != call.root) {
    std::memcpy(data, agreed.inline_data[call.root].data, bytes);
  }
  return {};
}

}  // namespace

const CollectiveOp kBroadcastOp{agree_on(kDtype | kShape | kRoot), kCacheable, kInPlace, validate_broadcast,
                                offer_root_tensor, run_broadcast};

}  // namespace shvd
