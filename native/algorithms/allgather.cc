#include "algorithms/algorithms.h"
#include "algorithms/ring.h"

namespace shvd {

void ring_allgatherv(Mesh& mesh, uint8_t* out, const std::vector<size_t>& byte_offset,
                     const std::vector<size_t>& byte_len, const CollectiveOptions& opts) {
  const int size = mesh.size();
  if (size == 1) return;
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  sends.reserve(size);
  recvs.reserve(size);
  // Shift -1: the first block this rank sends is its own.
  add_ring_allgather(sends, recvs, mesh.rank(), size, out, byte_offset, byte_len, -1, nullptr);
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

}  // namespace shvd
