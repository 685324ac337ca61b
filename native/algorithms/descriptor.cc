#include "algorithms/descriptor.h"

#include <cstring>
#include <map>

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
  uint32_t extra_count;
  uint64_t data_bytes;
  double prescale;
  double postscale;
};

std::string describe_field(const CallInfo& c, const std::string& field) {
  if (field == "kind") return collective_name(c.kind);
  if (field == "name") return "'" + c.name + "'";
  if (field == "dtype") return dtype_name(c.dtype);
  if (field == "shape" || field == "trailing shape") return shape_text(c.shape);
  if (field == "op") return reduce_op_name(c.op);
  if (field == "root") return std::to_string(c.root);
  return "prescale " + std::to_string(c.prescale) + ", postscale " + std::to_string(c.postscale);
}

}  // namespace

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAlltoall: return "alltoall";
    case CollectiveKind::kReducescatter: return "reducescatter";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kJoin: return "join";
  }
  return "unknown collective";
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

size_t element_count(const std::vector<int64_t>& shape) {
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  return n;
}

std::vector<int64_t> trailing_shape(const std::vector<int64_t>& shape) {
  return shape.empty() ? shape : std::vector<int64_t>(shape.begin() + 1, shape.end());
}

size_t row_elements(const std::vector<int64_t>& shape) { return element_count(trailing_shape(shape)); }

size_t call_bytes(const CallInfo& call) { return element_count(call.shape) * dtype_size(call.dtype); }

AgreementRules rules_for(CollectiveKind kind) {
  AgreementRules r;
  switch (kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReducescatter:
      r.shape = r.op = r.scales = true;
      break;
    case CollectiveKind::kAllgather:
    case CollectiveKind::kAlltoall:
      r.trailing_shape = true;
      break;
    case CollectiveKind::kBroadcast:
      r.shape = r.root = true;
      break;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kJoin:
      break;
  }
  return r;
}

namespace {

// Decodes one received block; only sizes already checked against the buffer are trusted.
void decode_block(const ByteBuffer& raw, int rank, PeerBlock* b) {
  BlockHeader got;
  if (raw.size() < sizeof(got)) fail(ErrorKind::kPeerFailure, "short call descriptor from rank " + std::to_string(rank), rank);
  std::memcpy(&got, raw.data(), sizeof(got));
  size_t expect = sizeof(got) + size_t(got.name_bytes) + 8 * (size_t(got.ndim) + got.extra_count) + got.data_bytes;
  if (got.magic != kBlockMagic || got.name_bytes > kMaxName || got.ndim > kMaxDims || expect != raw.size() ||
      got.dtype < 0 || got.dtype >= kNumDTypes || got.op < 0 || got.op >= kNumReduceOps) {
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
  b->extra.resize(got.extra_count);
  std::memcpy(b->extra.data(), q, 8 * got.extra_count);
  q += 8 * got.extra_count;
  b->data = got.data_bytes ? q : nullptr;
  b->data_bytes = got.data_bytes;
}

}  // namespace

std::vector<PeerBlock> exchange_call_info(Mesh& mesh, const CallInfo& mine, const std::vector<int64_t>& extra,
                                          const void* inline_data, size_t inline_bytes, const Deadline& deadline,
                                          std::vector<ByteBuffer>& scratch) {
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

  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  sends.reserve(2 * n);
  recvs.reserve(n);
  // Inline data can make a block large; cap what a peer may announce to something sane.
  const size_t max_block = (64u << 20) + sizeof(h) + kMaxName + 8 * (kMaxDims + size_t(n));
  for (int step = 1; step < n; ++step) {
    // Staggered order spreads the load: rank r first talks to r+1, then r+2, ...
    int to = (me + step) % n;
    int from = (me - step + n) % n;
    SendItem s;
    s.peer = to;
    s.data = head.data();
    s.len = head_bytes;
    sends.push_back(s);
    if (inline_bytes > 0) {
      s.data = static_cast<const uint8_t*>(inline_data);
      s.len = inline_bytes;
      sends.push_back(s);
    }
    RecvItem r;
    r.peer = from;
    r.grow_into = &scratch[from];
    r.max_len = max_block;
    recvs.push_back(std::move(r));
  }
  mesh.run(sends, recvs, deadline, std::string(collective_name(mine.kind)) + " '" + mine.name + "'");

  std::vector<PeerBlock> blocks(n);
  for (int r = 0; r < n; ++r) {
    if (r != me) decode_block(scratch[r], r, &blocks[r]);
  }
  blocks[me].info = mine;
  blocks[me].extra = extra;
  blocks[me].data = inline_bytes ? static_cast<const uint8_t*>(inline_data) : nullptr;
  blocks[me].data_bytes = inline_bytes;
  return blocks;
}

void check_agreement(const std::vector<PeerBlock>& blocks, int my_rank, const std::vector<int>* ranks) {
  const CallInfo& base = blocks[0].info;
  auto differs = [&](const CallInfo& a, const std::string& field) -> bool {
    AgreementRules rules = rules_for(base.kind);
    if (field == "kind") return a.kind != base.kind;
    if (field == "name") return a.name != base.name;
    if (field == "dtype") return base.kind != CollectiveKind::kBarrier && a.dtype != base.dtype;
    if (field == "shape") return rules.shape && a.shape != base.shape;
    if (field == "trailing shape") {
      if (!rules.trailing_shape) return false;
      if (a.shape.empty() || base.shape.empty()) return a.shape.size() != base.shape.size();
      return trailing_shape(a.shape) != trailing_shape(base.shape);
    }
    if (field == "op") return rules.op && a.op != base.op;
    if (field == "root") return rules.root && a.root != base.root;
    return rules.scales && (a.prescale != base.prescale || a.postscale != base.postscale);
  };
  for (const std::string field : {"kind", "name", "dtype", "shape", "trailing shape", "op", "root", "scales"}) {
    bool any = false;
    for (const PeerBlock& b : blocks) any |= differs(b.info, field);
    if (!any) continue;
    // Group ranks by what they passed, so the message reads "rank 0, 2: float32; rank 1: float64".
    std::map<std::string, std::string> groups;
    for (size_t i = 0; i < blocks.size(); ++i) {
      std::string& who = groups[describe_field(blocks[i].info, field)];
      who += (who.empty() ? "" : ", ") + std::to_string(ranks ? (*ranks)[i] : int(i));
    }
    std::string detail;
    for (auto& [value, who] : groups) {
      detail += (detail.empty() ? "" : "; ") + std::string("rank ") + who + ": " + value;
    }
    const CallInfo& me = blocks[ranks ? 0 : my_rank].info;
    std::string msg = "ranks disagree on the " + field + " of " + collective_name(me.kind) + " '" + me.name +
                      "' (call #" + std::to_string(me.seq) + "): " + detail;
    fail(ErrorKind::kMismatch, msg);
  }
}

}  // namespace shvd
