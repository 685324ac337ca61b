// Before moving any data, every collective exchanges a small self-describing block with every peer:
// what this rank is calling (kind, tensor name, dtype, shape, op, root), and, for small tensors, the
// data itself. Each rank then checks the blocks identically, so a disagreement becomes the same clear
// error on every rank instead of a hang or garbage, and the communicator stays usable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/types.h"
#include "transport/mesh.h"

namespace shvd {

enum class CollectiveKind : uint32_t {
  kAllreduce = 1,
  kAllgather = 2,
  kBroadcast = 3,
  kAlltoall = 4,
  kReducescatter = 5,
  kBarrier = 6,
  kJoin = 7,  // engine only: this rank has run out of data
};
const char* collective_name(CollectiveKind kind);

// What one rank says about its call.
struct CallInfo {
  CollectiveKind kind = CollectiveKind::kBarrier;
  std::string name;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  double prescale = 1.0;
  double postscale = 1.0;
  uint64_t seq = 0;
};

// A peer's block, decoded.
struct PeerBlock {
  CallInfo info;
  std::vector<int64_t> extra;  // alltoall: this rank's splits
  const uint8_t* data = nullptr;  // inline tensor bytes, if any (they live in the caller's scratch)
  size_t data_bytes = 0;
};

// Exchanges blocks with all peers in one round; returns every rank's block, in rank order. Peers'
// blocks land in `scratch` (one buffer per rank, reused across calls), which must outlive the result.
std::vector<PeerBlock> exchange_call_info(Mesh& mesh, const CallInfo& mine, const std::vector<int64_t>& extra,
                                          const void* inline_data, size_t inline_bytes, const Deadline& deadline,
                                          std::vector<ByteBuffer>& scratch);

// Which fields must agree across ranks for each kind of collective.
struct AgreementRules {
  bool shape = false;           // the whole shape
  bool trailing_shape = false;  // all but the first dimension
  bool op = false;
  bool root = false;
  bool scales = false;
};
AgreementRules rules_for(CollectiveKind kind);

// Throws kMismatch, naming the tensor, the field and the ranks, if the blocks disagree. `ranks`, when
// given, says which rank each block came from (default: block i is rank i).
void check_agreement(const std::vector<PeerBlock>& blocks, int my_rank, const std::vector<int>* ranks = nullptr);

std::string shape_text(const std::vector<int64_t>& shape);
size_t element_count(const std::vector<int64_t>& shape);
// All but the first dimension (empty for a scalar), and how many elements one first-dimension row holds.
std::vector<int64_t> trailing_shape(const std::vector<int64_t>& shape);
size_t row_elements(const std::vector<int64_t>& shape);
// Bytes of the tensor a call describes.
size_t call_bytes(const CallInfo& call);

}  // namespace shvd
