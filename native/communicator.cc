#include "communicator.h"

#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring.h"
#include "common/error.h"
#include "reduce/reduce.h"

namespace shvd {
namespace {

void require_rows(const TensorRef& t, const char* what) {
  if (t.shape.empty()) {
    fail(ErrorKind::kInvalidArgument, std::string(what) + " needs a tensor with at least one dimension");
  }
}

}  // namespace

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

CollectiveOptions Communicator::options_for(const CallInfo& info) const {
  return CollectiveOptions{Deadline::after_seconds(options_.timeout_s),
                           std::string(collective_name(info.kind)) + " '" + info.name + "'"};
}

std::vector<PeerBlock> Communicator::agree(const CallInfo& info, const std::vector<int64_t>& extra,
                                           const void* inline_data, size_t inline_bytes, const Deadline& deadline) {
  if (size() == 1) {
    // Nobody to disagree with; keep the shape of the answer so callers need no special case.
    std::vector<PeerBlock> blocks(1);
    blocks[0].info = info;
    blocks[0].extra = extra;
    blocks[0].data = static_cast<const uint8_t*>(inline_data);
    blocks[0].data_bytes = inline_bytes;
    return blocks;
  }
  std::vector<PeerBlock> blocks = exchange_call_info(*mesh_, info, extra, inline_data, inline_bytes, deadline, scratch_);
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
    CollectiveOptions opts = options_for(info);
    const size_t count = t.count();
    const size_t bytes = t.bytes();
    if (prescale != 1.0) scale(t.data, count, t.dtype, prescale);
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, t.data, small ? bytes : 0, opts.deadline);
    if (size() == 1) {
      // Nothing to combine.
    } else if (small) {
      // Everyone has every input: reduce locally in rank order, so all ranks get identical bits.
      std::vector<const void*> inputs(size());
      for (int r = 0; r < size(); ++r) inputs[r] = r == rank() ? t.data : blocks[r].data;
      reduce_many(t.data, inputs.data(), inputs.size(), count, t.dtype, op);
    } else {
      ring_allreduce(*mesh_, t.data, count, t.dtype, op, opts);
    }
    finish_reduction(t.data, count, t.dtype, op, size(), postscale);
  });
}

OwnedResult Communicator::allgather(const TensorRef& t, const std::string& name) {
  return guarded([&] {
    require_rows(t, "allgather");
    CallInfo info = call(CollectiveKind::kAllgather, name, &t);
    CollectiveOptions opts = options_for(info);
    const size_t bytes = t.bytes();
    auto blocks = agree(info, {}, t.data, fits_inline(bytes) ? bytes : 0, opts.deadline);
    const size_t row_bytes = dtype_size(t.dtype) * row_elements(t.shape);
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
    } else {
      ring_allgatherv(*mesh_, out.data.get(), byte_offset, byte_len, opts);
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
    CollectiveOptions opts = options_for(info);
    const size_t bytes = t.bytes();
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, t.data, small && rank() == root ? bytes : 0, opts.deadline);
    if (!small) {
      chain_broadcast(*mesh_, t.data, bytes, root, opts);
    } else if (rank() != root) {
      std::memcpy(t.data, blocks[root].data, bytes);
    }
  });
}

