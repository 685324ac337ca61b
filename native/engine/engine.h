// The background engine behind the async API (collective.torch and friends).
//
// Any thread enqueues named requests and gets a handle. One background thread owns all communication:
// every cycle it tells rank 0's coordinator what was submitted, receives the list of collectives that
// are ready on every rank, and runs them in that order, fusing small allreduces into one buffer.
// Handles complete with a result or an error; a dead peer or a failed cycle fails every handle.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "algorithms/collective_op.h"
#include "common/byte_buffer.h"
#include "common/error.h"
#include "engine/coordinator.h"
#include "engine/messages.h"
#include "engine/timeline.h"
#include "transport/mesh.h"

namespace shvd {

// Each collective's deadline is the mesh's (MeshOptions::timeout_s); so is each negotiation round's.
struct EngineOptions {
  size_t fusion_threshold_bytes = 128 << 20;  // Horovod's default; 0 turns fusion off
  // An idle engine's negotiation round interval (Horovod's default). A submit starts a round at once, so
  // this bounds only how soon a rank notices what its peers did without it: their requests, stalls, joins.
  // Rounds that bring nothing, with nothing of this rank's pending, stretch it, doubling up to
  // 16 times, so an idle engine does not take a training step's CPU for empty rounds.
  double cycle_time_ms = 1.0;
  size_t cache_capacity = 1024;               // response cache entries
  std::string timeline;                       // Chrome trace JSON, written by rank 0; empty = off
  double stall_check_s = 60.0;                // warn about tensors some ranks have not submitted; 0 = off
  double stall_shutdown_s = 300.0;            // then fail them on every rank; 0 = never
};

// What a finished handle holds.
struct HandleOutcome {
  bool failed = false;
  ErrorKind error_kind = ErrorKind::kGeneric;
  int error_rank = -1;
  std::string error;
  bool has_result = false;
  OwnedResult result;
  int join_rank = -1;
};

class Engine {
 public:
  // Takes over the communicator's mesh for as long as it runs.
  Engine(Mesh& mesh, EngineOptions options);
  ~Engine();

  // `data` stays owned by the caller and must stay valid until the handle completes. In-place kinds
  // (allreduce, broadcast) write the result there. An allreduce may read its input from `source` instead
  // (as many bytes, also valid until completion, never written): `data` then only receives the result.
  int64_t enqueue(RequestSpec spec, void* data, const void* source = nullptr);
  bool poll(int64_t handle);
  // Blocks until the handle completes or timeout_s passes (then kTimeout); forgets the handle and
  // returns its outcome (errors are returned, not thrown, so the caller can release its tensors first).
  HandleOutcome wait(int64_t handle, double timeout_s);
  // Negotiated stop: every rank's engine stops after the cycle that carries it.
  void shutdown();
  // Horovod's start_timeline/stop_timeline: rank 0 (the coordinator, which sees every rank's negotiation)
  // writes the file; on other ranks these do nothing. Starting again switches to the new file.
  void start_timeline(const std::string& path, bool mark_cycles);
  void stop_timeline();

 private:
  struct LocalRequest {
    RequestSpec spec;
    void* data = nullptr;
    const void* source = nullptr;  // an out-of-place allreduce's input
    int64_t handle = 0;
    std::chrono::steady_clock::time_point enqueued;
  };
  void loop();
  struct RoundOutcome {
    bool news = false;   // requests sent or responses received: the ranks are busy
    bool go_on = false;  // a rank still holding unanswered requests should start the next round at once
  };
  // One negotiation round (see loop()).
  RoundOutcome cycle();
  bool worth_waking_for(const RequestSpec& spec);
  ResponseList negotiate(const RankMessage& mine);
  ResponseList coordinate(const RankMessage& mine);
  ResponseList ask_coordinator(const RankMessage& mine);
  void execute(const Response& resp, std::chrono::steady_clock::time_point negotiated);
  void run_fused(const Response& resp);
  void run_single(const ResponseEntry& entry, LocalRequest* local);
  size_t fill_fusion_buffer(const Response& resp);
  void drain_fusion_buffer(const Response& resp, std::chrono::steady_clock::time_point start,
                           std::chrono::steady_clock::time_point end);
  void finish(std::string name, HandleOutcome outcome);  // by value: it may name the request it erases
  std::string pending_names() const;
  void fail_everything(const Error& e);
  OpContext context_for(const RequestSpec& spec);
  LocalRequest* local(const std::string& name);

  Mesh& mesh_;
  EngineOptions options_;
  std::unique_ptr<Coordinator> coordinator_;  // rank 0 only
  Timeline timeline_;

  // Shared with callers, under mutex_.
  std::mutex mutex_;
  std::condition_variable wake_;      // the engine thread: new work or stop
  std::condition_variable finished_;  // callers waiting on handles
  std::vector<LocalRequest> queue_;
  std::unordered_set<std::string> names_in_flight_;
  std::unordered_map<int64_t, HandleOutcome> done_;
  std::unordered_set<int64_t> pending_handles_;
  bool work_ready_ = false;                         // a request (or a whole group) waits: run a round now
  std::unordered_map<int32_t, int32_t> group_seen_;  // group -> members enqueued so far, until complete
  int64_t next_handle_ = 1;
  bool stop_requested_ = false;
  bool stopped_ = false;
  std::string stopped_reason_;
  ErrorKind stopped_kind_ = ErrorKind::kGeneric;
  int stopped_rank_ = -1;

  // Engine thread only.
  std::unordered_map<std::string, LocalRequest> in_flight_;
  std::unordered_map<std::string, int32_t> cache_;  // signature -> response cache id
  ByteBuffer fusion_;
  ByteBuffer slots_;
  std::vector<ByteBuffer> scratch_;
  std::thread thread_;
};

}  // namespace shvd
