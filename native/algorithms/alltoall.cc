#include <cstring>

#include "algorithms/algorithms.h"

namespace shvd {

void pairwise_alltoallv(Mesh& mesh, const uint8_t* send, const std::vector<size_t>& send_offset,
                        const std::vector<size_t>& send_len, uint8_t* recv, const std::vector<size_t>& recv_offset,
                        const std::vector<size_t>& recv_len, const CollectiveOptions& opts) {
  const int size = mesh.size();
  const int rank = mesh.rank();
  std::memcpy(recv + recv_offset[rank], send + send_offset[rank], send_len[rank]);
  std::vector<SendItem> sends;
  std::vector<RecvItem> recvs;
  for (int step = 1; step < size; ++step) {
    // Staggered partners, so no rank is everyone's first target.
    int to = (rank + step) % size;
    int from = (rank - step + size) % size;
    SendItem s;
    s.peer = to;
    s.data = send + send_offset[to];
    s.len = send_len[to];
    sends.push_back(s);
    RecvItem r;
    r.peer = from;
    r.dst = recv + recv_offset[from];
    r.len = recv_len[from];
    recvs.push_back(std::move(r));
  }
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

}  // namespace shvd
