#include "communicator.h"

#include "common/error.h"

namespace shvd {

Communicator::Communicator(MeshOptions mesh_options, Fd listener)
    : mesh_(std::make_unique<Mesh>(std::move(mesh_options), std::move(listener))) {}

template <typename Fn>
auto Communicator::guarded(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    // A disagreement found by the descriptor round leaves every rank in step, so the communicator stays
    // usable. Anything else may have left peers mid-transfer: tell them why, and drop the mesh.
    if (e.kind() != ErrorKind::kMismatch && e.kind() != ErrorKind::kInvalidArgument) {
      int cause = e.peer_rank() >= 0 ? e.peer_rank() : rank();
      mesh_->abort(cause, e.what());
    }
    throw;
  }
}

OwnedResult Communicator::run(CallInfo& call, void* data) {
  return guarded([&] {
    validate_call(call, size());
    call.seq = seq_++;
    OpContext ctx{*mesh_, {Deadline::after_seconds(mesh_->options().timeout_s), call_label(call)}, slots_, work_};
    const CollectiveOp& op = op_for(call.kind);
    InlineBytes offer = op.prepare(ctx, call, data);
    Agreed agreed = agree(call, offer, ctx.options.deadline);
    return op.run(ctx, call, data, agreed);
  });
}

Agreed Communicator::agree(const CallInfo& call, InlineBytes offer, const Deadline& deadline) {
  const size_t inline_bytes = offer.data != nullptr && is_small_call(offer.len, size()) ? offer.len : 0;
  if (size() == 1) {
    // Nobody to disagree with; keep the shape of the answer so the ops need no special case.
    const CallInfo* mine = &call;
    Agreed agreed = agreed_from(call.kind, &mine, 1);
    agreed.inline_data.push_back({offer.data, inline_bytes});
    return agreed;
  }
  std::vector<PeerBlock> blocks = exchange_call_info(*mesh_, call, offer.data, inline_bytes, deadline, scratch_);
  std::vector<const CallInfo*> calls;
  std::vector<int> ranks;
  for (const PeerBlock& b : blocks) {
    ranks.push_back(int(calls.size()));
    calls.push_back(&b.info);
  }
  check_agreement(calls, ranks, size_t(rank()));
  Agreed agreed = agreed_from(call.kind, calls.data(), calls.size());
  for (const PeerBlock& b : blocks) agreed.inline_data.push_back({b.data, b.data_bytes});
  return agreed;
}

void Communicator::shutdown() { mesh_->close(); }

}  // namespace shvd
