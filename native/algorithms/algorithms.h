// Data-movement algorithms, each defined in its collective's file. They assume every rank already
// agreed on the call (the communicator's descriptor round, or the engine's negotiation), so sizes here
// are trusted to match across ranks.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/collective_options.h"
#include "common/byte_buffer.h"
#include "common/types.h"
#include "transport/mesh.h"

namespace shvd {

// In place over `count` elements: pipelined ring reduce-scatter then allgather, 2(p-1)/p of the data
// per rank, around the ranks host by host, ending with `finish` applied (see add_ring_allreduce).
// With `source`, out of place: `data` ends with the reduction, `source` (this rank's values) is only read.
void ring_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts,
                    const void* source = nullptr, const Finish& finish = {});

// Whether an allreduce of `bytes` per rank takes the hierarchy: the mesh's hierarchical_allreduce option
// when set, else when several hosts hold several ranks and the tensor is past the one-round size. Every
// rank derives the same answer (same options, host keys and size).
bool use_hierarchical_allreduce(const Mesh& mesh, size_t bytes);

// In place: reduce-scatter within each host, one allreduce across hosts per slice (a direct exchange
// when the slice is small), allgather within each host. Any layout of ranks on hosts; `slots` holds
// the copies of a direct exchange (reused across calls). Average behaves as Sum here.
void hierarchical_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op,
                            const CollectiveOptions& opts, ByteBuffer& slots);

// In place, for small tensors: every rank's whole tensor reaches every rank (one round, or a few rounds of
// relayed blocks at large p: block_allgather.h), and each reduces all of them locally in rank order, so all ranks get
// identical bits after a few rounds instead of 2(p-1) ring steps.
// `slots` holds every rank's copy side by side (reused across calls).
void direct_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts,
                      ByteBuffer& slots);

// `out` holds every rank's block at byte_offset[r] (byte_len[r] long); this rank's block is already in
// place. Ring allgather of variable-size blocks.
void ring_allgatherv(Mesh& mesh, uint8_t* out, const std::vector<size_t>& byte_offset,
                     const std::vector<size_t>& byte_len, const CollectiveOptions& opts);

// Pipelined chain root -> root+1 -> ...: each rank forwards bytes as soon as they arrive.
void chain_broadcast(Mesh& mesh, void* data, size_t bytes, int root, const CollectiveOptions& opts);

// Direct exchange with every peer at once: send_len[r] bytes from send + send_offset[r] to rank r, and
// recv_len[r] bytes from rank r into recv + recv_offset[r]. This rank's own slice is copied locally.
void pairwise_alltoallv(Mesh& mesh, const uint8_t* send, const std::vector<size_t>& send_offset,
                        const std::vector<size_t>& send_len, uint8_t* recv, const std::vector<size_t>& recv_offset,
                        const std::vector<size_t>& recv_len, const CollectiveOptions& opts);

// In place over `data`, split into per-rank element ranges (offset, count): afterwards range `rank`
// holds the full reduction, with `finish` applied as the last receive produced it. Other ranges hold
// partial results.
void ring_reducescatter(Mesh& mesh, void* data, const std::vector<size_t>& elem_offset,
                        const std::vector<size_t>& elem_count, DType dtype, ReduceOp op,
                        const CollectiveOptions& opts, const Finish& finish = {});

}  // namespace shvd
