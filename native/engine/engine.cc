#include "engine/engine.h"

#include <pthread.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace shvd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kJoinName[] = "__join__";
// Negotiation rounds happen every cycle even when idle: wait for peers without burning a core.
constexpr WaitPolicy kNegotiationWait{0, 0};
// An idle engine's rounds are at most 2^this cycle times apart (EngineOptions::cycle_time_ms).
constexpr int kLongestIdleDoublings = 4;
// A negotiation message is at most this long.
constexpr size_t kMaxNegotiationBytes = size_t(1) << 30;

HandleOutcome failure(ErrorKind kind, int rank, const std::string& message) {
  return HandleOutcome{/*failed=*/true, kind, rank, message};
}

}  // namespace

Engine::Engine(Mesh& mesh, EngineOptions options) : mesh_(mesh), options_(std::move(options)) {
  if (mesh_.rank() == 0) {
    CoordinatorOptions co;
    co.size = mesh_.size();
    co.fusion_threshold_bytes = options_.fusion_threshold_bytes;
    co.stall_check_s = options_.stall_check_s;
    co.stall_shutdown_s = options_.stall_shutdown_s;
    co.cache_capacity = options_.cache_capacity;
    coordinator_ = std::make_unique<Coordinator>(co);
    timeline_.open(options_.timeline, 0);
  }
  thread_ = std::thread([this] { loop(); });
  // Named, so that top -H, gdb and /proc tell the engine from the framework's threads; from here, so that
  // the name is there as soon as the engine is.
  pthread_setname_np(thread_.native_handle(), "collective-eng");
}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

int64_t Engine::enqueue(RequestSpec spec, void* data, const void* source) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_ || stop_requested_) {
    fail(stopped_ ? stopped_kind_ : ErrorKind::kGeneric,
         "the collective engine has stopped" + (stopped_reason_.empty() ? "" : ": " + stopped_reason_), stopped_rank_);
  }
  if (spec.kind == CollectiveKind::kJoin) spec.name = kJoinName;
  if (spec.name.empty()) fail(ErrorKind::kInvalidArgument, "every asynchronous collective needs a name");
  validate_call(spec, mesh_.size());
  if (source != nullptr && spec.kind != CollectiveKind::kAllreduce) {
    fail(ErrorKind::kInvalidArgument, std::string("a separate input tensor is for allreduce only, not ") +
                                          collective_name(spec.kind) + " '" + spec.name + "'");
  }
  if (!names_in_flight_.insert(spec.name).second) {
    fail(ErrorKind::kInvalidArgument, "a collective named '" + spec.name +
                                          "' is already in flight; wait for it or use another name");
  }
  LocalRequest req;
  req.spec = std::move(spec);
  req.data = data;
  req.source = source;
  req.handle = next_handle_++;
  req.enqueued = Clock::now();
  pending_handles_.insert(req.handle);
  int64_t handle = req.handle;
  const bool wake = worth_waking_for(req.spec);
  queue_.push_back(std::move(req));
  if (wake) {
    work_ready_ = true;
    wake_.notify_one();  // under the lock: the engine cannot miss it between its check and its sleep
  }
  return handle;
}

// A group is negotiated whole, so waking for its first member would only send part of it: wake when
// its last member arrives (the cycle timer still takes whatever is queued if the rest never comes).
bool Engine::worth_waking_for(const RequestSpec& spec) {
  if (spec.group < 0 || spec.group_size <= 1) return true;
  int32_t& seen = group_seen_[spec.group];
  if (++seen < spec.group_size) return false;
  group_seen_.erase(spec.group);
  return true;
}

bool Engine::poll(int64_t handle) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (done_.count(handle)) return true;
  if (!pending_handles_.count(handle)) fail(ErrorKind::kInvalidArgument, "unknown handle " + std::to_string(handle));
  return false;
}

HandleOutcome Engine::wait(int64_t handle, double timeout_s) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!done_.count(handle) && !pending_handles_.count(handle)) {
    fail(ErrorKind::kInvalidArgument, "unknown handle " + std::to_string(handle) + " (already waited on?)");
  }
  auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  if (!finished_.wait_until(lock, until, [&] { return done_.count(handle) > 0; })) {
    fail(ErrorKind::kTimeout, "waited " + std::to_string(timeout_s) + " s for handle " + std::to_string(handle));
  }
  HandleOutcome out = std::move(done_[handle]);
  done_.erase(handle);
  return out;
}

