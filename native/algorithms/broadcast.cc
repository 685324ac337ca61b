#include "algorithms/algorithms.h"

namespace shvd {

void chain_broadcast(Mesh& mesh, void* data, size_t bytes, int root, const CollectiveOptions& opts) {
  const int size = mesh.size();
  if (size == 1) return;
  const int rank = mesh.rank();
  const int position = (rank - root + size) % size;
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  sends.reserve(1);
  recvs.reserve(1);
  if (position > 0) {
    RecvItem r;
    r.peer = (rank - 1 + size) % size;
    r.dst = static_cast<uint8_t*>(data);
    r.len = bytes;
    recvs.push_back(std::move(r));
  }
  if (position < size - 1) {
    SendItem s;
    s.peer = (rank + 1) % size;
    s.data = static_cast<uint8_t*>(data);
    s.len = bytes;
    s.gate = position > 0 ? &recvs.back().done : nullptr;
    sends.push_back(s);
  }
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

}  // namespace shvd
