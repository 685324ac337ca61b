// Building blocks shared by the ring algorithms.
#pragma once
#include <cstddef>
#include <vector>

#include "algorithms/collective_options.h"
#include "common/types.h"
#include "transport/mesh.h"

namespace shvd {

// The items of one pipelined ring call, with room for `steps` sends and receives reserved up front:
// gated items point at each other, so the vectors must never reallocate.
struct RingItems {
  explicit RingItems(int steps) {
    sends.reserve(steps);
    recvs.reserve(steps);
  }
  void run(Mesh& mesh, const CollectiveOptions& opts) { mesh.run(sends, recvs, opts.deadline, opts.tag); }
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
};

// A ring through some ranks of the mesh, seen from one of them. Chunks are numbered by ring position,
// not by rank: a caller whose chunks belong to ranks lists them in the ring's order.
struct RingView {
  const std::vector<int>* members;  // mesh ranks, in ring order
  int position;                     // this rank's index in *members
  int size() const { return int(members->size()); }
  int right() const { return (*members)[(position + 1) % size()]; }
  int left() const { return (*members)[(position + size() - 1) % size()]; }
};
// The whole mesh, host by host (HostLayout::ring), so that a ring crosses each host boundary once.
RingView host_ordered_ring(const Mesh& mesh);
// `by_rank` (one entry per mesh rank) in the order of the host-ordered ring.
std::vector<size_t> in_ring_order(const Mesh& mesh, const std::vector<size_t>& by_rank);

// Splits `rows` into `parts` contiguous ranges; the first rows % parts ranges get one extra row.
struct Partition {
  std::vector<size_t> offset;  // in rows
  std::vector<size_t> rows;
};
Partition split_rows(size_t rows, int parts);

// Appends the items of a ring reduce-scatter over `data`, whose chunk i spans elements
// [offset[i], offset[i] + count[i]). After mesh.run, chunk (position + 1 + shift) % size holds the full
// reduction. Every send after the first waits on the receive that produced its bytes, so the whole ring
// runs pipelined in one mesh.run call. The vectors must have room reserved: items point at each other.
// With `source` (laid out as `data`), this rank's own values are read from there and `data` is only
// written: the first send and every reduction take them from `source`, and the later sends forward the
// partial sums the receives wrote into `data`.
void add_ring_reduce_scatter(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const RingView& ring,
                             uint8_t* data, const std::vector<size_t>& offset, const std::vector<size_t>& count,
                             DType dtype, ReduceOp op, int shift, const uint8_t* source = nullptr);

// Appends a ring allgather that starts from chunk (position + 1 + shift) % size being complete locally.
// When `chain_gate` is set, the first send waits on it (the reduce-scatter's last receive).
void add_ring_allgather(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const RingView& ring,
                        uint8_t* data, const std::vector<size_t>& byte_offset, const std::vector<size_t>& byte_len,
                        int shift, const size_t* chain_gate);

// Appends a whole pipelined ring allreduce of `count` elements at `data` (reduce-scatter, then allgather
// chained to it): 2(size-1) sends and receives. With `source`, out of place (see add_ring_reduce_scatter):
// `data` ends with the reduction of every rank's values, `source` is only read. `finish` (Average's
// division, the postscale) is applied to this rank's chunk as its last reduction produces it, before the
// allgather sends it on: each rank finishes 1/size of the result, in cache, and all get the same bits.
void add_ring_allreduce(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const RingView& ring,
                        uint8_t* data, size_t count, DType dtype, ReduceOp op, const uint8_t* source = nullptr,
                        const Finish& finish = {});

}  // namespace shvd
