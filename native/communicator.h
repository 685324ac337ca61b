// One rank's handle on a job: the mesh plus the collectives. Each collective first agrees on the call
// with every peer (algorithms/descriptor.h); small tensors travel inside that round and are finished
// locally, large ones then move with an algorithm from algorithms/algorithms.h.
// Not thread-safe by itself: callers serialise (the binding holds a mutex).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "algorithms/collective_options.h"
#include "algorithms/descriptor.h"
#include "common/types.h"
#include "transport/mesh.h"

namespace shvd {

struct TensorRef {
  void* data = nullptr;
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  size_t count() const { return element_count(shape); }
  size_t bytes() const { return count() * dtype_size(dtype); }
};

// Memory the communicator allocated for a result whose size only the peers know (allgather, alltoall).
struct OwnedResult {
  std::unique_ptr<uint8_t[]> data;
  std::vector<int64_t> shape;
  std::vector<int64_t> received_splits;  // alltoall: rows received from each rank
};

struct CommOptions {
  double timeout_s = 300.0;
  size_t inline_bytes = 64 << 10;  // total bytes a rank may receive inline in the descriptor round
};

class Communicator {
 public:
  Communicator(MeshOptions mesh_options, Fd listener, CommOptions options);

  int rank() const { return mesh_->rank(); }
  int size() const { return mesh_->size(); }
  bool uses_shm(int peer) const { return mesh_->uses_shm(peer); }
  // For the engine, which drives the mesh itself while it runs.
  Mesh& mesh() { return *mesh_; }

  // In place: tensor.data holds the result on return.
  void allreduce(TensorRef tensor, ReduceOp op, double prescale, double postscale, const std::string& name);
  OwnedResult allgather(const TensorRef& tensor, const std::string& name);
  void broadcast(TensorRef tensor, int root, const std::string& name);
  // splits: rows of the first dimension sent to each rank; empty = even split.
  OwnedResult alltoall(const TensorRef& tensor, const std::vector<int64_t>& splits, const std::string& name);
  OwnedResult reducescatter(const TensorRef& tensor, ReduceOp op, double prescale, double postscale,
                            const std::string& name);
  void barrier();

  void shutdown();

 private:
  template <typename Fn>
  auto guarded(Fn&& fn) -> decltype(fn());
  std::vector<PeerBlock> agree(const CallInfo& info, const std::vector<int64_t>& extra, const void* inline_data,
                               size_t inline_bytes, const Deadline& deadline);
  CallInfo call(CollectiveKind kind, const std::string& name, const TensorRef* tensor);
  CollectiveOptions options_for(const CallInfo& info) const;
  bool fits_inline(size_t bytes) const;

  std::unique_ptr<Mesh> mesh_;
  CommOptions options_;
  uint64_t seq_ = 0;
  std::vector<ByteBuffer> scratch_;  // peers' call descriptors (and inline tensors), reused every call
};

// Reduce-op post-processing shared by allreduce and reducescatter: Average divides by the world size,
// then the postscale factor applies.
void finish_reduction(void* data, size_t count, DType dtype, ReduceOp op, int world_size, double postscale);

}  // namespace shvd
