#include "communicator.h"

#include <cstring>
#include <numeric>

#include "algorithms/ring.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace shvd {

Communicator::Communicator(MeshOptions mesh_options, Fd listener, CommOptions options)
    : mesh_(std::make_unique<Mesh>(std::move(mesh_options), std::move(listener))), options_(options) {}

template <typename Fn>
auto Communicator::guarded(Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    // A disagreement found by the descriptor round leaves every rank in step, so the communicator stays
    // usable. Anything else may have left peers mid-transfer: tell them why, and drop the mesh.
    if (e.kind() != ErrorKind::kMismatch && e.kind() != ErrorKind::kInvalidArgument) {
      int cause = e.peer_rank() >= 0 ? e.peer_rank() : rank();
      mesh_->abort(cause, e.what());
    }
    throw;
  }
}

CallInfo Communicator::call(CollectiveKind kind, const std::string& name, const TensorRef* tensor) {
  CallInfo info;
  info.kind = kind;
  info.name = name;
  info.seq = seq_++;
  if (tensor) {
    info.dtype = tensor->dtype;
    info.shape = tensor->shape;
  }
  return info;
}

std::vector<PeerBlock> Communicator::agree(const CallInfo& info, const std::vector<int64_t>& extra,
                                           const void* inline_data, size_t inline_bytes, const Deadline& deadline) {
  std::vector<PeerBlock> blocks = exchange_call_info(*mesh_, info, extra, inline_data, inline_bytes, deadline);
  check_agreement(blocks, rank());
  return blocks;
}

bool Communicator::fits_inline(size_t bytes) const {
  return bytes * size_t(size() - 1) <= options_.inline_bytes;
}

void finish_reduction(void* data, size_t count, DType dtype, ReduceOp op, int world_size, double postscale) {
  if (op == ReduceOp::kAverage) {
    if (dtype_is_integer(dtype)) {
      divide(data, count, dtype, world_size);
    } else {
      postscale /= double(world_size);
    }
  }
  if (postscale != 1.0) scale(data, count, dtype, postscale);
}

void Communicator::allreduce(TensorRef t, ReduceOp op, double prescale, double postscale, const std::string& name) {
  guarded([&] {
    CallInfo info = call(CollectiveKind::kAllreduce, name, &t);
    info.op = op;
    info.prescale = prescale;
    info.postscale = postscale;
    Deadline deadline = Deadline::after_seconds(options_.timeout_s);
    const size_t count = t.count();
    const size_t bytes = t.bytes();
    uint8_t* data = static_cast<uint8_t*>(t.data);
    if (prescale != 1.0) scale(data, count, t.dtype, prescale);
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, data, small ? bytes : 0, deadline);
    if (size() > 1 && small) {
      // Everyone has every input: reduce locally in rank order, so all ranks get identical bits.
      std::vector<const void*> inputs(size());
      for (int r = 0; r < size(); ++r) inputs[r] = r == rank() ? data : blocks[r].data;
      reduce_many(data, inputs.data(), inputs.size(), count, t.dtype, op);
    } else if (size() > 1) {
      Partition parts = split_rows(count, size());
      const size_t elem = dtype_size(t.dtype);
      std::vector<size_t> byte_offset(size()), byte_len(size());
      for (int i = 0; i < size(); ++i) {
        byte_offset[i] = parts.offset[i] * elem;
        byte_len[i] = parts.rows[i] * elem;
      }
      std::vector<SendItem> sends;
      std::vector<RecvItem> recvs;
      sends.reserve(2 * size());
      recvs.reserve(2 * size());
      add_ring_reduce_scatter(sends, recvs, rank(), size(), data, parts, elem, t.dtype, op, 0);
      const size_t* last_reduced = &recvs.back().done;
      add_ring_allgather(sends, recvs, rank(), size(), data, byte_offset, byte_len, 0, last_reduced);
      mesh_->run(sends, recvs, deadline, "allreduce '" + name + "'");
    }
    finish_reduction(data, count, t.dtype, op, size(), postscale);
  });
}

