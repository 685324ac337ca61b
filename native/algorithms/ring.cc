#include "algorithms/ring.h"

namespace shvd {

RingView host_ordered_ring(const Mesh& mesh) {
  const HostLayout& layout = mesh.layout();
  return RingView{&layout.ring, layout.ring_position[mesh.rank()]};
}

std::vector<size_t> in_ring_order(const Mesh& mesh, const std::vector<size_t>& by_rank) {
  std::vector<size_t> ordered;
  ordered.reserve(by_rank.size());
  for (int r : mesh.layout().ring) ordered.push_back(by_rank[r]);
  return ordered;
}

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

void add_ring_reduce_scatter(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const RingView& ring,
                             uint8_t* data, const std::vector<size_t>& offset, const std::vector<size_t>& count,
                             DType dtype, ReduceOp op, int shift, const uint8_t* source) {
  const size_t elem_bytes = dtype_size(dtype);
  const bool out_of_place = source != nullptr && source != data;
  const int size = ring.size();
  const int me = ring.position;
  for (int step = 0; step < size - 1; ++step) {
    int send_chunk = wrap(me - step + shift, size);
    int recv_chunk = wrap(me - step - 1 + shift, size);
    SendItem s;
    s.peer = ring.right();
    s.data = (step == 0 && out_of_place ? source : data) + offset[send_chunk] * elem_bytes;
    s.len = count[send_chunk] * elem_bytes;
    if (step > 0) s.gate = &recvs[recvs.size() - 1].done;
    sends.push_back(s);
    RecvItem r;
    r.peer = ring.left();
    r.dst = data + offset[recv_chunk] * elem_bytes;
    r.len = count[recv_chunk] * elem_bytes;
    r.reduce = true;
    if (out_of_place) r.reduce_from = source + offset[recv_chunk] * elem_bytes;
    r.dtype = dtype;
    r.op = op;
    recvs.push_back(std::move(r));
  }
}

void add_ring_allgather(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const RingView& ring,
                        uint8_t* data, const std::vector<size_t>& byte_offset, const std::vector<size_t>& byte_len,
                        int shift, const size_t* chain_gate) {
  const int size = ring.size();
  const int me = ring.position;
  for (int step = 0; step < size - 1; ++step) {
    int send_chunk = wrap(me + 1 - step + shift, size);
    int recv_chunk = wrap(me - step + shift, size);
    SendItem s;
    s.peer = ring.right();
    s.data = data + byte_offset[send_chunk];
    s.len = byte_len[send_chunk];
    s.gate = step > 0 ? &recvs[recvs.size() - 1].done : chain_gate;
    sends.push_back(s);
    RecvItem r;
    r.peer = ring.left();
    r.dst = data + byte_offset[recv_chunk];
    r.len = byte_len[recv_chunk];
    recvs.push_back(std::move(r));
  }
}

void add_ring_allreduce(std::vector<SendItem>& sends, std::vector<RecvItem>& recvs, const RingView& ring,
                        uint8_t* data, size_t count, DType dtype, ReduceOp op, const uint8_t* source,
                        const Finish& finish) {
  const int size = ring.size();
  if (size == 1) return;
  Partition parts = split_rows(count, size);
  const size_t elem = dtype_size(dtype);
  std::vector<size_t> byte_offset(size), byte_len(size);
  for (int i = 0; i < size; ++i) {
    byte_offset[i] = parts.offset[i] * elem;
    byte_len[i] = parts.rows[i] * elem;
  }
  add_ring_reduce_scatter(sends, recvs, ring, data, parts.offset, parts.rows, dtype, op, 0, source);
  recvs.back().finish = finish;
  // The allgather's first send is this rank's fully reduced chunk: it streams out as it is produced.
  const size_t* last_reduced = &recvs.back().done;
  add_ring_allgather(sends, recvs, ring, data, byte_offset, byte_len, 0, last_reduced);
}

}  // namespace shvd