void Engine::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_requested_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  timeline_.close();
}

void Engine::start_timeline(const std::string& path, bool mark_cycles) {
  if (path.empty()) fail(ErrorKind::kInvalidArgument, "start_timeline needs a file path");
  if (mesh_.rank() == 0) timeline_.open(path, 0, mark_cycles);
}

void Engine::stop_timeline() { timeline_.close(); }

void Engine::loop() {
  auto next = Clock::now();
  int idle_doublings = 0;
  try {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        // Wakes on a submit, a stop, or the cycle timer: a submitted collective waits for no timer.
        wake_.wait_until(lock, next, [&] { return stop_requested_ || work_ready_; });
        work_ready_ = false;
      }
      const RoundOutcome round = cycle();
      bool waiting_on_peers;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopped_) break;
        waiting_on_peers = !in_flight_.empty();
      }
      // An empty round with nothing of ours pending doubles the pause before the next; anything else
      // resets it. The ranks see the same answers, so idle ranks stretch alike and stay in phase.
      idle_doublings = round.news || waiting_on_peers ? 0 : std::min(idle_doublings + 1, kLongestIdleDoublings);
      // Counted from the end of the round: every rank receives the coordinator's answer at about the
      // same moment, so this keeps idle ranks' rounds in phase.
      next = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double, std::milli>(
                                options_.cycle_time_ms * double(1 << idle_doublings)));
      // Requests some peers have not submitted yet: go straight into the next round, which blocks (without
      // spinning) until every peer sends its message, so a late peer's submit completes them at once, not
      // at this rank's next tick. Not when every rank waits on another (a mismatch, a stall, or ranks
      // that submitted in different orders) and the round brought nothing new: all would go on trading
      // empty rounds as fast as they can, so they take the timer's pace (or a submit's) instead.
      if (round.go_on && waiting_on_peers) next = Clock::now();
    }
  } catch (const Error& e) {
    int cause = e.peer_rank() >= 0 ? e.peer_rank() : mesh_.rank();
    mesh_.abort(cause, e.what());
    fail_everything(e);
  } catch (const std::exception& e) {
    Error wrapped(ErrorKind::kGeneric, std::string("collective engine failed: ") + e.what());
    mesh_.abort(mesh_.rank(), wrapped.what());
    fail_everything(wrapped);
  }
}

Engine::RoundOutcome Engine::cycle() {
  RankMessage mine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mine.shutdown = stop_requested_;
    for (LocalRequest& req : queue_) {
      std::string signature = signature_of(req.spec);
      auto hit = op_for(req.spec.kind).cacheable ? cache_.find(signature) : cache_.end();
      if (hit != cache_.end()) {
        mine.cached.push_back(uint32_t(hit->second));
      } else {
        mine.requests.push_back(req.spec);
      }
      std::string name = req.spec.name;
      in_flight_.emplace(std::move(name), std::move(req));
    }
    queue_.clear();
  }
  ResponseList list = negotiate(mine);
  auto negotiated = Clock::now();
  if (!list.responses.empty()) timeline_.cycle_start();
  for (const Response& resp : list.responses) execute(resp, negotiated);
  if (list.shutdown) {
    // The rank left (it finished, or fn failed there): a peer failure, so launchers blame that rank.
    Error e(ErrorKind::kPeerFailure,
            "rank " + std::to_string(list.shutdown_rank) + " shut down collectives while this rank's were pending" +
                pending_names(),
            list.shutdown_rank);
    fail_everything(e);
  }
  RoundOutcome out;
  out.news = !mine.requests.empty() || !mine.cached.empty() || !list.responses.empty();
  out.go_on = out.news || !list.every_rank_waiting;
  return out;
}

ResponseList Engine::negotiate(const RankMessage& mine) {
  if (int(scratch_.size()) < mesh_.size()) scratch_.resize(mesh_.size());
  return mesh_.rank() == 0 ? coordinate(mine) : ask_coordinator(mine);
}

