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
  if (int(scratch.size()) < size) scratch.resize(size);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  for (int step = 1; step < size; ++step) {
    int to = (rank + step) % size;
    int from = (rank - step + size) % size;
    SendItem s;
    s.peer = to;
    s.data = static_cast<const uint8_t*>(data);
    s.len = bytes;
    sends.push_back(s);
    scratch[from].resize(bytes);
    RecvItem r;
    r.peer = from;
    r.dst = scratch[from].data();
    r.len = bytes;
    recvs.push_back(std::move(r));
  }
  mesh.run(sends, recvs, opts.deadline, opts.tag);
  std::vector<const void*> inputs(size);
  for (int r = 0; r < size; ++r) inputs[r] = r == rank ? data : scratch[r].data();
  reduce_many(data, inputs.data(), inputs.size(), count, dtype, op);
}

}  // namespace shvd
