#include <algorithm>

#include "algorithms/algorithms.h"
#include "algorithms/ring.h"
#include "reduce/reduce.h"

namespace shvd {

void ring_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts) {
  const int size = mesh.size();
  if (size == 1) return;
  Partition parts = split_rows(count, size);
  const size_t elem = dtype_size(dtype);
  std::vector<size_t> byte_offset(size), byte_len(size);
  for (int i = 0; i < size; ++i) {
    byte_offset[i] = parts.offset[i] * elem;
    byte_len[i] = parts.rows[i] * elem;
  }
  uint8_t* bytes = static_cast<uint8_t*>(data);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  sends.reserve(2 * size);
  recvs.reserve(2 * size);
  add_ring_reduce_scatter(sends, recvs, mesh.rank(), size, bytes, parts.offset, parts.rows, dtype, op, 0);
  // The allgather's first send is this rank's fully reduced chunk: it streams out as it is produced.
  const size_t* last_reduced = &recvs.back().done;
  add_ring_allgather(sends, recvs, mesh.rank(), size, bytes, byte_offset, byte_len, 0, last_reduced);
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

void direct_allreduce(Mesh& mesh, void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts,
                      std::vector<ByteBuffer>& scratch) {
  const int size = mesh.size();
  const int rank = mesh.rank();
  if (size == 1) return;
  const size_t bytes = count * dtype_size(dtype);
  if (scratch.empty()) scratch.resize(1);
  // An alltoall in which every rank sends its whole tensor to everyone; slot r then holds rank r's.
  ByteBuffer& slots = scratch[0];
  slots.resize(std::max<size_t>(bytes * size_t(size), 1));
  std::vector<size_t> send_offset(size, 0), lengths(size, bytes), recv_offset(size);
  for (int r = 0; r < size; ++r) recv_offset[r] = size_t(r) * bytes;
  pairwise_alltoallv(mesh, static_cast<const uint8_t*>(data), send_offset, lengths, slots.data(), recv_offset,
                     lengths, opts);
  std::vector<const void*> inputs(size);
  for (int r = 0; r < size; ++r) inputs[r] = r == rank ? data : slots.data() + recv_offset[r];
  reduce_many(data, inputs.data(), inputs.size(), count, dtype, op);
}

}  // namespace shvd
