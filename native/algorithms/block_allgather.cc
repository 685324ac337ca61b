#include "algorithms/block_allgather.h"

namespace shvd {
namespace {

// The cost model of a small gather on one host (shared memory), measured by bench/small_collectives.py
// (see its docstring for the fit; figures in its output and the project's bench notes). Both schedules
// move every block to every rank once, so the bytes cost the same and cancel out: only the fixed costs
// decide, and the choice depends on the number of ranks alone.
//   one round:       (p - 1) * kPeerMessageSeconds
//   log rounds:      ceil(log2 p) * kRoundSeconds
constexpr double kPeerMessageSeconds = 20e-6;  // each more peer in the one-round exchange
constexpr double kRoundSeconds = 60e-6;        // each more round of Bruck's schedule

int rounds_for(int size) {
  int rounds = 0;
  for (int reach = 1; reach < size; reach *= 2) ++rounds;
  return rounds;
}

// Queues `block` to go to `peer`: its bytes, then its tail if it has one.
void send_block(const GatherBlock& block, int peer, std::vector<SendItem>& sends) {
  SendItem s;
  s.peer = peer;
  s.data = block.data;
  s.len = block.len;
  sends.push_back(s);
  if (block.tail_len > 0) {
    s.data = block.tail;
    s.len = block.tail_len;
    sends.push_back(s);
  }
}

RecvItem receive_block(const GatherBlock& block, int peer) {
  RecvItem r;
  r.peer = peer;
  if (block.grow_into != nullptr) {
    r.grow_into = block.grow_into;
    r.max_len = block.max_len;
  } else {
    r.dst = block.dst;
    r.len = block.len;
  }
  return r;
}

// After a receive: the block is where it landed, in one piece, ready to be passed on.
void settle(GatherBlock& block) {
  if (block.grow_into != nullptr) {
    block.data = block.grow_into->data();
    block.len = block.grow_into->size();
  } else {
    block.data = block.dst;
  }
}

void one_round(Mesh& mesh, std::vector<GatherBlock>& blocks, const Deadline& deadline, const std::string& what,
               GatherItems& items) {
  const int n = mesh.size();
  const int me = mesh.rank();
  items.sends.clear();
  items.recvs.clear();
  for (int step = 1; step < n; ++step) {
    // Staggered order spreads the load: rank r first talks to r+1, then r+2, ...
    send_block(blocks[me], (me + step) % n, items.sends);
    const int from = (me - step + n) % n;
    items.recvs.push_back(receive_block(blocks[from], from));
  }
  mesh.run(items.sends, items.recvs, deadline, what);
  for (int r = 0; r < n; ++r) {
    if (r != me) settle(blocks[r]);
  }
}

// Before the round at distance d this rank holds the blocks of ranks me .. me+d-1; it sends the first
// min(d, n-d) of them to me-d and receives the same number, those of me+d onwards, from me+d.
void log_rounds(Mesh& mesh, std::vector<GatherBlock>& blocks, const Deadline& deadline, const std::string& what,
                GatherItems& items) {
  const int n = mesh.size();
  const int me = mesh.rank();
  for (int d = 1; d < n; d *= 2) {
    const int count = std::min(d, n - d);
    const int to = (me - d + n) % n;
    const int from = (me + d) % n;
    items.sends.clear();
    items.recvs.clear();
    for (int i = 0; i < count; ++i) {
      send_block(blocks[(me + i) % n], to, items.sends);
      items.recvs.push_back(receive_block(blocks[(from + i) % n], from));
    }
    mesh.run(items.sends, items.recvs, deadline, what);
    for (int i = 0; i < count; ++i) settle(blocks[(from + i) % n]);
  }
}

}  // namespace

bool gather_in_log_rounds(int size, const std::optional<bool>& forced) {
  if (forced.has_value()) return *forced;
  return rounds_for(size) * kRoundSeconds < (size - 1) * kPeerMessageSeconds;
}

void allgather_blocks(Mesh& mesh, std::vector<GatherBlock>& blocks, const Deadline& deadline,
                      const std::string& what, GatherItems& items) {
  if (mesh.size() == 1) return;
  if (gather_in_log_rounds(mesh.size(), mesh.options().log_round_small_calls)) {
    log_rounds(mesh, blocks, deadline, what, items);
  } else {
    one_round(mesh, blocks, deadline, what, items);
  }
}

}  // namespace shvd
