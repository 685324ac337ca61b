// What ranks tell the coordinator each cycle, and what it answers. Every rank executes the answer's
// responses in order, which is how all ranks run the same collectives in the same order.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "algorithms/call.h"
#include "common/error.h"
#include "common/types.h"

namespace shvd {

// One submitted collective, as the other ranks must see it: what a direct call agrees on, plus what
// only the engine needs.
struct RequestSpec : CallInfo {
  int32_t group = -1;           // grouped_allreduce: members are negotiated and fused together
  int32_t group_size = 0;
};

// A rank's message for one cycle. Requests seen before travel as their response-cache id.
struct RankMessage {
  bool shutdown = false;
  std::vector<RequestSpec> requests;
  std::vector<uint32_t> cached;
};

enum class ResponseType : uint8_t { kCollective = 1, kError = 2, kJoinDone = 3 };

struct ResponseEntry {
  RequestSpec spec;
  int32_t cache_id = -1;              // assigned the first time this signature was negotiated
  std::vector<int64_t> first_dims;   // allgather: every rank's first dimension
  std::vector<int64_t> split_matrix;  // alltoall: row r = rank r's splits
};

struct Response {
  ResponseType type = ResponseType::kCollective;
  CollectiveKind kind = CollectiveKind::kAllreduce;
  std::vector<ResponseEntry> entries;  // several = fused
  ErrorKind error_kind = ErrorKind::kGeneric;
  int32_t error_rank = -1;
  std::string error;
  int32_t last_joined = -1;
};

struct ResponseList {
  std::vector<Response> responses;
  bool shutdown = false;
  int32_t shutdown_rank = -1;
  // After this round every rank (joined ones included) holds a request some peer has not submitted: no
  // rank is idle, so ranks that go straight into the next round would only trade empty ones.
  bool every_rank_waiting = false;
};

// A signature identifies "the same request again" for the response cache.
std::string signature_of(const RequestSpec& spec);

// Framing: every message starts with 16 bytes whose second 8 hold the total length (the mesh's
// self-describing receive reads that).
std::vector<uint8_t> encode(const RankMessage& m);
RankMessage decode_rank_message(const uint8_t* data, size_t len);
std::vector<uint8_t> encode(const ResponseList& r);
ResponseList decode_response_list(const uint8_t* data, size_t len);

}  // namespace shvd