OwnedResult Communicator::allgather(const TensorRef& t, const std::string& name) {
  return guarded([&] {
    if (t.shape.empty()) fail(ErrorKind::kInvalidArgument, "allgather needs a tensor with at least one dimension");
    CallInfo info = call(CollectiveKind::kAllgather, name, &t);
    Deadline deadline = Deadline::after_seconds(options_.timeout_s);
    const size_t bytes = t.bytes();
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, t.data, small ? bytes : 0, deadline);
    const size_t row_bytes =
        dtype_size(t.dtype) * element_count(std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()));
    std::vector<size_t> byte_offset(size()), byte_len(size());
    size_t total_rows = 0, total_bytes = 0;
    // Every rank sees the same blocks, so every rank makes the same choice here.
    bool all_inline = true;
    for (int r = 0; r < size(); ++r) {
      size_t rows = size_t(blocks[r].info.shape[0]);
      byte_offset[r] = total_bytes;
      byte_len[r] = rows * row_bytes;
      total_rows += rows;
      total_bytes += byte_len[r];
      all_inline &= blocks[r].data_bytes == byte_len[r];
    }
    OwnedResult out;
    out.data.reset(new uint8_t[std::max<size_t>(total_bytes, 1)]);
    out.shape = t.shape;
    out.shape[0] = int64_t(total_rows);
    std::memcpy(out.data.get() + byte_offset[rank()], t.data, bytes);
    if (all_inline) {
      for (int r = 0; r < size(); ++r) {
        if (r != rank()) std::memcpy(out.data.get() + byte_offset[r], blocks[r].data, byte_len[r]);
      }
    } else if (size() > 1) {
      std::vector<SendItem> sends;
      std::vector<RecvItem> recvs;
      sends.reserve(size());
      recvs.reserve(size());
      // A ring allgather starting from this rank's own block: shift so chunk `rank` goes first.
      add_ring_allgather(sends, recvs, rank(), size(), out.data.get(), byte_offset, byte_len, -1, nullptr);
      mesh_->run(sends, recvs, deadline, "allgather '" + name + "'");
    }
    return out;
  });
}

void Communicator::broadcast(TensorRef t, int root, const std::string& name) {
  guarded([&] {
    if (root < 0 || root >= size()) {
      fail(ErrorKind::kInvalidArgument,
           "broadcast root_rank " + std::to_string(root) + " is outside [0, " + std::to_string(size()) + ")");
    }
    CallInfo info = call(CollectiveKind::kBroadcast, name, &t);
    info.root = root;
    Deadline deadline = Deadline::after_seconds(options_.timeout_s);
    const size_t bytes = t.bytes();
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, t.data, small && rank() == root ? bytes : 0, deadline);
    if (size() == 1) return;
    if (small) {
      if (rank() != root) std::memcpy(t.data, blocks[root].data, bytes);
      return;
    }
    // A pipelined chain root -> root+1 -> ... : each rank forwards bytes as soon as they arrive.
    const int pos = (rank() - root + size()) % size();
    std::vector<SendItem> sends;
    std::vector<RecvItem> recvs;
    sends.reserve(1);
    recvs.reserve(1);
    if (pos > 0) {
      RecvItem r;
      r.peer = (rank() - 1 + size()) % size();
      r.dst = static_cast<uint8_t*>(t.data);
      r.len = bytes;
      recvs.push_back(std::move(r));
    }
    if (pos < size() - 1) {
      SendItem s;
      s.peer = (rank() + 1) % size();
      s.data = static_cast<uint8_t*>(t.data);
      s.len = bytes;
      s.gate = pos > 0 ? &recvs.back().done : nullptr;
      sends.push_back(s);
    }
    mesh_->run(sends, recvs, deadline, "broadcast '" + name + "'");
  });
}

OwnedResult Communicator::alltoall(const TensorRef& t, const std::vector<int64_t>& splits_in, const std::string& name) {
  return guarded([&] {
    if (t.shape.empty()) fail(ErrorKind::kInvalidArgument, "alltoall needs a tensor with at least one dimension");
    const size_t rows = size_t(t.shape[0]);
    std::vector<int64_t> splits = splits_in;
    if (splits.empty()) {
      if (rows % size_t(size()) != 0) {
        fail(ErrorKind::kInvalidArgument, "alltoall '" + name + "': first dimension " + std::to_string(rows) +
                                              " does not divide evenly by " + std::to_string(size()) +
                                              " ranks; pass splits=");
      }
      splits.assign(size(), int64_t(rows / size_t(size())));
    }
    if (int(splits.size()) != size()) {
      fail(ErrorKind::kInvalidArgument, "alltoall '" + name + "': splits has " + std::to_string(splits.size()) +
                                            " entries, but there are " + std::to_string(size()) + " ranks");
    }
    int64_t sum = 0;
    for (int64_t s : splits) {
      if (s < 0) fail(ErrorKind::kInvalidArgument, "alltoall '" + name + "': splits must not be negative");
      sum += s;
    }
    if (size_t(sum) != rows) {
      fail(ErrorKind::kInvalidArgument, "alltoall '" + name + "': splits sum to " + std::to_string(sum) +
                                            " but the first dimension is " + std::to_string(rows));
    }
    CallInfo info = call(CollectiveKind::kAlltoall, name, &t);
    Deadline deadline = Deadline::after_seconds(options_.timeout_s);
    auto blocks = agree(info, splits, nullptr, 0, deadline);
    const size_t row_bytes = dtype_size(t.dtype) * element_count(std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()));
    OwnedResult out;
    out.received_splits.resize(size());
    size_t recv_rows = 0;
    for (int r = 0; r < size(); ++r) {
      out.received_splits[r] = blocks[r].extra[rank()];
      recv_rows += size_t(out.received_splits[r]);
    }
    out.shape = t.shape;
    out.shape[0] = int64_t(recv_rows);
    out.data.reset(new uint8_t[std::max<size_t>(recv_rows * row_bytes, 1)]);
    const uint8_t* src = static_cast<const uint8_t*>(t.data);
    std::vector<size_t> send_offset(size()), recv_offset(size());
    for (int r = 0, s_at = 0, r_at = 0; r < size(); ++r) {
      send_offset[r] = size_t(s_at) * row_bytes;
      recv_offset[r] = size_t(r_at) * row_bytes;
      s_at += int(splits[r]);
      r_at += int(out.received_splits[r]);
    }
    std::memcpy(out.data.get() + recv_offset[rank()], src + send_offset[rank()], size_t(splits[rank()]) * row_bytes);
    std::vector<SendItem> sends;
    std::vector<RecvItem> recvs;
    for (int step = 1; step < size(); ++step) {
      int to = (rank() + step) % size();
      int from = (rank() - step + size()) % size();
      SendItem s;
      s.peer = to;
      s.data = src + send_offset[to];
      s.len = size_t(splits[to]) * row_bytes;
      sends.push_back(s);
      RecvItem r;
      r.peer = from;
      r.dst = out.data.get() + recv_offset[from];
      r.len = size_t(out.received_splits[from]) * row_bytes;
      recvs.push_back(std::move(r));
    }
    mesh_->run(sends, recvs, deadline, "alltoall '" + name + "'");
    return out;
  });
}

