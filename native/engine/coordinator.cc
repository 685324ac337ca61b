#include "engine/coordinator.h"

#include <algorithm>

#include "common/error.h"

namespace shvd {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

// Larger tensors are reduced in place on their own: copying them through the fusion buffer costs more
// than the per-collective overhead fusion saves.
constexpr size_t kLargestFusedTensor = 1 << 20;

bool fusible(const Response& a, const Response& b) {
  if (a.type != ResponseType::kCollective || b.type != ResponseType::kCollective) return false;
  if (a.kind != CollectiveKind::kAllreduce || b.kind != CollectiveKind::kAllreduce) return false;
  const RequestSpec& x = a.entries.front().spec;
  const RequestSpec& y = b.entries.front().spec;
  return x.dtype == y.dtype && x.op == y.op && x.prescale == y.prescale && x.postscale == y.postscale;
}

}  // namespace

Coordinator::Coordinator(CoordinatorOptions options) : options_(options), joined_(options.size, false) {}

void Coordinator::add(int rank, const RequestSpec& spec, Clock::time_point now) {
  if (spec.kind == CollectiveKind::kJoin) {
    joined_[rank] = true;
    last_joined_ = rank;
    return;
  }
  auto [it, inserted] = table_.try_emplace(spec.name);
  Pending& p = it->second;
  if (inserted) {
    p.by_rank.resize(options_.size);
    p.submitted.assign(options_.size, false);
    p.first_seen = now;
    p.order = next_order_++;
  }
  p.by_rank[rank] = spec;
  p.submitted[rank] = true;
}

bool Coordinator::ready(const Pending& p) const {
  bool any = false;
  for (int r = 0; r < options_.size; ++r) {
    if (p.submitted[r]) {
      any = true;
    } else if (!joined_[r]) {
      return false;
    }
  }
  return any;
}

std::string Coordinator::missing_ranks(const Pending& p) const {
  std::vector<int> missing;
  for (int r = 0; r < options_.size; ++r) {
    if (!p.submitted[r] && !joined_[r]) missing.push_back(r);
  }
  return rank_list(missing);
}

Response Coordinator::to_response(const std::string& name, Pending& p) {
  std::vector<PeerBlock> blocks;
  std::vector<int> ranks;
  const RequestSpec* first = nullptr;
  for (int r = 0; r < options_.size; ++r) {
    if (!p.submitted[r]) continue;
    const RequestSpec& s = p.by_rank[r];
    if (!first) first = &s;
    PeerBlock b;
    b.info = s;  // the agreement check reads the CallInfo part
    blocks.push_back(std::move(b));
    ranks.push_back(r);
  }
  Response resp;
  resp.kind = first->kind;
  bool someone_joined = std::find(joined_.begin(), joined_.end(), true) != joined_.end();
  if (someone_joined && first->kind != CollectiveKind::kAllreduce) {
    std::vector<int> joined;
    for (int r = 0; r < options_.size; ++r) {
      if (joined_[r]) joined.push_back(r);
    }
    resp.type = ResponseType::kError;
    resp.error_kind = ErrorKind::kInvalidArgument;
    resp.error = std::string(collective_name(first->kind)) + " '" + name + "' cannot run while rank(s) " +
                 rank_list(joined) + " have joined; only allreduce continues until every rank has joined";
    resp.entries.push_back(ResponseEntry{*first});
    return resp;
  }
  try {
    check_agreement(blocks, 0, &ranks);
  } catch (const Error& e) {
    resp.type = ResponseType::kError;
    resp.error_kind = ErrorKind::kMismatch;
    resp.error = e.what();
    resp.entries.push_back(ResponseEntry{*first});
    return resp;
  }
  ResponseEntry entry;
  entry.spec = *first;
  if (first->kind == CollectiveKind::kAllgather) {
    for (int r = 0; r < options_.size; ++r) entry.first_dims.push_back(p.by_rank[r].shape.empty() ? 0 : p.by_rank[r].shape[0]);
  }
  if (first->kind == CollectiveKind::kAlltoall) {
    for (int r = 0; r < options_.size; ++r) {
      const std::vector<int64_t>& splits = p.by_rank[r].splits;
      if (int(splits.size()) != options_.size) {
        resp.type = ResponseType::kError;
        resp.error_kind = ErrorKind::kInvalidArgument;
        resp.error = "alltoall '" + name + "': rank " + std::to_string(r) + " passed " +
                     std::to_string(splits.size()) + " splits for " + std::to_string(options_.size) + " ranks";
        return resp;
      }
      entry.split_matrix.insert(entry.split_matrix.end(), splits.begin(), splits.end());
    }
  }
  std::string signature = signature_of(*first);
  auto cached = cache_ids_.find(signature);
  if (cached != cache_ids_.end()) {
    entry.cache_id = cached->second;
  } else if (cache_by_id_.size() < options_.cache_capacity) {
    entry.cache_id = int32_t(cache_by_id_.size());
    cache_ids_.emplace(signature, entry.cache_id);
    cache_by_id_.push_back(*first);
  }
  resp.entries.push_back(std::move(entry));
  return resp;
}

