// What one rank asks for in a collective call, as every layer sees it: the direct communicator's
// descriptor round and the engine's negotiation both carry it, and each op's file runs it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/types.h"

namespace shvd {

struct CallInfo {
  CollectiveKind kind = CollectiveKind::kBarrier;
  std::string name;
  DType dtype = DType::kUInt8;
  std::vector<int64_t> shape;
  ReduceOp op = ReduceOp::kSum;
  int root = -1;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> splits;  // alltoall: rows of the first dimension sent to each rank
  uint64_t seq = 0;             // direct calls: this communicator's call number, for error messages
};

// How errors and traces name a call: "allreduce 'grad.w'".
std::string call_label(const CallInfo& call);

std::string shape_text(const std::vector<int64_t>& shape);
size_t element_count(const std::vector<int64_t>& shape);
// All but the first dimension (empty for a scalar), and how many elements one first-dimension row holds.
std::vector<int64_t> trailing_shape(const std::vector<int64_t>& shape);
size_t row_elements(const std::vector<int64_t>& shape);
// Bytes of the tensor a call describes.
size_t call_bytes(const CallInfo& call);

}  // namespace shvd
