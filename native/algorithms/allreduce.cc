#include "algorithms/algorithms.h"
#include "algorithms/ring.h"

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

}  // namespace shvd
