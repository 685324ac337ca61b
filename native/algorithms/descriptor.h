// Before moving any data, every collective exchanges a small self-describing block with every peer:
// what this rank is calling (kind, tensor name, dtype, shape, op, root), and, for small tensors, the
// data itself. Each rank then checks the blocks identically, so a disagreement becomes the same clear
// error on every rank instead of a hang or garbage, and the communicator stays usable.
#pragma once
#include <cstdint>
#include <vector>

#include "algorithms/call.h"
#include "common/byte_buffer.h"
#include "common/deadline.h"
#include "transport/mesh.h"

namespace shvd {

// A peer's block, decoded.
struct PeerBlock {
  CallInfo info;
  const uint8_t* data = nullptr;  // inline tensor bytes, if any (they live in the caller's scratch)
  size_t data_bytes = 0;
};

// Exchanges blocks with all peers in one round; returns every rank's block, in rank order. Peers'
// blocks land in `scratch` (one buffer per rank, reused across calls), which must outlive the result.
std::vector<PeerBlock> exchange_call_info(Mesh& mesh, const CallInfo& mine, const void* inline_data,
                                          size_t inline_bytes, const Deadline& deadline,
                                          std::vector<ByteBuffer>& scratch);

}  // namespace shvd
