#include "algorithms/descriptor.h"

#include <cstring>

#include "common/error.h"

namespace shvd {
namespace {

constexpr uint32_t kBlockMagic = 0x4b4c4244;  // "DBLK"
constexpr size_t kMaxName = 1024;
constexpr size_t kMaxDims = 64;

// Fixed part of a block. `block_bytes` sits at offset 8: the mesh reads it to size the receive.
struct BlockHeader {
  uint32_t magic;
  uint32_t kind;
  uint64_t block_bytes;
  uint64_t seq;
  int32_t dtype;
  int32_t op;
  int32_t root;
  uint32_t name_bytes;
  uint32_t ndim;
  uint32_t extra_count;  // alltoall: the splits
  uint64_t data_bytes;
  double prescale;
  double postscale;
};

// Decodes one received block; only sizes already checked against the buffer are trusted.
void decode_block(const ByteBuffer& raw, int rank, PeerBlock* b) {
  BlockHeader got;
  if (raw.size() < sizeof(got)) fail(ErrorKind::kPeerFailure, "short call descriptor from rank " + std::to_string(rank), rank);
  std::memcpy(&got, raw.data(), sizeof(got));
  size_t expect = sizeof(got) + size_t(got.name_bytes) + 8 * (size_t(got.ndim) + got.extra_count) + got.data_bytes;
  if (got.magic != kBlockMagic || !is_collective_kind(got.kind) || got.name_bytes > kMaxName || got.ndim > kMaxDims || expect != raw.size() ||
      !is_dtype(got.dtype) || !is_reduce_op(got.op)) {
    fail(ErrorKind::kPeerFailure, "malformed call descriptor from rank " + std::to_string(rank), rank);
  }
  const uint8_t* q = raw.data() + sizeof(got);
  b->info.kind = CollectiveKind(got.kind);
  b->info.seq = got.seq;
  b->info.dtype = DType(got.dtype);
  b->info.op = ReduceOp(got.op);
  b->info.root = got.root;
  b->info.prescale = got.prescale;
  b->info.postscale = got.postscale;
  b->info.name.assign(reinterpret_cast<const char*>(q), got.name_bytes);
  q += got.name_bytes;
  b->info.shape.resize(got.ndim);
  std::memcpy(b->info.shape.data(), q, 8 * got.ndim);
  q += 8 * got.ndim;
  b->info.splits.resize(got.extra_count);
  std::memcpy(b->info.splits.data(), q, 8 * got.extra_count);
  q += 8 * got.extra_count;
  b->data = got.data_bytes ? q : nullptr;
  b->data_bytes = got.data_bytes;
}

}  // namespace

void exchange_call_info(Mesh& mesh, const CallInfo& mine, const void* inline_data, size_t inline_bytes,
                        const Deadline& deadline, const std::string& label, DescriptorRound& round) {
  const std::vector<int64_t>& extra = mine.splits;
  if (mine.name.size() > kMaxName) fail(ErrorKind::kInvalidArgument, "tensor name longer than 1024 bytes");
  if (mine.shape.size() > kMaxDims) fail(ErrorKind::kInvalidArgument, "tensor has more than 64 dimensions");
  BlockHeader h{};
  h.magic = kBlockMagic;
  h.kind = uint32_t(mine.kind);
  h.seq = mine.seq;
  h.dtype = int32_t(mine.dtype);
  h.op = int32_t(mine.op);
  h.root = mine.root;
  h.name_bytes = uint32_t(mine.name.size());
  h.ndim = uint32_t(mine.shape.size());
  h.extra_count = uint32_t(extra.size());
  h.data_bytes = inline_bytes;
  h.prescale = mine.prescale;
  h.postscale = mine.postscale;
  const size_t head_bytes = sizeof(h) + h.name_bytes + 8 * (h.ndim + h.extra_count);
  h.block_bytes = head_bytes + inline_bytes;

  const int n = mesh.size();
  const int me = mesh.rank();
  std::vector<ByteBuffer>& scratch = round.scratch;
  if (int(scratch.size()) < n) scratch.resize(n);
  // The header goes out from my own scratch slot; the inline data straight from the caller's tensor.
  ByteBuffer& head = scratch[me];
  head.resize(head_bytes);
  uint8_t* p = head.data();
  std::memcpy(p, &h, sizeof(h));
  p += sizeof(h);
  std::memcpy(p, mine.name.data(), mine.name.size());
  p += mine.name.size();
  std::memcpy(p, mine.shape.data(), 8 * mine.shape.size());
  p += 8 * mine.shape.size();
  std::memcpy(p, extra.data(), 8 * extra.size());

  // Inline data can make a block large; cap what a peer may announce to something sane.
  const size_t max_block = (64u << 20) + sizeof(h) + kMaxName + 8 * (kMaxDims + size_t(n));
  round.gather.assign(n, GatherBlock{});
  for (int r = 0; r < n; ++r) {
    round.gather[r].grow_into = &scratch[r];
    round.gather[r].max_len = max_block;
  }
  GatherBlock& own = round.gather[me];
  own = GatherBlock{};
  own.data = head.data();
  own.len = head_bytes;
  own.tail = static_cast<const uint8_t*>(inline_data);
  own.tail_len = inline_bytes;
  allgather_blocks(mesh, round.gather, deadline, label, round.items);

  round.blocks.resize(n);
  round.calls.resize(n);
  for (int r = 0; r < n; ++r) {
    if (r != me) decode_block(scratch[r], r, &round.blocks[r]);
    round.calls[r] = &round.blocks[r].info;
  }
  round.calls[me] = &mine;
  round.blocks[me].data = inline_bytes ? static_cast<const uint8_t*>(inline_data) : nullptr;
  round.blocks[me].data_bytes = inline_bytes;
}

}  // namespace shvd
