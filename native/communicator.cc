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
    return op.run(ctx, call, data, agree(call, offer, ctx.options));
  });
}

const Agreed& Communicator::agree(const CallInfo& call, InlineBytes offer, const CollectiveOptions& options) {
  const size_t inline_bytes = offer.data != nullptr && is_small_call(offer.len, size()) ? offer.len : 0;
  if (size() == 1) {
    // Nobody to disagree with; keep the shape of the answer so the ops need no special case.
    const CallInfo* mine = &call;
    fill_agreed(call.kind, &mine, 1, agreed_);
    agreed_.inline_data.push_back({offer.data, inline_bytes});
    return agreed_;
  }
  exchange_call_info(*mesh_, call, offer.data, inline_bytes, options.deadline, options.tag, round_);
  if (ranks_.size() != round_.calls.size()) {
    ranks_.resize(round_.calls.size());
    for (size_t r = 0; r < ranks_.size(); ++r) ranks_[r] = int(r);
  }
  check_agreement(round_.calls, ranks_, size_t(rank()));
  fill_agreed(call.kind, round_.calls.data(), round_.calls.size(), agreed_);
  for (const PeerBlock& b : round_.blocks) agreed_.inline_data.push_back({b.data, b.data_bytes});
  return agreed_;
}

void Communicator::shutdown() { mesh_->close(); }

}  // namespace shvd
