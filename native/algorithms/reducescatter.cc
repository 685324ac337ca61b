#include "algorithms/algorithms.h"
#include "algorithms/ring.h"

namespace shvd {

void ring_reducescatter(Mesh& mesh, void* data, const std::vector<size_t>& elem_offset,
                        const std::vector<size_t>& elem_count, DType dtype, ReduceOp op,
                        const CollectiveOptions& opts) {
  const int size = mesh.size();
  if (size == 1) return;
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  sends.reserve(size);
  recvs.reserve(size);
  // Shift -1 so that rank r ends holding chunk r.
  add_ring_reduce_scatter(sends, recvs, mesh.rank(), size, static_cast<uint8_t*>(data), elem_offset, elem_count,
                          dtype, op, -1);
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

}  // namespace shvd