OwnedResult Communicator::alltoall(const TensorRef& t, const std::vector<int64_t>& splits_in, const std::string& name) {
  return guarded([&] {
    require_rows(t, "alltoall");
    const std::string label = "alltoall '" + name + "': ";
    const size_t rows = size_t(t.shape[0]);
    std::vector<int64_t> splits = splits_in;
    if (splits.empty()) {
      if (rows % size_t(size()) != 0) {
        fail(ErrorKind::kInvalidArgument, label + "first dimension " + std::to_string(rows) +
                                              " does not divide evenly by " + std::to_string(size()) +
                                              " ranks; pass splits=");
      }
      splits.assign(size(), int64_t(rows / size_t(size())));
    }
    if (int(splits.size()) != size()) {
      fail(ErrorKind::kInvalidArgument, label + "splits has " + std::to_string(splits.size()) +
                                            " entries, but there are " + std::to_string(size()) + " ranks");
    }
    int64_t sum = 0;
    for (int64_t s : splits) {
      if (s < 0) fail(ErrorKind::kInvalidArgument, label + "splits must not be negative");
      sum += s;
    }
    if (size_t(sum) != rows) {
      fail(ErrorKind::kInvalidArgument, label + "splits sum to " + std::to_string(sum) +
                                            " but the first dimension is " + std::to_string(rows));
    }
    CallInfo info = call(CollectiveKind::kAlltoall, name, &t);
    CollectiveOptions opts = options_for(info);
    auto blocks = agree(info, splits, nullptr, 0, opts.deadline);
    const size_t row_bytes = dtype_size(t.dtype) * row_elements(t.shape);
    OwnedResult out;
    out.received_splits.resize(size());
    std::vector<size_t> send_offset(size()), send_len(size()), recv_offset(size()), recv_len(size());
    size_t sent_rows = 0, recv_rows = 0;
    for (int r = 0; r < size(); ++r) {
      out.received_splits[r] = blocks[r].extra[rank()];
      send_offset[r] = sent_rows * row_bytes;
      send_len[r] = size_t(splits[r]) * row_bytes;
      recv_offset[r] = recv_rows * row_bytes;
      recv_len[r] = size_t(out.received_splits[r]) * row_bytes;
      sent_rows += size_t(splits[r]);
      recv_rows += size_t(out.received_splits[r]);
    }
    out.shape = t.shape;
    out.shape[0] = int64_t(recv_rows);
    out.data.reset(new uint8_t[std::max<size_t>(recv_rows * row_bytes, 1)]);
    pairwise_alltoallv(*mesh_, static_cast<const uint8_t*>(t.data), send_offset, send_len, out.data.get(),
                       recv_offset, recv_len, opts);
    return out;
  });
}

OwnedResult Communicator::reducescatter(const TensorRef& t, ReduceOp op, double prescale, double postscale,
                                        const std::string& name) {
  return guarded([&] {
    require_rows(t, "reducescatter");
    CallInfo info = call(CollectiveKind::kReducescatter, name, &t);
    info.op = op;
    info.prescale = prescale;
    info.postscale = postscale;
    CollectiveOptions opts = options_for(info);
    const size_t bytes = t.bytes();
    const size_t elem = dtype_size(t.dtype);
    const size_t row_elems = row_elements(t.shape);
    Partition rows = split_rows(size_t(t.shape[0]), size());
    std::vector<size_t> elem_offset(size()), elem_count(size());
    for (int i = 0; i < size(); ++i) {
      elem_offset[i] = rows.offset[i] * row_elems;
      elem_count[i] = rows.rows[i] * row_elems;
    }
    // Work on a copy: the ring reduces in place and the caller's input must stay intact.
    std::unique_ptr<uint8_t[]> work(new uint8_t[std::max<size_t>(bytes, 1)]);
    std::memcpy(work.get(), t.data, bytes);
    if (prescale != 1.0) scale(work.get(), t.count(), t.dtype, prescale);
    const bool small = fits_inline(bytes);
    auto blocks = agree(info, {}, work.get(), small ? bytes : 0, opts.deadline);
    const size_t mine_at = elem_offset[rank()] * elem;
    const size_t my_count = elem_count[rank()];
    if (small && size() > 1) {
      std::vector<const void*> inputs(size());
      for (int r = 0; r < size(); ++r) inputs[r] = (r == rank() ? work.get() : blocks[r].data) + mine_at;
      reduce_many(work.get() + mine_at, inputs.data(), inputs.size(), my_count, t.dtype, op);
    } else {
      ring_reducescatter(*mesh_, work.get(), elem_offset, elem_count, t.dtype, op, opts);
    }
    finish_reduction(work.get() + mine_at, my_count, t.dtype, op, size(), postscale);
    OwnedResult out;
    out.shape = t.shape;
    out.shape[0] = int64_t(rows.rows[rank()]);
    out.data.reset(new uint8_t[std::max<size_t>(my_count * elem, 1)]);
    std::memcpy(out.data.get(), work.get() + mine_at, my_count * elem);
    return out;
  });
}

void Communicator::barrier() {
  guarded([&] {
    CallInfo info = call(CollectiveKind::kBarrier, "", nullptr);
    // Nobody's block can arrive before its sender entered the barrier, so the round itself is the barrier.
    agree(info, {}, nullptr, 0, options_for(info).deadline);
  });
}

void Communicator::shutdown() { mesh_->close(); }

}  // namespace shvd