void Coordinator::append_fused(std::vector<Response>& out, Response resp) {
  bool small = resp.entries.size() == 1 && call_bytes(resp.entries.front().spec) <= kLargestFusedTensor;
  bool back_small = !out.empty() && (out.back().entries.size() > 1 ||
                                     call_bytes(out.back().entries.front().spec) <= kLargestFusedTensor);
  if (options_.fusion_threshold_bytes > 0 && !out.empty() && small && back_small && fusible(out.back(), resp)) {
    size_t total = 0;
    for (const auto& e : out.back().entries) total += call_bytes(e.spec);
    for (const auto& e : resp.entries) total += call_bytes(e.spec);
    bool grouped = resp.entries.front().spec.group >= 0 || out.back().entries.front().spec.group >= 0;
    if (!grouped && total <= options_.fusion_threshold_bytes) {
      for (auto& e : resp.entries) out.back().entries.push_back(std::move(e));
      return;
    }
  }
  out.push_back(std::move(resp));
}

ResponseList Coordinator::process(const std::vector<RankMessage>& messages, Clock::time_point now,
                                  std::vector<std::string>* warnings) {
  ResponseList list;
  for (int r = 0; r < int(messages.size()); ++r) {
    const RankMessage& m = messages[r];
    if (m.shutdown && !list.shutdown) {
      list.shutdown = true;
      list.shutdown_rank = r;
    }
    for (const RequestSpec& spec : m.requests) add(r, spec, now);
    for (uint32_t id : m.cached) {
      if (id >= cache_by_id_.size()) fail(ErrorKind::kPeerFailure, "rank " + std::to_string(r) + " sent an unknown cache id");
      add(r, cache_by_id_[id], now);
    }
  }

  // Ready entries, in the order they were first submitted anywhere.
  std::vector<std::map<std::string, Pending>::iterator> ready_now;
  std::map<int32_t, std::vector<std::map<std::string, Pending>::iterator>> groups;
  for (auto it = table_.begin(); it != table_.end(); ++it) {
    if (!ready(it->second)) continue;
    ready_now.push_back(it);
  }
  std::sort(ready_now.begin(), ready_now.end(), [](auto a, auto b) { return a->second.order < b->second.order; });

  std::vector<Response> responses;
  std::vector<std::map<std::string, Pending>::iterator> finished;
  for (auto it : ready_now) {
    const RequestSpec* spec = nullptr;
    for (int r = 0; r < options_.size && !spec; ++r) {
      if (it->second.submitted[r]) spec = &it->second.by_rank[r];
    }
    if (spec->group >= 0) {
      // A group goes out whole, once every member is ready everywhere.
      auto& members = groups[spec->group];
      members.push_back(it);
      if (int(members.size()) < spec->group_size) continue;
      // Members go out together; members that cannot share a buffer (another dtype, op or scaling)
      // go out as neighbouring responses.
      std::vector<Response> parts;
      for (auto member : members) {
        Response part = to_response(member->first, member->second);
        if (part.type == ResponseType::kCollective && !parts.empty() && fusible(parts.back(), part)) {
          for (auto& e : part.entries) parts.back().entries.push_back(std::move(e));
        } else {
          parts.push_back(std::move(part));
        }
        finished.push_back(member);
      }
      for (auto& part : parts) responses.push_back(std::move(part));
      groups.erase(spec->group);
      continue;
    }
    append_fused(responses, to_response(it->first, it->second));
    finished.push_back(it);
  }
  for (auto it : finished) table_.erase(it);

  // The stall inspector: name the ranks that have not submitted what others are waiting on.
  for (auto it = table_.begin(); it != table_.end();) {
    Pending& p = it->second;
    double waited = std::chrono::duration<double>(now - p.first_seen).count();
    std::string missing = missing_ranks(p);
    std::vector<int> have;
    for (int r = 0; r < options_.size; ++r) {
      if (p.submitted[r]) have.push_back(r);
    }
    const RequestSpec& spec = p.by_rank[have.empty() ? 0 : have.front()];
    std::string what = std::string(collective_name(spec.kind)) + " '" + it->first + "'";
    if (options_.stall_shutdown_s > 0 && waited >= options_.stall_shutdown_s && !missing.empty()) {
      Response err;
      err.type = ResponseType::kError;
      err.kind = spec.kind;
      err.error_kind = ErrorKind::kTimeout;
      err.error = what + " stalled: rank(s) " + rank_list(have) + " submitted it but rank(s) " + missing +
                  " did not within " + std::to_string(int(options_.stall_shutdown_s)) + " s";
      err.entries.push_back(ResponseEntry{spec});
      responses.push_back(std::move(err));
      it = table_.erase(it);
      continue;
    }
    if (options_.stall_warning_s > 0 && waited >= options_.stall_warning_s && !p.warned && !missing.empty()) {
      p.warned = true;
      warnings->push_back("stall: " + what + " was submitted by rank(s) " + rank_list(have) +
                          " but not by rank(s) " + missing + " for " + std::to_string(int(waited)) + " s");
    }
    ++it;
  }

  if (std::all_of(joined_.begin(), joined_.end(), [](bool j) { return j; })) {
    Response done;
    done.type = ResponseType::kJoinDone;
    done.kind = CollectiveKind::kJoin;
    done.last_joined = last_joined_;
    responses.push_back(std::move(done));
    joined_.assign(options_.size, false);
    last_joined_ = -1;
  }
  list.responses = std::move(responses);
  return list;
}

}  // namespace shvd
