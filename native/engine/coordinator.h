// Rank 0's bookkeeping: which ranks submitted which named collectives, when each is ready on every
// rank, how ready allreduces fuse, and which tensors stall. Pure logic, no I/O, so it is easy to test.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/messages.h"

namespace shvd {

// Why a collective other than allreduce is refused while some ranks have joined (Horovod's rule: only
// allreduce continues until every rank has joined). The MPI engine raises the same text.
std::string joined_refusal(CollectiveKind kind, const std::string& name, const std::vector<int>& joined);

struct CoordinatorOptions {
  int size = 1;
  size_t fusion_threshold_bytes = 128 << 20;  // 0 disables fusion
  double stall_check_s = 60.0;                // 0 disables the warning
  double stall_shutdown_s = 0.0;              // 0 never gives up
  size_t cache_capacity = 1024;
};

class Coordinator {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Coordinator(CoordinatorOptions options);

  // Folds in one cycle's messages (index = rank) and returns the responses every rank must run, in order.
  // Stall warnings for the log are appended to *warnings.
  ResponseList process(const std::vector<RankMessage>& messages, Clock::time_point now,
                       std::vector<std::string>* warnings);

 private:
  struct Pending {
    std::vector<RequestSpec> by_rank;
    std::vector<bool> submitted;
    Clock::time_point first_seen;
    uint64_t order = 0;
    bool warned = false;
  };
  using Table = std::map<std::string, Pending>;

  // The steps of process(), in order.
  void fold_in(const std::vector<RankMessage>& messages, Clock::time_point now, ResponseList* list);
  std::vector<Table::iterator> ready_in_order();
  void respond(const std::vector<Table::iterator>& ready, std::vector<Response>* out);
  void inspect_stalls(Clock::time_point now, std::vector<Response>* out, std::vector<std::string>* warnings);
  void finish_join(std::vector<Response>* out);
  bool every_rank_waiting() const;

  void add(int rank, const RequestSpec& spec, Clock::time_point now);
  bool ready(const Pending& p) const;
  std::vector<int> submitters(const Pending& p) const;
  std::vector<int> missing(const Pending& p) const;
  Response to_response(const std::string& name, Pending& p);
  Response refused_while_joined(const std::string& name, const RequestSpec& first) const;
  void assign_cache_id(ResponseEntry* entry);
  std::vector<Response> fused_group(const std::vector<Table::iterator>& members);
  void append_fused(std::vector<Response>& out, Response resp);

  CoordinatorOptions options_;
  Table table_;
  uint64_t next_order_ = 0;
  std::vector<bool> joined_;
  int last_joined_ = -1;
  std::vector<RequestSpec> cache_by_id_;
  std::unordered_map<std::string, int32_t> cache_ids_;
};

}  // namespace shvd
