// One rank's handle on a job: the mesh, and direct (synchronous) collectives on it. Each call first
// agrees on the call with every peer (algorithms/descriptor.h); small tensors travel inside that round.
// The call itself is its op's (algorithms/collective_op.h), which the engine runs too.
// Not thread-safe by itself: callers serialise (the binding holds a mutex).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "algorithms/collective_op.h"
#include "algorithms/descriptor.h"
#include "transport/mesh.h"

namespace shvd {

class Communicator {
 public:
  Communicator(MeshOptions mesh_options, Fd listener);

  int rank() const { return mesh_->rank(); }
  int size() const { return mesh_->size(); }
  bool uses_shm(int peer) const { return mesh_->uses_shm(peer); }
  int connected_peers() const { return mesh_->connected_peers(); }
  // For the engine, which drives the mesh itself while it runs.
  Mesh& mesh() { return *mesh_; }

  // Runs one collective to completion. `call` describes this rank's tensor at `data`; in-place kinds
  // (allreduce, broadcast) write the result there, the others return it.
  // The call is validated (and completed, e.g. alltoall's even splits) in place.
  OwnedResult run(CallInfo& call, void* data);

  void shutdown();

 private:
  template <typename Fn>
  auto guarded(Fn&& fn) -> decltype(fn());
  // What every rank asked for, checked; valid until the next call.
  const Agreed& agree(const CallInfo& call, InlineBytes offer, const CollectiveOptions& options);

  std::unique_ptr<Mesh> mesh_;
  uint64_t seq_ = 0;
  // Reused every call, so that a warm small call allocates nothing here.
  DescriptorRound round_;
  std::vector<int> ranks_;  // 0..size-1: the descriptor round hears from every rank
  Agreed agreed_;
  ByteBuffer slots_;
  ByteBuffer work_;
};

}  // namespace shvd