OwnedResult Communicator::reducescatter(const TensorRef& t, ReduceOp op, double prescale, double postscale,
                                        const std::string& name) {
  return guarded([&] {
    if (t.shape.empty()) fail(ErrorKind::kInvalidArgument, "reducescatter needs a tensor with at least one dimension");
    CallInfo info = call(CollectiveKind::kReducescatter, name, &t);
    info.op = op;
    info.prescale = prescale;
    info.postscale = postscale;
    Deadline deadline = Deadline::after_seconds(options_.timeout_s);
    const size_t bytes = t.bytes();
    const size_t elem = dtype_size(t.dtype);
    const size_t row_elems = element_count(std::vector<int64_t>(t.shape.begin() + 1, t.shape.end()));
    Partition rows = split_rows(size_t(t.shape[0]), size());
    Partition parts;  // in elements
    for (int i = 0; i < size(); ++i) {
      parts.offset.push_back(rows.offset[i] * row_elems);
      parts.rows.push_back(rows.rows[i] * row_elems);
    }
    // Work on a copy: the ring reduces in place and the caller's input must stay intact.
    std::unique_ptr<uint8_t[]> work(new uint8_t[std::max<size_t>(bytes, 1)]);
    std::memcpy(work.get(), t.data, bytes);
    if (prescale != 1.0) scale(work.get(), t.count(), t.dtype, prescale);
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, work.get(), small ? bytes : 0, deadline);
    uint8_t* mine = work.get() + parts.offset[rank()] * elem;
    const size_t my_count = parts.rows[rank()];
    if (size() > 1 && small) {
      std::vector<const void*> inputs(size());
      for (int r = 0; r < size(); ++r) {
        inputs[r] = (r == rank() ? work.get() : blocks[r].data) + parts.offset[rank()] * elem;
      }
      reduce_many(mine, inputs.data(), inputs.size(), my_count, t.dtype, op);
    } else if (size() > 1) {
      std::vector<SendItem> sends;
      std::vector<RecvItem> recvs;
      sends.reserve(size());
      recvs.reserve(size());
      // Shift by -1 so that rank r ends holding chunk r.
      add_ring_reduce_scatter(sends, recvs, rank(), size(), work.get(), parts, elem, t.dtype, op, -1);
      mesh_->run(sends, recvs, deadline, "reducescatter '" + name + "'");
    }
    finish_reduction(mine, my_count, t.dtype, op, size(), postscale);
    OwnedResult out;
    out.shape = t.shape;
    out.shape[0] = int64_t(rows.rows[rank()]);
    out.data.reset(new uint8_t[std::max<size_t>(my_count * elem, 1)]);
    std::memcpy(out.data.get(), mine, my_count * elem);
    return out;
  });
}

void Communicator::barrier() {
  guarded([&] {
    CallInfo info = call(CollectiveKind::kBarrier, "", nullptr);
    Deadline deadline = Deadline::after_seconds(options_.timeout_s);
    agree(info, {}, nullptr, 0, deadline);
  });
}

void Communicator::shutdown() { mesh_->close(); }

}  // namespace shvd