ResponseList Engine::ask_coordinator(const RankMessage& mine) {
  std::vector<uint8_t> out = encode(mine);
  std::vector<SendItem> sends(1);
  sends[0].peer = 0;
  sends[0].data = out.data();
  sends[0].len = out.size();
  std::vector<RecvItem> recvs(1);
  recvs[0].peer = 0;
  recvs[0].grow_into = &scratch_[0];
  recvs[0].max_len = kMaxNegotiationBytes;
  mesh_.run(sends, recvs, Deadline::after_seconds(mesh_.options().timeout_s), "negotiation", &kNegotiationWait);
  return decode_response_list(scratch_[0].data(), scratch_[0].size());
}

// Rank 0: every rank's message in, the coordinator's answer out to all.
ResponseList Engine::coordinate(const RankMessage& mine) {
  const int size = mesh_.size();
  const Deadline deadline = Deadline::after_seconds(mesh_.options().timeout_s);
  std::vector<SendItem> none;
  std::vector<RecvItem> recvs(size - 1);
  for (int r = 1; r < size; ++r) {
    recvs[r - 1].peer = r;
    recvs[r - 1].grow_into = &scratch_[r];
    recvs[r - 1].max_len = kMaxNegotiationBytes;
  }
  if (size > 1) mesh_.run(none, recvs, deadline, "negotiation", &kNegotiationWait);
  std::vector<RankMessage> messages(size);
  messages[0] = mine;
  for (int r = 1; r < size; ++r) messages[r] = decode_rank_message(scratch_[r].data(), scratch_[r].size());
  std::vector<std::string> warnings;
  ResponseList list = coordinator_->process(messages, Clock::now(), &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "[collective] %s\n", w.c_str());
  if (!warnings.empty()) std::fflush(stderr);
  if (size == 1) return list;
  std::vector<uint8_t> out = encode(list);
  std::vector<SendItem> sends(size - 1);
  for (int r = 1; r < size; ++r) {
    sends[r - 1].peer = r;
    sends[r - 1].data = out.data();
    sends[r - 1].len = out.size();
  }
  std::vector<RecvItem> no_recvs;
  mesh_.run(sends, no_recvs, deadline, "negotiation", &kNegotiationWait);
  return list;
}

Engine::LocalRequest* Engine::local(const std::string& name) {
  auto it = in_flight_.find(name);
  return it == in_flight_.end() ? nullptr : &it->second;
}

OpContext Engine::context_for(const RequestSpec& spec) {
  return OpContext{mesh_, {Deadline::after_seconds(mesh_.options().timeout_s), call_label(spec)}, slots_, fusion_};
}

void Engine::finish(std::string name, HandleOutcome outcome) {
  auto it = in_flight_.find(name);
  if (it == in_flight_.end()) return;
  int64_t handle = it->second.handle;
  in_flight_.erase(it);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    names_in_flight_.erase(name);
    pending_handles_.erase(handle);
    done_[handle] = std::move(outcome);
  }
  finished_.notify_all();
}

// The names a peer's exit leaves unfinished, so the error says which of this rank's calls it cut short.
std::string Engine::pending_names() const {
  std::vector<std::string> names;
  for (const auto& [name, req] : in_flight_) names.push_back("'" + name + "'");
  if (names.empty()) return "";
  std::sort(names.begin(), names.end());
  constexpr size_t kShown = 4;
  std::string out = ": ";
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
  return out;
}

void Engine::fail_everything(const Error& e) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopped_ = true;
    stopped_reason_ = e.what();
    stopped_kind_ = e.kind();
    stopped_rank_ = e.peer_rank();
    for (LocalRequest& req : queue_) in_flight_.emplace(req.spec.name, std::move(req));
    queue_.clear();
  }
  std::vector<std::string> names;
  for (auto& [name, req] : in_flight_) names.push_back(name);
  for (const std::string& name : names) finish(name, failure(e.kind(), e.peer_rank(), e.what()));
}

