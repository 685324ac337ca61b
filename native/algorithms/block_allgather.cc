#include "algorithms/block_allgather.h"

#include <algorithm>

namespace shvd {
namespace {

// The cost model of a small gather on one host (shared memory), fitted by bench/small_collectives.py
// `model` (see /work/notes/logp-results.md's tables: 2 cores, 4 to 32 ranks, under a load of about 100).
// Every schedule moves each block to each rank once, so the bytes cost the same whatever the radix and
// drop out: only the fixed costs decide, and the choice depends on the number of ranks alone.
//   cost(radix) = rounds * kRoundSeconds + messages * kMessageSeconds   (messages sent per rank)
// The fit (with a free constant per world size) found a round and a message costing the same, within
// 0.2%: on an oversubscribed host both are a scheduler wake-up. Only their ratio matters here. With it,
// one round stays at p <= 5 (the path before this model), and larger p relay: radix 3 or 4 from 6 ranks,
// 4 from 12 on (3 rounds at 64 ranks).
constexpr double kRoundSeconds = 520e-6;    // each more round: a wait for the peers of the round
constexpr double kMessageSeconds = 519e-6;  // each more message a rank sends (and one it receives)

struct Schedule {
  int rounds = 0;
  int messages = 0;
};

// Round j at distance d = radix^j: messages to the peers at m*d for m = 1 .. radix-1 while m*d < size.
Schedule schedule_of(int size, int radix) {
  Schedule s;
  for (long d = 1; d < size; d *= radix) {
    ++s.rounds;
    for (int m = 1; m < radix && m * d < size; ++m) ++s.messages;
  }
  return s;
}

double modelled_seconds(int size, int radix) {
  Schedule s = schedule_of(size, radix);
  return s.rounds * kRoundSeconds + s.messages * kMessageSeconds;
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

}  // namespace

int small_call_radix(int size, int forced) {
  if (forced >= 2) return std::min(forced, std::max(size, 2));
  // From one round down: a tie goes to fewer rounds (fewer waits in a row).
  int best = std::max(size, 2);
  for (int radix = best - 1; radix >= 2; --radix) {
    if (modelled_seconds(size, radix) < modelled_seconds(size, best)) best = radix;
  }
  return best;
}

// Before the round at distance d this rank holds the blocks of ranks me .. me+d-1 (indices mod n). For
// each m = 1 .. radix-1 it sends its first min(d, n - m*d) blocks to me - m*d and receives as many, those
// of me + m*d onwards, from me + m*d; afterwards it holds me .. me + radix*d - 1.
void allgather_blocks(Mesh& mesh, std::vector<GatherBlock>& blocks, const Deadline& deadline,
                      const std::string& what, GatherItems& items) {
  const int n = mesh.size();
  const int me = mesh.rank();
  const int radix = small_call_radix(n, mesh.options().small_call_radix);
  for (long d = 1; d < n; d *= radix) {
    items.sends.clear();
    items.recvs.clear();
    for (int m = 1; m < radix && m * d < n; ++m) {
      const int start = int(m * d);
      const int count = int(std::min<long>(d, n - start));
      const int to = (me - start + n) % n;
      const int from = (me + start) % n;
      for (int i = 0; i < count; ++i) {
        send_block(blocks[(me + i) % n], to, items.sends);
        items.recvs.push_back(receive_block(blocks[(from + i) % n], from));
      }
    }
    mesh.run(items.sends, items.recvs, deadline, what);
    const int held = int(std::min<long>(radix * d, n));
    for (int i = int(d); i < held; ++i) settle(blocks[(me + i) % n]);
  }
}

}  // namespace shvd
