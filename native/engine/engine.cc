#include "engine/engine.h"

#include <cstdio>
#include <cstring>

#include "algorithms/algorithms.h"
#include "algorithms/ring.h"
#include "reduce/reduce.h"

namespace shvd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr char kJoinName[] = "__join__";
// Small allreduces go to every peer at once: one round instead of 2(p-1) ring steps.
constexpr size_t kDirectAllreduceBytes = 64 << 10;
// Negotiation rounds happen every cycle even when idle: wait for peers without burning a core.
constexpr WaitPolicy kNegotiationWait{0, 0};

// Only kinds whose request is identical on every rank can be named by a cache id.
bool cacheable(CollectiveKind kind) {
  return kind == CollectiveKind::kAllreduce || kind == CollectiveKind::kBroadcast ||
         kind == CollectiveKind::kReducescatter || kind == CollectiveKind::kBarrier;
}

const char* phase_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllreduce: return "ALLREDUCE";
    case CollectiveKind::kAllgather: return "ALLGATHER";
    case CollectiveKind::kBroadcast: return "BROADCAST";
    case CollectiveKind::kAlltoall: return "ALLTOALL";
    case CollectiveKind::kReducescatter: return "REDUCESCATTER";
    case CollectiveKind::kBarrier: return "BARRIER";
    case CollectiveKind::kJoin: return "JOIN";
  }
  return "COLLECTIVE";
}

HandleOutcome failure(ErrorKind kind, int rank, const std::string& message) {
  HandleOutcome out;
  out.failed = true;
  out.error_kind = kind;
  out.error_rank = rank;
  out.error = message;
  return out;
}

}  // namespace

Engine::Engine(Mesh& mesh, EngineOptions options) : mesh_(mesh), options_(std::move(options)) {
  if (mesh_.rank() == 0) {
    CoordinatorOptions co;
    co.size = mesh_.size();
    co.fusion_threshold_bytes = options_.fusion_threshold_bytes;
    co.stall_warning_s = options_.stall_warning_s;
    co.stall_shutdown_s = options_.stall_shutdown_s;
    co.cache_capacity = options_.cache_capacity;
    coordinator_ = std::make_unique<Coordinator>(co);
    timeline_.open(options_.timeline_path, 0);
  }
  thread_ = std::thread([this] { loop(); });
}

Engine::~Engine() {
  try {
    shutdown();
  } catch (...) {
  }
}

int64_t Engine::enqueue(RequestSpec spec, void* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (stopped_ || stop_requested_) {
    fail(stopped_ ? stopped_kind_ : ErrorKind::kGeneric,
         "the collective engine has stopped" + (stopped_reason_.empty() ? "" : ": " + stopped_reason_), stopped_rank_);
  }
  if (spec.kind == CollectiveKind::kJoin) spec.name = kJoinName;
  if (spec.name.empty()) fail(ErrorKind::kInvalidArgument, "every asynchronous collective needs a name");
  if (!names_in_flight_.insert(spec.name).second) {
    fail(ErrorKind::kInvalidArgument, "a collective named '" + spec.name +
                                          "' is already in flight; wait for it or use another name");
  }
  LocalRequest req;
  req.spec = std::move(spec);
  req.data = data;
  req.handle = next_handle_++;
  req.enqueued = Clock::now();
  pending_handles_.insert(req.handle);
  int64_t handle = req.handle;
  queue_.push_back(std::move(req));
  return handle;
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

void Engine::loop() {
  auto next = Clock::now();
  try {
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait_until(lock, next, [&] { return stop_requested_; });
      }
      cycle();
      // Counted from the end of the round: every rank receives the coordinator's answer at about the
      // same moment, so this keeps all ranks' cycles in phase and a request waits about one cycle.
      next = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double, std::milli>(options_.cycle_time_ms));
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopped_) break;
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

