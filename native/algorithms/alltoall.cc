// Alltoall: splits[r] rows of this rank's first dimension go to rank r, in order; what every rank sent
// here is concatenated in rank order. Without splits the first dimension is divided evenly.
#include <algorithm>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/collective_op.h"
#include "common/error.h"

namespace shvd {

void pairwise_alltoallv(Mesh& mesh, const uint8_t* send, const std::vector<size_t>& send_offset,
                        const std::vector<size_t>& send_len, uint8_t* recv, const std::vector<size_t>& recv_offset,
                        const std::vector<size_t>& recv_len, const CollectiveOptions& opts) {
  const int size = mesh.size();
  const int rank = mesh.rank();
  std::memcpy(recv + recv_offset[rank], send + send_offset[rank], send_len[rank]);
  std::vector<SendItem> sends(size - 1);
  std::vector<RecvItem> recvs(size - 1);
  for (int step = 1; step < size; ++step) {
    // Staggered partners, so no rank is everyone's first target.
    const int to = (rank + step) % size;
    const int from = (rank - step + size) % size;
    sends[step - 1].peer = to;
    sends[step - 1].data = send + send_offset[to];
    sends[step - 1].len = send_len[to];
    recvs[step - 1].peer = from;
    recvs[step - 1].dst = recv + recv_offset[from];
    recvs[step - 1].len = recv_len[from];
  }
  mesh.run(sends, recvs, opts.deadline, opts.tag);
}

namespace {

void validate_alltoall(CallInfo& call, int size) {
  require_rows(call);
  const int64_t rows = call.shape[0];
  if (call.splits.empty()) {
    if (rows % size != 0) {
      fail(ErrorKind::kInvalidArgument, call_label(call) + ": first dimension " + std::to_string(rows) +
                                            " does not divide evenly by " + std::to_string(size) +
                                            " ranks; pass splits=");
    }
    call.splits.assign(size, rows / size);
  }
  int64_t sum = 0;
  bool negative = false;
  for (int64_t s : call.splits) {
    sum += s;
    negative |= s < 0;
  }
  if (int(call.splits.size()) != size || negative || sum != rows) {
    fail(ErrorKind::kInvalidArgument, call_label(call) + ": splits must be " + std::to_string(size) +
                                          " non-negative row counts summing to the first dimension " +
                                          std::to_string(rows));
  }
}

// Where this rank's rows go and where every rank's rows land.
struct AlltoallPlan {
  std::vector<size_t> send_offset, send_len, recv_offset, recv_len;
  std::vector<int64_t> received_splits;
  size_t received_rows = 0;
};

AlltoallPlan plan_alltoall(const std::vector<int64_t>& split_matrix, int rank, int size, size_t row_bytes) {
  AlltoallPlan plan;
  size_t sent_rows = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t to_r = split_matrix[size_t(rank) * size + r];
    const int64_t from_r = split_matrix[size_t(r) * size + rank];
    plan.received_splits.push_back(from_r);
    plan.send_offset.push_back(sent_rows * row_bytes);
    plan.send_len.push_back(size_t(to_r) * row_bytes);
    plan.recv_offset.push_back(plan.received_rows * row_bytes);
    plan.recv_len.push_back(size_t(from_r) * row_bytes);
    sent_rows += size_t(to_r);
    plan.received_rows += size_t(from_r);
  }
  return plan;
}

OwnedResult run_alltoall(OpContext& ctx, const CallInfo& call, void* data, const Agreed& agreed) {
  const size_t row_bytes = dtype_size(call.dtype) * row_elements(call.shape);
  AlltoallPlan plan = plan_alltoall(agreed.split_matrix, ctx.mesh.rank(), ctx.mesh.size(), row_bytes);
  OwnedResult out;
  out.shape = call.shape;
  out.shape[0] = int64_t(plan.received_rows);
  out.received_splits = std::move(plan.received_splits);
  out.data.reset(new uint8_t[std::max<size_t>(plan.received_rows * row_bytes, 1)]);
  pairwise_alltoallv(ctx.mesh, static_cast<const uint8_t*>(data), plan.send_offset, plan.send_len, out.data.get(),
                     plan.recv_offset, plan.recv_len, ctx.options);
  return out;
}

}  // namespace

// Splits differ between ranks (so nothing travels inside the descriptor round), and so may first dimensions.
const CollectiveOp kAlltoallOp{agree_on(kDtype | kTrailingShape), kNotCacheable, kReturnsResult, validate_alltoall,
                               offer_nothing, run_alltoall};

}  // namespace shvd
