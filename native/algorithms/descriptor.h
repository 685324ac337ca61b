// Before moving any data, every collective gathers a small self-describing block from every rank:
// what this rank is calling (kind, tensor name, dtype, shape, op, root), and, for small tensors, the
// data itself. Each rank then checks the blocks identically, so a disagreement becomes the same clear
// error on every rank instead of a hang or garbage, and the communicator stays usable.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/block_allgather.h"
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

// One rank's buffers for the descriptor round, kept from one call to the next so that a small call
// allocates nothing once warm.
struct DescriptorRound {
  std::vector<ByteBuffer> scratch;  // every peer's raw block (and inline tensor); mine holds my header
  std::vector<PeerBlock> blocks;    // decoded, in rank order; my own slot carries only my inline data
  std::vector<const CallInfo*> calls;  // every rank's call, in rank order; mine is the caller's own
  std::vector<GatherBlock> gather;  // where each rank's raw block goes out from and lands
  GatherItems items;
};

// Gathers every rank's block (in one round, or in a few rounds of relayed blocks at large p:
// block_allgather.h); afterwards `round.calls` and `round.blocks` describe every rank's call. `mine` must
// outlive the use of `round.calls`.
void exchange_call_info(Mesh& mesh, const CallInfo& mine, const void* inline_data, size_t inline_bytes,
                        const Deadline& deadline, const std::string& label, DescriptorRound& round);

}  // namespace shvd