void Engine::cycle() {
  RankMessage mine;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    mine.shutdown = stop_requested_;
    for (LocalRequest& req : queue_) {
      std::string signature = signature_of(req.spec);
      auto hit = cacheable(req.spec.kind) ? cache_.find(signature) : cache_.end();
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
  for (const Response& resp : list.responses) execute(resp, negotiated);
  if (list.shutdown) {
    // The rank left (it finished, or fn failed there): a peer failure, so launchers blame that rank.
    Error e(ErrorKind::kPeerFailure,
            "rank " + std::to_string(list.shutdown_rank) + " shut down collectives while this rank's were pending",
            list.shutdown_rank);
    fail_everything(e);
  }
}

ResponseList Engine::negotiate(const RankMessage& mine) {
  std::vector<std::string> warnings;
  if (mesh_.size() == 1) return coordinator_->process({mine}, Clock::now(), &warnings);
  Deadline deadline = Deadline::after_seconds(options_.timeout_s);
  const std::string what = "negotiation";
  if (int(scratch_.size()) < mesh_.size()) scratch_.resize(mesh_.size());
  if (mesh_.rank() != 0) {
    std::vector<uint8_t> out = encode(mine);
    std::vector<SendItem> sends(1);
    sends[0].peer = 0;
    sends[0].data = out.data();
    sends[0].len = out.size();
    std::vector<RecvItem> recvs(1);
    recvs[0].peer = 0;
    recvs[0].grow_into = &scratch_[0];
    recvs[0].max_len = size_t(1) << 30;
    mesh_.run(sends, recvs, deadline, what, &kNegotiationWait);
    return decode_response_list(scratch_[0].data(), scratch_[0].size());
  }
  std::vector<SendItem> none;
  std::vector<RecvItem> recvs(mesh_.size() - 1);
  for (int r = 1; r < mesh_.size(); ++r) {
    recvs[r - 1].peer = r;
    recvs[r - 1].grow_into = &scratch_[r];
    recvs[r - 1].max_len = size_t(1) << 30;
  }
  mesh_.run(none, recvs, deadline, what, &kNegotiationWait);
  std::vector<RankMessage> messages(mesh_.size());
  messages[0] = mine;
  for (int r = 1; r < mesh_.size(); ++r) messages[r] = decode_rank_message(scratch_[r].data(), scratch_[r].size());
  ResponseList list = coordinator_->process(messages, Clock::now(), &warnings);
  for (const std::string& w : warnings) std::fprintf(stderr, "[collective] %s\n", w.c_str());
  if (!warnings.empty()) std::fflush(stderr);
  std::vector<uint8_t> out = encode(list);
  std::vector<SendItem> sends(mesh_.size() - 1);
  for (int r = 1; r < mesh_.size(); ++r) {
    sends[r - 1].peer = r;
    sends[r - 1].data = out.data();
    sends[r - 1].len = out.size();
  }
  std::vector<RecvItem> no_recvs;
  mesh_.run(sends, no_recvs, deadline, what, &kNegotiationWait);
  return list;
}

Engine::LocalRequest* Engine::local(const std::string& name) {
  auto it = in_flight_.find(name);
  return it == in_flight_.end() ? nullptr : &it->second;
}

CollectiveOptions Engine::options_for(const RequestSpec& spec) const {
  return CollectiveOptions{Deadline::after_seconds(options_.timeout_s),
                           std::string(collective_name(spec.kind)) + " '" + spec.name + "'"};
}

void Engine::finish(const std::string& name, HandleOutcome outcome) {
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

void Engine::allreduce_buffer(void* data, size_t count, DType dtype, ReduceOp op, const CollectiveOptions& opts) {
  if (count * dtype_size(dtype) * size_t(mesh_.size() - 1) <= kDirectAllreduceBytes) {
    direct_allreduce(mesh_, data, count, dtype, op, opts, scratch_);
  } else {
    ring_allreduce(mesh_, data, count, dtype, op, opts);
  }
}

void Engine::execute(const Response& resp, Clock::time_point negotiated) {
  for (const ResponseEntry& e : resp.entries) {
    if (e.cache_id >= 0) cache_.emplace(signature_of(e.spec), e.cache_id);
    if (LocalRequest* req = local(e.spec.name)) {
      timeline_.phase(e.spec.name, "NEGOTIATE", req->enqueued, negotiated);
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
  if (resp.kind == CollectiveKind::kAllreduce) {
    run_allreduce(resp);
    return;
  }
  for (const ResponseEntry& e : resp.entries) run_single(e, local(e.spec.name));
}

void Engine::run_allreduce(const Response& resp) {
  const RequestSpec& first = resp.entries.front().spec;
  const DType dtype = first.dtype;
  const size_t elem = dtype_size(dtype);
  CollectiveOptions opts = options_for(first);
  if (resp.entries.size() == 1 && local(first.name) != nullptr) {
    // Alone: reduce in the caller's buffer, no fusion copies.
    LocalRequest* req = local(first.name);
    size_t count = element_count(req->spec.shape);
    auto start = Clock::now();
    if (first.prescale != 1.0) scale(req->data, count, dtype, first.prescale);
    allreduce_buffer(req->data, count, dtype, first.op, opts);
    finish_reduction(req->data, count, dtype, first.op, mesh_.size(), first.postscale);
    timeline_.phase(first.name, "ALLREDUCE", start, Clock::now());
    finish(first.name, HandleOutcome{});
    return;
  }
  size_t total = 0;
  for (const ResponseEntry& e : resp.entries) total += call_bytes(e.spec);
  fusion_.resize(std::max<size_t>(total, 1));
  uint8_t* buffer = fusion_.data();
  size_t offset = 0;
  for (const ResponseEntry& e : resp.entries) {
    auto start = Clock::now();
    size_t bytes = call_bytes(e.spec);
    LocalRequest* req = local(e.spec.name);
    // A rank that has joined has no tensor: it contributes zeros.
    if (req != nullptr) {
      std::memcpy(buffer + offset, req->data, bytes);
    } else {
      std::memset(buffer + offset, 0, bytes);
    }
    if (req) timeline_.phase(e.spec.name, "MEMCPY_IN_FUSION_BUFFER", start, Clock::now());
    offset += bytes;
  }
  size_t count = total / elem;
  auto start = Clock::now();
  if (first.prescale != 1.0) scale(buffer, count, dtype, first.prescale);
  allreduce_buffer(buffer, count, dtype, first.op, opts);
  finish_reduction(buffer, count, dtype, first.op, mesh_.size(), first.postscale);
  auto end = Clock::now();
  std::string fused = std::to_string(resp.entries.size()) + " tensors, " + std::to_string(total) + " bytes";
  offset = 0;
  for (const ResponseEntry& e : resp.entries) {
    size_t bytes = call_bytes(e.spec);
    LocalRequest* req = local(e.spec.name);
    if (req != nullptr) {
      timeline_.phase(e.spec.name, "ALLREDUCE", start, end, fused);
      auto copy_start = Clock::now();
      std::memcpy(req->data, buffer + offset, bytes);
      timeline_.phase(e.spec.name, "MEMCPY_OUT_FUSION_BUFFER", copy_start, Clock::now());
      finish(e.spec.name, HandleOutcome{});
    }
    offset += bytes;
  }
}

void Engine::run_single(const ResponseEntry& entry, LocalRequest* req) {
  const RequestSpec& spec = entry.spec;
  CollectiveOptions opts = options_for(spec);
  const int size = mesh_.size();
  const int me = mesh_.rank();
  const size_t row_bytes = dtype_size(spec.dtype) * row_elements(spec.shape);
  auto start = Clock::now();
  HandleOutcome out;
  switch (spec.kind) {
    case CollectiveKind::kAllgather: {
      std::vector<size_t> offset(size), len(size);
      size_t total = 0, rows = 0;
      for (int r = 0; r < size; ++r) {
        offset[r] = total;
        len[r] = size_t(entry.first_dims[r]) * row_bytes;
        total += len[r];
        rows += size_t(entry.first_dims[r]);
      }
      out.has_result = true;
      out.result.data.reset(new uint8_t[std::max<size_t>(total, 1)]);
      out.result.shape = req->spec.shape;
      out.result.shape[0] = int64_t(rows);
      std::memcpy(out.result.data.get() + offset[me], req->data, len[me]);
      ring_allgatherv(mesh_, out.result.data.get(), offset, len, opts);
      break;
    }
    case CollectiveKind::kBroadcast:
      chain_broadcast(mesh_, req->data, call_bytes(req->spec), spec.root, opts);
      break;
    case CollectiveKind::kAlltoall: {
      std::vector<size_t> send_offset(size), send_len(size), recv_offset(size), recv_len(size);
      size_t sent = 0, received = 0;
      out.result.received_splits.resize(size);
      for (int r = 0; r < size; ++r) {
        int64_t to_r = entry.split_matrix[size_t(me) * size + r];
        int64_t from_r = entry.split_matrix[size_t(r) * size + me];
        out.result.received_splits[r] = from_r;
        send_offset[r] = sent * row_bytes;
        send_len[r] = size_t(to_r) * row_bytes;
        recv_offset[r] = received * row_bytes;
        recv_len[r] = size_t(from_r) * row_bytes;
        sent += size_t(to_r);
        received += size_t(from_r);
      }
      out.has_result = true;
      out.result.shape = req->spec.shape;
      out.result.shape[0] = int64_t(received);
      out.result.data.reset(new uint8_t[std::max<size_t>(received * row_bytes, 1)]);
      pairwise_alltoallv(mesh_, static_cast<const uint8_t*>(req->data), send_offset, send_len, out.result.data.get(),
                         recv_offset, recv_len, opts);
      break;
    }
    case CollectiveKind::kReducescatter: {
      const size_t elem = dtype_size(spec.dtype);
      const size_t row_elems = row_elements(spec.shape);
      Partition rows = split_rows(size_t(spec.shape[0]), size);
      std::vector<size_t> elem_offset(size), elem_count(size);
      for (int i = 0; i < size; ++i) {
        elem_offset[i] = rows.offset[i] * row_elems;
        elem_count[i] = rows.rows[i] * row_elems;
      }
      const size_t bytes = call_bytes(spec);
      fusion_.resize(std::max<size_t>(bytes, 1));
      std::memcpy(fusion_.data(), req->data, bytes);
      if (spec.prescale != 1.0) scale(fusion_.data(), element_count(spec.shape), spec.dtype, spec.prescale);
      ring_reducescatter(mesh_, fusion_.data(), elem_offset, elem_count, spec.dtype, spec.op, opts);
      uint8_t* mine = fusion_.data() + elem_offset[me] * elem;
      finish_reduction(mine, elem_count[me], spec.dtype, spec.op, size, spec.postscale);
      out.has_result = true;
      out.result.shape = spec.shape;
      out.result.shape[0] = int64_t(rows.rows[me]);
      out.result.data.reset(new uint8_t[std::max<size_t>(elem_count[me] * elem, 1)]);
      std::memcpy(out.result.data.get(), mine, elem_count[me] * elem);
      break;
    }
    case CollectiveKind::kBarrier:
      break;
    default:
      out.failed = true;
      out.error_kind = ErrorKind::kInvalidArgument;
      out.error = std::string("unexpected collective in a response: ") + collective_name(spec.kind);
  }
  timeline_.phase(spec.name, phase_name(spec.kind), start, Clock::now());
  finish(spec.name, std::move(out));
}

}  // namespace shvd
