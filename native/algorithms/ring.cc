#include "algorithms/ring.h"

namespace shvd {

Partition split_rows(size_t rows, int parts) {
  Partition p;
  p.offset.resize(parts);
  p.rows.resize(parts);
  size_t base = rows / size_t(parts);
  size_t extra = rows % size_t(parts);
  size_t at = 0;
  for (int i = 0; i < parts; ++i) {
    p.offset[i] = at;
    p.rows[i] = base + (size_t(i) < extra ? 1 : 0);
    at += p.rows[i];
  }
  return p;
}

static int wrap(int i, int n) { return ((i % n) + n) % n; }

void add_ring_reduce_scatter(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, int rank, int size,
                             uint8_t* data, const std::vector<size_t>& offset, const std::vector<size_t>& count,
                             DType dtype, ReduceOp op, int shift) {
  const size_t elem_bytes = dtype_size(dtype);
  const int right = wrap(rank + 1, size);
  const int left = wrap(rank - 1, size);
  for (int step = 0; step < size - 1; ++step) {
    int send_chunk = wrap(rank - step + shift, size);
    int recv_chunk = wrap(rank - step - 1 + shift, size);
    SendItem s;
    s.peer = right;
    s.data = data + offset[send_chunk] * elem_bytes;
    s.len = count[send_chunk] * elem_bytes;
    if (step > 0) s.gate = &recvs[recvs.size() - 1].done;
    sends.push_back(s);
    RecvItem r;
    r.peer = left;
    r.dst = data + offset[recv_chunk] * elem_bytes;
    r.len = count[recv_chunk] * elem_bytes;
    r.reduce = true;
    r.dtype = dtype;
    r.op = op;
    recvs.push_back(std::move(r));
  }
}

void add_ring_allgather(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, int rank, int size,
                        uint8_t* data, const std::vector<size_t>& byte_offset, const std::vector<size_t>& byte_len,
                        int shift, const size_t* chain_gate) {
  const int right = wrap(rank + 1, size);
  const int left = wrap(rank - 1, size);
  for (int step = 0; step < size - 1; ++step) {
    int send_chunk = wrap(rank + 1 - step + shift, size);
    int recv_chunk = wrap(rank - step + shift, size);
    SendItem s;
    s.peer = right;
    s.data = data + byte_offset[send_chunk];
    s.len = byte_len[send_chunk];
    s.gate = step > 0 ? &recvs[recvs.size() - 1].done : chain_gate;
    sends.push_back(s);
    RecvItem r;
    r.peer = left;
    r.dst = data + byte_offset[recv_chunk];
    r.len = byte_len[recv_chunk];
    recvs.push_back(std::move(r));
  }
}

}  // namespace shvd
