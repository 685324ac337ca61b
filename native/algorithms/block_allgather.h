// Every rank's small block to every rank: the descriptor round of direct calls, and the small allreduce
// of the engine. The schedule is Bruck's allgather with a radix k: in the round at distance d (1, k, k^2,
// ...) a rank sends the blocks it holds (its own and the next d-1 ranks') to the ranks at -d, -2d, ...,
// -(k-1)d, and receives the next ones from +d, ..., +(k-1)d, so a block may be relayed on its way.
//   - radix >= p is one round: each rank sends its block to every peer (p-1 messages per rank, one wait);
//   - radix 2 is ceil(log2 p) rounds of one message each way;
//   - in between, fewer rounds for more messages.
// Every radix moves the same bytes; block_allgather.cc holds the measured model that picks it. Either way
// blocks[r] ends describing rank r's block on every rank, so callers reduce in rank order and all ranks
// get the same bits.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/byte_buffer.h"
#include "common/deadline.h"
#include "transport/mesh.h"

namespace shvd {

// One rank's block: where it is read from when this rank sends it (its own, or one it passes on), and
// where it lands when it arrives from a peer.
struct GatherBlock {
  // What goes out, in up to two pieces sent back to back (the descriptor round's header, then the
  // caller's tensor, which is never copied).
  const uint8_t* data = nullptr;
  size_t len = 0;
  const uint8_t* tail = nullptr;
  size_t tail_len = 0;
  // Where a peer's block lands: `len` bytes at `dst` when the ranks agreed on its length, otherwise a
  // self-describing block (a uint64 total length at byte 8, see RecvItem::grow_into) grows `grow_into`
  // up to max_len. Once received, data/len point at it.
  uint8_t* dst = nullptr;
  ByteBuffer* grow_into = nullptr;
  size_t max_len = 0;
};

// The mesh items of one gather, kept from call to call so that a warm small call allocates nothing.
struct GatherItems {
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
};

// The radix of a gather among `size` ranks: `forced` (MeshOptions::small_call_radix) when >= 2, otherwise
// the cheapest by the measured model. It depends only on values every rank holds alike, so every rank
// takes the same schedule.
int small_call_radix(int size, int forced);

// Every rank's block to every rank. blocks has one entry per rank: this rank's gives data (and tail);
// every peer's gives dst (with len) or grow_into (with max_len). Afterwards every entry's data/len hold
// that rank's block (a peer's tail, if it sent one, follows its data there).
void allgather_blocks(Mesh& mesh, std::vector<GatherBlock>& blocks, const Deadline& deadline,
                      const std::string& what, GatherItems& items);

}  // namespace shvd