void Engine::execute(const Response& resp, Clock::time_point negotiated) {
  for (const ResponseEntry& e : resp.entries) {
    if (e.cache_id >= 0) cache_.emplace(signature_of(e.spec), e.cache_id);
    if (LocalRequest* req = local(e.spec.name)) {
      timeline_.phase(e.spec.name, negotiate_phase(e.spec.kind), req->enqueued, negotiated);
      timeline_.phase(e.spec.name, "QUEUE", negotiated, Clock::now());
    }
  }
  if (resp.type == ResponseType::kError) {
    for (const ResponseEntry& e : resp.entries) finish(e.spec.name, failure(resp.error_kind, resp.error_rank, resp.error));
    return;
  }
  if (resp.type == ResponseType::kJoinDone) {
    HandleOutcome joined;
    joined.join_rank = resp.last_joined;
    finish(kJoinName, std::move(joined));
    return;
  }
  // An allreduce alone reduces in the caller's buffer: no fusion copies.
  if (resp.kind == CollectiveKind::kAllreduce && (resp.entries.size() > 1 || !local(resp.entries[0].spec.name))) {
    run_fused(resp);
    return;
  }
  for (const ResponseEntry& e : resp.entries) run_single(e, local(e.spec.name));
}

void Engine::run_fused(const Response& resp) {
  RequestSpec fused = resp.entries.front().spec;
  const size_t total = fill_fusion_buffer(resp);
  fused.shape = {int64_t(total / dtype_size(fused.dtype))};
  OpContext ctx = context_for(resp.entries.front().spec);
  auto start = Clock::now();
  kAllreduceOp.prepare(ctx, fused, fusion_.data());
  kAllreduceOp.run(ctx, fused, fusion_.data(), {});
  drain_fusion_buffer(resp, start, Clock::now());
}

// Copies every request's tensor into the fusion buffer, in response order; returns the bytes in it.
size_t Engine::fill_fusion_buffer(const Response& resp) {
  size_t total = 0;
  for (const ResponseEntry& e : resp.entries) total += call_bytes(e.spec);
  fusion_.resize(std::max<size_t>(total, 1));
  size_t offset = 0;
  for (const ResponseEntry& e : resp.entries) {
    auto start = Clock::now();
    const size_t bytes = call_bytes(e.spec);
    LocalRequest* req = local(e.spec.name);
    // A rank that has joined has no tensor: it contributes zeros.
    if (req != nullptr) {
      std::memcpy(fusion_.data() + offset, req->source != nullptr ? req->source : req->data, bytes);
      timeline_.phase(e.spec.name, "MEMCPY_IN_FUSION_BUFFER", start, Clock::now());
    } else {
      std::memset(fusion_.data() + offset, 0, bytes);
    }
    offset += bytes;
  }
  return total;
}

// Copies the reduced tensors back to their requests and completes them.
void Engine::drain_fusion_buffer(const Response& resp, Clock::time_point start, Clock::time_point end) {
  size_t total = 0;
  for (const ResponseEntry& e : resp.entries) total += call_bytes(e.spec);
  const std::string fused = std::to_string(resp.entries.size()) + " tensors, " + std::to_string(total) + " bytes";
  size_t offset = 0;
  for (const ResponseEntry& e : resp.entries) {
    const size_t bytes = call_bytes(e.spec);
    if (LocalRequest* req = local(e.spec.name)) {
      timeline_.phase(e.spec.name, "ALLREDUCE", start, end, fused);
      auto copy_start = Clock::now();
      std::memcpy(req->data, fusion_.data() + offset, bytes);
      timeline_.phase(e.spec.name, "MEMCPY_OUT_FUSION_BUFFER", copy_start, Clock::now());
      finish(e.spec.name, HandleOutcome{});
    }
    offset += bytes;
  }
}

// Runs one negotiated request on this rank's tensor, through its op: the same code as a direct call.
void Engine::run_single(const ResponseEntry& entry, LocalRequest* req) {
  const RequestSpec& spec = req->spec;
  const CollectiveOp& op = op_for(spec.kind);
  auto start = Clock::now();
  HandleOutcome out;
  if (op.run == nullptr) {
    out = failure(ErrorKind::kInvalidArgument, -1,
                  std::string("unexpected collective in a response: ") + collective_name(spec.kind));
  } else {
    OpContext ctx = context_for(spec);
    ctx.source = req->source;
    Agreed agreed;
    agreed.first_dims = entry.first_dims;
    agreed.split_matrix = entry.split_matrix;
    op.prepare(ctx, spec, req->data);
    out.result = op.run(ctx, spec, req->data, agreed);
    out.has_result = op.returns_result;
  }
  timeline_.phase(spec.name, collective_phase(spec.kind), start, Clock::now());
  finish(spec.name, std::move(out));
}

}  // namespace shvd
